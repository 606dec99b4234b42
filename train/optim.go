package train

import (
	"errors"
	"fmt"
	"math"

	"trainmem/model"
)

// Optimizer is an update rule and its hyperparameters. Weight decay applies
// to the parameter-table rows marked Decay (embeddings and linear weights).
type Optimizer struct {
	Kind         model.Optimizer
	LR           float32
	Beta1, Beta2 float32 // Adam's moment decay rates
	Eps          float32
	WeightDecay  float32
	MomentumRate float32 // Momentum's rate (0.9 when zero)
}

// DefaultOptimizer returns kind with the usual hyperparameters: lr 3e-4,
// betas (0.9, 0.999), eps 1e-8 (PyTorch's defaults), weight decay 0.1 for
// AdamW (and its 8-bit form) as in GPT-2-style training (nanoGPT) and 0
// otherwise, momentum 0.9.
func DefaultOptimizer(kind model.Optimizer) Optimizer {
	o := Optimizer{Kind: kind, LR: 3e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8}
	if kind.Rule() == model.AdamW {
		o.WeightDecay = 0.1
	}
	if kind == model.Momentum {
		o.MomentumRate = 0.9
	}
	return o
}

// WithLR is o with learning rate lr when lr > 0 (a flag's override), else
// o unchanged.
func (o Optimizer) WithLR(lr float64) Optimizer {
	if lr > 0 {
		o.LR = float32(lr)
	}
	return o
}

func (o Optimizer) validate() error {
	bad := func(name string, v float32, valid string) error {
		return fmt.Errorf("train: %s %g is invalid (valid: %s)", name, v, valid)
	}
	switch {
	case !(o.LR > 0) || math.IsInf(float64(o.LR), 0):
		return bad("learning rate", o.LR, "a finite number > 0")
	case o.WeightDecay < 0:
		return bad("weight decay", o.WeightDecay, ">= 0")
	}
	if r := o.Kind.Rule(); r == model.Adam || r == model.AdamW {
		switch {
		case o.Beta1 < 0 || o.Beta1 >= 1:
			return bad("beta1", o.Beta1, "0 <= beta1 < 1")
		case o.Beta2 < 0 || o.Beta2 >= 1:
			return bad("beta2", o.Beta2, "0 <= beta2 < 1")
		case !(o.Eps > 0):
			return bad("eps", o.Eps, "> 0")
		}
	}
	if o.Kind == model.Momentum && (o.momentum() <= 0 || o.momentum() >= 1) {
		return bad("momentum", o.momentum(), "0 < momentum < 1")
	}
	return nil
}

// firstMoment reports whether the rule keeps a first-moment buffer
// (adam_m; SGD momentum's buffer too).
func (o Optimizer) firstMoment() bool { return o.Kind != model.SGD }

// secondMoment reports whether the rule keeps adam_v.
func (o Optimizer) secondMoment() bool {
	r := o.Kind.Rule()
	return r == model.Adam || r == model.AdamW
}

func (o Optimizer) momentum() float32 {
	if o.Kind != model.Momentum {
		return 0
	}
	if o.MomentumRate == 0 {
		return 0.9
	}
	return o.MomentumRate
}

// LossScaleOptions configure fp16's dynamic loss scaling; zero fields take
// PyTorch GradScaler's defaults (initial scale 2^16, growth ×2 after 2000
// clean steps, backoff ×0.5) and a floor of 1.
type LossScaleOptions struct {
	Init, Growth, Backoff, Floor float64
	Interval                     int
}

// lossScaler multiplies the loss seed by a scale so that small fp16
// gradients do not flush to zero, and divides it out in the update. Disabled
// (any precision but fp16) it is a no-op with scale 1.
type lossScaler struct {
	enabled bool
	opts    LossScaleOptions
	scale   float64 // the scale the next backward pass uses
	used    float64 // the scale of the gradients now in the grads buffer
	clean   int     // steps since the last overflow or growth
	skipped int     // consecutive skipped steps
}

func newLossScaler(enabled bool, o LossScaleOptions) *lossScaler {
	if o.Init == 0 {
		o.Init = 65536
	}
	if o.Growth == 0 {
		o.Growth = 2
	}
	if o.Backoff == 0 {
		o.Backoff = 0.5
	}
	if o.Floor == 0 {
		o.Floor = 1
	}
	if o.Interval == 0 {
		o.Interval = 2000
	}
	s := &lossScaler{enabled: enabled, opts: o, scale: 1, used: 1}
	if enabled {
		s.scale, s.used = o.Init, o.Init
	}
	return s
}

// begin returns the seed of a backward pass.
func (s *lossScaler) begin() float64 {
	s.used = s.scale
	return s.scale
}

// observe takes the overflow check of a step's gradients: on an overflow the
// scale backs off, and a scale that falls below the floor is an error, not
// an endless run of skipped steps.
func (s *lossScaler) observe(overflow bool) error {
	if !s.enabled {
		return nil
	}
	if !overflow {
		s.skipped = 0
		return nil
	}
	s.clean = 0
	s.skipped++
	s.scale *= s.opts.Backoff
	if s.scale < s.opts.Floor {
		return fmt.Errorf("the fp16 gradients overflow even at loss scale %g (%d steps skipped in a row; floor %g)", s.used, s.skipped, s.opts.Floor)
	}
	return nil
}

// grow counts a clean step and raises the scale after Interval of them.
func (s *lossScaler) grow() {
	if !s.enabled {
		return
	}
	s.clean++
	if s.clean >= s.opts.Interval {
		s.scale *= s.opts.Growth
		s.clean = 0
	}
}

// DivergedError ends a run whose loss or gradients are not finite: a
// non-finite loss, or non-finite gradients (an infinite or NaN gradient
// norm) without fp16 loss scaling, or fp16 gradients that overflow at the
// loss scaler's floor. The step's update was not applied, so the weights
// are those of the step before; the step's record (Record.Diverged) is
// complete.
type DivergedError struct {
	Step   int
	Reason string // "the loss is NaN", "the gradients are not finite (loss 2.31)", ...
	FP16   bool   // the run was in fp16, whose range bf16 widens
}

// Error names the step and the cause; it carries no package prefix, as the
// command line prints it after the subcommand's name.
func (e *DivergedError) Error() string {
	advice := "lower --lr"
	if e.FP16 {
		advice += ", or use --precision bf16"
	}
	return fmt.Sprintf("step %d: %s: the run diverged (that step's update was not applied; %s)", e.Step, e.Reason, advice)
}

func isDiverged(err error) bool {
	var d *DivergedError
	return errors.As(err, &d)
}
