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
// column-parallel layer's x gradient is all-reduced; a row-parallel layer
// all-reduces x·Wᵀ before it adds b. With sequence parallelism (Seq, the
// ranks the rows are split over) a column-parallel layer's x is this
// rank's N/Seq rows, gathered into workspace before the product (and again
// for W's gradient, so that only the rank's rows are kept), its x gradient
// reduce-scattered; a row-parallel layer's product is reduce-scattered into
// the rank's N/Seq rows of y, and its dy gathered for both gradients.
type LinearOp struct {
	opBase
	N, In, Out int
	Bias       bool
	Parallel   Parallel
	Seq        int
}

// seqOf is an op's Seq as the ranks its sequence-parallel rows are split
// over: 1 for none (Seq 0).
func seqOf(seq int) int { return max(seq, 1) }

// rowsX and rowsY are the rows of x and y this rank holds.
func (op *LinearOp) rowsX() int {
	if op.Parallel == ColumnParallel {
		return op.N / seqOf(op.Seq)
	}
	return op.N
}

func (op *LinearOp) rowsY() int {
	if op.Parallel == RowParallel {
		return op.N / seqOf(op.Seq)
	}
	return op.N
}

// signature: x (N, In), W (Out, In), with Bias b (Out) → (N, Out), the
// sequence-parallel side N/Seq rows.
func (op *LinearOp) signature() signature {
	args := []param{arg("x", op.rowsX(), op.In), arg("W", op.Out, op.In)}
	if op.Bias {
		args = append(args, arg("b", op.Out))
	}
	return signature{args: args, out: result(op.rowsY(), op.Out)}
}

// String names the op and every field; WriteHash hashes it.
func (op *LinearOp) String() string {
	switch {
	case op.Seq != 0:
		return fmt.Sprintf("Linear{N=%d,In=%d,Out=%d,Bias=%t,Parallel=%v,Seq=%d}", op.N, op.In, op.Out, op.Bias, op.Parallel, op.Seq)
	case op.Parallel != NotParallel:
		return fmt.Sprintf("Linear{N=%d,In=%d,Out=%d,Bias=%t,Parallel=%v}", op.N, op.In, op.Out, op.Bias, op.Parallel)
	}
	return fmt.Sprintf("Linear{N=%d,In=%d,Out=%d,Bias=%t}", op.N, op.In, op.Out, op.Bias)
}

// Run is y = x·Wᵀ (Kernels.MatMul), row-parallel summed over the tensor
// group (sequence-parallel: x gathered, or y reduce-scattered), then + b
// (Kernels.AddBias).
func (op *LinearOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	mm := func(in, y *cuda.Buffer) error {
		return x.K.MatMul(cuda.MatMul{TransB: true, M: op.N, N: op.Out, K: op.In, A: in, B: a[1], C: y, Alpha: 1})
	}
	var err error
	switch seq := seqOf(op.Seq); {
	case seq > 1 && op.Parallel == ColumnParallel:
		err = x.gathered(op, a[0], seq, func(all *cuda.Buffer) error { return mm(all, out) })
	case seq > 1 && op.Parallel == RowParallel:
		err = x.scattered(op, out, seq, func(all *cuda.Buffer) error { return mm(a[0], all) })
	case op.Parallel == RowParallel:
		if err = mm(a[0], out); err == nil {
			err = x.allReduce(op, out)
		}
	default:
		err = mm(a[0], out)
	}
	if err != nil || !op.Bias {
		return err
	}
	return x.K.AddBias(out, a[2], op.rowsY(), op.Out)
}

// DiffWRT: every input.
func (op *LinearOp) DiffWRT(n int) []bool {
	d := make([]bool, n)
	for i := range d {
		d[i] = true
	}
	return d
}

// SymDiff returns LinearBackwardX(dy, W), LinearBackwardW(dy, x) and, with a
// bias, SumRows(dy) (summed over the tensor group where dy is a rank's rows).
func (op *LinearOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	return op.symDiffSome(in, out, dy, nil)
}

// symDiffSome is SymDiff of the inputs need says (nil: all): a frozen
// weight's gradient is not made, and neither is x's when nothing below it
// is trained; x is then kept for W's gradient only, W for x's only.
func (op *LinearOp) symDiffSome(in G.Nodes, out, dy *G.Node, need []bool) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	x, w := in[0], in[1]
	d := make(G.Nodes, len(in))
	var err error
	if needs(need, 0) {
		if d[0], err = applyOp(op.sub("x", &LinearBackwardXOp{N: op.N, In: op.In, Out: op.Out, Parallel: op.Parallel, Seq: op.Seq}), dy, w); err != nil {
			return nil, err
		}
	}
	if needs(need, 1) {
		if d[1], err = applyOp(op.sub("w", &LinearBackwardWOp{N: op.N, In: op.In, Out: op.Out, Parallel: op.Parallel, Seq: op.Seq}), dy, x); err != nil {
			return nil, err
		}
	}
	if op.Bias && needs(need, 2) {
		if d[2], err = applyOp(op.sub("b", &SumRowsOp{N: op.rowsY(), C: op.Out, Reduce: op.rowsY() < op.N}), dy); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// LinearBackwardXOp is x's gradient (N, In) of y = x·Wᵀ + b, from dy (N, Out)
// and W (Out, In): dx = dy·W. Lowered to one Kernels.MatMul. Parallel and Seq
// are the forward layer's: a column-parallel layer's dx is summed over the
// tensor group (each rank's is the part through its own output features),
// reduce-scattered into the rank's rows with sequence parallelism; a
// sequence-parallel row-parallel layer's dy, the rank's rows, is gathered
// first.
type LinearBackwardXOp struct {
	opBase
	N, In, Out int
	Parallel   Parallel
	Seq        int
}

func (op *LinearBackwardXOp) fwd() *LinearOp {
	return &LinearOp{N: op.N, In: op.In, Out: op.Out, Parallel: op.Parallel, Seq: op.Seq}
}

// signature: dy (N, Out), W (Out, In) → (N, In), the sequence-parallel
// side N/Seq rows.
func (op *LinearBackwardXOp) signature() signature {
	f := op.fwd()
	return signature{
		args: []param{arg("dy", f.rowsY(), op.Out), arg("W", op.Out, op.In)},
		out:  result(f.rowsX(), op.In),
	}
}

// linearBackwardName is a linear backward op's String: its name and
// fields, the parallel ones where they are set.
func linearBackwardName(name string, N, in, out int, p Parallel, seq int) string {
	if p != NotParallel || seq != 0 {
		return fmt.Sprintf("%s{N=%d,In=%d,Out=%d,Parallel=%v,Seq=%d}", name, N, in, out, p, seq)
	}
	return fmt.Sprintf("%s{N=%d,In=%d,Out=%d}", name, N, in, out)
}

// String names the op and every field; WriteHash hashes it.
func (op *LinearBackwardXOp) String() string {
	return linearBackwardName("LinearBackwardX", op.N, op.In, op.Out, op.Parallel, op.Seq)
}

// Run is dx = dy·W (Kernels.MatMul), summed, reduce-scattered or from
// the gathered dy as Parallel and Seq say.
func (op *LinearBackwardXOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	mm := func(dy, dx *cuda.Buffer) error {
		return x.K.MatMul(cuda.MatMul{M: op.N, N: op.In, K: op.Out, A: dy, B: a[1], C: dx, Alpha: 1})
	}
	switch seq := seqOf(op.Seq); {
	case seq > 1 && op.Parallel == ColumnParallel:
		return x.scattered(op, out, seq, func(all *cuda.Buffer) error { return mm(a[0], all) })
	case seq > 1 && op.Parallel == RowParallel:
		return x.gathered(op, a[0], seq, func(all *cuda.Buffer) error { return mm(all, out) })
	case op.Parallel == ColumnParallel:
		if err := mm(a[0], out); err != nil {
			return err
		}
		return x.allReduce(op, out)
	}
	return mm(a[0], out)
}

// LinearBackwardWOp is W's gradient (Out, In) of y = x·Wᵀ + b, from dy (N, Out)
// and x (N, In): dW = dyᵀ·x. Lowered to one Kernels.MatMul (TransA). With
// sequence parallelism the side that is the rank's rows (x of a
// column-parallel layer, dy of a row-parallel one) is gathered first.
type LinearBackwardWOp struct {
	opBase
	N, In, Out int
	Parallel   Parallel
	Seq        int
}

// signature: dy (N, Out), x (N, In) → (Out, In), the sequence-parallel
// side N/Seq rows.
func (op *LinearBackwardWOp) signature() signature {
	f := &LinearOp{N: op.N, In: op.In, Out: op.Out, Parallel: op.Parallel, Seq: op.Seq}
	return signature{
		args: []param{arg("dy", f.rowsY(), op.Out), arg("x", f.rowsX(), op.In)},
		out:  result(op.Out, op.In),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *LinearBackwardWOp) String() string {
	return linearBackwardName("LinearBackwardW", op.N, op.In, op.Out, op.Parallel, op.Seq)
}

// Run is dW = dyᵀ·x (Kernels.MatMul), the rank's rows gathered first with
// sequence parallelism; dW += dyᵀ·x (Beta 1) with Exec.Accumulate.
func (op *LinearBackwardWOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	beta := float32(0)
	if x.Accumulate {
		beta = 1
	}
	mm := func(dy, in *cuda.Buffer) error {
		return x.K.MatMul(cuda.MatMul{TransA: true, M: op.Out, N: op.In, K: op.N, A: dy, B: in, C: out, Alpha: 1, Beta: beta})
	}
	switch seq := seqOf(op.Seq); {
	case seq > 1 && op.Parallel == ColumnParallel:
		return x.gathered(op, a[1], seq, func(all *cuda.Buffer) error { return mm(a[0], all) })
	case seq > 1 && op.Parallel == RowParallel:
		return x.gathered(op, a[0], seq, func(all *cuda.Buffer) error { return mm(all, a[1]) })
	}
	return mm(a[0], a[1])
}

// Accumulates: Run adds dyᵀ·x into out with Exec.Accumulate (the tied
// head's term of wte's gradient, Accumulator).
func (op *LinearBackwardWOp) Accumulates() bool { return true }

// Products of y = x·Wᵀ (N×In by In×Out), dx = dy·W (N×Out by Out×In)
// and dW = dyᵀ·x (Out×N by N×In).
func (op *LinearOp) Products() []cuda.Product {
	return []cuda.Product{{Batch: 1, M: int64(op.N), N: int64(op.Out), K: int64(op.In)}}
}

func (op *LinearBackwardXOp) Products() []cuda.Product {
	return []cuda.Product{{Batch: 1, M: int64(op.N), N: int64(op.In), K: int64(op.Out)}}
}

func (op *LinearBackwardWOp) Products() []cuda.Product {
	return []cuda.Product{{Batch: 1, M: int64(op.Out), N: int64(op.In), K: int64(op.N)}}
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
