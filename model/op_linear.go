package model

// The linear family: y = x·Wᵀ (+ b) and the gradients of x and W (the bias gradient is SumRowsOp, op_bias.go).

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"trainmem/cuda"
)

// LinearOp is y = x·Wᵀ + b for x (N, In), W (Out, In) stored as in llm.c, and
// optionally b (Out); y (N, Out). Bias is false for the tied head (logits =
// x·wteᵀ), which has two inputs. Lowered to one Kernels.MatMul (TransB) and,
// with a bias, Kernels.AddBias.
//
// Kept for backward: x (N·In elements) for W's gradient and W (Out·In, a
// parameter) for x's gradient; b's gradient reads only dy. Differentiable in
// every input.
//
// Parallel splits it over tensor-parallel ranks (tensor.go): a
// column-parallel layer's x gradient is all-reduced (its backward op's
// Reduce); a row-parallel layer all-reduces x·Wᵀ before it adds b.
type LinearOp struct {
	opBase
	N, In, Out int
	Bias       bool
	Parallel   Parallel
}

// signature: x (N, In), W (Out, In), with Bias b (Out) → (N, Out).
func (op *LinearOp) signature() signature {
	args := []param{arg("x", op.N, op.In), arg("W", op.Out, op.In)}
	if op.Bias {
		args = append(args, arg("b", op.Out))
	}
	return signature{args: args, out: result(op.N, op.Out)}
}

// String names the op and every field; WriteHash hashes it.
func (op *LinearOp) String() string {
	if op.Parallel != NotParallel {
		return fmt.Sprintf("Linear{N=%d,In=%d,Out=%d,Bias=%t,Parallel=%v}", op.N, op.In, op.Out, op.Bias, op.Parallel)
	}
	return fmt.Sprintf("Linear{N=%d,In=%d,Out=%d,Bias=%t}", op.N, op.In, op.Out, op.Bias)
}

// Run is y = x·Wᵀ (Kernels.MatMul), row-parallel summed over the tensor
// group, then + b (Kernels.AddBias).
func (op *LinearOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	if err := x.K.MatMul(cuda.MatMul{TransB: true, M: op.N, N: op.Out, K: op.In, A: a[0], B: a[1], C: out, Alpha: 1}); err != nil {
		return err
	}
	if op.Parallel == RowParallel {
		if err := x.allReduce(op.String(), out); err != nil {
			return err
		}
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
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	x, w := in[0], in[1]
	dx, err := applyOp(op.sub("x", &LinearBackwardXOp{N: op.N, In: op.In, Out: op.Out, Reduce: op.Parallel == ColumnParallel}), dy, w)
	if err != nil {
		return nil, err
	}
	dw, err := applyOp(op.sub("w", &LinearBackwardWOp{N: op.N, In: op.In, Out: op.Out}), dy, x)
	if err != nil {
		return nil, err
	}
	if !op.Bias {
		return G.Nodes{dx, dw}, nil
	}
	db, err := applyOp(op.sub("b", &SumRowsOp{N: op.N, C: op.Out}), dy)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx, dw, db}, nil
}

// LinearBackwardXOp is x's gradient (N, In) of y = x·Wᵀ + b, from dy (N, Out)
// and W (Out, In): dx = dy·W. Lowered to one Kernels.MatMul. Reduce (a
// column-parallel layer's) sums dx over the tensor group: each rank's is
// the part through its own output features.
type LinearBackwardXOp struct {
	opBase
	N, In, Out int
	Reduce     bool
}

// signature: dy (N, Out), W (Out, In) → (N, In).
func (op *LinearBackwardXOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.N, op.Out), arg("W", op.Out, op.In)},
		out:  result(op.N, op.In),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *LinearBackwardXOp) String() string {
	if op.Reduce {
		return fmt.Sprintf("LinearBackwardX{N=%d,In=%d,Out=%d,Reduce}", op.N, op.In, op.Out)
	}
	return fmt.Sprintf("LinearBackwardX{N=%d,In=%d,Out=%d}", op.N, op.In, op.Out)
}

// Run is dx = dy·W (Kernels.MatMul), with Reduce summed over the tensor
// group.
func (op *LinearBackwardXOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	if err := x.K.MatMul(cuda.MatMul{M: op.N, N: op.In, K: op.Out, A: a[0], B: a[1], C: out, Alpha: 1}); err != nil {
		return err
	}
	if op.Reduce {
		return x.allReduce(op.String(), out)
	}
	return nil
}

// LinearBackwardWOp is W's gradient (Out, In) of y = x·Wᵀ + b, from dy (N, Out)
// and x (N, In): dW = dyᵀ·x. Lowered to one Kernels.MatMul (TransA).
type LinearBackwardWOp struct {
	opBase
	N, In, Out int
}

// signature: dy (N, Out), x (N, In) → (Out, In).
func (op *LinearBackwardWOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.N, op.Out), arg("x", op.N, op.In)},
		out:  result(op.Out, op.In),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *LinearBackwardWOp) String() string {
	return fmt.Sprintf("LinearBackwardW{N=%d,In=%d,Out=%d}", op.N, op.In, op.Out)
}

// Run is dW = dyᵀ·x (Kernels.MatMul).
func (op *LinearBackwardWOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.MatMul(cuda.MatMul{TransA: true, M: op.Out, N: op.In, K: op.N, A: a[0], B: a[1], C: out, Alpha: 1})
}

// FLOPs of y = x·Wᵀ: 2·N·In·Out.
func (op *LinearOp) FLOPs() float64 { return 2 * float64(op.N) * float64(op.In) * float64(op.Out) }

// FLOPs of dx = dy·W: 2·N·In·Out.
func (op *LinearBackwardXOp) FLOPs() float64 {
	return 2 * float64(op.N) * float64(op.In) * float64(op.Out)
}

// FLOPs of dW = dyᵀ·x: 2·N·In·Out.
func (op *LinearBackwardWOp) FLOPs() float64 {
	return 2 * float64(op.N) * float64(op.In) * float64(op.Out)
}
