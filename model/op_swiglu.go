package model

// The SwiGLU family: LLaMA's gated MLP activation and its gradient.

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"trainmem/cuda"
)

// SwiGLUOp is y = silu(g)·u for x (N, 2F), each row [g (F) | u (F)] (the
// gate's and the up projection's outputs of one linear layer), y (N, F).
// Lowered to Kernels.SwiGLU.
//
// Kept for backward: x (N·2F elements). Differentiable in x.
type SwiGLUOp struct {
	opBase
	N, F int
}

// signature: x (N, 2F) → (N, F).
func (op *SwiGLUOp) signature() signature {
	return signature{
		args: []param{arg("x", op.N, 2*op.F)},
		out:  result(op.N, op.F),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *SwiGLUOp) String() string { return fmt.Sprintf("SwiGLU{N=%d,F=%d}", op.N, op.F) }

// DiffWRT: x.
func (op *SwiGLUOp) DiffWRT(n int) []bool { return []bool{true} }

// SymDiff returns SwiGLUBackward(dy, x).
func (op *SwiGLUOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	dx, err := applyOp(op.sub("x", &SwiGLUBackwardOp{N: op.N, F: op.F}), dy, in[0])
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx}, nil
}

// Run is Kernels.SwiGLU.
func (op *SwiGLUOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.SwiGLU(out, a[0], op.N, op.F)
}

// SwiGLUBackwardOp is x's gradient (N, 2F) of SwiGLU from dy (N, F) and
// x (N, 2F): the gate's half dy·u·σ(g)·(1 + g·(1 - σ(g))), the up
// projection's dy·silu(g). Lowered to Kernels.SwiGLUBackward.
type SwiGLUBackwardOp struct {
	opBase
	N, F int
}

// signature: dy (N, F), x (N, 2F) → (N, 2F).
func (op *SwiGLUBackwardOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.N, op.F), arg("x", op.N, 2*op.F)},
		out:  result(op.N, 2*op.F),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *SwiGLUBackwardOp) String() string {
	return fmt.Sprintf("SwiGLUBackward{N=%d,F=%d}", op.N, op.F)
}

// Run is Kernels.SwiGLUBackward.
func (op *SwiGLUBackwardOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.SwiGLUBackward(out, a[0], a[1], op.N, op.F)
}

// Specials: an exponential an element of the gate, forward (its sigmoid)
// and backward (the sigmoid again).
func (op *SwiGLUOp) Specials() float64         { return float64(op.N) * float64(op.F) }
func (op *SwiGLUBackwardOp) Specials() float64 { return float64(op.N) * float64(op.F) }
