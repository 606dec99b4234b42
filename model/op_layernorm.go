package model

// The layer-norm family: the row statistics, the normalisation, and the gradients of its input and gain.
// Each op says what it keeps for backward, and runs itself on the device
// (Run: the kernels of cuda.Kernels it is lowered to).

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"trainmem/cuda"
)

var (
	_ Runner = (*LayerNormStatsOp)(nil)
	_ Runner = (*LayerNormOp)(nil)
	_ Runner = (*LayerNormBackwardXOp)(nil)
	_ Runner = (*LayerNormBackwardWOp)(nil)
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
	N, C int
	Eps  float32
}

// Arity is 1.
func (op *LayerNormStatsOp) Arity() int { return 1 }

// Type is a matrix → a matrix.
func (op *LayerNormStatsOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(2, a)) }

// InferShape returns (N, 2).
func (op *LayerNormStatsOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 1)
	if err != nil {
		return nil, err
	}
	if err := wantShape(op, "x", s[0], op.N, op.C); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, 2}, nil
}

// Do is not supported: see ErrNotVM.
func (op *LayerNormStatsOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LayerNormStatsOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LayerNormStatsOp) Hashcode() uint32 { return hashcode(op) }

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

// DiffWRT is false: statistics carry no gradient of their own.
func (op *LayerNormStatsOp) DiffWRT(n int) []bool { return []bool{false} }

// SymDiff is an error: the op is not differentiable.
func (op *LayerNormStatsOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("model: %v is not differentiable (LayerNorm marks its stats input non-differentiable)", op)
}

// LayerNormOp is y = (x - mean)·rstd·w + b for x (N, C), stats (N, 2) from
// LayerNormStatsOp, w and b (C); y (N, C). Lowered to Kernels.LayerNorm.
//
// Kept for backward: x (N·C elements), stats (2N) and w (C, a parameter).
// Differentiable in x, w and b; not in stats.
type LayerNormOp struct {
	opBase
	N, C int
}

// Arity is 4: x, stats, w, b.
func (op *LayerNormOp) Arity() int { return 4 }

// Type is a matrix → a matrix → a vector → a vector → a matrix.
func (op *LayerNormOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(2, a), tt(1, a), tt(1, a), tt(2, a))
}

// InferShape returns (N, C).
func (op *LayerNormOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 4)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "x", s[0], op.N, op.C),
		wantShape(op, "stats", s[1], op.N, 2),
		wantShape(op, "w", s[2], op.C),
		wantShape(op, "b", s[3], op.C),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *LayerNormOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LayerNormOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LayerNormOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *LayerNormOp) String() string { return fmt.Sprintf("LayerNorm{N=%d,C=%d}", op.N, op.C) }

// DiffWRT: x, w and b; not stats.
func (op *LayerNormOp) DiffWRT(n int) []bool { return []bool{true, false, true, true} }

// SymDiff returns LayerNormGradX(dy, x, stats, w), nil,
// LayerNormGradW(dy, x, stats) and SumRows(dy).
func (op *LayerNormOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if len(in) != 4 {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want 4", op, len(in))
	}
	x, stats, w := in[0], in[1], in[2]
	dx, err := G.ApplyOp(&LayerNormBackwardXOp{opBase: op.sub("x"), N: op.N, C: op.C}, dy, x, stats, w)
	if err != nil {
		return nil, err
	}
	dw, err := G.ApplyOp(&LayerNormBackwardWOp{opBase: op.sub("w"), N: op.N, C: op.C}, dy, x, stats)
	if err != nil {
		return nil, err
	}
	db, err := G.ApplyOp(&SumRowsOp{opBase: op.sub("b"), N: op.N, C: op.C}, dy)
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

// Arity is 4: dy, x, stats, w.
func (op *LayerNormBackwardXOp) Arity() int { return 4 }

// Type is a matrix → a matrix → a matrix → a vector → a matrix.
func (op *LayerNormBackwardXOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a), tt(1, a), tt(2, a))
}

// InferShape returns (N, C).
func (op *LayerNormBackwardXOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 4)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "dy", s[0], op.N, op.C),
		wantShape(op, "x", s[1], op.N, op.C),
		wantShape(op, "stats", s[2], op.N, 2),
		wantShape(op, "w", s[3], op.C),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *LayerNormBackwardXOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LayerNormBackwardXOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LayerNormBackwardXOp) Hashcode() uint32 { return hashcode(op) }

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
	N, C int
}

// Arity is 3: dy, x, stats.
func (op *LayerNormBackwardWOp) Arity() int { return 3 }

// Type is a matrix → a matrix → a matrix → a vector.
func (op *LayerNormBackwardWOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a), tt(1, a))
}

// InferShape returns (C).
func (op *LayerNormBackwardWOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 3)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "dy", s[0], op.N, op.C),
		wantShape(op, "x", s[1], op.N, op.C),
		wantShape(op, "stats", s[2], op.N, 2),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *LayerNormBackwardWOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LayerNormBackwardWOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LayerNormBackwardWOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *LayerNormBackwardWOp) String() string {
	return fmt.Sprintf("LayerNormBackwardW{N=%d,C=%d}", op.N, op.C)
}

// Run is Kernels.LayerNormBackwardW.
func (op *LayerNormBackwardWOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.LayerNormBackwardW(out, a[0], a[1], a[2], op.N, op.C)
}
