package model

// The layer-norm family: the row statistics, the normalisation, and the gradients of its input and gain.

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"trainmem/cuda"
)

// LayerNormStatsOp computes the layer-norm statistics of x (N, C): a (N, 2) tensor,
// per row (mean, 1/sqrt(var + Eps)) with var the biased variance over C.
// Lowered to Kernels.LayerNormStats; the kernel stores stats in fp32 whatever
// the storage type of x.
//
// It is not differentiable: LayerNorm marks its stats input
// non-differentiable, and LayerNorm's backward ops read the stats (2N
// elements) instead of recomputing them.
type LayerNormStatsOp struct {
	opBase
	noGradient
	N, C int
	Eps  float32
}

// signature: x (N, C) → (N, 2).
func (op *LayerNormStatsOp) signature() signature {
	return signature{
		args: []param{arg("x", op.N, op.C)},
		out:  result(op.N, 2),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *LayerNormStatsOp) String() string {
	return fmt.Sprintf("LayerNormStats{N=%d,C=%d,Eps=%g}", op.N, op.C, op.Eps)
}

// Run is Kernels.LayerNormStats.
func (op *LayerNormStatsOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.LayerNormStats(out, a[0], op.N, op.C, op.Eps)
}

// Statistic: the row mean and 1/std are fp32 bookkeeping, not an activation
// of the working dtype.
func (op *LayerNormStatsOp) Statistic() bool { return true }

// LayerNormOp is y = (x - mean)·rstd·w + b for x (N, C), stats (N, 2) from
// LayerNormStatsOp, w and b (C); y (N, C). Lowered to Kernels.LayerNorm.
//
// Kept for backward: x (N·C elements), stats (2N) and w (C, a parameter).
// Differentiable in x, w and b; not in stats.
type LayerNormOp struct {
	opBase
	N, C int
	// Reduce sums w's and b's gradients over the tensor group: with
	// sequence parallelism the rows are a rank's own.
	Reduce bool
}

// signature: x (N, C), stats (N, 2), w (C), b (C) → (N, C).
func (op *LayerNormOp) signature() signature {
	return signature{
		args: []param{arg("x", op.N, op.C), arg("stats", op.N, 2), arg("w", op.C), arg("b", op.C)},
		out:  result(op.N, op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *LayerNormOp) String() string {
	return fmt.Sprintf("LayerNorm{N=%d,C=%d%s}", op.N, op.C, reduceTag(op.Reduce))
}

// DiffWRT: x, w and b; not stats.
func (op *LayerNormOp) DiffWRT(n int) []bool { return []bool{true, false, true, true} }

// SymDiff returns LayerNormBackwardX(dy, x, stats, w), nil,
// LayerNormBackwardW(dy, x, stats) and SumRows(dy).
func (op *LayerNormOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	x, stats, w := in[0], in[1], in[2]
	dx, err := applyOp(op.sub("x", &LayerNormBackwardXOp{N: op.N, C: op.C}), dy, x, stats, w)
	if err != nil {
		return nil, err
	}
	dw, err := applyOp(op.sub("w", &LayerNormBackwardWOp{N: op.N, C: op.C, Reduce: op.Reduce}), dy, x, stats)
	if err != nil {
		return nil, err
	}
	db, err := applyOp(op.sub("b", &SumRowsOp{N: op.N, C: op.C, Reduce: op.Reduce}), dy)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx, nil, dw, db}, nil
}

// Run is Kernels.LayerNorm.
func (op *LayerNormOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.LayerNorm(out, a[0], a[1], a[2], a[3], op.N, op.C)
}

// LayerNormBackwardXOp is x's gradient (N, C) of a layer norm, from dy (N, C),
// x (N, C), stats (N, 2) and w (C): dx = rstd·(g - mean_c(g) -
// xhat·mean_c(g·xhat)), g = dy·w, xhat = (x - mean)·rstd. Lowered to
// Kernels.LayerNormBackwardX.
type LayerNormBackwardXOp struct {
	opBase
	N, C int
}

// signature: dy (N, C), x (N, C), stats (N, 2), w (C) → (N, C).
func (op *LayerNormBackwardXOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.N, op.C), arg("x", op.N, op.C), arg("stats", op.N, 2), arg("w", op.C)},
		out:  result(op.N, op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *LayerNormBackwardXOp) String() string {
	return fmt.Sprintf("LayerNormBackwardX{N=%d,C=%d}", op.N, op.C)
}

// Run is Kernels.LayerNormBackwardX.
func (op *LayerNormBackwardXOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.LayerNormBackwardX(out, a[0], a[1], a[2], a[3], op.N, op.C)
}

// LayerNormBackwardWOp is a layer norm gain's gradient (C) from dy (N, C),
// x (N, C) and stats (N, 2): dw[c] = Σ_i dy[i, c]·xhat[i, c]. Lowered to
// Kernels.LayerNormBackwardW.
type LayerNormBackwardWOp struct {
	opBase
	N, C   int
	Reduce bool // summed over the tensor group: the rows are a rank's (LayerNormOp.Reduce)
}

// signature: dy (N, C), x (N, C), stats (N, 2) → (C).
func (op *LayerNormBackwardWOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.N, op.C), arg("x", op.N, op.C), arg("stats", op.N, 2)},
		out:  result(op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *LayerNormBackwardWOp) String() string {
	return fmt.Sprintf("LayerNormBackwardW{N=%d,C=%d%s}", op.N, op.C, reduceTag(op.Reduce))
}

// Run is Kernels.LayerNormBackwardW, with Reduce summed over the tensor
// group.
func (op *LayerNormBackwardWOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.reduced(op.Reduce, op, out, x.K.LayerNormBackwardW(out, a[0], a[1], a[2], op.N, op.C))
}
