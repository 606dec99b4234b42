package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/train"
	"trainmem/zero"
)

// Row names, the "category" of each JSON row, in report order. The first
// five and activations, temporaries, workspace are package cuda's memory
// categories; the others are the allocator's totals.
const (
	RowModelStates = "model_states"             // params + grads + master + adam_m + adam_v
	RowRounding    = "allocator_rounding"       // peak allocated − peak requested: requests rounded up to blocks
	RowTotalPeak   = "total_peak"               // peak allocated: every category at the moment of the peak
	RowCache       = "reserved_minus_allocated" // peak reserved − peak allocated: cached blocks and fragmentation
	RowReserved    = "peak_reserved"            // segments held from the device
	RowContext     = "context_and_libraries"    // device used − reserved (a GPU: CUDA context, libraries)
)

// rowOrder lists the rows of a report; RowContext only appears when the
// measured device reports it, gathered and comm only when one rank holds
// them (ZeRO-3 gathering its offloaded weights from host memory).
var rowOrder = []string{
	cuda.Params.String(), cuda.Grads.String(), cuda.Master.String(), cuda.AdamM.String(), cuda.AdamV.String(), cuda.Frozen.String(), cuda.QuantState.String(), RowModelStates,
	cuda.Activations.String(), cuda.Temporaries.String(), cuda.Workspace.String(), cuda.Gathered.String(), cuda.Comm.String(),
	RowRounding, RowTotalPeak, RowCache, RowReserved, RowContext,
}

// Label is a row's name in the text report.
func Label(row string) string {
	switch row {
	case RowModelStates:
		return "model states"
	case RowRounding:
		return "rounding (alloc − req)"
	case RowTotalPeak:
		return "total peak (allocated)"
	case RowCache:
		return "reserved − allocated"
	case RowReserved:
		return "peak reserved"
	case RowContext:
		return "context and libraries"
	}
	return row
}

// Options are a run's request, one type for every run bench makes
// (simulate, validate, sweep and train, one rank or many): train's run
// options (the checked setup, the steps, seed, data and learning rate,
// train's files, progress, the allocator trace, the profile), the ranks'
// data-parallel setting, and what only bench's reports use. Where a run
// reads a field its own way its doc says so: validate's Steps 0 means 3, a
// sweep's 7 a policy, simulate's 2; validate's and sweep's Seed 0 means 1;
// validate's Progress gets a line per finished piece of work, train's the
// progress bar; Trace gets the last measured step's allocator events (the
// simulation's when nothing is measured).
type Options struct {
	train.RunOptions
	// Setting is the ranks' data-parallel setting (the parameter server or
	// a ZeRO stage, buckets, prefetch); the zero value is DDP, and one rank.
	Setting zero.Setting
	// Timelines makes Sweep trace each policy's simulated step, for the
	// timeline plot (SweepReport.Timelines).
	Timelines bool
	// Policies are Sweep's checkpoint policies; nil means SweepPolicies.
	Policies []model.Checkpoint
	// Cluster is the nodes the estimators that count per node see
	// (DeepSpeed's); the zero value is their defaults.
	Cluster model.Cluster
}

func (o Options) seed() uint64 {
	if o.Seed == 0 {
		return 1
	}
	return o.Seed
}

func (o Options) progress(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// Row is one line of the validation table, in bytes. Estimate holds one
// entry per formula (nil where the formula says nothing about the row);
// Simulated is nil only where the shape-only device has nothing to say (the
// CUDA context); Measured is nil when nothing was measured.
type Row struct {
	Category  string                   `json:"category"`
	Estimate  map[model.Formula]*int64 `json:"estimate"`
	Simulated *int64                   `json:"simulated"`
	Measured  *int64                   `json:"measured"`
}

// ValidateReport is Validate's answer.
type ValidateReport struct {
	Setup    model.Setup    `json:"-"`
	Estimate model.Estimate `json:"-"`
	// Formulas are the estimate's columns, in model.Formulas order.
	Formulas []model.Formula `json:"formulas"`
	// Steps is how many steps were simulated and measured; the last is reported.
	Steps int `json:"steps"`
	// Device names the measured device; empty when nothing was measured.
	Device string `json:"device,omitempty"`
	// Data names the measured run's tokens.
	Data string `json:"data,omitempty"`
	Rows []Row  `json:"rows"`
	// Explanations say, one line each, what causes every difference.
	Explanations []string `json:"explanations"`

	// The raw material: the simulated and measured last steps.
	Simulated      train.Record  `json:"-"`
	SimulatedStats cuda.Stats    `json:"-"`
	Measured       *train.Record `json:"-"`
	MeasuredStats  *cuda.Stats   `json:"-"`
	// DeviceUsed is the measured device's used memory (total − free) after
	// the last step, when the device is a GPU; 0 otherwise.
	DeviceUsed int64 `json:"-"`

	// Over ranks: the setting, the simulated ranks' last steps
	// (zero.SimulatedRanks; one for one rank, whose record and statistics
	// are Simulated and SimulatedStats) and every measured rank's (nil when
	// nothing was measured), what moved the measured ranks' data between
	// processes ("tcp", "mpi"; "" in one process), and the workspace a
	// measured rank's libraries hold beyond the kernels' (cuBLAS's on a
	// GPU), which the simulation has not.
	Setting                       zero.Setting      `json:"-"`
	SimulatedRanks, MeasuredRanks []zero.RankResult `json:"-"`
	Engine                        string            `json:"-"`
	LibraryWorkspace              int64             `json:"-"`
	// PartActivations is, with tensor or pipeline parallelism, the
	// trainmem formula's activations of each rank's part (a tensor rank's
	// of a stage, at index stage·TP + tensor rank; partOf): tensor parts
	// differ by a row of the vocabulary where t does not divide it, stages
	// by their blocks, ends and micro-batches in flight.
	PartActivations []int64 `json:"-"`
	// Estimators are DeepSpeed's and Megatron-LM's estimates of the setup,
	// which the explanations set against the simulation.
	Estimators Estimators `json:"-"`
	// Time is the measured step's time beside the model's on the measured
	// device as a card (one rank measured; host ranks measured, each
	// rank's; nil otherwise).
	Time *TimeCheck `json:"time,omitempty"`
	// hostTimed is the card and the link measured host ranks timed.
	hostTimed *hostTimed
}

// TimeCheck is a measured step's time beside the model's: the card (the
// host timed as one, or the GPU's row of cuda.GPUs), both step times (the
// measured one the median of the steps after the first), and
// with a profile each op family's predicted time beside the measured.
type TimeCheck struct {
	Card        string  `json:"card"`
	MeasuredMs  float64 `json:"measured_ms"`
	PredictedMs float64 `json:"predicted_ms"`
	// Ops are the op families, the measured longest first, with --profile.
	Ops []OpTime `json:"ops,omitempty"`
	// RankCorrelation is Spearman's ρ between the families' ranks by
	// measured and by predicted time (1: the same order), with Ops.
	RankCorrelation float64 `json:"rank_correlation,omitempty"`
	// Over host ranks: the link their collectives were timed on, and each
	// rank's measured step beside its replayed one (MeasuredMs and
	// PredictedMs are then the slowest rank's).
	Network string     `json:"network,omitempty"`
	Ranks   []RankTime `json:"ranks,omitempty"`
}

// RankTime is a rank's measured step beside its predicted one, and the
// predicted step's split: kernels, collectives that held the rank, and
// time it waited for the others.
type RankTime struct {
	Rank        int     `json:"rank"`
	MeasuredMs  float64 `json:"measured_ms"`
	PredictedMs float64 `json:"predicted_ms"`
	ComputeMs   float64 `json:"compute_ms"`
	CommMs      float64 `json:"comm_ms"`
	WaitMs      float64 `json:"wait_ms"`
}

// hostTimed is what host ranks time after their measured steps: their
// link, every rank at once, and the host as a card, rank 0 alone while
// the others wait, as the share of it each rank had (the ranks on rank
// 0's machine together run more threads than it has cores: they take
// turns).
type hostTimed struct {
	card cuda.Roofline
	ring zero.HostRing
}

// timeHost times the ring on every member of g at once and the card on
// rank 0; rank 0's timings come back (nothing on the other processes'
// ranks).
func timeHost(g *zero.Group) (*hostTimed, error) {
	var out *hostTimed
	err := g.Run(func(c *zero.Comm) error {
		h, ok := c.Device().(cuda.Carder)
		if !ok {
			return fmt.Errorf("bench: timing the host: rank %d's device is %s, which is timed as no card", c.Rank(), c.Device().Name())
		}
		ring, err := zero.TimeRing(c)
		if err != nil {
			return err
		}
		ranks, threads, cores, err := zero.SameHost(c, h.Threads())
		if err != nil || c.Rank() != 0 {
			return err
		}
		card, err := HostCard(h)
		if err != nil {
			return err
		}
		if threads > cores {
			card = card.Shared(float64(cores)/float64(threads), fmt.Sprintf("%d ranks on this machine run %d threads on its %d cores", ranks, threads, cores))
		}
		out = &hostTimed{card: card, ring: ring}
		return nil
	})
	return out, err
}

// onCard makes shape-only devices whose clock is modelled on card r,
// which the caller has checked (a row of cuda.GPUs, a timed host).
func onCard(r cuda.Roofline) func() cuda.Device {
	return func() cuda.Device {
		d := shape.New(0)
		d.Model(r) // checked by the caller
		return d
	}
}

// measuredMs is a measured rank's step time: the median of its steps
// after the first.
func measuredMs(m zero.RankResult) float64 {
	if m.MedianStepMs > 0 {
		return m.MedianStepMs
	}
	return m.Record.StepMs
}

// checkRankTime sets each measured host rank's step beside the
// simulation's replayed step, the collectives costed as trainmem's ring
// runs them on the timed link and the kernels on the timed card.
func (r *ValidateReport) checkRankTime(c model.Checked, set zero.Setting) error {
	ht := r.hostTimed
	n := zero.LayoutOf(r.Setup).Size()
	name := r.Engine
	if name == "" {
		name = "memory"
	}
	nw := zero.HostNetwork(name, n, ht.ring, ht.card.Bandwidth)
	set.Network = &nw
	res, err := zero.SimulateWith(onCard(ht.card), c, set, 2, nil, train.Options{})
	if err != nil {
		return err
	}
	tc := &TimeCheck{Card: ht.card.Name, Network: nw.String()}
	for _, rr := range res {
		if rr.Rank < 0 || rr.Rank >= len(r.MeasuredRanks) {
			return fmt.Errorf("bench: simulated rank %d of %d measured", rr.Rank, len(r.MeasuredRanks))
		}
		rt := RankTime{Rank: rr.Rank, MeasuredMs: measuredMs(r.MeasuredRanks[rr.Rank]), PredictedMs: rr.Record.StepMs}
		if t := rr.Timing; t != nil {
			rt.PredictedMs, rt.ComputeMs, rt.CommMs, rt.WaitMs = ms(t.Step), ms(t.Compute), ms(t.Comm), ms(t.Wait)
		}
		tc.Ranks = append(tc.Ranks, rt)
		tc.MeasuredMs, tc.PredictedMs = max(tc.MeasuredMs, rt.MeasuredMs), max(tc.PredictedMs, rt.PredictedMs)
	}
	r.Time = tc
	return nil
}

// predictedRanks is each of Ops' rank (1 the longest) by predicted time,
// ties in the measured order.
func (tc *TimeCheck) predictedRanks() []int {
	rank := make([]int, len(tc.Ops))
	idx := make([]int, len(tc.Ops))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return tc.Ops[idx[a]].PredictedMs > tc.Ops[idx[b]].PredictedMs })
	for k, i := range idx {
		rank[i] = k + 1
	}
	return rank
}

// spearman is Spearman's rank correlation of Ops (measured longest
// first) and their predicted ranks: 1 − 6·Σd²/(n·(n² − 1)); 0 for fewer
// than two families.
func (tc *TimeCheck) spearman() float64 {
	n := len(tc.Ops)
	if n < 2 {
		return 0
	}
	var d2 float64
	for i, r := range tc.predictedRanks() {
		d := float64(r - (i + 1))
		d2 += d * d
	}
	nf := float64(n)
	return 1 - 6*d2/(nf*(nf*nf-1))
}

// OpTime is an op family in a phase: its measured and predicted time a
// step, in ms.
type OpTime struct {
	Op          string  `json:"op"`
	Phase       string  `json:"phase"`
	MeasuredMs  float64 `json:"measured_ms"`
	PredictedMs float64 `json:"predicted_ms"`
}

// checkTime times the setup's step on the measured device's card (the
// host's, timed now; a GPU's from the table; none for another device)
// and sets it beside the measured step, op family by op family when
// measured is a profile.
func (r *ValidateReport) checkTime(c model.Checked, set zero.Setting, measured *train.Profile) error {
	if r.Measured == nil {
		return nil
	}
	var card cuda.Roofline
	if strings.HasPrefix(r.Device, "host") {
		d, err := host.New(host.Options{})
		if err != nil {
			return err
		}
		defer d.Close()
		if card, err = HostCard(d); err != nil {
			return err
		}
	} else if g, ok := cuda.GPUByName(r.Device); ok {
		card = g.Roofline
	} else {
		return nil
	}
	var p *train.Profile
	if measured != nil {
		p = &train.Profile{}
	}
	res, err := zero.SimulateWith(onCard(card), c, set, 2, nil, train.Options{Profile: p})
	if err != nil {
		return err
	}
	tc := &TimeCheck{Card: card.Name, MeasuredMs: measuredMs(r.MeasuredRanks[0]), PredictedMs: res[0].Record.StepMs}
	if p != nil {
		pred := map[[2]string]time.Duration{}
		for _, row := range p.Rows() {
			pred[[2]string{row.Op, row.Phase}] = row.Time / time.Duration(p.Steps())
		}
		for _, row := range measured.Rows() {
			tc.Ops = append(tc.Ops, OpTime{Op: row.Op, Phase: row.Phase, MeasuredMs: ms(row.Time / time.Duration(measured.Steps())), PredictedMs: ms(pred[[2]string{row.Op, row.Phase}])})
		}
		tc.RankCorrelation = tc.spearman()
	}
	r.Time = tc
	return nil
}

// WriteJSON writes the report with the model, the setup and each formula's
// source; over ranks every simulated and measured rank with exact bytes.
func (r *ValidateReport) WriteJSON(w io.Writer) error {
	if zero.LayoutOf(r.Setup).Size() > 1 {
		return r.writeRanksJSON(w)
	}
	doc := struct {
		Model modelDoc `json:"model"`
		Setup setupDoc `json:"setup"`
		*ValidateReport
		Estimators *estimatorsJSON   `json:"estimators"`
		Sources    map[string]string `json:"sources"`
	}{Model: modelDocOf(r.Setup), Setup: setupDocOf(r.Setup), ValidateReport: r, Estimators: r.Estimators.doc(), Sources: map[string]string{}}
	for _, f := range r.Formulas {
		doc.Sources[f.String()] = f.Source()
	}
	return writeJSON(w, doc)
}

// Row returns the row of a category, or nil.
func (r *ValidateReport) Row(category string) *Row {
	for i := range r.Rows {
		if r.Rows[i].Category == category {
			return &r.Rows[i]
		}
	}
	return nil
}

// ErrParallel is returned for setups Validate and Sweep cannot run: tensor
// and pipeline parallelism (Sweep: data parallelism too).
var ErrParallel = errors.New("bench: a measured run uses one device: data, tensor and pipeline parallelism are estimated by 'trainmem estimate'")

func checkSetup(c model.Checked) error {
	if err := c.Err(); err != nil {
		return err
	}
	if s := c.Setup(); s.MicroBatches > 1 {
		return fmt.Errorf("bench: %d micro-batches a step are run by 'trainmem simulate', 'trainmem train' and 'trainmem validate'", s.MicroBatches)
	}
	return checkRunnable(c.Setup(), 1, 1, 1, 0)
}

// checkRunnable refuses what a measured run of ranks data-parallel ranks
// of tp tensor-parallel ranks and pp stages each under ZeRO stage zero
// cannot run.
func checkRunnable(s model.Setup, ranks, tp, pp, zero int) error {
	if s.ParamsOnly() {
		return errors.New("bench: a parameter count alone cannot be run: give a model shape")
	}
	if s.Ranks != ranks || s.TP != tp || s.PP != pp || s.ZeRO != zero {
		return ErrParallel
	}
	return nil
}

// partActivations is the trainmem formula's activations of every part of
// c's layout, at index stage·TP + tensor rank; nil where the formula
// counts no such split (sequence parallelism whose rows do not divide).
func partActivations(c model.Checked) ([]int64, error) {
	s := c.Setup()
	var out []int64
	for pp := range s.PP {
		for tr := range s.TP {
			part, err := c.TensorRank(tr)
			if err == nil {
				part, err = part.StageRank(pp)
			}
			if err != nil {
				return nil, err
			}
			a, err := part.TrainmemActivations()
			if err != nil {
				return nil, nil
			}
			out = append(out, a.Total)
		}
	}
	return out, nil
}

// partOf is the index of rank's part in PartActivations.
func (v *ValidateReport) partOf(rank int) int {
	co := zero.LayoutOf(v.Setup).Coord(rank)
	return co[zero.PipelineAxis]*v.Setup.TP + co[zero.TensorAxis]
}

// partParams is the parameters of rank's part of the model (its tensor
// rank's of its stage).
func (v *ValidateReport) partParams(rank int) int64 {
	s := v.Setup
	co := zero.LayoutOf(s).Coord(rank)
	part, err := s.Model.TensorRank(s.TP, co[zero.TensorAxis])
	if err == nil {
		part, err = part.PipelineStage(s.PP, co[zero.PipelineAxis])
	}
	if err != nil {
		return s.Model.NumParams()
	}
	return part.NumParams()
}

// MostMeasuredRanks is the most ranks Validate measures in one process
// (each builds its own trainer on its own device).
const MostMeasuredRanks = 8

// Validate estimates o.Setup, simulates o.Steps steps (0: 3) of it over its
// ranks under o.Setting (each simulated rank, zero.SimulatedRanks, on a
// shape-only device of its own; one rank is one device's trainer) and,
// when where is not nil, measures them there (in this process, or one
// rank a process: see Where), each rank the micro-batch s.Batch, rank r
// taking the r-th of every s.Ranks micro-batches of the data's stream, and
// sets them side by side: one rank's memory by category beside every
// formula, each difference explained; over ranks each rank's beside the
// ZeRO paper's model states, and its traffic. The measured devices should
// hold nothing else (their allocator statistics are the measured column).
// A measured run that the simulation shows would not fit its machine is
// refused with a *TooLargeError before it starts. Over processes the
// measured ranks are gathered on rank 0, which alone simulates; the other
// ranks' answers hold their setup only. o.Trace records the simulated step
// of one rank when nothing is measured (on the default card's modelled
// clock, so that its timeline has times); where.Traces the measured ranks'.
func Validate(ctx context.Context, where *Where, o Options) (*ValidateReport, error) {
	c, set := o.Setup, o.Setting
	if err := c.Err(); err != nil {
		return nil, err
	}
	s := c.Setup()
	if err := checkRunnable(s, s.Ranks, s.TP, s.PP, s.ZeRO); err != nil {
		return nil, err
	}
	steps := o.Steps
	if steps == 0 {
		steps = 3
	}
	one := zero.LayoutOf(s).Size() == 1
	switch {
	case steps < 1:
		return nil, fmt.Errorf("bench: steps %d: must be a positive integer", steps)
	case o.Trace != nil && (where != nil || !one):
		return nil, errors.New("bench: Options.Trace records one rank's simulated step when nothing is measured; the measured ranks' traces are Where.Traces")
	case o.Profile != nil && !one:
		return nil, errors.New("bench: a profile is one device's: give it without ranks")
	}
	e, err := c.Estimate()
	if err != nil {
		return nil, err
	}
	r := &ValidateReport{Setup: s, Setting: set, Estimate: e, Formulas: model.Formulas(), Steps: steps}
	if r.Estimators, err = estimatorsOf(s, o.Cluster); err != nil {
		return nil, err
	}
	if s.TP > 1 || s.PP > 1 {
		if r.PartActivations, err = partActivations(c); err != nil {
			return nil, err
		}
	}
	simulate := func() error {
		newDevice := func() cuda.Device { return shape.New(0) }
		var trace func(int) cuda.Tracer
		if one {
			o.progress("validate: simulating %d steps on the shape-only device", steps)
			if o.Trace != nil {
				g, ok := cuda.GPUByKey(cuda.DefaultGPU)
				if err := g.Roofline.Check(); !ok || err != nil {
					return fmt.Errorf("bench: the default card %s has no roofline: %v", cuda.DefaultGPU, err)
				}
				newDevice = onCard(g.Roofline)
				trace = func(int) cuda.Tracer { return o.Trace }
			}
		} else {
			o.progress("validate: simulating %s over %s", set, ranksText(s))
		}
		res, err := zero.Simulate(newDevice, c, set, steps, trace)
		if err != nil {
			if one {
				return fmt.Errorf("bench: simulation: %w", unwrapRank(err))
			}
			return err
		}
		r.SimulatedRanks, r.Simulated, r.SimulatedStats = res, res[0].Record, res[0].Stats
		return nil
	}
	finish := func() (*ValidateReport, error) {
		if one && r.Measured != nil {
			if err := r.checkTime(c, set, o.Profile); err != nil {
				return nil, err
			}
		}
		if !one && r.hostTimed != nil && len(r.MeasuredRanks) == zero.LayoutOf(s).Size() {
			o.progress("validate: replaying the ranks' step on the timed card and link")
			if err := r.checkRankTime(c, set); err != nil {
				return nil, err
			}
		}
		if one && r.SimulatedRanks != nil {
			r.Rows = r.rows()
			r.Explanations = append(explain(r), r.Estimators.explain(s, simulatedOf(r.SimulatedStats, r.Simulated))...)
		}
		return r, nil
	}
	if where == nil {
		if err := simulate(); err != nil {
			return nil, err
		}
		return finish()
	}
	if where.Link == nil {
		if err := simulate(); err != nil {
			return nil, err
		}
	}
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	if err := r.measure(ctx, *where, o, steps); err != nil {
		return nil, err
	}
	if !where.Root() {
		return r, nil
	}
	if where.Link != nil {
		r.Engine = where.Link.Name()
		if err := simulate(); err != nil {
			return nil, err
		}
	}
	return finish()
}

// measure runs the measured ranks where says, steps steps, and keeps
// every rank's last step (rank 0's over processes; the others keep none).
func (r *ValidateReport) measure(ctx context.Context, where Where, o Options, steps int) error {
	c, set, s := o.Setup, o.Setting, r.Setup
	lay := zero.LayoutOf(s)
	one := lay.Size() == 1
	g, devs, closeDevs, err := where.open(lay.Size())
	defer closeDevs()
	if err != nil {
		return err
	}
	batches, init, err := where.prepare(devs, c, set, o.Data, "", "", o.seed())
	if err != nil {
		return err
	}
	defer batches.Close()
	r.Device, r.Data = devs[0].Name(), batches.Source
	if lw, ok := devs[0].(cuda.LibraryWorkspacer); ok {
		defer func() { r.LibraryWorkspace = lw.LibraryWorkspaceBytes() }() // once the run has used cuBLAS
	}
	opts, err := where.trainOptions(s, o.LR, o.Profile)
	if err != nil {
		return err
	}
	switch {
	case one:
		o.progress("validate: measuring %d steps on %s", steps, r.Device)
	case where.Root():
		o.progress("validate: measuring %s over %s on %s, %d steps%s", set, ranksText(s), r.Device, steps, where.over())
	}
	finished := 0
	errStopped := errors.New("stopped")
	// Each of this process's ranks' step times, for their medians.
	var stepMs [][]float64
	mine, err := zero.Run(g, c, set, opts, init, steps, where.stream(batches, lay, s.MicroBatches), func(step int, recs []train.Record, _ error) error {
		finished = step + 1
		if stepMs == nil {
			stepMs = make([][]float64, len(recs))
		}
		for i, rec := range recs {
			if step > 0 || steps == 1 {
				stepMs[i] = append(stepMs[i], rec.StepMs)
			}
		}
		if one {
			rec := recs[0]
			o.progress("validate: step %d/%d: loss %.4f, %.1f ms, peak %s", step+1, steps, rec.Loss, rec.StepMs, model.GiB(rec.PeakAllocatedBytes))
		}
		if where.Link == nil && ctx.Err() != nil && step+1 < steps {
			return errStopped
		}
		return nil
	}, nil)
	var div *train.DivergedError
	switch {
	case errors.Is(err, errStopped):
		return fmt.Errorf("bench: measured run stopped after %d of %d steps: %w", finished, steps, context.Cause(ctx))
	case one && err != nil:
		failed := finished + 1
		if errors.As(err, &div) {
			failed = finished // a diverged step is finished
		}
		return fmt.Errorf("bench: measured step %d: %w", failed, unwrapRank(err))
	case errors.As(err, &div):
		return fmt.Errorf("the measured run diverged: %w", err)
	case err != nil:
		return err
	}
	for i := range mine {
		if i < len(stepMs) && len(stepMs[i]) > 0 {
			mine[i].MedianStepMs = median(stepMs[i])
		}
	}
	if _, ok := devs[0].(cuda.Carder); ok && !one {
		// The link by every rank at once, the card by rank 0 alone
		// (timeHost).
		o.progress("validate: timing the host and the ranks' link")
		if r.hostTimed, err = timeHost(g); err != nil {
			return err
		}
	}
	if r.MeasuredRanks, err = zero.Gather(g, mine); err != nil || !where.Root() {
		return err
	}
	if one {
		m := r.MeasuredRanks[0]
		r.Measured, r.MeasuredStats = &m.Record, &m.Stats
		if isGPU(devs[0]) {
			if free, total, err := devs[0].MemInfo(); err == nil {
				r.DeviceUsed = total - free
			}
		}
	}
	return nil
}

// TooLargeError is a measured run that its machine cannot hold
// (train.CheckMachine).
type TooLargeError = train.TooLargeError

// isGPU reports whether dev's MemInfo is a card's own memory, so that used
// minus reserved is the CUDA context and libraries: not the host (whose
// MemInfo is the whole machine's) and not the shape-only device.
func isGPU(dev cuda.Device) bool {
	return dev.Computes() && !cuda.OnMachineMemory(dev)
}

// observed is a run's value of every row but the context, from its last
// step's statistics: categories at their own peak in requested bytes; the
// totals in the allocator's bytes.
func observed(st cuda.Stats) map[string]int64 {
	v := map[string]int64{}
	var states int64
	for _, c := range cuda.Categories() {
		v[c.String()] = st.CategoryRequested[c].Peak
		if c.ModelState() {
			states += st.CategoryRequested[c].Peak
		}
	}
	v[RowModelStates] = states
	v[RowRounding] = st.AllocatedBytes.Peak - st.RequestedBytes.Peak
	v[RowTotalPeak] = st.AllocatedBytes.Peak
	v[RowCache] = st.ReservedBytes.Peak - st.AllocatedBytes.Peak
	v[RowReserved] = st.ReservedBytes.Peak
	return v
}

func (r *ValidateReport) rows() []Row {
	e := r.Estimate
	sim := observed(r.SimulatedStats)
	var meas map[string]int64
	if r.MeasuredStats != nil {
		meas = observed(*r.MeasuredStats)
	}
	states := map[string]int64{}
	for _, t := range e.States.Named() {
		states[t.Cat.String()] = t.Bytes
	}
	states[RowModelStates] = e.States.Total()
	var rows []Row
	for _, name := range rowOrder {
		row := Row{Category: name, Estimate: map[model.Formula]*int64{}}
		for _, f := range r.Formulas {
			var v *int64
			cat, err := cuda.ParseCategory(name)
			isCat := err == nil
			switch {
			case name == RowModelStates || (isCat && cat.ModelState()):
				v = ptr(states[name])
			case isCat && cat == cuda.Activations:
				v = ptr(e.ActivationBytes(f))
			case isCat && cat == cuda.Gathered:
				v = ptr(e.Gathered)
			case name == RowTotalPeak:
				v = ptr(e.Total(f))
			}
			row.Estimate[f] = v
		}
		if name == RowContext {
			if r.DeviceUsed == 0 || r.MeasuredStats == nil {
				continue
			}
			ctx := r.DeviceUsed - r.MeasuredStats.ReservedBytes.Current
			if ctx <= 0 {
				continue
			}
			row.Measured = ptr(ctx)
			rows = append(rows, row)
			continue
		}
		row.Simulated = ptr(sim[name])
		if meas != nil {
			row.Measured = ptr(meas[name])
		}
		if (name == cuda.Gathered.String() || name == cuda.Comm.String()) && sim[name] == 0 && e.Gathered == 0 {
			continue // one rank gathers nothing
		}
		if name == cuda.Frozen.String() && sim[name] == 0 && e.States.Frozen == 0 ||
			name == cuda.QuantState.String() && sim[name] == 0 && e.States.QuantState == 0 {
			continue // nothing frozen, nothing quantized
		}
		rows = append(rows, row)
	}
	return rows
}

func ptr[T any](v T) *T { return &v }

// runner drives a Trainer for the measured runs: weights initialised from
// the seed, batches from train's own data path (train.OpenBatches).
type runner struct {
	tr      *train.Trainer
	batches *train.Batches
	data    string
}

func newRunner(dev cuda.Device, c model.Checked, o Options) (*runner, error) {
	s := c.Setup()
	if s.Offload != model.OffloadNone {
		return nil, fmt.Errorf("bench: a sweep measures one device; offloading the %s is run by 'trainmem simulate', 'trainmem train' and 'trainmem validate'", s.Offload)
	}
	batches, err := train.OpenBatches(dev, o.Data, s, o.seed())
	if err != nil {
		return nil, err
	}
	tr, err := train.New(dev, c, train.Options{Optimizer: train.DefaultOptimizer(s.Optimizer).WithLR(o.LR)})
	if err == nil && dev.Computes() {
		if err = tr.SetParams(model.InitParams(s.Model, o.seed())); err != nil {
			tr.Close()
		}
	}
	if err != nil {
		batches.Close()
		return nil, err
	}
	return &runner{tr: tr, batches: batches, data: batches.Source}, nil
}

func (r *runner) close() {
	r.tr.Close()
	r.batches.Close()
}
