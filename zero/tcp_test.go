package zero

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"trainmem/cuda"
)

// freeAddr is a loopback address with a port nobody listens on.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// dialAll joins n TCP links at one address from n goroutines, as n
// processes would, each with the given timeout.
func dialAll(t testing.TB, n int, timeout time.Duration) ([]*TCPLink, []error) {
	t.Helper()
	addr := freeAddr(t)
	links, errs := make([]*TCPLink, n), make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			links[r], errs[r] = DialTCP(addr, r, n, timeout)
		}()
	}
	wg.Wait()
	return links, errs
}

// linkedGroups is n process groups over TCP, one host device each, and a
// runner that runs f on every rank at once as n processes would.
func linkedGroups(t testing.TB, n int) ([]*Group, []cuda.Device, func(func(*Comm) error) error) {
	t.Helper()
	links, errs := dialAll(t, n, 20*time.Second)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	devs := hosts(t, n)
	gs := make([]*Group, n)
	for r := range n {
		var err error
		if gs[r], err = NewProcessGroup(devs[r], links[r]); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { closeAll(links) })
	run := func(f func(*Comm) error) error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, g := range gs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = g.Run(f) }()
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	return gs, devs, run
}

// The collectives over TCP links, one group per rank as in processes of
// their own, against the same reference as the in-process ranks; the
// traffic each rank counts is the in-process rank's.
func TestCollectivesOverTCP(t *testing.T) {
	for _, N := range []int{1, 2, 3, 5} {
		gs, devs, run := linkedGroups(t, N)
		for _, dt := range dtypes {
			for _, count := range []int{1, 3*N + 2, 64 * N} {
				for _, inPlace := range []bool{false, true} {
					checkCollectives(t, fmt.Sprintf("tcp/N=%d/%s/count=%d/inplace=%t", N, dt, count, inPlace), run, devs, dt, count, inPlace)
				}
			}
		}
		ig, err := NewGroup(hosts(t, N))
		if err != nil {
			t.Fatal(err)
		}
		idevs := make([]cuda.Device, N)
		for r := range idevs {
			idevs[r] = ig.devs[r]
		}
		for _, dt := range dtypes {
			for _, count := range []int{1, 3*N + 2, 64 * N} {
				for _, inPlace := range []bool{false, true} {
					checkCollectives(t, "inproc", ig.Run, idevs, dt, count, inPlace)
				}
			}
		}
		for r, g := range gs {
			if got, want := g.Comm(0).Traffic(), ig.Comm(r).Traffic(); got != want {
				t.Errorf("N=%d rank %d: traffic over TCP %+v, in process %+v", N, r, got, want)
			}
			if st := devs[r].Stats(); st.CategoryAllocated[cuda.Comm].Peak != ig.devs[r].Stats().CategoryAllocated[cuda.Comm].Peak {
				t.Errorf("N=%d rank %d: comm staging peak over TCP %d, in process %d", N, r, st.CategoryAllocated[cuda.Comm].Peak, ig.devs[r].Stats().CategoryAllocated[cuda.Comm].Peak)
			}
		}
	}
}

// TestTCPMesh: every pair of five ranks talks over a connection of its
// own: each rank sends every other rank a message naming the pair and
// receives one from each, in an order no ring would allow (the ranks after
// it first), and a rank that is not in the group is refused by number.
func TestTCPMesh(t *testing.T) {
	const n = 5
	links, errs := dialAll(t, n, 20*time.Second)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	defer closeAll(links)
	var wg sync.WaitGroup
	for r, l := range links {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 1; k < n; k++ {
				q := (r + k) % n
				if err := l.Send(q, []byte{byte(r), byte(q)}); err != nil {
					errs[r] = err
					return
				}
			}
			for q := n - 1; q >= 0; q-- {
				if q == r {
					continue
				}
				b := make([]byte, 2)
				if err := l.Recv(q, b); err != nil {
					errs[r] = err
					return
				}
				if b[0] != byte(q) || b[1] != byte(r) {
					errs[r] = fmt.Errorf("rank %d from rank %d: %v, want [%d %d]", r, q, b, q, r)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if err := links[2].Send(n, []byte{0}); err == nil || !strings.Contains(err.Error(), "no rank 5") {
		t.Errorf("send to rank %d of %d: %v", n, n, err)
	}
}

// A collective that differs between the ranks fails on every rank with the
// difference, as in process: a rank that finds it (one of rank 1's
// neighbours, whichever compares first: the other may hear its abort
// before it compares) names rank 1's call, and the abort reaches every
// other rank.
func TestTCPCallsDiffer(t *testing.T) {
	_, devs, run := linkedGroups(t, 3)
	bufs := make([]*cuda.Buffer, 3)
	for r, d := range devs {
		b, err := d.Alloc(cuda.Grads, cuda.F32, 4+r%2)
		if err != nil {
			t.Fatal(err)
		}
		bufs[r] = b
	}
	err := run(func(c *Comm) error { return c.AllReduce(bufs[c.Rank()], bufs[c.Rank()], Sum) })
	if err == nil || strings.Count(err.Error(), "the ranks' calls differ") != 3 || strings.Count(err.Error(), "all_reduce of fp32 (sum), send 5 and recv 5 elements") != 3 {
		t.Fatalf("got %v, want every rank to name rank 1's different call", err)
	}
	found := 0
	for _, finder := range []string{
		"rank 1: zero: the ranks' calls differ: rank 0 calls all_reduce of fp32 (sum), send 4 and recv 4 elements, rank 1 all_reduce of fp32 (sum), send 5 and recv 5 elements",
		"rank 2: zero: the ranks' calls differ: rank 1 calls all_reduce of fp32 (sum), send 5 and recv 5 elements, rank 2 all_reduce of fp32 (sum), send 4 and recv 4 elements",
	} {
		if strings.Contains(err.Error(), finder) {
			found++
		}
	}
	if found == 0 {
		t.Errorf("got %v, want rank 1 or rank 2 to have found the difference with its neighbour", err)
	}
}

// A rank that makes a collective the others do not is named with its
// call by a neighbour, and every rank hears it; a rank whose own
// arguments fail takes every rank down with its error. Neither waits for
// the timeout.
func TestTCPCallsOutOfStep(t *testing.T) {
	t.Run("another collective", func(t *testing.T) {
		_, devs, run := linkedGroups(t, 3)
		bufs := make([]*cuda.Buffer, 3)
		for r, d := range devs {
			b, err := d.Alloc(cuda.Grads, cuda.F32, 4)
			if err != nil {
				t.Fatal(err)
			}
			bufs[r] = b
		}
		start := time.Now()
		err := run(func(c *Comm) error {
			b := bufs[c.Rank()]
			if c.Rank() == 2 {
				if err := c.AllGather(b.View(0, 1), b.View(0, 3)); err != nil {
					return err
				}
			}
			return c.AllReduce(b, b, Sum)
		})
		// Rank 2's neighbours may find it either way round: rank 0
		// compares rank 2's call with its own, rank 2 rank 1's with its
		// own; the other ranks hear the finder's abort.
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		if strings.Count(msg, "the ranks' calls differ") != 3 || strings.Count(msg, "all_gather of fp32, send 1 and recv 3 elements") != 3 ||
			!strings.Contains(msg, "rank 0: zero: the ranks' calls differ: rank 2 calls all_gather of fp32, send 1 and recv 3 elements, rank 0 all_reduce of fp32 (sum), send 4 and recv 4 elements") &&
				!strings.Contains(msg, "rank 2: zero: the ranks' calls differ: rank 1 calls all_reduce of fp32 (sum), send 4 and recv 4 elements, rank 2 all_gather of fp32, send 1 and recv 3 elements") {
			t.Fatalf("got %v, want every rank to name rank 2's extra all_gather", err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("the ranks took %v to notice, want well within the 20s timeout", d)
		}
	})
	t.Run("bad arguments", func(t *testing.T) {
		_, devs, run := linkedGroups(t, 3)
		err := run(func(c *Comm) error {
			b, err := devs[c.Rank()].Alloc(cuda.Grads, cuda.F32, 4)
			if err != nil {
				return err
			}
			send := b
			if c.Rank() == 1 {
				send = nil
			}
			return c.AllReduce(send, b, Sum)
		})
		if err == nil || strings.Count(err.Error(), "zero: all_reduce: send is nil") != 3 || !strings.Contains(err.Error(), "rank 1: zero: all_reduce: send is nil") || strings.Count(err.Error(), "rank 1 failed: zero: all_reduce: send is nil") != 2 {
			t.Fatalf("got %v, want every rank to name rank 1's nil send", err)
		}
	})
}

// Under a native engine, which a link's abort cannot interrupt, no rank
// enters the library before every rank agreed: a call that differs, or a
// rank's bad arguments, fails every rank with the same error and the engine
// is never called; calls that agree reach it.
func TestNativeOverLinksAgreeFirst(t *testing.T) {
	for _, tc := range []struct {
		name  string
		len   func(r int) int
		nilAt int
		want  string
	}{
		{"agree", func(int) int { return 4 }, -1, ""},
		{"another length", func(r int) int { return 4 + r/2 }, -1, "the ranks' calls differ: rank 0 calls all_reduce of fp32 (sum), send 4 and recv 4 elements, rank 2 all_reduce of fp32 (sum), send 5"},
		{"bad arguments", func(int) int { return 4 }, 1, "rank 1: zero: all_reduce: send is nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 3
			links, errs := dialAll(t, n, 20*time.Second)
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { closeAll(links) })
			devs := hosts(t, n)
			lib := newCountingLib()
			gs := make([]*Group, n)
			for r := range n {
				var err error
				if gs[r], err = NewNativeProcessGroup(devs[r], links[r], lib); err != nil {
					t.Fatal(err)
				}
			}
			got := make([]error, n)
			var wg sync.WaitGroup
			for r, g := range gs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					got[r] = g.Run(func(c *Comm) error {
						b, err := devs[r].Alloc(cuda.Grads, cuda.F32, tc.len(r))
						if err != nil {
							return err
						}
						send := b
						if r == tc.nilAt {
							send = nil
						}
						return c.AllReduce(send, b, Sum)
					})
				}()
			}
			wg.Wait()
			for r, err := range got {
				switch {
				case tc.want == "" && err != nil:
					t.Errorf("rank %d: %v", r, err)
				case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("rank %d: %v, want %q", r, err, tc.want)
				}
			}
			if want := map[bool]int64{true: n, false: 0}[tc.want == ""]; lib.calls.Load() != want {
				t.Errorf("the engine was called %d times, want %d", lib.calls.Load(), want)
			}
		})
	}
}

// The rendezvous names the ranks that did not join, and refuses a world
// size that differs; an aborting rank's reason reaches every rank; a rank
// that goes away fails the others' waits naming it.
func TestTCPFailures(t *testing.T) {
	t.Run("missing rank", func(t *testing.T) {
		addr := freeAddr(t)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 { // ranks 0 and 1 of 3
			wg.Add(1)
			go func() { defer wg.Done(); _, errs[r] = DialTCP(addr, r, 3, time.Second) }()
		}
		wg.Wait()
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "rank 2 did not join within 1s") {
				t.Errorf("rank %d: got %v, want rank 2 named", r, err)
			}
		}
	})
	t.Run("world differs", func(t *testing.T) {
		addr := freeAddr(t)
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r, n := range []int{2, 3} {
			wg.Add(1)
			go func() { defer wg.Done(); _, errs[r] = DialTCP(addr, r, n, 5*time.Second) }()
		}
		wg.Wait()
		for r, err := range errs {
			if err == nil || !strings.Contains(err.Error(), "rank 1 was started for 3 ranks, rank 0 for 2") {
				t.Errorf("rank %d: got %v, want the world sizes named", r, err)
			}
		}
	})
	t.Run("no rank 0", func(t *testing.T) {
		_, err := DialTCP(freeAddr(t), 1, 2, 300*time.Millisecond)
		if err == nil || !strings.Contains(err.Error(), "no rank 0 at") {
			t.Errorf("got %v, want no rank 0", err)
		}
	})
	for _, how := range []string{"abort", "gone"} {
		t.Run(how, func(t *testing.T) {
			const n = 4
			links, errs := dialAll(t, n, 20*time.Second)
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			// Rank 2 fails while the others wait in a ring of messages.
			start := time.Now()
			var wg sync.WaitGroup
			got := make([]error, n)
			for r, l := range links {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if r == 2 {
						if how == "abort" {
							l.Abort(errors.New("out of memory"))
						} else {
							l.mu.Lock()
							l.closed = true // silent, as a killed process
							l.mu.Unlock()
							l.closeConns() // its sockets close
						}
						return
					}
					b := make([]byte, 8)
					got[r] = l.Exchange((r+1)%n, b, (r+n-1)%n, make([]byte, 8))
					if got[r] == nil {
						got[r] = l.Recv((r+n-1)%n, b) // the next step never comes
					}
				}()
			}
			wg.Wait()
			want := "rank 2 failed: out of memory"
			if how == "gone" {
				want = "rank 2 is gone"
			}
			for r, err := range got {
				if r != 2 && (err == nil || !strings.Contains(err.Error(), want)) {
					t.Errorf("rank %d: got %v, want %q", r, err, want)
				}
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("the ranks took %v to notice, want well within the 20s timeout", d)
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		links, errs := dialAll(t, 2, 500*time.Millisecond)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		defer links[1].Close()
		err := links[0].Recv(1, make([]byte, 4))
		if err == nil || !strings.Contains(err.Error(), "rank 0 waited 500ms for rank 1, which did not answer") {
			t.Errorf("got %v, want the timeout naming rank 1", err)
		}
	})
}

// Agree refuses, on every rank, a rank whose setup differs, naming the
// difference.
func TestAgree(t *testing.T) {
	links, errs := dialAll(t, 3, 20*time.Second)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	got := make([]error, 3)
	var wg sync.WaitGroup
	for r, l := range links {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := []Field{{"--preset", "tiny"}, {"--batch", "2"}}
			if r == 2 {
				f[1].Value = strconv.Itoa(3)
			}
			got[r] = Agree(l, f)
		}()
	}
	wg.Wait()
	for r, err := range got {
		var me *MismatchError
		if !errors.As(err, &me) || !strings.Contains(err.Error(), "rank 2's setup differs from rank 0's: --batch 3 (rank 0: 2)") {
			t.Errorf("rank %d: got %v, want the batch named", r, err)
		}
	}
	closeAll(links)
}

// closeAll closes the links at once, as the processes of a run that
// finished would.
func closeAll(links []*TCPLink) {
	var wg sync.WaitGroup
	for _, l := range links {
		wg.Add(1)
		go func() { defer wg.Done(); l.Close() }()
	}
	wg.Wait()
}

// The ring's all-reduce of 1M fp32 elements over 4 ranks, in one process
// and over TCP links on the loopback: the bus bandwidth (NCCL's busbw,
// 2(N-1)/N · bytes / time) of each, for the closing ratios.
func BenchmarkAllReduce(b *testing.B) {
	const N, count = 4, 1 << 20
	run := func(b *testing.B, devs []cuda.Device, runAll func(func(*Comm) error) error) {
		bufs := make([]*cuda.Buffer, N)
		for r, d := range devs {
			var err error
			if bufs[r], err = d.Alloc(cuda.Grads, cuda.F32, count); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		for range b.N {
			if err := runAll(func(c *Comm) error { return c.AllReduce(bufs[c.Rank()], bufs[c.Rank()], Sum) }); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(2*float64(N-1)/N*count*4*float64(b.N)/b.Elapsed().Seconds()/1e9, "busGB/s")
	}
	b.Run("inproc", func(b *testing.B) {
		devs := hosts(b, N)
		g, err := NewGroup(devs)
		if err != nil {
			b.Fatal(err)
		}
		run(b, devs, g.Run)
	})
	b.Run("tcp", func(b *testing.B) {
		_, devs, runAll := linkedGroups(b, N)
		run(b, devs, runAll)
	})
}

// BenchmarkCollectiveLatency is small all-reduces (one fp32 element) over
// TCP links, 8 ranks in one process: the cost of the ranks agreeing on each
// call, which the data hardly adds to. µs/call is one collective.
func BenchmarkCollectiveLatency(b *testing.B) {
	const N, calls = 8, 200
	_, devs, runAll := linkedGroups(b, N)
	bufs := make([]*cuda.Buffer, N)
	for r, d := range devs {
		var err error
		if bufs[r], err = d.Alloc(cuda.Grads, cuda.F32, 1); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if err := runAll(func(c *Comm) error {
			for range calls {
				if err := c.AllReduce(bufs[c.Rank()], bufs[c.Rank()], Sum); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()*1e6/float64(b.N*calls), "µs/call")
}
