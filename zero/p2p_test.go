package zero

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"trainmem/cuda"
)

// checkSendRecv runs ringAndChain on n ranks through run.
func checkSendRecv(t *testing.T, name string, run func(func(*Comm) error) error, dt cuda.DType, count int) {
	t.Helper()
	if err := run(func(c *Comm) error { return ringAndChain(c, dt, count) }); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// ringAndChain is one rank's part of two exchanges: a ring (every rank
// sends to its successor and receives from its predecessor in one call,
// so each send waits on a rank that is itself sending) and a chain (rank 0
// only sends, the last only receives, the others pass on what they got).
// Every rank sends values that say whose they are (saltedValues) and
// checks what arrived against them, value by value.
func ringAndChain(c *Comm, dt cuda.DType, count int) error {
	r, n, d := c.Rank(), c.Size(), c.Device()
	send, recv := filledOn(d, dt, count, r), mustAlloc(d, dt, count)
	next, prev := (r+1)%n, (r+n-1)%n
	if err := c.SendRecv(send, next, recv, prev); err != nil {
		return err
	}
	if got, want := fmt.Sprint(download(d, recv)), fmt.Sprint(saltedValues(count, prev)); got != want {
		return fmt.Errorf("rank %d received %s, its predecessor sent %s", r, got, want)
	}
	var in, out *cuda.Buffer
	if r > 0 {
		in = mustAlloc(d, dt, count)
		if err := c.SendRecv(nil, 0, in, r-1); err != nil {
			return err
		}
		if got, want := fmt.Sprint(download(d, in)), fmt.Sprint(saltedValues(count, 0)); got != want {
			return fmt.Errorf("rank %d got %s down the chain, rank 0 sent %s", r, got, want)
		}
	}
	switch {
	case r == 0:
		out = send
	case r < n-1:
		out = in
	}
	if out != nil {
		return c.SendRecv(out, r+1, nil, 0)
	}
	return nil
}

// filledOn, mustAlloc and download are the rank's side of the tests: a
// panic here is a failed test, reported by the group's Run.
func filledOn(d cuda.Device, dt cuda.DType, n int, salt int) *cuda.Buffer {
	b := mustAlloc(d, dt, n)
	v := saltedValues(n, salt)
	if dt == cuda.I32 {
		iv := make([]int32, n)
		for i := range iv {
			iv[i] = int32(v[i])
		}
		if err := d.Upload(b, iv); err != nil {
			panic(err)
		}
		return b
	}
	if err := d.Upload(b, v); err != nil {
		panic(err)
	}
	return b
}

// saltedValues are n values that say whose they are (salt), exact in
// every dtype.
func saltedValues(n, salt int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(salt*8 + i%8)
	}
	return v
}

func mustAlloc(d cuda.Device, dt cuda.DType, n int) *cuda.Buffer {
	b, err := d.Alloc(cuda.Activations, dt, n)
	if err != nil {
		panic(err)
	}
	return b
}

func download(d cuda.Device, b *cuda.Buffer) []float64 {
	if b.DType == cuda.I32 {
		v := make([]int32, b.Len)
		if err := d.Download(v, b); err != nil {
			panic(err)
		}
		out := make([]float64, len(v))
		for i, x := range v {
			out[i] = float64(x)
		}
		return out
	}
	v := make([]float64, b.Len)
	if err := d.Download(v, b); err != nil {
		panic(err)
	}
	return v
}

// TestSendRecv: the exchanges in one process and over TCP links, with the
// same traffic on every rank either way: the ring's call sends and
// receives count elements, the chain's a half each but at its ends.
func TestSendRecv(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		ig, err := NewGroup(hosts(t, n))
		if err != nil {
			t.Fatal(err)
		}
		_, _, run := linkedGroups(t, n)
		gs := []struct {
			name string
			run  func(func(*Comm) error) error
		}{{"inproc", ig.Run}, {"tcp", run}}
		for _, x := range gs {
			for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.I32} {
				checkSendRecv(t, fmt.Sprintf("%s/N=%d/%s", x.name, n, dt), x.run, dt, 3*n+1)
			}
		}
		for r := range n {
			tr := ig.Comm(r).Traffic()[SendRecv]
			var sentB, recvB int64
			for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.I32} {
				b := int64(3*n+1) * int64(dt.Size())
				sentB += b // the ring
				recvB += b
				if r < n-1 {
					sentB += b
				}
				if r > 0 {
					recvB += b
				}
			}
			calls := int64(3 * 2) // the ring and one chain call a dtype
			if r > 0 && r < n-1 {
				calls = 3 * 3
			}
			if want := (Traffic{Calls: calls, SentBytes: sentB, RecvBytes: recvB}); tr != want {
				t.Errorf("N=%d rank %d: send_recv traffic %+v, want %+v", n, r, tr, want)
			}
		}
	}
}

// TestSendRecvFailures: a receive that does not match its send fails,
// naming both ranks and lengths, in one process on both ranks and over TCP
// on every rank (the receiver aborts the group); a rank that leaves while
// its peer waits for it fails the peer's call, naming it; bad arguments are
// refused before anything moves.
func TestSendRecvFailures(t *testing.T) {
	mismatch := func(c *Comm) error {
		d := c.Device()
		switch c.Rank() {
		case 0:
			return c.SendRecv(mustAlloc(d, cuda.F32, 4), 1, nil, 0)
		case 1:
			return c.SendRecv(nil, 0, mustAlloc(d, cuda.F32, 5), 0)
		}
		return nil
	}
	const want = "zero: send_recv: rank 0 sends 4 elements of fp32 to rank 1, which receives 5 of fp32"
	ig, err := NewGroup(hosts(t, 2))
	if err != nil {
		t.Fatal(err)
	}
	if err := ig.Run(mismatch); err == nil || strings.Count(err.Error(), want) != 2 {
		t.Errorf("in process: %v, want both ranks to say %q", err, want)
	}
	// Over TCP the receiver aborts the group: the sender's bytes may
	// already be on their way, so it and the rank that took no part hear
	// the abort at their next wait, here a collective.
	_, _, run := linkedGroups(t, 3)
	err = run(func(c *Comm) error {
		if err := mismatch(c); err != nil {
			return err
		}
		b := mustAlloc(c.Device(), cuda.F32, 1)
		return c.AllReduce(b, b, Sum)
	})
	if err == nil || strings.Count(err.Error(), want) != 3 {
		t.Errorf("over TCP: %v, want every rank to say %q", err, want)
	}

	ig, err = NewGroup(hosts(t, 3))
	if err != nil {
		t.Fatal(err)
	}
	err = ig.Run(func(c *Comm) error {
		if c.Rank() == 0 {
			return errors.New("rank 0 gives up")
		}
		return c.SendRecv(nil, 0, mustAlloc(c.Device(), cuda.F32, 4), 0)
	})
	if err == nil || strings.Count(err.Error(), "zero: send_recv: rank 0 left the group (it failed (rank 0: rank 0 gives up)) while rank") != 2 {
		t.Errorf("a peer that left: %v", err)
	}

	err = ig.Run(func(c *Comm) error {
		b := mustAlloc(c.Device(), cuda.F32, 4)
		switch c.Rank() {
		case 0:
			return c.SendRecv(b, 3, nil, 0)
		case 1:
			return c.SendRecv(nil, 0, b, 1)
		}
		return nil
	})
	for _, w := range []string{"rank 0: zero: send_recv: send to rank 3: out of range (valid: 0 to 2)", "rank 1: zero: send_recv: rank 1 cannot receive from itself"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("bad arguments: %v, want %q", err, w)
		}
	}
}

// TestSendRecvSplit: the stages of each pipeline group of a dp 2 × pp 2
// layout pass a buffer down their pipeline group, in one Run of the whole
// layout, and a shape-only group counts the same traffic with nothing
// moved and no peer needed.
func TestSendRecvSplit(t *testing.T) {
	l := Layout{DP: 2, TP: 1, PP: 2}
	for _, computes := range []bool{true, false} {
		devs := shapes(l.Size())
		if computes {
			devs = hosts(t, l.Size())
		}
		g, err := NewGroup(devs)
		if err != nil {
			t.Fatal(err)
		}
		pp, err := g.Split(l.Groups(PipelineAxis))
		if err != nil {
			t.Fatal(err)
		}
		got := make([][]float64, l.Size())
		err = g.Run(func(c *Comm) error {
			sub := pp[groupIndex(l, PipelineAxis, c.Rank())]
			sc, _ := sub.Sub(c)
			d := c.Device()
			if sc.Rank() == 0 {
				return sc.SendRecv(filledOn(d, cuda.F32, 6, c.Rank()), 1, nil, 0)
			}
			b := mustAlloc(d, cuda.F32, 6)
			if err := sc.SendRecv(nil, 0, b, 0); err != nil {
				return err
			}
			if computes {
				got[c.Rank()] = download(d, b)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, sub := range pp {
			first, last := sub.Comm(0), sub.Comm(1)
			if tr := first.Traffic()[SendRecv]; tr != (Traffic{Calls: 1, SentBytes: 24}) {
				t.Errorf("computes=%t: stage 0 traffic %+v", computes, tr)
			}
			if tr := last.Traffic()[SendRecv]; tr != (Traffic{Calls: 1, RecvBytes: 24}) {
				t.Errorf("computes=%t: stage 1 traffic %+v", computes, tr)
			}
		}
		if computes {
			for _, ranks := range l.Groups(PipelineAxis) {
				if fmt.Sprint(got[ranks[1]]) != fmt.Sprint(saltedValues(6, ranks[0])) {
					t.Errorf("stage 1 (rank %d) got %v from rank %d", ranks[1], got[ranks[1]], ranks[0])
				}
			}
		}
	}
}
