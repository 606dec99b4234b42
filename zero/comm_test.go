package zero

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/cuda/shape"
)

// hosts is n host devices of one thread each, closed with the test.
func hosts(t testing.TB, n int) []cuda.Device {
	t.Helper()
	devs := make([]cuda.Device, n)
	for i := range devs {
		h, err := host.New(host.Options{Threads: 1, BLAS: host.BLASGo})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		devs[i] = h
	}
	return devs
}

func shapes(n int) []cuda.Device {
	devs := make([]cuda.Device, n)
	for i := range devs {
		devs[i] = shape.New(0)
	}
	return devs
}

// values is what a buffer holds, read back in float64.
func values(t *testing.T, d cuda.Device, b *cuda.Buffer) []float64 {
	t.Helper()
	return download(d, b)
}

// filled is a buffer of n random values on d, stored in dt (ints small
// enough that no sum over 8 ranks wraps).
func filled(t *testing.T, d cuda.Device, dt cuda.DType, n int, rng *rand.Rand) *cuda.Buffer {
	t.Helper()
	b, err := d.Alloc(cuda.Grads, dt, n)
	if err != nil {
		t.Fatal(err)
	}
	if dt == cuda.I32 {
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(rng.IntN(2001) - 1000)
		}
		err = d.Upload(b, v)
	} else {
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.NormFloat64()
		}
		err = d.Upload(b, v)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// unitRoundoff is half the spacing of dt's values at 1.
func unitRoundoff(dt cuda.DType) float64 {
	switch dt {
	case cuda.F16:
		return 0x1p-11
	case cuda.BF16:
		return 0x1p-8
	case cuda.F64:
		return 0x1p-53
	case cuda.I32:
		return 0
	}
	return 0x1p-24
}

// reference reduces the ranks' values sequentially in float64. For a sum,
// tol bounds the ring's error: N-1 additions, each rounded to the storage
// type (at most u·Σ|x| each), then the final rounding (u·|sum|); Min and
// Max are exact.
func reference(op Op, dt cuda.DType, ranks [][]float64) (want, tol []float64) {
	n := len(ranks[0])
	want, tol = make([]float64, n), make([]float64, n)
	u := unitRoundoff(dt)
	for i := range n {
		acc, abs := ranks[0][i], math.Abs(ranks[0][i])
		for _, r := range ranks[1:] {
			switch op {
			case Sum:
				acc += r[i]
			case Min:
				acc = math.Min(acc, r[i])
			case Max:
				acc = math.Max(acc, r[i])
			}
			abs += math.Abs(r[i])
		}
		want[i] = acc
		if op == Sum {
			tol[i] = float64(len(ranks)-1)*u*abs + u*math.Abs(acc)
		}
	}
	return want, tol
}

func near(got, want, tol []float64) (int, bool) {
	if len(got) != len(want) {
		return -1, false
	}
	for i := range got {
		if !(math.Abs(got[i]-want[i]) <= tol[i]) {
			return i, false
		}
	}
	return 0, true
}

var dtypes = []cuda.DType{cuda.F32, cuda.F16, cuda.BF16, cuda.F64, cuda.I32}

// Every collective against a sequential reference, for every reduction,
// dtype, N from 1 to 8, sizes N does and does not divide, in place and out
// of place; an out-of-place send is left as it was.
func TestCollectivesMatchReference(t *testing.T) {
	for N := 1; N <= 8; N++ {
		devs := hosts(t, N)
		g, err := NewGroup(devs)
		if err != nil {
			t.Fatal(err)
		}
		for _, dt := range dtypes {
			for _, count := range []int{1, 7, 3*N + 2, 64 * N} {
				for _, inPlace := range []bool{false, true} {
					name := fmt.Sprintf("N=%d/%s/count=%d/inplace=%t", N, dt, count, inPlace)
					checkCollectives(t, name, g.Run, devs, dt, count, inPlace)
				}
			}
		}
	}
}

// checkCollectives runs every collective on the ranks of devs with run
// (one group's Run, or a group per rank over a link) and checks each rank's
// result against the reference.
func checkCollectives(t *testing.T, name string, run func(func(*Comm) error) error, devs []cuda.Device, dt cuda.DType, count int, inPlace bool) {
	N := len(devs)
	rng := rand.New(rand.NewPCG(uint64(N), uint64(count)))
	for _, op := range []Op{Sum, Min, Max} {
		for _, kind := range []Collective{Broadcast, Reduce, AllReduce, ReduceScatter, AllGather} {
			if kind == Broadcast && op != Sum || kind == AllGather && op != Sum {
				continue // no reduction
			}
			root := (count + 1) % N
			sendLen, recvLen := callLens(kind, N, count)
			sends, recvs := make([]*cuda.Buffer, N), make([]*cuda.Buffer, N)
			in := make([][]float64, N)
			for r, d := range devs {
				big := filled(t, d, dt, max(sendLen, recvLen), rng)
				defer d.Free(big)
				sends[r], recvs[r] = big.View(0, sendLen), big.View(0, recvLen)
				if !inPlace {
					sends[r] = filled(t, d, dt, sendLen, rng)
					defer d.Free(sends[r])
					recvs[r] = filled(t, d, dt, recvLen, rng)
					defer d.Free(recvs[r])
				} else if kind == ReduceScatter {
					recvs[r] = big.View(r*count, count)
				} else if kind == AllGather {
					recvs[r], sends[r] = big, big.View(r*count, count)
				}
				in[r] = values(t, d, sends[r])
			}
			err := run(func(c *Comm) error {
				r := c.Rank()
				switch kind {
				case Broadcast:
					return c.Broadcast(sends[r], recvs[r], root)
				case Reduce:
					return c.Reduce(sends[r], recvs[r], op, root)
				case AllReduce:
					return c.AllReduce(sends[r], recvs[r], op)
				case ReduceScatter:
					return c.ReduceScatter(sends[r], recvs[r], op)
				}
				return c.AllGather(sends[r], recvs[r])
			})
			if err != nil {
				t.Fatalf("%s %s %s: %v", name, kind, op, err)
			}
			want, tol := reference(op, dt, in)
			for r, d := range devs {
				got := values(t, d, recvs[r])
				var w, tl []float64
				switch kind {
				case Broadcast:
					w, tl = in[root], make([]float64, count)
				case Reduce:
					if r != root {
						continue
					}
					w, tl = want, tol
				case AllReduce:
					w, tl = want, tol
				case ReduceScatter:
					w, tl = want[r*count:(r+1)*count], tol[r*count:(r+1)*count]
				case AllGather:
					for q := range in {
						w = append(w, in[q]...)
					}
					tl = make([]float64, len(w))
				}
				if i, ok := near(got, w, tl); !ok {
					t.Fatalf("%s %s %s: rank %d element %d is %v, want %v ± %v", name, kind, op, r, i, got[max(i, 0)], w[max(i, 0)], tl[max(i, 0)])
				}
				if !inPlace {
					if _, ok := near(values(t, d, sends[r]), in[r], make([]float64, len(in[r]))); !ok {
						t.Fatalf("%s %s %s: rank %d's send changed", name, kind, op, r)
					}
				}
			}
		}
	}
}

// The traffic each rank counts is the ring's: ReduceScatter and AllGather
// send and receive (N-1) blocks of k; AllReduce 2(N-1)/N of the count
// (exactly when N divides it, and 2(N-1)·count over all ranks whatever the
// count); Broadcast and Reduce move the count along a chain of N-1 links.
// Shape-only ranks count the same bytes and take the same comm staging.
func TestTrafficIsTheRing(t *testing.T) {
	for _, N := range []int{1, 2, 3, 5, 8} {
		for _, devs := range [][]cuda.Device{hosts(t, N), shapes(N)} {
			const k = 1000
			for _, count := range []int{N * k, N*k + 3} {
				g, err := NewGroup(devs) // its traffic counts from zero
				if err != nil {
					t.Fatal(err)
				}
				root := N / 2
				bufs := make([][2]*cuda.Buffer, N)
				for r, d := range devs {
					a, _ := d.Alloc(cuda.Grads, cuda.BF16, N*count)
					b, _ := d.Alloc(cuda.Grads, cuda.BF16, N*count)
					bufs[r] = [2]*cuda.Buffer{a, b}
				}
				all := make([][NumCollectives]Traffic, N) // each rank writes its own entry
				err = g.Run(func(c *Comm) error {
					a, b := bufs[c.Rank()][0], bufs[c.Rank()][1]
					for _, f := range []func() error{
						func() error { return c.AllReduce(a.View(0, count), b.View(0, count), Sum) },
						func() error { return c.ReduceScatter(a.View(0, N*k), b.View(0, k), Sum) },
						func() error { return c.AllGather(a.View(0, k), b.View(0, N*k)) },
						func() error { return c.Broadcast(a.View(0, count), b.View(0, count), root) },
						func() error { return c.Reduce(a.View(0, count), b.View(0, count), Sum, root) },
					} {
						if err := f(); err != nil {
							return err
						}
					}
					all[c.Rank()] = c.Traffic()
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				const e = 2 // bf16
				var arSent, arRecv int64
				for r, tr := range all {
					for kind, want := range map[Collective][2]int64{
						ReduceScatter: {int64(N-1) * k * e, int64(N-1) * k * e},
						AllGather:     {int64(N-1) * k * e, int64(N-1) * k * e},
						Broadcast:     {chainSent(r, root, N, count*e, true), chainRecv(r, root, N, count*e, true)},
						Reduce:        {chainSent(r, root, N, count*e, false), chainRecv(r, root, N, count*e, false)},
					} {
						if got := tr[kind]; got.SentBytes != want[0] || got.RecvBytes != want[1] || got.Calls != 1 {
							t.Errorf("N=%d count=%d %s rank %d: %+v, want sent %d recv %d in 1 call", N, count, kind, r, got, want[0], want[1])
						}
					}
					ar := tr[AllReduce]
					arSent += ar.SentBytes
					arRecv += ar.RecvBytes
					if count%N == 0 {
						if want := int64(2*(N-1)*count/N) * e; ar.SentBytes != want || ar.RecvBytes != want {
							t.Errorf("N=%d count=%d all_reduce rank %d: %+v, want 2(N-1)/N·count·2 = %d each way", N, count, r, ar, want)
						}
					}
				}
				if want := int64(2*(N-1)*count) * e; arSent != want || arRecv != want {
					t.Errorf("N=%d count=%d all_reduce: %d sent and %d received over all ranks, want 2(N-1)·count·2 = %d", N, count, arSent, arRecv, want)
				}
				for r, d := range devs {
					st := d.Stats().CategoryAllocated[cuda.Comm]
					if st.Current != 0 || (N > 1) != (st.Peak > 0) {
						t.Errorf("N=%d rank %d: comm %+v, want staging taken and given back", N, r, st)
					}
					d.Free(bufs[r][0])
					d.Free(bufs[r][1])
				}
			}
		}
	}
}

// chainSent and chainRecv are a chain collective's bytes on rank r: a
// broadcast from root to root-1, or a reduction from root+1 to root.
func chainSent(r, root, N, bytes int, fromRoot bool) int64 {
	last := (root + N - 1) % N
	if !fromRoot {
		last = root
	}
	if N == 1 || r == last {
		return 0
	}
	return int64(bytes)
}

func chainRecv(r, root, N, bytes int, fromRoot bool) int64 {
	first := root
	if !fromRoot {
		first = (root + 1) % N
	}
	if N == 1 || r == first {
		return 0
	}
	return int64(bytes)
}

// A tensor N does not divide is sharded over PaddedLen(n, N) elements,
// zeros at the end: reduce-scatter then all-gather is the all-reduce, and
// the padding stays zero.
func TestShardPadding(t *testing.T) {
	const N, n = 3, 10
	if ShardLen(n, N) != 4 || PaddedLen(n, N) != 12 {
		t.Fatalf("ShardLen(10, 3) = %d, PaddedLen = %d; want 4, 12", ShardLen(n, N), PaddedLen(n, N))
	}
	devs := hosts(t, N)
	g, _ := NewGroup(devs)
	ins := make([][]float64, N)
	full, shard, ref := make([]*cuda.Buffer, N), make([]*cuda.Buffer, N), make([]*cuda.Buffer, N)
	for r, d := range devs {
		ins[r] = make([]float64, PaddedLen(n, N))
		for i := range n {
			ins[r][i] = float64(r*100 + i)
		}
		full[r], _ = d.Alloc(cuda.Grads, cuda.F32, PaddedLen(n, N))
		d.Upload(full[r], ins[r])
		shard[r], _ = d.Alloc(cuda.Comm, cuda.F32, ShardLen(n, N))
		ref[r], _ = d.Alloc(cuda.Grads, cuda.F32, n)
	}
	err := g.Run(func(c *Comm) error {
		r := c.Rank()
		if err := c.AllReduce(full[r].View(0, n), ref[r], Sum); err != nil {
			return err
		}
		if err := c.ReduceScatter(full[r], shard[r], Sum); err != nil {
			return err
		}
		return c.AllGather(shard[r], full[r])
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, d := range devs {
		got, want := values(t, d, full[r]), values(t, d, ref[r])
		for i := range PaddedLen(n, N) {
			w := 0.0
			if i < n {
				w = want[i]
			}
			if got[i] != w {
				t.Fatalf("rank %d element %d: %v, want %v", r, i, got[i], w)
			}
		}
	}
}

// Bad arguments and ranks that disagree fail on every rank, naming the
// rank and the value; a rank that leaves the group ends the others' wait.
func TestCollectiveErrors(t *testing.T) {
	const N = 4
	devs := hosts(t, N)
	bufs := make([]*cuda.Buffer, N)
	for r, d := range devs {
		bufs[r], _ = d.Alloc(cuda.Grads, cuda.F32, 8*N)
	}
	for _, tc := range []struct {
		name string
		f    func(c *Comm) error
		want string
	}{
		{"root out of range", func(c *Comm) error { return c.Broadcast(bufs[c.Rank()], bufs[c.Rank()], N) }, "root 4 out of range (valid: 0 to 3)"},
		{"unknown op", func(c *Comm) error { return c.AllReduce(bufs[c.Rank()], bufs[c.Rank()], Op(9)) }, "unknown reduction Op(9)"},
		{"reduce-scatter length", func(c *Comm) error {
			return c.ReduceScatter(bufs[c.Rank()].View(0, 10), bufs[c.Rank()].View(10, 3), Sum)
		}, "send has 10 elements, want N·recv = 4·3 = 12"},
		{"one rank's length differs", func(c *Comm) error {
			n := 8
			if c.Rank() == 2 {
				n = 9
			}
			return c.AllReduce(bufs[c.Rank()].View(0, n), bufs[c.Rank()].View(16, n), Sum)
		}, "rank 2 all_reduce of fp32 (sum), send 9"},
		{"one rank's collective differs", func(c *Comm) error {
			if c.Rank() == 3 {
				return c.AllGather(bufs[3].View(0, 2), bufs[3].View(8, 8))
			}
			return c.AllReduce(bufs[c.Rank()].View(0, 8), bufs[c.Rank()].View(16, 8), Sum)
		}, "rank 3 all_gather"},
		{"a rank leaves", func(c *Comm) error {
			if c.Rank() == 1 {
				return nil
			}
			return c.AllReduce(bufs[c.Rank()].View(0, 8), bufs[c.Rank()].View(16, 8), Sum)
		}, "rank 1 left the group"},
	} {
		g, _ := NewGroup(devs) // a fresh group: a failed one stays broken
		err := g.Run(tc.f)
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for r := range N {
			if tc.name == "a rank leaves" && r == 1 {
				continue
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("rank %d: ", r)) {
				t.Errorf("%s: rank %d did not fail: %v", tc.name, r, err)
			}
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := NewGroup([]cuda.Device{devs[0], shape.New(0)}); err == nil || !strings.Contains(err.Error(), "rank 1's device") {
		t.Errorf("a host and a shape rank in one group: %v", err)
	}
}

// ringTraffic, the bytes a native engine's ranks count, is what the ring
// counts as it moves the data, for every collective, rank, root and size.
func TestRingTrafficFormula(t *testing.T) {
	for N := 1; N <= 6; N++ {
		g, err := NewGroup(hosts(t, N))
		if err != nil {
			t.Fatal(err)
		}
		for _, count := range []int{1, 5, 3*N + 1, 16 * N} {
			for _, kind := range []Collective{Broadcast, Reduce, AllReduce, ReduceScatter, AllGather} {
				for root := range N {
					if root > 0 && kind != Broadcast && kind != Reduce {
						break
					}
					sendLen, recvLen := callLens(kind, N, count)
					before := make([][NumCollectives]Traffic, N)
					for r := range N {
						before[r] = g.Comm(r).Traffic()
					}
					err := g.Run(func(c *Comm) error {
						d := c.Device()
						s, err1 := d.Alloc(cuda.Grads, cuda.BF16, sendLen)
						rv, err2 := d.Alloc(cuda.Grads, cuda.BF16, recvLen)
						if err1 != nil || err2 != nil {
							return fmt.Errorf("%v %v", err1, err2)
						}
						defer d.Free(s)
						defer d.Free(rv)
						switch kind {
						case Broadcast:
							return c.Broadcast(s, rv, root)
						case Reduce:
							return c.Reduce(s, rv, Sum, root)
						case AllReduce:
							return c.AllReduce(s, rv, Sum)
						case ReduceScatter:
							return c.ReduceScatter(s, rv, Sum)
						}
						return c.AllGather(s, rv)
					})
					if err != nil {
						t.Fatal(err)
					}
					k := call{kind: kind, root: root, dtype: cuda.BF16, sendLen: sendLen, recvLen: recvLen}
					for r := range N {
						got := g.Comm(r).Traffic()[kind]
						b := before[r][kind]
						sent, recv := k.ringTraffic(r, N)
						if got.SentBytes-b.SentBytes != sent || got.RecvBytes-b.RecvBytes != recv {
							t.Errorf("N=%d %s count %d root %d rank %d: the ring sent %d and received %d, ringTraffic says %d and %d",
								N, kind, count, root, r, got.SentBytes-b.SentBytes, got.RecvBytes-b.RecvBytes, sent, recv)
						}
					}
				}
			}
		}
	}
}

// callLens are the send and receive lengths of a collective of kind over
// N ranks that moves count elements a rank: a reduce-scatter sends N
// shards, an all-gather receives N.
func callLens(kind Collective, N, count int) (send, recv int) {
	switch kind {
	case ReduceScatter:
		return N * count, count
	case AllGather:
		return count, N * count
	}
	return count, count
}
