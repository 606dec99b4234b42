package model

// The attention family: causal probabilities, their product with the values, and the gradient of qkv.
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
	_ Runner = (*AttentionProbsOp)(nil)
	_ Runner = (*AttentionOutOp)(nil)
	_ Runner = (*AttentionBackwardOp)(nil)
)

// AttentionProbsOp computes causal attention probabilities from qkv (B·T, 3C),
// laid out [q | k | v], each C wide and split into NH heads of C/NH
// channels: P (B, NH, T, T) is the softmax of q·kᵀ/sqrt(C/NH) over keys
// 0..t for query t (row t has T-1-t trailing exact zeros). Lowered to
// Kernels.AttentionProbs.
//
// Its output is a node of its own so that AttnOut and its backward op read it
// instead of recomputing it; the op is not differentiable (AttnOut marks P
// non-differentiable and AttnGrad differentiates through P itself).
type AttentionProbsOp struct {
	opBase
	B, T, C, NH int
}

// Arity is 1.
func (op *AttentionProbsOp) Arity() int { return 1 }

// Type is a matrix → a 4-tensor.
func (op *AttentionProbsOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(4, a)) }

// InferShape returns (B, NH, T, T).
func (op *AttentionProbsOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 1)
	if err != nil {
		return nil, err
	}
	if err := checkHeads(op, op.C, op.NH); err != nil {
		return nil, err
	}
	if err := wantShape(op, "qkv", s[0], op.B*op.T, 3*op.C); err != nil {
		return nil, err
	}
	return tensor.Shape{op.B, op.NH, op.T, op.T}, nil
}

// Do is not supported: see ErrNotVM.
func (op *AttentionProbsOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *AttentionProbsOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *AttentionProbsOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *AttentionProbsOp) String() string {
	return fmt.Sprintf("AttentionProbs{B=%d,T=%d,C=%d,NH=%d}", op.B, op.T, op.C, op.NH)
}

// Run is Kernels.AttentionProbs.
func (op *AttentionProbsOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.AttentionProbs(out, a[0], op.B, op.T, op.C, op.NH)
}

// DroppedBySelective: selective checkpointing (Korthikanti et al.) drops
// the attention probabilities and recomputes them.
func (op *AttentionProbsOp) DroppedBySelective() bool { return true }

// DiffWRT is false: AttnGrad differentiates through P.
func (op *AttentionProbsOp) DiffWRT(n int) []bool { return []bool{false} }

// SymDiff is an error: the op is not differentiable on its own.
func (op *AttentionProbsOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("model: %v is not differentiable (AttnOut's gradient goes through the probabilities)", op)
}

// AttentionOutOp is the attention output y (B·T, C): head h's channels of row
// b·T+t are Σ_s P[b, h, t, s]·v[b·T+s, head h], for qkv (B·T, 3C) and P
// (B, NH, T, T) from AttentionProbsOp. Lowered to Kernels.AttentionOut.
//
// Kept for backward: qkv (N·3C elements) and P (B·NH·T·T), which AttnGrad
// reads to produce the whole gradient of qkv (through v directly and through
// q and k via P). Differentiable in qkv only.
type AttentionOutOp struct {
	opBase
	B, T, C, NH int
}

// Arity is 2: qkv, P.
func (op *AttentionOutOp) Arity() int { return 2 }

// Type is a matrix → a 4-tensor → a matrix.
func (op *AttentionOutOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(4, a), tt(2, a))
}

// InferShape returns (B·T, C).
func (op *AttentionOutOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 2)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		checkHeads(op, op.C, op.NH),
		wantShape(op, "qkv", s[0], op.B*op.T, 3*op.C),
		wantShape(op, "P", s[1], op.B, op.NH, op.T, op.T),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.B * op.T, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *AttentionOutOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *AttentionOutOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *AttentionOutOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *AttentionOutOp) String() string {
	return fmt.Sprintf("AttentionOut{B=%d,T=%d,C=%d,NH=%d}", op.B, op.T, op.C, op.NH)
}

// Run is Kernels.AttentionOut.
func (op *AttentionOutOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.AttentionOut(out, a[0], a[1], op.B, op.T, op.C, op.NH)
}

// DiffWRT: qkv only.
func (op *AttentionOutOp) DiffWRT(n int) []bool { return []bool{true, false} }

// SymDiff returns AttnGrad(dy, qkv, P) for qkv and nil for P.
func (op *AttentionOutOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want 2", op, len(in))
	}
	dqkv, err := G.ApplyOp(&AttentionBackwardOp{opBase: op.sub("qkv"), B: op.B, T: op.T, C: op.C, NH: op.NH}, dy, in[0], in[1])
	if err != nil {
		return nil, err
	}
	return G.Nodes{dqkv, nil}, nil
}

// AttentionBackwardOp is qkv's gradient (B·T, 3C) of AttnOut, from dy (B·T, C),
// qkv (B·T, 3C) and P (B, NH, T, T): through v directly and through q and k
// via the softmax. Lowered to Kernels.AttentionBackward, which also takes
// cuda.AttentionScratchLen(T, NH) fp32 elements of workspace.
type AttentionBackwardOp struct {
	opBase
	B, T, C, NH int
}

// Arity is 3: dy, qkv, P.
func (op *AttentionBackwardOp) Arity() int { return 3 }

// Type is a matrix → a matrix → a 4-tensor → a matrix.
func (op *AttentionBackwardOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(2, a), tt(4, a), tt(2, a))
}

// InferShape returns (B·T, 3C).
func (op *AttentionBackwardOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 3)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		checkHeads(op, op.C, op.NH),
		wantShape(op, "dy", s[0], op.B*op.T, op.C),
		wantShape(op, "qkv", s[1], op.B*op.T, 3*op.C),
		wantShape(op, "P", s[2], op.B, op.NH, op.T, op.T),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.B * op.T, 3 * op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *AttentionBackwardOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *AttentionBackwardOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *AttentionBackwardOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *AttentionBackwardOp) String() string {
	return fmt.Sprintf("AttentionBackward{B=%d,T=%d,C=%d,NH=%d}", op.B, op.T, op.C, op.NH)
}

// Run is Kernels.AttentionBackward, its score gradients in workspace lent
// for the call (cuda.AttentionScratchLen).
func (op *AttentionBackwardOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.Scratch(cuda.AttentionScratchLen(op.T, op.NH), func(s *cuda.Buffer) error {
		return x.K.AttentionBackward(out, a[0], a[1], a[2], s, op.B, op.T, op.C, op.NH)
	})
}
