package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/train"
)

// SweepPolicies are the checkpoint sweep's policies for a model of the
// given layers: none, selective, full, sqrt, and every:K for K = 2 and
// K = L/2 where they differ from full (K = 1), from sqrt's K and from each
// other.
func SweepPolicies(layers int) []model.Checkpoint {
	ps := []model.Checkpoint{{Kind: model.CheckpointNone}, {Kind: model.CheckpointSelective}, {Kind: model.CheckpointFull}, {Kind: model.CheckpointSqrt}}
	seen := map[int]bool{1: true, model.Checkpoint{Kind: model.CheckpointSqrt}.Segment(layers): true}
	for _, k := range []int{2, layers / 2} {
		if k >= 1 && k <= layers && !seen[k] {
			seen[k] = true
			ps = append(ps, model.Checkpoint{Kind: model.CheckpointEvery, Every: k})
		}
	}
	return ps
}

// SweepRow is one policy's memory and time. Activation bytes are the
// category's peak in requested bytes; the peaks are the allocator's.
// Times are medians over the timed steps (all but the first); Overhead is
// the median over those steps of the step time against none's in the same
// round, minus 1.
type SweepRow struct {
	Policy        string                  `json:"policy"`
	SegmentLayers int                     `json:"segment_layers"` // layers a recomputed segment (0: none, selective)
	Estimate      map[model.Formula]int64 `json:"estimate"`       // activation bytes by formula
	Simulated     int64                   `json:"simulated"`      // activation bytes
	Measured      *int64                  `json:"measured"`       // activation bytes; null when not measured
	SimulatedPeak int64                   `json:"simulated_peak"` // peak allocated bytes
	// AtPeak is what the simulated peak holds: each category's allocated
	// bytes at that moment (they sum to SimulatedPeak), so that what sets
	// a policy's peak shows beside what the policy saves.
	AtPeak       map[cuda.Category]int64 `json:"simulated_at_peak"`
	MeasuredPeak *int64                  `json:"measured_peak"`
	StepMs       *float64                `json:"step_ms"`
	RecomputeMs  *float64                `json:"recompute_ms"`
	Overhead     *float64                `json:"overhead"` // step time / none's − 1; null without none or a measurement
	// RecomputeFraction is the estimate's extra FLOPs over a step's
	// (Korthikanti et al. 2022, Appendix A; Narayanan et al. 2021).
	RecomputeFraction float64 `json:"recompute_flop_fraction"`
	// DominatedBy names a policy that reaches a peak no higher, keeps no
	// more activations and recomputes no more FLOPs, one of them strictly
	// less (the first such in the sweep's order; "" when none does): a
	// policy no one should choose.
	DominatedBy string `json:"dominated_by,omitempty"`

	simReserved int64 // the simulation's peak reserved bytes
}

// SweepReport is Sweep's answer.
type SweepReport struct {
	Setup    model.Setup     `json:"-"`
	Formulas []model.Formula `json:"formulas"`
	Device   string          `json:"device,omitempty"`
	Data     string          `json:"data,omitempty"`
	Steps    int             `json:"steps"`       // steps a policy
	Timed    int             `json:"timed_steps"` // steps in the timings (all but the first)
	Rows     []SweepRow      `json:"rows"`
	// Timelines are each policy's simulated step, traced (Options.Timelines).
	Timelines []TimelinePanel `json:"-"`
}

// WriteJSON writes the report with the model and the setup (whose
// checkpoint policy is one per row).
func (r *SweepReport) WriteJSON(w io.Writer) error {
	sd := setupDocOf(r.Setup)
	sd.Checkpoint = "" // one per row
	return writeJSON(w, struct {
		Model modelDoc `json:"model"`
		Setup setupDoc `json:"setup"`
		*SweepReport
	}{modelDocOf(r.Setup), sd, r})
}

// Sweep runs o.Setup under every checkpoint policy of o.Policies (default
// SweepPolicies): the estimate, the simulation and, when newDevice is not
// nil, a measured run on a device of its own for each policy. The measured
// runs are interleaved step by step (policy after policy, the order rotated
// each round) so that the machine's drift touches every policy alike. Sweep
// calls newDevice once per policy and closes every device it opened.
func Sweep(ctx context.Context, newDevice func() (cuda.Device, error), o Options) (*SweepReport, error) {
	c := o.Setup
	if err := checkSetup(c); err != nil {
		return nil, err
	}
	s := c.Setup()
	pols := o.Policies
	if pols == nil {
		pols = SweepPolicies(s.Model.Layers)
	}
	steps := o.Steps
	if steps == 0 {
		steps = 7
	}
	if steps < 1 {
		return nil, fmt.Errorf("bench: steps %d: must be a positive integer", steps)
	}
	rep := &SweepReport{Setup: s, Formulas: model.Formulas(), Steps: steps, Timed: max(steps-1, 1)}
	setups := make([]model.Checked, len(pols))
	for i, pol := range pols {
		// A signal stops the sweep between two policies' simulations, not
		// only once they are all done.
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bench: the sweep stopped after simulating %d of %d policies: %w", i, len(pols), context.Cause(ctx))
		}
		ps := s
		ps.Checkpoint = pol
		p, err := ps.Check()
		if err != nil {
			return nil, err
		}
		setups[i] = p
		e, err := p.Estimate()
		if err != nil {
			return nil, err
		}
		shape := shape.New(0)
		var tr *MemoryTrace
		var tracer cuda.Tracer
		if o.Timelines {
			tr = &MemoryTrace{}
			tracer = tr
		}
		_, st, err := train.Simulate(shape, p, steps, tracer)
		shape.Close()
		if tr != nil {
			rep.Timelines = append(rep.Timelines, TimelinePanel{Title: "checkpoint " + pol.String(), Trace: tr})
		}
		if err != nil {
			return nil, fmt.Errorf("bench: simulation of checkpoint %s: %w", pol, err)
		}
		row := SweepRow{Policy: pol.String(), SegmentLayers: pol.Segment(s.Model.Layers), Estimate: map[model.Formula]int64{},
			Simulated: st.CategoryRequested[cuda.Activations].Peak, SimulatedPeak: st.AllocatedBytes.Peak,
			RecomputeFraction: e.Recompute.Fraction, simReserved: st.ReservedBytes.Peak, AtPeak: map[cuda.Category]int64{}}
		for _, c := range cuda.Categories() {
			if st.AtPeak[c] != 0 {
				row.AtPeak[c] = st.AtPeak[c]
			}
		}
		for _, a := range e.Activations {
			row.Estimate[a.Formula] = a.Total
		}
		rep.Rows = append(rep.Rows, row)
	}
	markDominated(rep.Rows)
	o.progress("sweep: %d policies estimated and simulated", len(pols))
	if newDevice == nil {
		return rep, nil
	}

	runs := make([]*runner, len(pols))
	devs := make([]cuda.Device, 0, len(pols))
	defer func() {
		for i, r := range runs {
			if r != nil {
				r.close()
			}
			if i < len(devs) {
				devs[i].Close()
			}
		}
	}()
	for i, p := range setups {
		dev, err := newDevice()
		if err != nil {
			return nil, err
		}
		devs = append(devs, dev)
		if i == 0 {
			var need int64 // every policy's device is alive at once
			for _, row := range rep.Rows {
				need += row.simReserved
			}
			// every policy's runner initialises its parameters on the host
			if err := train.CheckMachine(dev, need, int64(len(setups))*train.HostParamBytes(p.Setup().Model)); err != nil {
				return nil, err
			}
		}
		if runs[i], err = newRunner(dev, p, o); err != nil {
			return nil, fmt.Errorf("bench: checkpoint %s: %w", p.Setup().Checkpoint, err)
		}
	}
	rep.Device, rep.Data = devs[0].Name(), runs[0].data
	recs := make([][]train.Record, len(pols))
	rot := &rotation{ctx: ctx, runs: runs, pols: pols}
	looped, err := train.Loop(ctx, rot, steps, func(_, i int) ([]int32, []int32, error) { return runs[i].batches.Next() },
		func(round int, got []train.Record, err error) error {
			if err != nil {
				return nil // a policy diverged: the round did not finish (its error follows)
			}
			line := fmt.Sprintf("sweep: step %d/%d:", round+1, steps)
			for i := range pols {
				recs[i] = append(recs[i], got[i])
				line += fmt.Sprintf(" %s %.1f ms", pols[i], got[i].StepMs)
			}
			o.progress("%s", line)
			return nil
		})
	switch {
	case looped.Interrupted:
		return nil, fmt.Errorf("bench: sweep stopped in step %d: %w", looped.Steps+1, context.Cause(ctx))
	case err != nil:
		return nil, err
	}
	none := slices.IndexFunc(pols, func(c model.Checkpoint) bool { return c.Kind == model.CheckpointNone })
	first := 1
	if steps == 1 {
		first = 0
	}
	for i := range pols {
		st := devs[i].Stats()
		row := &rep.Rows[i]
		row.Measured = ptr(st.CategoryRequested[cuda.Activations].Peak)
		row.MeasuredPeak = ptr(st.AllocatedBytes.Peak)
		var stepMs, recMs, ratio []float64
		for k, r := range recs[i][first:] {
			stepMs = append(stepMs, r.StepMs)
			recMs = append(recMs, r.RecomputeMs)
			if none >= 0 {
				ratio = append(ratio, r.StepMs/recs[none][first+k].StepMs)
			}
		}
		row.StepMs, row.RecomputeMs = fptr(median(stepMs)), fptr(median(recMs))
		if none >= 0 {
			row.Overhead = fptr(median(ratio) - 1)
		}
	}
	return rep, nil
}

// markDominated sets each row's DominatedBy from the simulated peaks and
// activations and the estimate's recompute FLOPs (exact and the same on
// every run: the measured peaks equal the simulated, and the step times'
// noise would make the judgement change from run to run).
func markDominated(rows []SweepRow) {
	for i := range rows {
		p := &rows[i]
		for _, q := range rows {
			noWorse := q.SimulatedPeak <= p.SimulatedPeak && q.Simulated <= p.Simulated && q.RecomputeFraction <= p.RecomputeFraction
			better := q.SimulatedPeak < p.SimulatedPeak || q.Simulated < p.Simulated || q.RecomputeFraction < p.RecomputeFraction
			if noWorse && better {
				p.DominatedBy = q.Policy
				break
			}
		}
	}
}

// rotation steps every policy's trainer once a step, starting one later
// each step, so that no policy always runs first on a warm machine; a
// signal (ctx) stops it between two policies' steps.
type rotation struct {
	ctx   context.Context
	runs  []*runner
	pols  []model.Checkpoint
	round int
}

func (r *rotation) Members() int { return len(r.runs) }

func (r *rotation) Step(batch func(int) ([]int32, []int32)) ([]train.Record, error) {
	recs := make([]train.Record, len(r.runs))
	for j := range r.runs {
		i := (j + r.round) % len(r.runs)
		if r.ctx.Err() != nil {
			return nil, fmt.Errorf("bench: sweep stopped in step %d: %w", r.round+1, context.Cause(r.ctx))
		}
		tokens, targets := batch(i)
		var err error
		if recs[i], err = r.runs[i].tr.Step(tokens, targets); err != nil {
			return recs, fmt.Errorf("bench: checkpoint %s, step %d: %w", r.pols[i], r.round+1, err)
		}
	}
	r.round++
	return recs, nil
}

func fptr(v float64) *float64 { return &v }

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}
