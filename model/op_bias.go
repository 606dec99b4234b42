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
}

// signature: dy (N, C) → (C).
func (op *SumRowsOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.N, op.C)},
		out:  result(op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *SumRowsOp) String() string { return fmt.Sprintf("SumRows{N=%d,C=%d}", op.N, op.C) }

// Run is Kernels.SumRows.
func (op *SumRowsOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.SumRows(out, a[0], op.N, op.C)
}
