package model

// The backward ops: one node per differentiable input of a forward op, made
// by the forward op's SymDiff. They are not differentiable themselves
// (trainmem takes first derivatives only), and like the forward ops they run
// only on trainmem's executor. dy is always the gradient of the forward op's
// output, of the output's shape.

import (
	"fmt"
	"hash"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// EmbeddingGradTokensOp is wte's gradient (V, C) from dy (B·T, C) and tokens
// Int32 (B·T): zero, then row tokens[i] += dy[i, :]. Lowered to
// Kernels.EmbeddingBackwardTokens.
type EmbeddingGradTokensOp struct {
	opBase
	B, T, C, V int
}

// Arity is 2: dy, tokens.
func (op *EmbeddingGradTokensOp) Arity() int { return 2 }

// Type is a matrix → Int32 vector → a matrix.
func (op *EmbeddingGradTokensOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), ids(), tt(2, a))
}

// InferShape returns (V, C).
func (op *EmbeddingGradTokensOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 2)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "dy", s[0], op.B*op.T, op.C),
		wantShape(op, "tokens", s[1], op.B*op.T),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.V, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *EmbeddingGradTokensOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *EmbeddingGradTokensOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *EmbeddingGradTokensOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *EmbeddingGradTokensOp) String() string {
	return fmt.Sprintf("EmbeddingGradTokens{B=%d,T=%d,C=%d,V=%d}", op.B, op.T, op.C, op.V)
}

// EmbeddingGradPositionsOp is wpe's gradient (Ctx, C) from dy (B·T, C): row
// t < T is Σ_b dy[b·T+t, :], rows t ≥ T are zero. Lowered to
// Kernels.EmbeddingBackwardPositions.
type EmbeddingGradPositionsOp struct {
	opBase
	B, T, C, Ctx int
}

// Arity is 1: dy.
func (op *EmbeddingGradPositionsOp) Arity() int { return 1 }

// Type is a matrix → a matrix.
func (op *EmbeddingGradPositionsOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(2, a))
}

// InferShape returns (Ctx, C).
func (op *EmbeddingGradPositionsOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 1)
	if err != nil {
		return nil, err
	}
	if err := wantShape(op, "dy", s[0], op.B*op.T, op.C); err != nil {
		return nil, err
	}
	return tensor.Shape{op.Ctx, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *EmbeddingGradPositionsOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *EmbeddingGradPositionsOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *EmbeddingGradPositionsOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *EmbeddingGradPositionsOp) String() string {
	return fmt.Sprintf("EmbeddingGradPositions{B=%d,T=%d,C=%d,Ctx=%d}", op.B, op.T, op.C, op.Ctx)
}

// LayerNormGradXOp is x's gradient (N, C) of a layer norm, from dy (N, C),
// x (N, C), stats (N, 2) and w (C): dx = rstd·(g - mean_c(g) -
// xhat·mean_c(g·xhat)), g = dy·w, xhat = (x - mean)·rstd. Lowered to
// Kernels.LayerNormBackwardX.
type LayerNormGradXOp struct {
	opBase
	N, C int
}

// Arity is 4: dy, x, stats, w.
func (op *LayerNormGradXOp) Arity() int { return 4 }

// Type is a matrix → a matrix → a matrix → a vector → a matrix.
func (op *LayerNormGradXOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a), tt(1, a), tt(2, a))
}

// InferShape returns (N, C).
func (op *LayerNormGradXOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
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
func (op *LayerNormGradXOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LayerNormGradXOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LayerNormGradXOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *LayerNormGradXOp) String() string {
	return fmt.Sprintf("LayerNormGradX{N=%d,C=%d}", op.N, op.C)
}

// LayerNormGradWOp is a layer norm gain's gradient (C) from dy (N, C),
// x (N, C) and stats (N, 2): dw[c] = Σ_i dy[i, c]·xhat[i, c]. Lowered to
// Kernels.LayerNormBackwardW.
type LayerNormGradWOp struct {
	opBase
	N, C int
}

// Arity is 3: dy, x, stats.
func (op *LayerNormGradWOp) Arity() int { return 3 }

// Type is a matrix → a matrix → a matrix → a vector.
func (op *LayerNormGradWOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a), tt(1, a))
}

// InferShape returns (C).
func (op *LayerNormGradWOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
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
func (op *LayerNormGradWOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LayerNormGradWOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LayerNormGradWOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *LayerNormGradWOp) String() string {
	return fmt.Sprintf("LayerNormGradW{N=%d,C=%d}", op.N, op.C)
}

// SumRowsOp is dst[c] = Σ_i dy[i, c] for dy (N, C): the gradient of every
// bias, layer-norm biases included. Lowered to Kernels.SumRows.
type SumRowsOp struct {
	opBase
	N, C int
}

// Arity is 1: dy.
func (op *SumRowsOp) Arity() int { return 1 }

// Type is a matrix → a vector.
func (op *SumRowsOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(1, a)) }

// InferShape returns (C).
func (op *SumRowsOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 1)
	if err != nil {
		return nil, err
	}
	if err := wantShape(op, "dy", s[0], op.N, op.C); err != nil {
		return nil, err
	}
	return tensor.Shape{op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *SumRowsOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *SumRowsOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *SumRowsOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *SumRowsOp) String() string { return fmt.Sprintf("SumRows{N=%d,C=%d}", op.N, op.C) }

// LinearGradXOp is x's gradient (N, In) of y = x·Wᵀ + b, from dy (N, Out)
// and W (Out, In): dx = dy·W. Lowered to one Kernels.MatMul.
type LinearGradXOp struct {
	opBase
	N, In, Out int
}

// Arity is 2: dy, W.
func (op *LinearGradXOp) Arity() int { return 2 }

// Type is a matrix → a matrix → a matrix.
func (op *LinearGradXOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a)) }

// InferShape returns (N, In).
func (op *LinearGradXOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 2)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "dy", s[0], op.N, op.Out),
		wantShape(op, "W", s[1], op.Out, op.In),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, op.In}, nil
}

// Do is not supported: see ErrNotVM.
func (op *LinearGradXOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LinearGradXOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LinearGradXOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *LinearGradXOp) String() string {
	return fmt.Sprintf("LinearGradX{N=%d,In=%d,Out=%d}", op.N, op.In, op.Out)
}

// LinearGradWOp is W's gradient (Out, In) of y = x·Wᵀ + b, from dy (N, Out)
// and x (N, In): dW = dyᵀ·x. Lowered to one Kernels.MatMul (TransA).
type LinearGradWOp struct {
	opBase
	N, In, Out int
}

// Arity is 2: dy, x.
func (op *LinearGradWOp) Arity() int { return 2 }

// Type is a matrix → a matrix → a matrix.
func (op *LinearGradWOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a)) }

// InferShape returns (Out, In).
func (op *LinearGradWOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 2)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "dy", s[0], op.N, op.Out),
		wantShape(op, "x", s[1], op.N, op.In),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.Out, op.In}, nil
}

// Do is not supported: see ErrNotVM.
func (op *LinearGradWOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LinearGradWOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LinearGradWOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *LinearGradWOp) String() string {
	return fmt.Sprintf("LinearGradW{N=%d,In=%d,Out=%d}", op.N, op.In, op.Out)
}

// AttnGradOp is qkv's gradient (B·T, 3C) of AttnOut, from dy (B·T, C),
// qkv (B·T, 3C) and P (B, NH, T, T): through v directly and through q and k
// via the softmax. Lowered to Kernels.AttentionBackward, which also takes
// cuda.AttentionScratchLen(T, NH) fp32 elements of workspace.
type AttnGradOp struct {
	opBase
	B, T, C, NH int
}

// Arity is 3: dy, qkv, P.
func (op *AttnGradOp) Arity() int { return 3 }

// Type is a matrix → a matrix → a 4-tensor → a matrix.
func (op *AttnGradOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(2, a), tt(4, a), tt(2, a))
}

// InferShape returns (B·T, 3C).
func (op *AttnGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 3)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		checkHeads(op, op.C, op.NH),
		wantShape(op, "dy", s[0], op.B*op.T, op.C),
		wantShape(op, "qkv", s[1], op.B*op.T, 3*op.C),
		wantShape(op, "P", s[2], op.B, op.NH, op.T, op.T),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.B * op.T, 3 * op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *AttnGradOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *AttnGradOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *AttnGradOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *AttnGradOp) String() string {
	return fmt.Sprintf("AttnGrad{B=%d,T=%d,C=%d,NH=%d}", op.B, op.T, op.C, op.NH)
}

// GELUGradOp is x's gradient of GELU, dx = dy·GELU'(x), for dy and x
// (N, C). Lowered to Kernels.GELUBackward.
type GELUGradOp struct {
	opBase
	N, C int
}

// Arity is 2: dy, x.
func (op *GELUGradOp) Arity() int { return 2 }

// Type is a matrix → a matrix → a matrix.
func (op *GELUGradOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a)) }

// InferShape returns (N, C).
func (op *GELUGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 2)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "dy", s[0], op.N, op.C),
		wantShape(op, "x", s[1], op.N, op.C),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *GELUGradOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *GELUGradOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *GELUGradOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *GELUGradOp) String() string { return fmt.Sprintf("GELUGrad{N=%d,C=%d}", op.N, op.C) }

// CrossEntropyGradOp is the logits' gradient (N, V) of the mean
// cross-entropy, from dloss (the scalar gradient of the loss: the loss
// scale), logits (N, V) and targets Int32 (N): dlogits =
// (softmax(logits) - onehot(targets))·dloss/N. Lowered to
// Kernels.CrossEntropyBackward.
type CrossEntropyGradOp struct {
	opBase
	N, V int
}

// Arity is 3: dloss, logits, targets.
func (op *CrossEntropyGradOp) Arity() int { return 3 }

// Type is a → a matrix → Int32 vector → a matrix.
func (op *CrossEntropyGradOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(a, tt(2, a), ids(), tt(2, a))
}

// InferShape returns (N, V).
func (op *CrossEntropyGradOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 3)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "dloss", s[0]),
		wantShape(op, "logits", s[1], op.N, op.V),
		wantShape(op, "targets", s[2], op.N),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, op.V}, nil
}

// Do is not supported: see ErrNotVM.
func (op *CrossEntropyGradOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *CrossEntropyGradOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *CrossEntropyGradOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *CrossEntropyGradOp) String() string {
	return fmt.Sprintf("CrossEntropyGrad{N=%d,V=%d}", op.N, op.V)
}
