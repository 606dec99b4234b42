package model

// The GELU family: the activation and its gradient.

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"trainmem/cuda"
)

// GELUOp is y = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) elementwise
// on x (N, C). Lowered to Kernels.GELU.
//
// Kept for backward: x (N·C elements). Differentiable in x.
type GELUOp struct {
	opBase
	N, C int
}

// signature: x (N, C) → (N, C).
func (op *GELUOp) signature() signature {
	return signature{
		args: []param{arg("x", op.N, op.C)},
		out:  result(op.N, op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *GELUOp) String() string { return fmt.Sprintf("GELU{N=%d,C=%d}", op.N, op.C) }

// DiffWRT: x.
func (op *GELUOp) DiffWRT(n int) []bool { return []bool{true} }

// SymDiff returns GELUBackward(dy, x).
func (op *GELUOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	dx, err := applyOp(op.sub("x", &GELUBackwardOp{N: op.N, C: op.C}), dy, in[0])
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

// signature: dy (N, C), x (N, C) → (N, C).
func (op *GELUBackwardOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.N, op.C), arg("x", op.N, op.C)},
		out:  result(op.N, op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *GELUBackwardOp) String() string { return fmt.Sprintf("GELUBackward{N=%d,C=%d}", op.N, op.C) }

// Run is Kernels.GELUBackward.
func (op *GELUBackwardOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.GELUBackward(out, a[0], a[1])
}

// Specials: GELU's tanh an element (an exponential), forward and
// backward.
func (op *GELUOp) Specials() float64         { return float64(op.N) * float64(op.C) }
func (op *GELUBackwardOp) Specials() float64 { return float64(op.N) * float64(op.C) }
