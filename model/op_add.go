package model

// The residual add, whose gradient passes through to both inputs.

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"trainmem/cuda"
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

// signature: a (N, C), b (N, C) → (N, C).
func (op *AddOp) signature() signature {
	return signature{
		args: []param{arg("a", op.N, op.C), arg("b", op.N, op.C)},
		out:  result(op.N, op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *AddOp) String() string { return fmt.Sprintf("Add{N=%d,C=%d}", op.N, op.C) }

// DiffWRT: both inputs.
func (op *AddOp) DiffWRT(n int) []bool { return []bool{true, true} }

// SymDiff returns dy for both inputs.
func (op *AddOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	return G.Nodes{dy, dy}, nil
}

// Run is Kernels.Add.
func (op *AddOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.Add(out, a[0], a[1])
}
