package cuda

// The norm family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/norm.go and cuda/gpu/norm.go implement it).
//
// One family, two variants: the layer norm (Ba et al. 2016, GPT-2's) and
// RMSNorm (Zhang and Sennrich 2019, LLaMA's), which is the layer norm with
// the row's mean taken as 0 and no bias. Every kernel takes the variant
// (Norm) and runs the same loops; what differs is said by Norm's methods,
// down to the CUDA C (kernels/norm.cuh), which takes it as an argument.

import (
	"trainmem/cuda/enum"
)

// Norm is a variant of the norm family: NormLayer, the layer norm, y =
// (x − mean)·rstd·w + b, rstd = 1/sqrt(var + eps) with var the biased
// variance over the row, its stats (mean, rstd) a row; or NormRMS,
// RMSNorm, y = x·rstd·w, rstd = 1/sqrt(mean_c(x²) + eps), no bias, its
// stats rstd a row.
type Norm uint8

const (
	NormLayer Norm = iota
	NormRMS
)

// normNames are the variants' names, as a model's config and --norm spell
// them.
var normNames = enum.New[Norm]("model", "Norm", "norm", "layernorm", "rmsnorm")

func (n Norm) String() string { return normNames.String(n) }

// ParseNorm reads a variant's name: layernorm or rmsnorm.
func ParseNorm(s string) (Norm, error) { return normNames.Parse(s) }

// Check refuses a value that is no variant.
func (n Norm) Check() error { return normNames.Check(n) }

// Stats is the statistics a row the variant keeps: 2 (mean, rstd) for the
// layer norm, 1 (rstd) for RMSNorm. rstd is always the row's last.
func (n Norm) Stats() int {
	if n == NormRMS {
		return 1
	}
	return 2
}

// Centred says the variant subtracts the row's mean (the layer norm).
func (n Norm) Centred() bool { return n != NormRMS }

// Bias says the variant adds a bias after the gain (the layer norm).
func (n Norm) Bias() bool { return n != NormRMS }

// Kernel is the name of one of the variant's kernels, op one of "Stats",
// "", "BackwardX", "BackwardW": "LayerNormStats", "RMSNorm", ... (the
// names errors, profiles and the graph's ops use).
func (n Norm) Kernel(op string) string {
	switch n {
	case NormLayer:
		return "LayerNorm" + op
	case NormRMS:
		return "RMSNorm" + op
	}
	return n.String() + op // Norm(7): refused by the checks
}

// NormKernels are the norm family: the row statistics, the normalisation
// and the gradients of its input and gain, of either variant.
type NormKernels interface {
	// NormStats writes stats (F32, or F64 for fp64 runs; n.Stats() a row)
	// per row: the layer norm's (mean, rstd), var the biased variance;
	// RMSNorm's rstd; the sums in float64.
	NormStats(n Norm, stats, x *Buffer, N, C int, eps float32) error
	// Norm: y = (x − mean)·rstd·w + b, with stats from NormStats (RMSNorm:
	// y = x·rstd·w; b must be nil).
	Norm(n Norm, y, x, stats, w, b *Buffer, N, C int) error
	// NormBackwardX: dx = rstd·(g − mean_c(g) − xhat·mean_c(g·xhat)),
	// g = dy·w, xhat = (x − mean)·rstd (RMSNorm: mean 0 and no mean_c(g)
	// term, the bias's gradient being absent).
	NormBackwardX(n Norm, dx, dy, x, stats, w *Buffer, N, C int) error
	// NormBackwardW: dw[c] = Σ_i dy[i, c]·xhat[i, c].
	NormBackwardW(n Norm, dw, dy, x, stats *Buffer, N, C int) error
}

// norm checks the variant and the statistics of N rows.
func (c *checker) norm(n Norm, stats *Buffer, N int) {
	if err := n.Check(); err != nil && c.err == nil {
		c.fail("%v", err)
		return
	}
	c.stats(stats, N, n.Stats())
}

func (Checks) NormStats(n Norm, stats, x *Buffer, N, C int, eps float32) error {
	c := check(n.Kernel("Stats"))
	c.positive("N", N, "C", C)
	c.norm(n, stats, N)
	c.rows(N, C, "x", x)
	c.eps(eps)
	return c.err
}

func (Checks) Norm(n Norm, y, x, stats, w, b *Buffer, N, C int) error {
	c := check(n.Kernel(""))
	c.positive("N", N, "C", C)
	c.rows(N, C, "y", y, "x", x)
	c.norm(n, stats, N)
	c.channels(C, "w", w)
	switch {
	case n.Bias():
		c.channels(C, "b", b)
	case b != nil && c.err == nil:
		c.fail("b is %s, want nil (%s has no bias)", b, n.Kernel(""))
	}
	return c.err
}

func (Checks) NormBackwardX(n Norm, dx, dy, x, stats, w *Buffer, N, C int) error {
	c := check(n.Kernel("BackwardX"))
	c.positive("N", N, "C", C)
	c.rows(N, C, "dx", dx, "dy", dy, "x", x)
	c.norm(n, stats, N)
	c.channels(C, "w", w)
	return c.err
}

func (Checks) NormBackwardW(n Norm, dw, dy, x, stats *Buffer, N, C int) error {
	c := check(n.Kernel("BackwardW"))
	c.positive("N", N, "C", C)
	c.channels(C, "dw", dw)
	c.rows(N, C, "dy", dy, "x", x)
	c.norm(n, stats, N)
	return c.err
}
