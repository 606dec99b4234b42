package model

// The embedding family: the token and position embedding and the gradients of its two tables.
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
	_ Runner = (*EmbeddingOp)(nil)
	_ Runner = (*EmbeddingBackwardTokensOp)(nil)
	_ Runner = (*EmbeddingBackwardPositionsOp)(nil)
)

// EmbeddingOp is the token and position embedding: out[b·T+t, :] =
// wte[tokens[b·T+t], :] + wpe[t, :]. Inputs: tokens Int32 (B·T), wte (V, C),
// wpe (Ctx, C); output (B·T, C). Lowered to cuda Kernels.Embedding.
//
// Kept for backward: tokens (B·T Int32 elements) for wte's gradient; wpe's
// gradient reads only the output gradient. Differentiable in wte and wpe.
type EmbeddingOp struct {
	opBase
	B, T, C int
	V       int // vocabulary: wte's rows
	Ctx     int // positions: wpe's rows, ≥ T
}

// Arity is 3: tokens, wte, wpe.
func (op *EmbeddingOp) Arity() int { return 3 }

// Type is Int32 vector → a matrix → a matrix → a matrix.
func (op *EmbeddingOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(ids(), tt(2, a), tt(2, a), tt(2, a))
}

// InferShape checks the inputs and returns (B·T, C).
func (op *EmbeddingOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 3)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "tokens", s[0], op.B*op.T),
		wantShape(op, "wte", s[1], op.V, op.C),
		wantShape(op, "wpe", s[2], op.Ctx, op.C),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.B * op.T, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *EmbeddingOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *EmbeddingOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *EmbeddingOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *EmbeddingOp) String() string {
	return fmt.Sprintf("Embedding{B=%d,T=%d,C=%d,V=%d,Ctx=%d}", op.B, op.T, op.C, op.V, op.Ctx)
}

// Run is Kernels.Embedding.
func (op *EmbeddingOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.Embedding(out, a[0], a[1], a[2], op.B, op.T, op.C)
}

// DiffWRT: wte and wpe, not the token ids.
func (op *EmbeddingOp) DiffWRT(n int) []bool { return []bool{false, true, true} }

// SymDiff returns EmbeddingGradTokens(dy, tokens) for wte and
// EmbeddingGradPositions(dy) for wpe.
func (op *EmbeddingOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if len(in) != 3 {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want 3", op, len(in))
	}
	dwte, err := G.ApplyOp(&EmbeddingBackwardTokensOp{opBase: op.sub("wte"), B: op.B, T: op.T, C: op.C, V: op.V}, dy, in[0])
	if err != nil {
		return nil, err
	}
	dwpe, err := G.ApplyOp(&EmbeddingBackwardPositionsOp{opBase: op.sub("wpe"), B: op.B, T: op.T, C: op.C, Ctx: op.Ctx}, dy)
	if err != nil {
		return nil, err
	}
	return G.Nodes{nil, dwte, dwpe}, nil
}

// EmbeddingBackwardTokensOp is wte's gradient (V, C) from dy (B·T, C) and tokens
// Int32 (B·T): zero, then row tokens[i] += dy[i, :]. Lowered to
// Kernels.EmbeddingBackwardTokens.
type EmbeddingBackwardTokensOp struct {
	opBase
	B, T, C, V int
}

// Arity is 2: dy, tokens.
func (op *EmbeddingBackwardTokensOp) Arity() int { return 2 }

// Type is a matrix → Int32 vector → a matrix.
func (op *EmbeddingBackwardTokensOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), ids(), tt(2, a))
}

// InferShape returns (V, C).
func (op *EmbeddingBackwardTokensOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
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
func (op *EmbeddingBackwardTokensOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *EmbeddingBackwardTokensOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *EmbeddingBackwardTokensOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *EmbeddingBackwardTokensOp) String() string {
	return fmt.Sprintf("EmbeddingBackwardTokens{B=%d,T=%d,C=%d,V=%d}", op.B, op.T, op.C, op.V)
}

// Run is Kernels.EmbeddingBackwardTokens.
func (op *EmbeddingBackwardTokensOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.EmbeddingBackwardTokens(out, a[0], a[1], op.B, op.T, op.C)
}

// EmbeddingBackwardPositionsOp is wpe's gradient (Ctx, C) from dy (B·T, C): row
// t < T is Σ_b dy[b·T+t, :], rows t ≥ T are zero. Lowered to
// Kernels.EmbeddingBackwardPositions.
type EmbeddingBackwardPositionsOp struct {
	opBase
	B, T, C, Ctx int
}

// Arity is 1: dy.
func (op *EmbeddingBackwardPositionsOp) Arity() int { return 1 }

// Type is a matrix → a matrix.
func (op *EmbeddingBackwardPositionsOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(2, a))
}

// InferShape returns (Ctx, C).
func (op *EmbeddingBackwardPositionsOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
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
func (op *EmbeddingBackwardPositionsOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *EmbeddingBackwardPositionsOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *EmbeddingBackwardPositionsOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *EmbeddingBackwardPositionsOp) String() string {
	return fmt.Sprintf("EmbeddingBackwardPositions{B=%d,T=%d,C=%d,Ctx=%d}", op.B, op.T, op.C, op.Ctx)
}

// Run is Kernels.EmbeddingBackwardPositions.
func (op *EmbeddingBackwardPositionsOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.EmbeddingBackwardPositions(out, a[0], op.B, op.T, op.C)
}
