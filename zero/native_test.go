package zero

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"trainmem/cuda"
)

// countingLib makes countingEngines, each a communicator of its own that
// moves nothing: it keeps every engine it made, with the rank and size it
// was made for, and counts every engine's calls.
type countingLib struct {
	mu      *sync.Mutex
	engines *[]*countingEngine
	calls   *atomic.Int64
}

func newCountingLib() countingLib {
	return countingLib{&sync.Mutex{}, &[]*countingEngine{}, &atomic.Int64{}}
}

func (l countingLib) add(rank, size int) *countingEngine {
	e := &countingEngine{lib: l, rank: rank, size: size}
	l.mu.Lock()
	*l.engines = append(*l.engines, e)
	l.mu.Unlock()
	return e
}

func (l countingLib) InitAll(devs []cuda.Device) ([]Native, error) {
	ns := make([]Native, len(devs))
	for r := range ns {
		ns[r] = l.add(r, len(devs))
	}
	return ns, nil
}

func (l countingLib) InitRank(_ cuda.Device, lk Link) (Native, error) {
	// The ranks of lk meet, as ncclCommInitRank's do over rank 0's id.
	if lk.Rank() == 0 {
		for q := 1; q < lk.Size(); q++ {
			if err := sendMsg(lk, q, []byte("id")); err != nil {
				return nil, err
			}
		}
	} else if b, err := recvMsg(lk, 0); err != nil || string(b) != "id" {
		return nil, fmt.Errorf("no id from rank 0: %q %v", b, err)
	}
	return l.add(lk.Rank(), lk.Size()), nil
}

// countingEngineBytes is what a countingEngine says it holds.
const countingEngineBytes = 1 << 20

type countingEngine struct {
	lib        countingLib
	rank, size int
	calls      atomic.Int64
	closed     atomic.Bool
}

func (e *countingEngine) call() error { e.calls.Add(1); e.lib.calls.Add(1); return nil }

func (e *countingEngine) Broadcast(_, _ *cuda.Buffer, _ int) error    { return e.call() }
func (e *countingEngine) Reduce(_, _ *cuda.Buffer, _ Op, _ int) error { return e.call() }
func (e *countingEngine) AllReduce(_, _ *cuda.Buffer, _ Op) error     { return e.call() }
func (e *countingEngine) ReduceScatter(_, _ *cuda.Buffer, _ Op) error { return e.call() }
func (e *countingEngine) AllGather(_, _ *cuda.Buffer) error           { return e.call() }
func (e *countingEngine) SendRecv(_ *cuda.Buffer, _ int, _ *cuda.Buffer, _ int) error {
	return e.call()
}
func (e *countingEngine) Name() string { return "counting" }
func (e *countingEngine) Bytes() int64 { return countingEngineBytes }
func (e *countingEngine) Close() error {
	if e.closed.Swap(true) {
		return errors.New("closed twice")
	}
	return nil
}

// TestNativeSplit: a native engine's group split into a dp 2 × tp 2
// layout's tensor and data groups gives each sub-group communicators of
// its own from the engine's library (as ncclCommSplit's children are),
// in one process (InitAll over the sub-group's devices) and over processes
// (InitRank over the sub-group's link, its ranks and size the
// sub-group's); a sub-group's calls reach its own engines only, a rank's
// engine bytes are those of every group it is in, and closing the group
// closes every engine once.
func TestNativeSplit(t *testing.T) {
	lay := Layout{DP: 2, TP: 2, PP: 1}
	// step runs one rank's calls: one all-reduce on its tensor group, two
	// on its data group.
	step := func(c *Comm, tp, dp []*Group) error {
		b, err := c.Device().Alloc(cuda.Grads, cuda.F32, 4)
		if err != nil {
			return err
		}
		defer c.Device().Free(b)
		tc, ok1 := tp[groupIndex(lay, TensorAxis, c.Rank())].Sub(c)
		dc, ok2 := dp[groupIndex(lay, DataAxis, c.Rank())].Sub(c)
		if !ok1 || !ok2 {
			return errors.New("not in its own groups")
		}
		return errors.Join(tc.AllReduce(b, b, Sum), dc.AllReduce(b, b, Sum), dc.AllReduce(b, b, Sum))
	}
	check := func(t *testing.T, lib countingLib, bytes func(r int) int64, closeAll func() error) {
		t.Helper()
		es := *lib.engines
		if len(es) != 12 {
			t.Fatalf("%d engines, want 12 (4 of the whole group, 2 of each of 4 sub-groups)", len(es))
		}
		var sizes [5]int
		var calls [3]int64
		for _, e := range es {
			sizes[e.size]++
			if e.size == 2 && (e.rank < 0 || e.rank > 1) {
				t.Errorf("a sub-group's engine of rank %d of 2", e.rank)
			}
			n := e.calls.Load()
			if n > 2 {
				t.Fatalf("an engine of %d ranks called %d times", e.size, n)
			}
			calls[n]++
		}
		// The whole group's engines are never called, the tensor groups'
		// once each, the data groups' twice.
		if sizes != [5]int{2: 8, 4: 4} || calls != [3]int64{4, 4, 4} {
			t.Errorf("engines by size %v, by calls %v; want 8 of 2 ranks and 4 of 4, 4 called 0, 1 and 2 times", sizes, calls)
		}
		for r := range 4 {
			if got := bytes(r); got != 3*countingEngineBytes {
				t.Errorf("rank %d's engines hold %d bytes, want three engines' %d", r, got, 3*countingEngineBytes)
			}
		}
		if err := closeAll(); err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if !e.closed.Load() {
				t.Errorf("an engine of rank %d of %d was not closed", e.rank, e.size)
			}
		}
	}
	t.Run("one process", func(t *testing.T) {
		lib := newCountingLib()
		g, err := NewNativeGroup(hosts(t, 4), lib)
		if err != nil {
			t.Fatal(err)
		}
		tp, dp, err := splitTensorData(g, lay)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Run(func(c *Comm) error { return step(c, tp, dp) }); err != nil {
			t.Fatal(err)
		}
		check(t, lib, g.EngineBytes, g.Close)
	})
	t.Run("processes", func(t *testing.T) {
		links, errs := dialAll(t, 4, 20*time.Second)
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		defer closeAll(links)
		devs := hosts(t, 4)
		lib := newCountingLib()
		gs := make([]*Group, 4)
		var wg sync.WaitGroup
		for r := range gs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g, err := NewNativeProcessGroup(devs[r], links[r], lib)
				if err != nil {
					errs[r] = err
					return
				}
				gs[r] = g
				tp, dp, err := splitTensorData(g, lay)
				if err != nil {
					errs[r] = err
					return
				}
				errs[r] = g.Run(func(c *Comm) error { return step(c, tp, dp) })
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
		check(t, lib, func(r int) int64 { return gs[r].EngineBytes(0) }, func() error {
			var errs []error
			for _, g := range gs {
				errs = append(errs, g.Close())
			}
			return errors.Join(errs...)
		})
	})
}
