package model

// The bias gradient: a sum over rows, shared by the linear layers and the layer norms.
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
	_ Runner = (*SumRowsOp)(nil)
)

// SumRowsOp is dst[c] = Σ_i dy[i, c] for dy (N, C): the gradient of every
// bias, layer-norm biases included. Lowered to Kernels.SumRows.
type SumRowsOp struct {
	opBase
	N, C int
}

// Arity is 1: dy.
func (op *SumRowsOp) Arity() int { return 1 }

// Type is a matrix → a vector.
func (op *SumRowsOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(1, a)) }

// InferShape returns (C).
func (op *SumRowsOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 1)
	if err != nil {
		return nil, err
	}
	if err := wantShape(op, "dy", s[0], op.N, op.C); err != nil {
		return nil, err
	}
	return tensor.Shape{op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *SumRowsOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *SumRowsOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *SumRowsOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *SumRowsOp) String() string { return fmt.Sprintf("SumRows{N=%d,C=%d}", op.N, op.C) }

// Run is Kernels.SumRows.
func (op *SumRowsOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.SumRows(out, a[0], op.N, op.C)
}
