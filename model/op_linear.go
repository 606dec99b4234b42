package model

// The linear family: y = x·Wᵀ (+ b) and the gradients of x and W (the bias gradient is SumRowsOp, op_bias.go).
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
	_ Runner = (*LinearOp)(nil)
	_ Runner = (*LinearBackwardXOp)(nil)
	_ Runner = (*LinearBackwardWOp)(nil)
)

// LinearOp is y = x·Wᵀ + b for x (N, In), W (Out, In) stored as in llm.c, and
// optionally b (Out); y (N, Out). Bias is false for the tied head (logits =
// x·wteᵀ), which has two inputs. Lowered to one Kernels.MatMul (TransB) and,
// with a bias, Kernels.AddBias.
//
// Kept for backward: x (N·In elements) for W's gradient and W (Out·In, a
// parameter) for x's gradient; b's gradient reads only dy. Differentiable in
// every input.
type LinearOp struct {
	opBase
	N, In, Out int
	Bias       bool
}

// Arity is 3 with a bias, else 2.
func (op *LinearOp) Arity() int {
	if op.Bias {
		return 3
	}
	return 2
}

// Type is a matrix → a matrix [→ a vector] → a matrix.
func (op *LinearOp) Type() hm.Type {
	a := fa()
	if op.Bias {
		return hm.NewFnType(tt(2, a), tt(2, a), tt(1, a), tt(2, a))
	}
	return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a))
}

// InferShape returns (N, Out).
func (op *LinearOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, op.Arity())
	if err != nil {
		return nil, err
	}
	errs := []error{
		wantShape(op, "x", s[0], op.N, op.In),
		wantShape(op, "W", s[1], op.Out, op.In),
	}
	if op.Bias {
		errs = append(errs, wantShape(op, "b", s[2], op.Out))
	}
	if err := checkAll(errs...); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, op.Out}, nil
}

// Do is not supported: see ErrNotVM.
func (op *LinearOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LinearOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LinearOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *LinearOp) String() string {
	return fmt.Sprintf("Linear{N=%d,In=%d,Out=%d,Bias=%t}", op.N, op.In, op.Out, op.Bias)
}

// Run is y = x·Wᵀ (Kernels.MatMul), then + b (Kernels.AddBias).
func (op *LinearOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	if err := x.K.MatMul(cuda.MatMul{TransB: true, M: op.N, N: op.Out, K: op.In, A: a[0], B: a[1], C: out, Alpha: 1}); err != nil {
		return err
	}
	if op.Bias {
		return x.K.AddBias(out, a[2], op.N, op.Out)
	}
	return nil
}

// DiffWRT: every input.
func (op *LinearOp) DiffWRT(n int) []bool {
	d := make([]bool, n)
	for i := range d {
		d[i] = true
	}
	return d
}

// SymDiff returns LinearGradX(dy, W), LinearGradW(dy, x) and, with a bias,
// SumRows(dy).
func (op *LinearOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if len(in) != op.Arity() {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want %d", op, len(in), op.Arity())
	}
	x, w := in[0], in[1]
	dx, err := G.ApplyOp(&LinearBackwardXOp{opBase: op.sub("x"), N: op.N, In: op.In, Out: op.Out}, dy, w)
	if err != nil {
		return nil, err
	}
	dw, err := G.ApplyOp(&LinearBackwardWOp{opBase: op.sub("w"), N: op.N, In: op.In, Out: op.Out}, dy, x)
	if err != nil {
		return nil, err
	}
	if !op.Bias {
		return G.Nodes{dx, dw}, nil
	}
	db, err := G.ApplyOp(&SumRowsOp{opBase: op.sub("b"), N: op.N, C: op.Out}, dy)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx, dw, db}, nil
}

// LinearBackwardXOp is x's gradient (N, In) of y = x·Wᵀ + b, from dy (N, Out)
// and W (Out, In): dx = dy·W. Lowered to one Kernels.MatMul.
type LinearBackwardXOp struct {
	opBase
	N, In, Out int
}

// Arity is 2: dy, W.
func (op *LinearBackwardXOp) Arity() int { return 2 }

// Type is a matrix → a matrix → a matrix.
func (op *LinearBackwardXOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a))
}

// InferShape returns (N, In).
func (op *LinearBackwardXOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
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
func (op *LinearBackwardXOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LinearBackwardXOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LinearBackwardXOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *LinearBackwardXOp) String() string {
	return fmt.Sprintf("LinearBackwardX{N=%d,In=%d,Out=%d}", op.N, op.In, op.Out)
}

// Run is dx = dy·W (Kernels.MatMul).
func (op *LinearBackwardXOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.MatMul(cuda.MatMul{M: op.N, N: op.In, K: op.Out, A: a[0], B: a[1], C: out, Alpha: 1})
}

// LinearBackwardWOp is W's gradient (Out, In) of y = x·Wᵀ + b, from dy (N, Out)
// and x (N, In): dW = dyᵀ·x. Lowered to one Kernels.MatMul (TransA).
type LinearBackwardWOp struct {
	opBase
	N, In, Out int
}

// Arity is 2: dy, x.
func (op *LinearBackwardWOp) Arity() int { return 2 }

// Type is a matrix → a matrix → a matrix.
func (op *LinearBackwardWOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a))
}

// InferShape returns (Out, In).
func (op *LinearBackwardWOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
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
func (op *LinearBackwardWOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LinearBackwardWOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LinearBackwardWOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *LinearBackwardWOp) String() string {
	return fmt.Sprintf("LinearBackwardW{N=%d,In=%d,Out=%d}", op.N, op.In, op.Out)
}

// Run is dW = dyᵀ·x (Kernels.MatMul).
func (op *LinearBackwardWOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.MatMul(cuda.MatMul{TransA: true, M: op.Out, N: op.In, K: op.N, A: a[0], B: a[1], C: out, Alpha: 1})
}
