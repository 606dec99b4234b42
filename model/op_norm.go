package model

// The norm family, both variants (the layer norm and RMSNorm: Norm): the
// row statistics, the normalisation, and the gradients of its input and
// gain. The layer norm keeps (mean, 1/std) a row and adds a bias; RMSNorm
// keeps one 1/rms a row and has no bias. Each op names its variant's
// kernel ("LayerNormStats", "RMSNorm", ...), as the graph, the profile and
// the errors do.

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"trainmem/cuda"
)

// NormStatsOp computes the norm statistics of x (N, C): (N, Kind.Stats())
// values, per row the layer norm's (mean, 1/sqrt(var + Eps)), var the
// biased variance over C, or RMSNorm's 1/sqrt(mean_c(x²) + Eps). Lowered to
// Kernels.NormStats; the kernel stores them in fp32 whatever the storage
// type of x.
//
// It is not differentiable: NormOp marks its stats input
// non-differentiable, and the backward ops read the stats instead of
// recomputing them.
type NormStatsOp struct {
	opBase
	noGradient
	Kind Norm
	N, C int
	Eps  float32
}

// signature: x (N, C) → (N, Kind.Stats()).
func (op *NormStatsOp) signature() signature {
	return signature{
		args: []param{arg("x", op.N, op.C)},
		out:  result(op.N, op.Kind.Stats()),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *NormStatsOp) String() string {
	return fmt.Sprintf("%s{N=%d,C=%d,Eps=%g}", op.Kind.Kernel("Stats"), op.N, op.C, op.Eps)
}

// Run is Kernels.NormStats.
func (op *NormStatsOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.NormStats(op.Kind, out, a[0], op.N, op.C, op.Eps)
}

// Statistic: the row statistics are fp32 bookkeeping, not an activation
// of the working dtype.
func (op *NormStatsOp) Statistic() bool { return true }

// NormOp is y = (x - mean)·rstd·w + b for x (N, C), stats from
// NormStatsOp, w and b (C) (RMSNorm: y = x·rstd·w, no b); y (N, C).
// Lowered to Kernels.Norm.
//
// Kept for backward: x (N·C elements), the stats and w (C, a parameter).
// Differentiable in x, w and b; not in stats.
type NormOp struct {
	opBase
	Kind Norm
	N, C int
	// Reduce sums w's and b's gradients over the tensor group: with
	// sequence parallelism the rows are a rank's own.
	Reduce bool
}

// signature: x (N, C), stats (N, Kind.Stats()), w (C) and, for the layer
// norm, b (C) → (N, C).
func (op *NormOp) signature() signature {
	args := []param{arg("x", op.N, op.C), arg("stats", op.N, op.Kind.Stats()), arg("w", op.C)}
	if op.Kind.Bias() {
		args = append(args, arg("b", op.C))
	}
	return signature{args: args, out: result(op.N, op.C)}
}

// String names the op and every field; WriteHash hashes it.
func (op *NormOp) String() string {
	return fmt.Sprintf("%s{N=%d,C=%d%s}", op.Kind.Kernel(""), op.N, op.C, reduceTag(op.Reduce))
}

// DiffWRT: x, w and b; not stats.
func (op *NormOp) DiffWRT(n int) []bool {
	if op.Kind.Bias() {
		return []bool{true, false, true, true}
	}
	return []bool{true, false, true}
}

// SymDiff returns NormBackwardX(dy, x, stats, w), nil, NormBackwardW(dy,
// x, stats) and, for the layer norm's bias, SumRows(dy).
func (op *NormOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	return op.symDiffSome(in, out, dy, nil)
}

// symDiffSome is SymDiff of the inputs need says (nil: all): a frozen
// norm's gain and bias have no gradient made, and x none when nothing
// below it is trained.
func (op *NormOp) symDiffSome(in G.Nodes, out, dy *G.Node, need []bool) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	x, stats, w := in[0], in[1], in[2]
	d := make(G.Nodes, len(in))
	var err error
	if needs(need, 0) {
		if d[0], err = applyOp(op.sub("x", &NormBackwardXOp{Kind: op.Kind, N: op.N, C: op.C}), dy, x, stats, w); err != nil {
			return nil, err
		}
	}
	if needs(need, 2) {
		if d[2], err = applyOp(op.sub("w", &NormBackwardWOp{Kind: op.Kind, N: op.N, C: op.C, Reduce: op.Reduce}), dy, x, stats); err != nil {
			return nil, err
		}
	}
	if op.Kind.Bias() && needs(need, 3) {
		if d[3], err = applyOp(op.sub("b", &SumRowsOp{N: op.N, C: op.C, Reduce: op.Reduce}), dy); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Run is Kernels.Norm.
func (op *NormOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	var b *cuda.Buffer
	if op.Kind.Bias() {
		b = a[3]
	}
	return x.K.Norm(op.Kind, out, a[0], a[1], a[2], b, op.N, op.C)
}

// NormBackwardXOp is x's gradient (N, C) of a norm, from dy (N, C), x
// (N, C), its stats and w (C): dx = rstd·(g - mean_c(g) -
// xhat·mean_c(g·xhat)), g = dy·w, xhat = (x - mean)·rstd (RMSNorm: mean 0
// and no mean_c(g)). Lowered to Kernels.NormBackwardX.
type NormBackwardXOp struct {
	opBase
	Kind Norm
	N, C int
}

// signature: dy (N, C), x (N, C), stats (N, Kind.Stats()), w (C) → (N, C).
func (op *NormBackwardXOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.N, op.C), arg("x", op.N, op.C), arg("stats", op.N, op.Kind.Stats()), arg("w", op.C)},
		out:  result(op.N, op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *NormBackwardXOp) String() string {
	return fmt.Sprintf("%s{N=%d,C=%d}", op.Kind.Kernel("BackwardX"), op.N, op.C)
}

// Run is Kernels.NormBackwardX.
func (op *NormBackwardXOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.NormBackwardX(op.Kind, out, a[0], a[1], a[2], a[3], op.N, op.C)
}

// NormBackwardWOp is a norm gain's gradient (C) from dy (N, C), x (N, C)
// and its stats: dw[c] = Σ_i dy[i, c]·xhat[i, c]. Lowered to
// Kernels.NormBackwardW.
type NormBackwardWOp struct {
	opBase
	Kind   Norm
	N, C   int
	Reduce bool // summed over the tensor group: the rows are a rank's (NormOp.Reduce)
}

// signature: dy (N, C), x (N, C), stats (N, Kind.Stats()) → (C).
func (op *NormBackwardWOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.N, op.C), arg("x", op.N, op.C), arg("stats", op.N, op.Kind.Stats())},
		out:  result(op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *NormBackwardWOp) String() string {
	return fmt.Sprintf("%s{N=%d,C=%d%s}", op.Kind.Kernel("BackwardW"), op.N, op.C, reduceTag(op.Reduce))
}

// Run is Kernels.NormBackwardW, with Reduce summed over the tensor group.
func (op *NormBackwardWOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.reduced(op.Reduce, op, out, x.K.NormBackwardW(op.Kind, out, a[0], a[1], a[2], op.N, op.C))
}
