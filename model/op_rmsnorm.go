package model

// The RMSNorm family (Zhang and Sennrich 2019, LLaMA's norm): the row
// statistic, the normalisation, and the gradients of its input and gain.
// Where a layer norm keeps (mean, 1/std) a row and adds a bias, RMSNorm
// keeps one 1/rms a row and has no bias.

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"trainmem/cuda"
)

// RMSNormStatsOp computes the RMSNorm statistic of x (N, C): a (N, 1)
// tensor, per row 1/sqrt(mean_c(x²) + Eps). Lowered to Kernels.RMSNormStats;
// the kernel stores it in fp32 whatever the storage type of x.
//
// It is not differentiable: RMSNorm marks its stats input
// non-differentiable, and RMSNorm's backward ops read the statistic (N
// elements) instead of recomputing it.
type RMSNormStatsOp struct {
	opBase
	noGradient
	N, C int
	Eps  float32
}

// signature: x (N, C) → (N, 1).
func (op *RMSNormStatsOp) signature() signature {
	return signature{
		args: []param{arg("x", op.N, op.C)},
		out:  result(op.N, 1),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *RMSNormStatsOp) String() string {
	return fmt.Sprintf("RMSNormStats{N=%d,C=%d,Eps=%g}", op.N, op.C, op.Eps)
}

// Run is Kernels.RMSNormStats.
func (op *RMSNormStatsOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.RMSNormStats(out, a[0], op.N, op.C, op.Eps)
}

// Statistic: 1/rms is fp32 bookkeeping, not an activation of the working
// dtype.
func (op *RMSNormStatsOp) Statistic() bool { return true }

// RMSNormOp is y = x·rstd·w for x (N, C), stats (N, 1) from RMSNormStatsOp
// and w (C); y (N, C). Lowered to Kernels.RMSNorm.
//
// Kept for backward: x (N·C elements), stats (N) and w (C, a parameter).
// Differentiable in x and w; not in stats.
type RMSNormOp struct {
	opBase
	N, C int
	// Reduce sums w's gradient over the tensor group: with sequence
	// parallelism the rows are a rank's own (as LayerNormOp.Reduce).
	Reduce bool
}

// signature: x (N, C), stats (N, 1), w (C) → (N, C).
func (op *RMSNormOp) signature() signature {
	return signature{
		args: []param{arg("x", op.N, op.C), arg("stats", op.N, 1), arg("w", op.C)},
		out:  result(op.N, op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *RMSNormOp) String() string {
	return fmt.Sprintf("RMSNorm{N=%d,C=%d%s}", op.N, op.C, reduceTag(op.Reduce))
}

// DiffWRT: x and w; not stats.
func (op *RMSNormOp) DiffWRT(n int) []bool { return []bool{true, false, true} }

// SymDiff returns RMSNormBackwardX(dy, x, stats, w), nil and
// RMSNormBackwardW(dy, x, stats).
func (op *RMSNormOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	x, stats, w := in[0], in[1], in[2]
	dx, err := applyOp(op.sub("x", &RMSNormBackwardXOp{N: op.N, C: op.C}), dy, x, stats, w)
	if err != nil {
		return nil, err
	}
	dw, err := applyOp(op.sub("w", &RMSNormBackwardWOp{N: op.N, C: op.C, Reduce: op.Reduce}), dy, x, stats)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx, nil, dw}, nil
}

// Run is Kernels.RMSNorm.
func (op *RMSNormOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.RMSNorm(out, a[0], a[1], a[2], op.N, op.C)
}

// RMSNormBackwardXOp is x's gradient (N, C) of an RMSNorm, from dy (N, C),
// x (N, C), stats (N, 1) and w (C): dx = rstd·(g - xhat·mean_c(g·xhat)),
// g = dy·w, xhat = x·rstd. Lowered to Kernels.RMSNormBackwardX.
type RMSNormBackwardXOp struct {
	opBase
	N, C int
}

// signature: dy (N, C), x (N, C), stats (N, 1), w (C) → (N, C).
func (op *RMSNormBackwardXOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.N, op.C), arg("x", op.N, op.C), arg("stats", op.N, 1), arg("w", op.C)},
		out:  result(op.N, op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *RMSNormBackwardXOp) String() string {
	return fmt.Sprintf("RMSNormBackwardX{N=%d,C=%d}", op.N, op.C)
}

// Run is Kernels.RMSNormBackwardX.
func (op *RMSNormBackwardXOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.RMSNormBackwardX(out, a[0], a[1], a[2], a[3], op.N, op.C)
}

// RMSNormBackwardWOp is an RMSNorm gain's gradient (C) from dy (N, C),
// x (N, C) and stats (N, 1): dw[c] = Σ_i dy[i, c]·xhat[i, c]. Lowered to
// Kernels.RMSNormBackwardW.
type RMSNormBackwardWOp struct {
	opBase
	N, C   int
	Reduce bool // summed over the tensor group: the rows are a rank's (RMSNormOp.Reduce)
}

// signature: dy (N, C), x (N, C), stats (N, 1) → (C).
func (op *RMSNormBackwardWOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.N, op.C), arg("x", op.N, op.C), arg("stats", op.N, 1)},
		out:  result(op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *RMSNormBackwardWOp) String() string {
	return fmt.Sprintf("RMSNormBackwardW{N=%d,C=%d%s}", op.N, op.C, reduceTag(op.Reduce))
}

// Run is Kernels.RMSNormBackwardW, with Reduce summed over the tensor
// group.
func (op *RMSNormBackwardWOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.reduced(op.Reduce, op, out, x.K.RMSNormBackwardW(out, a[0], a[1], a[2], op.N, op.C))
}
