package cuda

// The optimizer family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/optim.go and cuda/gpu/optim.go implement it).

import (
	"fmt"
	"math"
)

// OptimizerKernels are the optimizer family: one update of a parameter
// range.
type OptimizerKernels interface {
	// Adam updates one parameter range. With master == nil, param (F32 or
	// F64) is updated in place; otherwise the fp32 master is updated and
	// param = cast(master). grad may be in any float type; m, v and master
	// are F32 (F64 for fp64 runs).
	Adam(param, grad, master, m, v *Buffer, a AdamArgs) error
	// Adam8bit is Adam with m and v stored blockwise in 8 bits, as
	// bitsandbytes' blockwise 8-bit Adam stores them (Dettmers et al.
	// 2022): m (U8, param's length) in DynamicSigned codes and v in
	// DynamicUnsigned ones, each block of Block8 scaled by its fp32
	// absolute maximum (mScale, vScale: F32, Blocks(n, Block8)). Each
	// block's states are dequantized (code·scale, fp32), updated as Adam
	// updates them, its scales set to the largest |m| and v, and each
	// state requantized to the code nearest state/scale (fp32), an m
	// whose code has the other sign moved one code toward its own.
	Adam8bit(param, grad, master, m, v, mScale, vScale *Buffer, a AdamArgs) error
	// SGD updates one parameter range, with the momentum buffer mom when
	// a.Momentum > 0 (nil otherwise); master as for Adam.
	SGD(param, grad, master, mom *Buffer, a SGDArgs) error
}

// AdamArgs are the hyperparameters of one Adam or AdamW update. Step counts
// from 1 (bias correction). GradScale multiplies every gradient before use
// (1/loss-scale under fp16 loss scaling, else 1). WeightDecay is decoupled
// (AdamW) when Decoupled is set, else added to the gradient (Adam with L2).
// GradScale must be > 0: a zero is taken for a forgotten field, an error.
type AdamArgs struct {
	LR, Beta1, Beta2, Eps, WeightDecay float32
	Decoupled                          bool
	Step                               int
	GradScale                          float32
}

// Corrections are Adam's bias corrections in the form the kernels apply
// them: c1 = 1/(1-β1^t), which multiplies m, and c2 = 1/sqrt(1-β2^t), which
// multiplies sqrt(v), since m̂/(sqrt(v̂)+ε) = m·c1/(sqrt(v)·c2 + ε): one
// division an element instead of three. The kernels round both to their
// compute type.
func (a AdamArgs) Corrections() (c1, c2 float64) {
	return 1 / (1 - math.Pow(float64(a.Beta1), float64(a.Step))), 1 / math.Sqrt(1-math.Pow(float64(a.Beta2), float64(a.Step)))
}

// SGDArgs are the hyperparameters of one SGD update, with momentum when
// Momentum > 0 (then the momentum buffer is required).
type SGDArgs struct {
	LR, Momentum, WeightDecay float32
	GradScale                 float32
}

// state checks a buffer of optimizer state or master weights: fp32 or
// fp64, of param's length.
func (c *checker) state(name string, b, param *Buffer) {
	c.f32or64(name, b)
	c.sameLen(name, b, "param", param)
}

// optimizerBuffers checks what Adam and SGD share: the parameter, its
// gradient and the optional master copy.
func (c *checker) optimizerBuffers(param, grad, master *Buffer, gradScale float32) {
	c.elementwise("param", param, "grad", grad)
	if master == nil {
		if c.err == nil && param.DType != F32 && param.DType != F64 {
			c.fail("param is %s and master is nil: without master weights param is updated in place and must be fp32 or fp64", param.DType)
		}
	} else {
		c.state("master", master, param)
		c.disjoint("param", param, "master", master)
	}
	c.finite("GradScale", gradScale)
	if c.err == nil && gradScale <= 0 {
		c.fail("GradScale is %g, want > 0 (1 when the loss is not scaled)", gradScale)
	}
}

func (Checks) Adam(param, grad, master, m, v *Buffer, a AdamArgs) error {
	c := check("Adam")
	c.optimizerBuffers(param, grad, master, a.GradScale)
	c.state("m", m, param)
	c.state("v", v, param)
	c.adamArgs(a)
	return c.err
}

func (Checks) Adam8bit(param, grad, master, m, v, mScale, vScale *Buffer, a AdamArgs) error {
	c := check("Adam8bit")
	c.optimizerBuffers(param, grad, master, a.GradScale)
	if c.err == nil {
		n, blocks := param.Len, fmt.Sprintf("ceil(n/%d)", Block8)
		c.typed("m", m, U8, n, "param's length")
		c.typed("v", v, U8, n, "param's length")
		c.typed("mScale", mScale, F32, Blocks(n, Block8), blocks)
		c.typed("vScale", vScale, F32, Blocks(n, Block8), blocks)
	}
	c.adamArgs(a)
	return c.err
}

// adamArgs checks Adam's hyperparameters.
func (c *checker) adamArgs(a AdamArgs) {
	c.finite("LR", a.LR)
	c.finite("WeightDecay", a.WeightDecay)
	c.finite("Eps", a.Eps)
	if c.err == nil {
		switch {
		case a.Step < 1:
			c.fail("Step is %d, want ≥ 1 (steps count from 1)", a.Step)
		case !(a.Beta1 >= 0 && a.Beta1 < 1):
			c.fail("Beta1 is %g, want in [0, 1)", a.Beta1)
		case !(a.Beta2 >= 0 && a.Beta2 < 1):
			c.fail("Beta2 is %g, want in [0, 1)", a.Beta2)
		case a.Eps < 0:
			c.fail("Eps is %g, want ≥ 0", a.Eps)
		}
	}
}

func (Checks) SGD(param, grad, master, mom *Buffer, a SGDArgs) error {
	c := check("SGD")
	c.optimizerBuffers(param, grad, master, a.GradScale)
	c.finite("LR", a.LR)
	c.finite("WeightDecay", a.WeightDecay)
	c.finite("Momentum", a.Momentum)
	if c.err == nil && a.Momentum < 0 {
		c.fail("Momentum is %g, want ≥ 0", a.Momentum)
	}
	if a.Momentum > 0 {
		c.state("mom", mom, param)
	}
	return c.err
}
