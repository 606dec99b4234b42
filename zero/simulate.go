package zero

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/train"
)

// RankResult is what the last step of a run left on one rank: its record,
// its allocator's statistics and the bytes it sent and received in that
// step.
type RankResult struct {
	Rank    int
	Record  train.Record
	Stats   cuda.Stats
	Traffic [NumCollectives]Traffic
	// AxisTraffic is Traffic by the layout's axis: the tensor group's and
	// the data group's.
	AxisTraffic [NumAxes][NumCollectives]Traffic
	// Engine and EngineBytes are the rank's native engine ("" for the
	// ring) and the device memory it holds outside the allocator.
	Engine      string
	EngineBytes int64
	// Timing is the last step replayed in time (clock.go): set when the
	// ranks ran on devices with a modelled clock under a Setting with a
	// Network (a rank stood for by another has that one's).
	Timing *Timing
	// MedianStepMs is a measured rank's median step time over its steps
	// after the first (the only one when there is one): less at the mercy
	// of one slow step than the last step's Record.StepMs. Set by runs
	// that measure (bench.Validate); 0 otherwise.
	MedianStepMs float64
}

// SimulatedRanks are the ranks Simulate runs of a group of n: every rank
// up to 8; beyond, ranks 0, 1, 2, n/2, n-2 and n-1. The others are alike:
// every rank's buffers have the sizes of rank 2's (shards of ceil(Φ/N) on
// every rank; the parameter server's states on rank 0 only), and only the
// ends of the chains and the ring's uneven blocks, which these ranks
// cover, make a rank's traffic its own.
func SimulatedRanks(n int) []int {
	if n <= 8 {
		rs := make([]int, n)
		for i := range rs {
			rs[i] = i
		}
		return rs
	}
	return []int{0, 1, 2, n / 2, n - 2, n - 1}
}

// SimulatedRanks are the ranks Simulate runs of the layout: the ranks at
// SimulatedRanks(DP) on the data axis times SimulatedRanks(TP) on the
// tensor axis, of every pipeline stage, in rank order. The tensor-parallel
// ranks of a replica hold buffers of the same sizes (the split divides the
// heads evenly), and the ring's uneven blocks make their traffic their own
// as on the data axis; every stage is a rank of its own (its blocks, its
// ends of the model, its micro-batches in flight).
func (l Layout) SimulatedRanks() []int {
	var rs []int
	for p := range l.PP {
		for _, d := range SimulatedRanks(l.DP) {
			for _, t := range SimulatedRanks(l.TP) {
				rs = append(rs, l.Rank(Coord{TensorAxis: t, DataAxis: d, PipelineAxis: p}))
			}
		}
	}
	return rs
}

// Simulate runs steps of s (s.Batch a rank's micro-batch, s.Ranks the
// data-parallel ranks, s.TP the tensor-parallel ranks of each) under set,
// each rank of the layout's SimulatedRanks on a shape-only
// device of its own from newDevice: their schedules, collectives and
// allocations, nothing computed. It returns the last step's result per
// simulated rank (the first step fills the caches; two are run by
// default). A rank that runs out of its device's memory fails the run with
// the allocator's *cuda.OutOfMemoryError, naming the rank. trace, when set,
// gives each simulated rank's tracer (Group.TraceRanks).
func Simulate(newDevice func() cuda.Device, c model.Checked, set Setting, steps int, trace func(rank int) cuda.Tracer) ([]RankResult, error) {
	return SimulateWith(newDevice, c, set, steps, trace, train.Options{})
}

// SimulateWith is Simulate with the trainers' options opts (a profile of
// one rank's ops on its modelled clock); their offload is the shape-only
// one.
func SimulateWith(newDevice func() cuda.Device, c model.Checked, set Setting, steps int, trace func(rank int) cuda.Tracer, opts train.Options) ([]RankResult, error) {
	if steps <= 0 {
		steps = 2
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	s := c.Setup()
	lay := LayoutOf(s)
	if err := lay.Check(); err != nil {
		return nil, err
	}
	// The ranks reported; of them, one of each alike kind runs and
	// stands for the others (alike.go), unless every rank is traced.
	ranks, alike := lay.SimulatedRanks(), [][]int(nil)
	if trace == nil && !simulateEvery {
		ranks, alike = representatives(lay, s, set, ranks)
	}
	devs := make([]cuda.Device, len(ranks))
	for i := range devs {
		devs[i] = newDevice()
		defer devs[i].Close()
	}
	for i, d := range devs {
		if d.Computes() {
			return nil, fmt.Errorf("zero: Simulate runs on shape-only devices; rank %d's is %s", ranks[i], d.Name())
		}
	}
	g, err := NewSparseGroup(devs, ranks, lay.Size())
	if err != nil {
		return nil, err
	}
	for i, a := range alike {
		if err := g.standFor(i, a); err != nil {
			return nil, err
		}
	}
	g.TraceRanks(trace)
	// Shape-only ranks take no tokens: nothing that grows with the batch.
	opts.Offload = train.ShapeOffload(c)
	return Run(g, c, set, opts, nil, steps, train.NoBatch, nil, nil)
}

// simulateEvery, when a test sets it, has Simulate run every rank it
// reports instead of one of each alike kind.
var simulateEvery bool

// Run is a run of every member of g: a trainer each under set, from the
// weights init (nil: zero), steps steps of train's run loop (train.Loop;
// the ranks are its Stepper), each member's batch of each step from
// batch(step, rank). After each step onStep (when set) gets every
// member's record (a diverged step's records come with its
// *train.DivergedError); an error from onStep ends the run after that
// step. end (when set) sees the trainers before they are closed, to read
// what they hold. Run returns every member's last finished step, with the
// first error.
func Run(g *Group, c model.Checked, set Setting, opts train.Options, init []float32, steps int,
	batch func(step, rank int) ([]int32, []int32, error), onStep func(step int, recs []train.Record, err error) error,
	end func(*Ranks)) ([]RankResult, error) {
	rk, err := NewRanks(g, c, set, opts)
	if err != nil {
		return nil, err
	}
	defer rk.Close()
	if end != nil {
		defer end(rk)
	}
	if g.tracers != nil {
		for i, t := range rk.tr {
			if tr := g.tracers(g.ranks[i]); tr != nil {
				if err := t.Trace(tr); err != nil {
					return nil, err
				}
				defer t.Trace(nil) // before end reads the weights and the trainers close
			}
		}
	}
	if init != nil {
		if err := rk.SetParams(init); err != nil {
			return nil, err
		}
	}
	// Each step's traffic is the counters' growth over it: every member's
	// and every rank a member stands for (alike.go), in that order.
	n := rk.Members()
	type counts struct {
		all  [NumCollectives]Traffic
		axes [NumAxes][NumCollectives]Traffic
	}
	type who struct{ member, alike int } // alike -1: the member itself
	var ranks []who
	for i := range n {
		ranks = append(ranks, who{i, -1})
	}
	for i := range n {
		for j := range g.comms[i].alike {
			ranks = append(ranks, who{i, j})
		}
	}
	snapshot := func(out []counts) {
		for k, w := range ranks {
			out[k].all, out[k].axes = rk.traffic(w.member, w.alike)
		}
	}
	before, after := make([]counts, len(ranks)), make([]counts, len(ranks))
	snapshot(after)
	looped, runErr := train.Loop(context.Background(), rk, steps, func(step, i int) ([]int32, []int32, error) { return batch(step, g.ranks[i]) },
		func(step int, recs []train.Record, err error) error {
			copy(before, after)
			snapshot(after)
			if onStep != nil {
				return onStep(step, recs, err)
			}
			return nil
		})
	var div *train.DivergedError
	if runErr != nil && !errors.As(runErr, &div) {
		runErr = oomFirst(runErr)
	}
	recs := looped.Last
	if recs == nil {
		return nil, runErr
	}
	out := make([]RankResult, len(ranks))
	timings := rk.Timings()
	for k, w := range ranks {
		i := w.member
		out[k] = RankResult{Rank: g.ranks[i], Record: recs[i], Stats: g.devs[i].Stats()}
		if timings != nil {
			t := timings[i]
			out[k].Timing = &t
		}
		if w.alike >= 0 {
			out[k].Rank = g.comms[i].alike[w.alike].rank
		}
		if e := g.Engine(i); e != nil {
			out[k].Engine, out[k].EngineBytes = e.Name(), g.EngineBytes(i)
		}
		out[k].Traffic = subTraffic(after[k].all, before[k].all)
		for a := range out[k].AxisTraffic {
			out[k].AxisTraffic[a] = subTraffic(after[k].axes[a], before[k].axes[a])
		}
	}
	if len(ranks) > n {
		sort.Slice(out, func(a, b int) bool { return out[a].Rank < out[b].Rank })
	}
	return out, runErr
}

// subTraffic is the counters a less b.
func subTraffic(a, b [NumCollectives]Traffic) [NumCollectives]Traffic {
	for k := range a {
		a[k] = Traffic{Calls: a[k].Calls - b[k].Calls, SentBytes: a[k].SentBytes - b[k].SentBytes, RecvBytes: a[k].RecvBytes - b[k].RecvBytes}
	}
	return a
}

// oomFirst puts a rank's out-of-memory error first: the other ranks then
// only report that it left.
func oomFirst(err error) error {
	var oom *cuda.OutOfMemoryError
	if errors.As(err, &oom) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				if errors.As(e, &oom) {
					return e
				}
			}
		}
	}
	return err
}

// SimulateRank is Simulate of one rank alone on dev (a sparse group of that
// member): its last step. Every rank of a ZeRO setting holds buffers of the
// same sizes, so one rank says whether a setting fits a card.
func SimulateRank(dev cuda.Device, c model.Checked, set Setting, rank, steps int) (RankResult, error) {
	if steps <= 0 {
		steps = 2
	}
	if err := c.Err(); err != nil {
		return RankResult{}, err
	}
	g, err := NewSparseGroup([]cuda.Device{dev}, []int{rank}, LayoutOf(c.Setup()).Size())
	if err != nil {
		return RankResult{}, err
	}
	res, err := Run(g, c, set, train.Options{Offload: train.ShapeOffload(c)}, nil, steps, train.NoBatch, nil, nil)
	if err != nil {
		return RankResult{}, err
	}
	return res[0], nil
}
