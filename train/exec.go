package train

import (
	"errors"
	"fmt"
	"math"
	"time"

	"gorgonia.org/tensor"

	"trainmem/cuda"
	"trainmem/model"
)

// Options configure a Trainer.
type Options struct {
	// Optimizer is the update rule and its hyperparameters; the zero value
	// means DefaultOptimizer of the setup's optimizer. Its Kind must be the
	// setup's.
	Optimizer Optimizer
	// Float64 stores every value in float64 whatever the precision: the
	// reference mode of the finite-difference checks.
	Float64 bool
	// LossScale configures fp16's dynamic loss scaling; ignored otherwise.
	LossScale LossScaleOptions
	// Policy makes the trainer one rank of a data-parallel group of the
	// setup's Ranks (package zero's settings); nil is one rank alone.
	Policy Policy
	// Profile, when set, records every step's ops (Trainer.Profile).
	Profile *Profile
	// TensorGroup is the ranks a tensor-parallel rank's model is split
	// over (the setup's model a part, model.Checked.TensorRank): its
	// parallel layers sum over it. Nil for a whole model.
	TensorGroup model.TensorGroup
	// Pipeline is the stages of a pipeline stage's pipeline (the setup's
	// model a stage, model.Checked.StageRank; pipeline.go). Nil for a
	// whole model.
	Pipeline PipelineGroup
	// Offload opens the device that holds the optimizer's states when the
	// setup offloads them (model.OffloadOptimizer; offload.go): host
	// memory beside a GPU, a shape-only device beside a shape-only one.
	// The trainer closes it. Required then, nil otherwise.
	Offload func() (cuda.Device, error)
}

// Trainer runs a compiled schedule on a device: it owns the model states
// (one flat buffer per category, carved by the parameter table) and executes
// one training step at a time.
type Trainer struct {
	dev     cuda.Device
	args    []*cuda.Buffer // exec's arguments of an instruction, the slice reused
	setup   model.Setup
	checked model.Checked // setup, checked (Setup.Check), for the estimate mfu reads
	// stepFLOPs is the estimate's FLOPs of a step (mfu), made on first use.
	stepFLOPs     float64
	stepFLOPsMade bool
	// table is the graph's parameter table (model.Graph.Table), made once: the policies read rows of it
	// for every lazily bound row, and the update for every piece.
	table  []model.Param
	opts   Options
	dtypes storage // the types of what the step stores, by precision (precision.go)
	sched  *Schedule
	layout Layout
	// lastRead is, per half of the step (forward; backward with
	// recomputation) and parameter row, the last instruction that reads the
	// row's weights, -1 for none; readOrder the rows each half reads, in the
	// order of their first read.
	lastRead  [2][]int
	readOrder [2][]int

	params, grads, master, m, v *cuda.Buffer // flat model states of the trained rows in the layout; master, m, v may be nil
	frozen                      *cuda.Buffer // the frozen rows' weights (model.Freeze) kept in the working type, whole on every rank; nil when none
	quant                       *quantStore  // the frozen rows stored quantized (model.Config.Quantize; quant.go); nil when none
	moments8                    *moments8    // the fp32 parts of 8-bit optimizer states (optim8.go; m and v hold their codes); nil when none
	trained                     int          // the trained rows' parameters (model.Config.NumTrained), counted once
	// offloaded holds master, m and v and the host's copies of the
	// gradients and working weights they update under optimizer offload
	// (offload.go).
	offloaded offload

	kernels model.Exec     // what the ops run on: the device and its workspace
	slots   []*cuda.Buffer // live buffer of every slot
	inputs  map[int]any    // host data of the step's input slots
	scaler  *lossScaler
	steps   int // steps run, skipped ones included
	step    int // updates applied (Adam's bias-correction step)

	// Tracing (trace.go): the tracer, the device that sends it events, and
	// every instruction's site.
	tracer cuda.Tracer
	traced cuda.Traceable
	sites  []cuda.Site
	// profile, when set, times every instruction and the update (profile.go).
	profile *Profile
	// micro is the state of a step's micro-batches (pipeline.go).
	micro microState
}

// New builds the GPT-2 graph of setup c (model, batch, sequence,
// precision, optimizer, checkpoint policy: the Setup that estimate and
// simulate take, checked once by Setup.Check), compiles its schedule and
// allocates the model states on dev. The trainer runs one rank. Parameters
// start at zero: call SetParams.
func New(dev cuda.Device, c model.Checked, opts Options) (*Trainer, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	s := c.Setup()
	switch {
	case s.ParamsOnly():
		return nil, errors.New("train: a setup of a parameter count only has no model to run: give a preset or layers, hidden, heads")
	case s.PP != 1 && s.Model.Stage.Size != s.PP:
		return nil, fmt.Errorf("train: the setup has %d pipeline stages and its model is whole: run a stage (model.Checked.StageRank) through package zero", s.PP)
	case s.PP == 1 && opts.Pipeline != nil:
		return nil, errNoPipeline
	case s.TP != 1 && s.Model.Tensor.Size != s.TP:
		return nil, fmt.Errorf("train: the setup has %d tensor-parallel ranks and its model is whole: run a rank's part (model.Checked.TensorRank) through package zero", s.TP)
	case s.TP != 1 && opts.TensorGroup == nil:
		return nil, fmt.Errorf("train: %s is a tensor-parallel part and the trainer has no tensor group (Options.TensorGroup)", s.Model)
	case s.TP == 1 && opts.TensorGroup != nil:
		return nil, errors.New("train: a tensor group for a whole model (the setup has one tensor-parallel rank)")
	case s.Ranks != 1 && opts.Policy == nil:
		return nil, fmt.Errorf("train: the setup has %d data-parallel ranks and the trainer no policy for them: run the ranks through package zero", s.Ranks)
	case s.Offload != model.OffloadNone && opts.Offload == nil:
		return nil, fmt.Errorf("train: the setup offloads the %s and Options.Offload opens no device for it", s.Offload)
	case s.Offload == model.OffloadNone && opts.Offload != nil:
		return nil, errors.New("train: Options.Offload for a setup that offloads nothing")
	}
	trained := int(s.Model.NumTrained())
	lay := singleRank(trained)
	if opts.Policy != nil {
		lay = opts.Policy.Layout(s)
		if err := lay.check(trained); err != nil {
			return nil, err
		}
		if lay.Ranks != s.Ranks {
			return nil, fmt.Errorf("train: the policy's group has %d ranks and the setup %d", lay.Ranks, s.Ranks)
		}
	}
	if s.Offload == model.OffloadParams && !lay.LazyParams {
		return nil, errors.New("train: offloading the parameters needs a policy that keeps a shard of the weights and gathers them (ZeRO-3)")
	}
	if opts.Optimizer == (Optimizer{}) {
		opts.Optimizer = DefaultOptimizer(s.Optimizer)
	}
	if opts.Optimizer.Kind != s.Optimizer {
		return nil, fmt.Errorf("train: the optimizer's hyperparameters are for %v and the setup's optimizer is %v", opts.Optimizer.Kind, s.Optimizer)
	}
	if err := opts.Optimizer.validate(); err != nil {
		return nil, err
	}
	st := storageOf(s.Precision, s.MainGrads, opts.Float64)
	dt := tensor.Float32
	if opts.Float64 {
		dt = tensor.Float64
	}
	gr, err := model.Build(s.Model, s.Batch, s.Seq, dt)
	if err != nil {
		return nil, err
	}
	sched, err := compile(gr, st, s.Checkpoint)
	if err != nil {
		return nil, err
	}
	t := &Trainer{dev: dev, setup: s, checked: c, table: gr.Table, opts: opts, dtypes: st, sched: sched, layout: lay, trained: trained,
		slots: make([]*cuda.Buffer, len(sched.Slots)), inputs: map[int]any{}}
	t.kernels = model.Exec{K: dev, Scratch: t.withScratch, ScratchLike: t.withScratchLike, Tensor: opts.TensorGroup}
	t.findLastReads()
	t.scaler = newLossScaler(s.Precision == model.FP16 && !opts.Float64, opts.LossScale)
	if opts.Offload != nil {
		if t.offloaded.dev, err = opts.Offload(); err != nil {
			return nil, fmt.Errorf("train: the offload device: %w", err)
		}
	}
	if err := t.allocStates(); err != nil {
		t.Close()
		return nil, err
	}
	if err := t.setupMicro(); err != nil {
		t.Close()
		return nil, err
	}
	if t.quant != nil && !dev.Computes() {
		// A computing device quantizes the weights SetParams loads; a
		// simulated run loads none, and makes the same allocations here.
		if err := t.setQuantized(nil); err != nil {
			t.Close()
			return nil, err
		}
	}
	t.Profile(opts.Profile)
	return t, nil
}

// allocStates takes the model states from the allocator, one flat buffer
// per category in the policy's layout, zero-filled (padding included), and
// binds the parameter and gradient slots to views of them.
func (t *Trainer) allocStates() error {
	l := t.layout
	var a stateAlloc
	t.params = a.alloc(t.paramsDevice(), cuda.Params, t.dtypes.param, l.Params)
	if n := t.setup.Model.NumFrozen() - t.setup.Model.NumQuantized(); n > 0 {
		t.frozen = a.alloc(t.dev, cuda.Frozen, t.dtypes.param, int(n))
	}
	if t.setup.Model.NumQuantized() > 0 && a.err == nil {
		t.quant, a.err = newQuantStore(t.dev, t.setup.Model, t.table)
	}
	t.grads = a.alloc(t.dev, cuda.Grads, t.dtypes.grad, l.Grads)
	if l.States > 0 {
		sd := t.statesDevice()
		if t.dtypes.mixed {
			t.master = a.alloc(sd, cuda.Master, t.dtypes.state, l.States)
		}
		switch {
		case t.opts.Optimizer.Kind.EightBit():
			if a.err == nil {
				a.err = t.allocMoments8(sd)
			}
		default:
			if t.opts.Optimizer.firstMoment() {
				t.m = a.alloc(sd, cuda.AdamM, t.dtypes.state, l.States)
			}
			if t.opts.Optimizer.secondMoment() {
				t.v = a.alloc(sd, cuda.AdamV, t.dtypes.state, l.States)
			}
		}
		if t.offloaded.dev != nil {
			t.offloaded.grads = a.alloc(sd, cuda.Grads, t.dtypes.grad, l.States)
			if !t.ParamsOffloaded() {
				t.offloaded.params = a.alloc(sd, cuda.Params, t.dtypes.param, l.States)
			}
		}
	}
	if a.err != nil {
		return a.err
	}
	for i, r := range t.table {
		switch {
		case r.Quantized:
			continue // dequantized for each instruction that reads it (quant.go)
		case r.Frozen:
			t.slots[t.sched.ParamSlots[i]] = t.frozen.View(int(r.Store), int(r.Count))
			continue
		case !l.LazyParams:
			t.slots[t.sched.ParamSlots[i]] = t.params.View(int(r.Store), int(r.Count))
		}
		if !l.LazyGrads {
			t.slots[t.sched.GradSlots[i]] = t.grads.View(int(r.Store), int(r.Count))
		}
	}
	return nil
}

// stateAlloc takes model-state buffers one after another, keeping the
// first error (the later calls then take nothing): each zero-filled, but
// a byte buffer (codes, written before they are read).
type stateAlloc struct{ err error }

func (a *stateAlloc) alloc(dev cuda.Device, cat cuda.Category, dt cuda.DType, n int) *cuda.Buffer {
	if a.err != nil {
		return nil
	}
	b, err := dev.Alloc(cat, dt, n)
	if err == nil && dt.Float() {
		err = dev.Fill(b, 0)
	}
	a.err = err
	return b
}

// Schedule is the compiled step.
func (t *Trainer) Schedule() *Schedule { return t.sched }

// Device is the device the trainer runs on.
func (t *Trainer) Device() cuda.Device { return t.dev }

// SetParams loads the weights, a []float32 or []float64 in flat table
// order, into the working weights (rounded to their type) and this rank's
// part of the fp32 master copy under mixed precision.
func (t *Trainer) SetParams(flat any) error {
	n := t.trained
	var part func(lo, hi int) any
	var frozen any
	var err error
	switch f := flat.(type) {
	case []float32:
		flat, frozen, part, err = splitFlat(t.setup.Model, f)
	case []float64:
		flat, frozen, part, err = splitFlat(t.setup.Model, f)
	default:
		return fmt.Errorf("train: SetParams: %T, want []float32 or []float64", flat)
	}
	if err != nil {
		return err
	}
	if t.frozen != nil {
		if err := t.dev.Upload(t.frozen, sliceOf(frozen, 0, t.frozen.Len)); err != nil {
			return err
		}
	}
	if t.quant != nil {
		if err := t.setQuantized(frozen); err != nil {
			return err
		}
	}
	if !t.layout.LazyParams {
		if err := t.dev.Upload(t.params.View(0, n), flat); err != nil {
			return err
		}
	}
	for _, p := range t.layout.Pieces {
		if p.Hi <= p.Lo {
			continue
		}
		if t.layout.LazyParams {
			if err := t.paramsDevice().Upload(t.params.View(p.Param, p.Hi-p.Lo), part(p.Lo, p.Hi)); err != nil {
				return err
			}
		}
		if t.master != nil {
			if err := t.statesDevice().Upload(t.master.View(p.State, p.Hi-p.Lo), part(p.Lo, p.Hi)); err != nil {
				return err
			}
		}
	}
	return nil
}

// splitFlat checks that f holds the whole table's weights and splits it
// into the trained rows' and the frozen rows' (model.Trained), with part,
// a range of the trained ones.
func splitFlat[T float32 | float64](cfg model.Config, f []T) (trained, frozen any, part func(lo, hi int) any, err error) {
	if len(f) != int(cfg.NumParams()) {
		return nil, nil, nil, fmt.Errorf("train: SetParams: %d values for a model of %d parameters", len(f), cfg.NumParams())
	}
	tr, fr := model.Trained(cfg, f)
	return tr, fr, func(lo, hi int) any { return tr[lo:hi] }, nil
}

// Params downloads the weights in flat table order: the fp32 master copy
// under mixed precision when this rank holds all of it, else the working
// weights. A rank that keeps a shard of the weights has no such copy (see
// PieceParams).
func (t *Trainer) Params() ([]float32, error) {
	if t.layout.LazyParams {
		return nil, errors.New("train: this rank keeps a shard of the weights only")
	}
	n := t.trained
	src, dev := t.params.View(0, n), t.dev
	if p := t.layout.Pieces; t.master != nil && len(p) == 1 && p[0].Lo == 0 && p[0].State == 0 && p[0].Hi >= n {
		src, dev = t.master.View(0, n), t.statesDevice()
	}
	out := make([]float32, n)
	if err := dev.Download(out, src); err != nil {
		return nil, err
	}
	frozen, err := t.FrozenParams()
	if err != nil {
		return nil, err
	}
	return model.Whole(t.setup.Model, out, frozen), nil
}

// FrozenParams downloads the frozen rows' weights (whole on every rank),
// in their Param.Store order: the quantized ones dequantized. Nil when
// nothing is frozen.
func (t *Trainer) FrozenParams() ([]float32, error) {
	n := t.setup.Model.NumFrozen()
	if n == 0 {
		return nil, nil
	}
	frozen := make([]float32, n)
	if t.frozen != nil {
		if err := t.dev.Download(frozen[:t.frozen.Len], t.frozen); err != nil {
			return nil, err
		}
	}
	if t.quant != nil {
		if err := t.downloadQuantized(frozen); err != nil {
			return nil, err
		}
	}
	return frozen, nil
}

// Grads downloads the gradients of the last step, unscaled, in flat table
// order of the trained rows (Param.Store; every row when nothing is
// frozen), as float64 (this rank's own until the policy reduces them). A
// rank whose layout keeps a shard of the gradients has no such copy.
func (t *Trainer) Grads() ([]float64, error) {
	if t.layout.LazyGrads {
		return nil, errors.New("train: this rank keeps a shard of the gradients only")
	}
	out := make([]float64, t.trained)
	if err := t.dev.Download(out, t.grads.View(0, len(out))); err != nil {
		return nil, err
	}
	if s := t.scaler.used / float64(t.layout.Ranks); s != 1 {
		for i := range out {
			out[i] /= s
		}
	}
	return out, nil
}

// Step runs one training step (forward, backward, optimizer) on a batch of
// B·T tokens and their next-token targets. A step whose loss or gradients
// are not finite applies no update and returns its complete record with a
// *DivergedError (see update).
func (t *Trainer) Step(tokens, targets []int32) (Record, error) {
	rec, err := t.ForwardBackward(tokens, targets)
	if err != nil {
		return rec, err
	}
	t.steps++
	m0, err := t.dev.Mark()
	if err != nil {
		return rec, err
	}
	t.site(t.optimizerSite())
	var skipped bool
	var diverged string
	var moved int64
	if t.profile != nil {
		moved = t.updateBytes()
	}
	tm := t.timeModel()
	modelled := tm != nil
	if modelled {
		moved = t.updateBytes()
	}
	err = t.profiled(t.opts.Optimizer.Kind.String(), "optimizer", 0, moved, func() error {
		var err error
		skipped, diverged, err = t.update(rec.Loss)
		if modelled {
			tm.Spend(t.dtypes.param, cuda.Work{Bytes: moved}) // the update is memory-bound
		}
		return err
	})
	if err != nil {
		return rec, err
	}
	if t.setup.PP > 1 {
		rec.Loss = t.micro.loss // the last stage's, which every stage learned
	}
	d, err := t.since(m0)
	if err != nil {
		return rec, err
	}
	rec.OptimizerMs = ms(d)
	rec.Skipped = skipped
	rec.LossScale = t.scaler.used
	rec.finish(t)
	if diverged != "" {
		rec.Diverged = diverged
		return rec, &DivergedError{Step: rec.Step, Reason: diverged, FP16: t.setup.Precision == model.FP16 && !t.opts.Float64}
	}
	return rec, nil
}

// ForwardBackward runs the forward and backward passes, leaving the
// gradients in the grads buffer, without updating the weights.
func (t *Trainer) ForwardBackward(tokens, targets []int32) (rec Record, err error) {
	if t.micro.on {
		return t.microBatches(tokens, targets)
	}
	// A failed step gives back everything but the model states.
	defer func() {
		if err != nil {
			t.release()
		}
	}()
	if _, err := t.beginStep(tokens, targets); err != nil {
		return rec, err
	}
	t.inputs[t.sched.Tokens] = tokens
	t.inputs[t.sched.Targets] = targets

	var spent [numPhases]time.Duration
	if err := t.run(0, len(t.sched.Instrs), &rec, &spent); err != nil {
		return rec, err
	}
	rec.ForwardMs, rec.RecomputeMs, rec.BackwardMs = ms(spent[Forward]), ms(spent[Recompute]), ms(spent[Backward])
	return rec, nil
}

// beginStep checks a step's tokens and targets (M micro-batches' of B·T,
// one after another; none on a shape-only device: nothing to store, nothing
// given, which it reports), starts the step's trace, profile and peaks,
// and binds the loss seed. The seed is divided by the ranks, as PyTorch
// DDP divides the gradients before it reduces them (the ranks' sum is then
// the mean, and a loss-scaled fp16 sum overflows no sooner than one rank's
// gradient of the global batch would), and by the micro-batches: the
// step's gradient is the mean's over every micro-batch of every replica.
func (t *Trainer) beginStep(tokens, targets []int32) (shapeOnly bool, err error) {
	M, n := max(t.micro.n, 1), t.setup.Batch*t.setup.Seq
	shapeOnly = !t.dev.Computes() && tokens == nil && targets == nil
	switch {
	case shapeOnly:
	case M == 1 && (len(tokens) != n || len(targets) != n):
		return false, fmt.Errorf("train: a step takes B·T = %d tokens and targets, got %d and %d", n, len(tokens), len(targets))
	case len(tokens) != M*n || len(targets) != M*n:
		return false, fmt.Errorf("train: a step of %d micro-batches takes M·B·T = %d tokens and targets, got %d and %d", M, M*n, len(tokens), len(targets))
	}
	if t.tracer != nil {
		t.tracer.Event(cuda.TraceEvent{Action: cuda.TraceStep, Step: t.steps + 1})
	}
	t.profileStep()
	t.dev.ResetPeakStats()
	t.offloaded.begin()
	// Every stage scales by the step's loss scale (it unscales its
	// gradients by it); the last seeds the backward pass with it, a stage
	// before the last is seeded by the next.
	seed := t.scaler.begin() / float64(t.layout.Ranks) / float64(M)
	if t.sched.Loss >= 0 {
		if t.dtypes.state == cuda.F64 {
			t.inputs[t.sched.DLoss] = []float64{seed}
		} else {
			t.inputs[t.sched.DLoss] = []float32{float32(seed)}
		}
	}
	return shapeOnly, nil
}

// run executes instructions [lo, hi) of the schedule on the trainer's
// slots, adding each phase's device time to spent and the loss, weighted
// by lossWeight, to rec's.
func (t *Trainer) run(lo, hi int, rec *Record, spent *[numPhases]time.Duration) error {
	if lo >= hi {
		return nil
	}
	phase := t.sched.Instrs[lo].Phase
	tm := t.timeModel()
	mark, err := t.dev.Mark()
	if err != nil {
		return err
	}
	for i := lo; i < hi; i++ {
		in := &t.sched.Instrs[i]
		if in.Phase != phase {
			now, d, err := t.lap(mark)
			if err != nil {
				return err
			}
			spent[phase] += d
			phase, mark = in.Phase, now
		}
		if t.tracer != nil {
			t.traced.SetSite(t.sites[i])
		}
		var err error
		var flops float64
		var bytes int64
		if t.profile != nil || tm != nil {
			flops, bytes = t.instrWork(in)
		}
		run := func() error {
			if err := t.exec(in); err != nil {
				return err
			}
			if tm != nil {
				// A modelled clock: the instruction's time on the card,
				// after its allocations and before its frees (and inside
				// the profile's lap, so a simulated profile is the
				// model's).
				w := cuda.Work{FLOPs: flops, Bytes: bytes}
				if p, ok := in.Node.Op().(model.Producter); ok {
					w.Products = p.Products()
				}
				_, w.Attention = in.Node.Op().(model.FusedAttention)
				if sp, ok := in.Node.Op().(model.Specialer); ok {
					w.Specials = sp.Specials()
				}
				tm.Spend(t.dtypes.param, w)
			}
			return nil
		}
		if t.profile == nil {
			err = run()
		} else {
			err = t.profiled(opName(in), in.Phase.String(), flops, bytes, run)
		}
		if err != nil {
			return fmt.Errorf("train: %s of %s: %w", in.Phase, in.Node.Name(), err)
		}
		if in.Out == t.sched.Loss {
			loss, err := t.scalar(t.slots[in.Out])
			if err != nil {
				return err
			}
			rec.Loss += loss * t.micro.lossWeight()
		}
		for _, sl := range in.Free {
			t.dev.Free(t.slots[sl])
			t.slots[sl] = nil
		}
		if t.layout.LazyParams {
			if err := t.paramsDone(i, in); err != nil {
				return err
			}
		}
		if out := &t.sched.Slots[in.Out]; t.opts.Policy != nil && out.Persistent && out.Cat == cuda.Grads && !t.micro.holdGrads && !in.Partial {
			if err := t.opts.Policy.GradReady(t, out.Param); err != nil {
				return fmt.Errorf("train: the gradient of %s: %w", t.table[out.Param].Name, err)
			}
			if t.layout.LazyGrads {
				t.slots[in.Out] = nil // the policy's buffer, bound again next step
			}
		}
	}
	d, err := t.since(mark)
	if err != nil {
		return err
	}
	spent[phase] += d
	return nil
}

// exec allocates an instruction's output and the step inputs it reads for
// the first time, dequantizes the quantized weights it reads, then runs
// its kernels.
func (t *Trainer) exec(in *Instr) error {
	defer t.releaseQuantized()
	for _, a := range in.Args {
		if t.slots[a] != nil {
			continue
		}
		if ok, err := t.bindQuantized(a); ok || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		sl := &t.sched.Slots[a]
		if sl.Persistent && sl.Cat == cuda.Params { // lazily bound weights
			b, err := t.opts.Policy.ParamBuffer(t, sl.Param)
			if err != nil {
				return err
			}
			t.slots[a] = b
			continue
		}
		if !sl.Input {
			return fmt.Errorf("argument %s is not live", sl.Node.Name())
		}
		b, err := t.dev.Alloc(sl.Cat, sl.DType, sl.Len)
		if err != nil {
			return err
		}
		t.slots[a] = b
		if v := t.inputs[a]; !t.dev.Computes() && isNil(v) {
			continue // a shape-only step's tokens: nothing to upload
		}
		if err := t.dev.Upload(b, t.inputs[a]); err != nil {
			return err
		}
	}
	if sl := &t.sched.Slots[in.Out]; t.slots[in.Out] == nil && sl.Persistent && sl.Cat == cuda.Grads {
		b, err := t.opts.Policy.GradBuffer(t, sl.Param) // a lazily bound gradient
		if err != nil {
			return err
		}
		t.slots[in.Out] = b
	}
	if t.slots[in.Out] == nil {
		sl := &t.sched.Slots[in.Out]
		b, err := t.dev.Alloc(sl.Cat, sl.DType, sl.Len)
		if err != nil {
			return err
		}
		t.slots[in.Out] = b
	}
	args := t.args[:0] // no kernel keeps its arguments
	for _, a := range in.Args {
		args = append(args, t.slots[a])
	}
	t.args = args
	if sl := &t.sched.Slots[in.Out]; (t.micro.accumulate || t.dtypes.separateGrads()) && sl.Persistent && sl.Cat == cuda.Grads {
		return t.accumulated(in, sl, args)
	}
	if in.Accumulate {
		return in.run.add(t, t.slots[in.Out], args)
	}
	return in.run.run(t, t.slots[in.Out], args)
}

// findLastReads finds, per half of the step, each parameter row's last
// reading instruction and the order of the rows' first reads.
func (t *Trainer) findLastReads() {
	rows := len(t.sched.ParamSlots)
	for h := range t.lastRead {
		t.lastRead[h] = make([]int, rows)
		for i := range t.lastRead[h] {
			t.lastRead[h][i] = -1
		}
	}
	for i, in := range t.sched.Instrs {
		h := half(in.Phase != Forward)
		for _, a := range in.Args {
			if sl := &t.sched.Slots[a]; sl.Persistent && sl.Cat == cuda.Params {
				if t.lastRead[h][sl.Param] < 0 {
					t.readOrder[h] = append(t.readOrder[h], sl.Param)
				}
				t.lastRead[h][sl.Param] = i
			}
		}
	}
}

// paramsDone tells the policy of the lazily bound weights whose last read
// of the half was instruction i, and unbinds them.
func (t *Trainer) paramsDone(i int, in *Instr) error {
	h := half(in.Phase != Forward)
	for _, a := range in.Args {
		sl := &t.sched.Slots[a]
		if !sl.Persistent || sl.Cat != cuda.Params || t.lastRead[h][sl.Param] != i || t.slots[a] == nil {
			continue
		}
		if err := t.opts.Policy.ParamDone(t, sl.Param); err != nil {
			return fmt.Errorf("train: the weights of %s: %w", t.table[sl.Param].Name, err)
		}
		t.slots[a] = nil
	}
	return nil
}

// release frees every live non-persistent buffer after a failed step, so the
// allocator is back to the model states.
func (t *Trainer) release() {
	t.releaseQuantized()
	t.releaseMicro()
	for sl, b := range t.slots {
		if b != nil && !t.sched.Slots[sl].Persistent {
			t.dev.Free(b)
			t.slots[sl] = nil
		}
	}
}

// scalar reads a one-element buffer.
func (t *Trainer) scalar(b *cuda.Buffer) (float64, error) {
	if !t.dev.Computes() {
		return 0, nil
	}
	v := make([]float64, 1)
	if err := t.dev.Download(v, b); err != nil {
		return 0, err
	}
	return v[0], nil
}

// update runs the optimizer over every parameter unless the step's
// gradients are not finite; it reports whether the step was skipped and,
// when the run has diverged, why. Under fp16 loss scaling an overflow (of
// the gradients, as GradScaler checks, or of the loss) skips the step and
// backs the scale off, and diverges only below the scale's floor; without it a non-finite loss or gradient (the
// gradient norm would be infinite or NaN) diverges at once, before the
// update could spread it into the weights.
func (t *Trainer) update(loss float64) (skipped bool, diverged string, err error) {
	if !t.dev.Computes() {
		loss = 0 // nothing was computed
	}
	if err := t.tieEmbedding(); err != nil {
		return false, "", err
	}
	if p := t.opts.Policy; p != nil {
		if err = p.ReduceGrads(t); err != nil {
			return false, "", err
		}
	}
	n := t.trained
	bad := false
	for _, p := range t.layout.Pieces {
		if hi := min(p.Hi, n); hi > p.Lo && !bad {
			if bad, err = t.dev.NonFinite(t.grads.View(p.Grad, hi-p.Lo)); err != nil {
				return false, "", err
			}
		}
	}
	lossBad := math.IsNaN(loss) || math.IsInf(loss, 0)
	if p := t.opts.Policy; p != nil {
		// Every rank skips or updates alike.
		any, err := p.AnyRank(bad, lossBad)
		if err != nil {
			return false, "", err
		}
		bad, lossBad = any[0], any[1]
	}
	if bad, lossBad, loss, err = t.agreeStages(bad, lossBad, loss); err != nil {
		return false, "", err
	}
	t.micro.loss = loss
	switch {
	case t.scaler.enabled:
		bad = bad || lossBad // an overflow in the forward pass counts too
		if err := t.scaler.observe(bad); err != nil {
			return true, err.Error(), nil
		}
		if bad {
			return true, "", nil
		}
	case lossBad:
		return true, fmt.Sprintf("the loss is %v", loss), nil
	case bad:
		return true, fmt.Sprintf("the gradients are not finite (loss %.4f)", loss), nil
	}
	t.step++
	for _, p := range t.layout.Pieces {
		if err := t.updatePiece(p); err != nil {
			return false, "", err
		}
	}
	if p := t.opts.Policy; p != nil {
		if err := p.ShareParams(t); err != nil {
			return false, "", err
		}
	}
	t.scaler.grow()
	return false, "", nil
}

// updatePiece runs the optimizer over one of this rank's pieces, row by
// row (weight decay is a row's). The gradients, summed over the ranks from
// a seed divided by their number, are divided by the loss scale.
func (t *Trainer) updatePiece(p Piece) error {
	gs := float32(1 / t.scaler.used)
	o := t.opts.Optimizer
	state := func(b *cuda.Buffer, off, n int) *cuda.Buffer {
		if b == nil {
			return nil
		}
		return b.View(p.State+off-p.Lo, n)
	}
	// The piece's weights and gradients where the update runs: the
	// device's, or under offload the host's copies (offload.go).
	dev, params, grads, err := t.updateBuffers(p)
	if err != nil {
		return err
	}
	for row, r := range t.table {
		a, b := max(p.Lo, int(r.Store)), min(p.Hi, int(r.Store+r.Count))
		if r.Frozen || a >= b {
			continue
		}
		n := b - a
		param, grad := params.View(a-p.Lo, n), grads.View(a-p.Lo, n)
		master := state(t.master, a, n)
		var m, v *cuda.Buffer
		if !o.Kind.EightBit() { // 8-bit states are placed by row (update8)
			m, v = state(t.m, a, n), state(t.v, a, n)
		}
		wd := float32(0)
		if r.Decay {
			wd = o.WeightDecay
		}
		adam := cuda.AdamArgs{LR: o.LR, Beta1: o.Beta1, Beta2: o.Beta2, Eps: o.Eps, WeightDecay: wd,
			Decoupled: o.Kind.Rule() == model.AdamW, Step: t.step, GradScale: gs}
		switch o.Kind {
		case model.Adam, model.AdamW:
			err = dev.Adam(param, grad, master, m, v, adam)
		case model.Adam8bit, model.AdamW8bit:
			err = t.update8(dev, row, n, param, grad, master, adam)
		case model.SGD, model.Momentum:
			err = dev.SGD(param, grad, master, m, cuda.SGDArgs{
				LR: o.LR, Momentum: o.momentum(), WeightDecay: wd, GradScale: gs})
		}
		if err != nil {
			return fmt.Errorf("train: update of %s: %w", r.Name, err)
		}
	}
	return t.updated(p, params)
}

// Close frees the model states.
func (t *Trainer) Close() error {
	t.release()
	if t.params != nil {
		t.paramsDevice().Free(t.params)
	}
	if t.grads != nil {
		t.dev.Free(t.grads)
	}
	if t.frozen != nil {
		t.dev.Free(t.frozen)
	}
	if t.quant != nil {
		t.quant.free(t.dev)
		t.quant = nil
	}
	for _, b := range []*cuda.Buffer{t.master, t.m, t.v, t.offloaded.grads, t.offloaded.params} {
		if b != nil {
			t.statesDevice().Free(b)
		}
	}
	if t.moments8 != nil {
		t.moments8.free(t.statesDevice())
		t.moments8 = nil
	}
	t.params, t.frozen, t.grads, t.master, t.m, t.v, t.offloaded.grads, t.offloaded.params = nil, nil, nil, nil, nil, nil, nil, nil
	if t.offloaded.dev != nil {
		err := t.offloaded.dev.Close()
		t.offloaded.dev = nil
		return err
	}
	return nil
}

// lap marks now and is the device time from mark to it, as the device
// times its queue (no wait for the work to finish: since waits).
func (t *Trainer) lap(mark cuda.Mark) (cuda.Mark, time.Duration, error) {
	now, err := t.dev.Mark()
	if err != nil {
		return nil, 0, err
	}
	d, err := t.dev.Elapsed(mark, now)
	return now, d, err
}

// since is the device time from mark to now, once the queued work is done.
func (t *Trainer) since(mark cuda.Mark) (time.Duration, error) {
	end, err := t.dev.Mark()
	if err != nil {
		return 0, err
	}
	if err := t.dev.Synchronize(); err != nil {
		return 0, err
	}
	return t.dev.Elapsed(mark, end)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// timeModel is the device's modelled clock when it has one with a
// roofline (cuda.TimeModel), else nil.
func (t *Trainer) timeModel() cuda.TimeModel {
	if tm, ok := t.dev.(cuda.TimeModel); ok && tm.Roofline().Bandwidth > 0 {
		return tm
	}
	return nil
}

// isNil reports whether an input's host values are a nil slice.
func isNil(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case []int32:
		return x == nil
	case []float32:
		return x == nil
	case []float64:
		return x == nil
	}
	return false
}
