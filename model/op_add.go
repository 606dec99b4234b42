package model

// The residual add, whose gradient passes through to both inputs.
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
	_ Runner = (*AddOp)(nil)
)

// AddOp is the residual connection y = a + b elementwise on (N, C) inputs.
// Lowered to Kernels.Add.
//
// Kept for backward: nothing. Its gradient is the output gradient itself for
// both inputs, so SymDiff creates no node.
type AddOp struct {
	opBase
	N, C int
}

// Arity is 2.
func (op *AddOp) Arity() int { return 2 }

// Type is a matrix → a matrix → a matrix.
func (op *AddOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a)) }

// InferShape returns (N, C).
func (op *AddOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 2)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "a", s[0], op.N, op.C),
		wantShape(op, "b", s[1], op.N, op.C),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *AddOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *AddOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *AddOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *AddOp) String() string { return fmt.Sprintf("Add{N=%d,C=%d}", op.N, op.C) }

// DiffWRT: both inputs.
func (op *AddOp) DiffWRT(n int) []bool { return []bool{true, true} }

// SymDiff returns dy for both inputs.
func (op *AddOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want 2", op, len(in))
	}
	return G.Nodes{dy, dy}, nil
}

// Run is Kernels.Add.
func (op *AddOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.Add(out, a[0], a[1])
}
