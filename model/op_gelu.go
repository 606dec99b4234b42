package model

// The GELU family: the activation and its gradient.
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
	_ Runner = (*GELUOp)(nil)
	_ Runner = (*GELUBackwardOp)(nil)
)

// GELUOp is y = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) elementwise
// on x (N, C). Lowered to Kernels.GELU.
//
// Kept for backward: x (N·C elements). Differentiable in x.
type GELUOp struct {
	opBase
	N, C int
}

// Arity is 1.
func (op *GELUOp) Arity() int { return 1 }

// Type is a matrix → a matrix.
func (op *GELUOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(2, a)) }

// InferShape returns (N, C).
func (op *GELUOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 1)
	if err != nil {
		return nil, err
	}
	if err := wantShape(op, "x", s[0], op.N, op.C); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *GELUOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *GELUOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *GELUOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *GELUOp) String() string { return fmt.Sprintf("GELU{N=%d,C=%d}", op.N, op.C) }

// DiffWRT: x.
func (op *GELUOp) DiffWRT(n int) []bool { return []bool{true} }

// SymDiff returns GELUGrad(dy, x).
func (op *GELUOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want 1", op, len(in))
	}
	dx, err := G.ApplyOp(&GELUBackwardOp{opBase: op.sub("x"), N: op.N, C: op.C}, dy, in[0])
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx}, nil
}

// Run is Kernels.GELU.
func (op *GELUOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error { return x.K.GELU(out, a[0]) }

// GELUBackwardOp is x's gradient of GELU, dx = dy·GELU'(x), for dy and x
// (N, C). Lowered to Kernels.GELUBackward.
type GELUBackwardOp struct {
	opBase
	N, C int
}

// Arity is 2: dy, x.
func (op *GELUBackwardOp) Arity() int { return 2 }

// Type is a matrix → a matrix → a matrix.
func (op *GELUBackwardOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a))
}

// InferShape returns (N, C).
func (op *GELUBackwardOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
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
func (op *GELUBackwardOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *GELUBackwardOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *GELUBackwardOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *GELUBackwardOp) String() string { return fmt.Sprintf("GELUBackward{N=%d,C=%d}", op.N, op.C) }

// Run is Kernels.GELUBackward.
func (op *GELUBackwardOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.GELUBackward(out, a[0], a[1])
}
