package bench

import (
	"context"
	"errors"
	"fmt"
	"io"

	"trainmem/cuda"
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
// measured device reports it.
var rowOrder = []string{
	cuda.Params.String(), cuda.Grads.String(), cuda.Master.String(), cuda.AdamM.String(), cuda.AdamV.String(), RowModelStates,
	cuda.Activations.String(), cuda.Temporaries.String(), cuda.Workspace.String(),
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
}

// WriteJSON writes the report with the model, the setup and each formula's
// source.
func (r *ValidateReport) WriteJSON(w io.Writer) error {
	doc := struct {
		Model modelDoc `json:"model"`
		Setup setupDoc `json:"setup"`
		*ValidateReport
		Sources map[string]string `json:"sources"`
	}{Model: modelDocOf(r.Setup), Setup: setupDocOf(r.Setup), ValidateReport: r, Sources: map[string]string{}}
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

// ErrParallel is returned for setups with more than one rank: Validate and
// Sweep run one device.
var ErrParallel = errors.New("bench: a measured run uses one device: data, tensor and pipeline parallelism are estimated by 'trainmem estimate'")

func checkSetup(c model.Checked) error {
	if err := c.Err(); err != nil {
		return err
	}
	return checkRunnable(c.Setup(), 1, 0)
}

// checkRunnable refuses what a measured run of ranks data-parallel ranks
// under ZeRO stage zero cannot run.
func checkRunnable(s model.Setup, ranks, zero int) error {
	if s.ParamsOnly() {
		return errors.New("bench: a parameter count alone cannot be run: give a model shape")
	}
	if s.Ranks != ranks || s.TP != 1 || s.PP != 1 || s.ZeRO != zero {
		return ErrParallel
	}
	return nil
}

// Validate runs o.Setup's estimate, its simulation (the shape device) and,
// when dev is not nil, a measured run of o.Steps steps on dev, and sets them
// side by side.
// dev should hold nothing else (its allocator statistics are the measured
// column) and is left open for the caller to close. A measured run that the
// simulation shows would not fit dev's free memory is refused with a
// *TooLargeError before it starts.
func Validate(ctx context.Context, dev cuda.Device, o Options) (*ValidateReport, error) {
	c := o.Setup
	if err := checkSetup(c); err != nil {
		return nil, err
	}
	s := c.Setup()
	steps := o.Steps
	if steps == 0 {
		steps = 3
	}
	if steps < 1 {
		return nil, fmt.Errorf("bench: steps %d: must be a positive integer", steps)
	}
	e, err := c.Estimate()
	if err != nil {
		return nil, err
	}
	r := &ValidateReport{Setup: s, Estimate: e, Formulas: model.Formulas(), Steps: steps}

	o.progress("validate: simulating %d steps on the shape-only device", steps)
	shape := shape.New(0)
	defer shape.Close()
	var simTrace cuda.Tracer
	if dev == nil && o.Trace != nil {
		// Nothing measured: the simulation's step is traced, on the default
		// card's modelled clock (cuda.DefaultGPU), so its timeline has
		// times as simulate's does.
		simTrace = o.Trace
		if g, ok := cuda.GPUByKey(cuda.DefaultGPU); ok {
			if err := shape.Model(g.Roofline); err != nil {
				return nil, err
			}
		}
	}
	rec, st, err := train.Simulate(shape, c, steps, simTrace)
	if err != nil {
		return nil, fmt.Errorf("bench: simulation: %w", err)
	}
	r.Simulated, r.SimulatedStats = rec, st

	if dev != nil {
		if err := train.CheckMachine(dev, st.ReservedBytes.Peak, train.HostParamBytes(s.Model)); err != nil {
			return nil, err
		}
		o.progress("validate: measuring %d steps on %s", steps, dev.Name())
		run, err := newRunner(dev, c, o)
		if err != nil {
			return nil, err
		}
		defer run.close()
		if o.Trace != nil {
			if err := run.tr.Trace(o.Trace); err != nil {
				return nil, err
			}
			defer run.tr.Trace(nil) // before the trainer closes: the snapshot is the last step's end
		}
		run.tr.Profile(o.Profile)
		r.Data = run.data
		looped, err := train.Loop(ctx, train.One(run.tr), steps, func(int, int) ([]int32, []int32, error) { return run.batches.Next() },
			func(i int, recs []train.Record, _ error) error {
				rec := recs[0]
				o.progress("validate: step %d/%d: loss %.4f, %.1f ms, peak %s", i+1, steps, rec.Loss, rec.StepMs, model.GiB(rec.PeakAllocatedBytes))
				r.Measured = &rec
				return nil
			})
		switch {
		case looped.Interrupted:
			return nil, fmt.Errorf("bench: measured run stopped after %d of %d steps: %w", looped.Steps, steps, context.Cause(ctx))
		case err != nil:
			failed := looped.Steps + 1
			var div *train.DivergedError
			if errors.As(err, &div) {
				failed = looped.Steps // a diverged step is finished
			}
			return nil, fmt.Errorf("bench: measured step %d: %w", failed, err)
		}
		ms := dev.Stats()
		r.MeasuredStats = &ms
		r.Device = dev.Name()
		if isGPU(dev) {
			if free, total, err := dev.MemInfo(); err == nil {
				r.DeviceUsed = total - free
			}
		}
	}
	r.Rows = r.rows()
	r.Explanations = explain(r)
	return r, nil
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
		rows = append(rows, row)
	}
	return rows
}

func ptr(v int64) *int64 { return &v }

// runner drives a Trainer for the measured runs: weights initialised from
// the seed, batches from train's own data path (train.OpenBatches).
type runner struct {
	tr      *train.Trainer
	batches *train.Batches
	data    string
}

func newRunner(dev cuda.Device, c model.Checked, o Options) (*runner, error) {
	s := c.Setup()
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
