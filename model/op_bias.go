package model

// The bias gradient: a sum over rows, shared by the linear layers and the layer norms.

import (
	"fmt"

	"trainmem/cuda"
)

// SumRowsOp is dst[c] = Σ_i dy[i, c] for dy (N, C): the gradient of every
// bias, layer-norm biases included. Lowered to Kernels.SumRows.
type SumRowsOp struct {
	opBase
	N, C int
	// Reduce sums the result over the tensor group: dy is this rank's
	// rows of a sequence-parallel region.
	Reduce bool
}

// signature: dy (N, C) → (C).
func (op *SumRowsOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.N, op.C)},
		out:  result(op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *SumRowsOp) String() string {
	return fmt.Sprintf("SumRows{N=%d,C=%d%s}", op.N, op.C, reduceTag(op.Reduce))
}

// Run is Kernels.SumRows, with Reduce summed over the tensor group.
func (op *SumRowsOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.reduced(op.Reduce, op, out, x.K.SumRows(out, a[0], op.N, op.C))
}
