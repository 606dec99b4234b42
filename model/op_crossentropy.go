package model

// The cross-entropy family: the mean loss over rows and the gradient of the logits.
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
	_ Runner = (*CrossEntropyOp)(nil)
	_ Runner = (*CrossEntropyBackwardOp)(nil)
)

// CrossEntropyOp is the mean over N rows of -log softmax(logits[i, :])[targets[i]]
// for logits (N, V) and targets Int32 (N) in [0, V); the output is a bare
// scalar of the logits' dtype (a scalar dtype, so that gorgonia's
// differentiation accepts it as a cost). Lowered to Kernels.CrossEntropy.
//
// Kept for backward: logits (N·V elements, the largest activation of a GPT-2)
// and targets (N Int32). Differentiable in the logits.
type CrossEntropyOp struct {
	opBase
	N, V int
}

// Arity is 2: logits, targets.
func (op *CrossEntropyOp) Arity() int { return 2 }

// Type is a matrix → Int32 vector → a.
func (op *CrossEntropyOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), ids(), a) }

// InferShape returns the scalar shape ().
func (op *CrossEntropyOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 2)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "logits", s[0], op.N, op.V),
		wantShape(op, "targets", s[1], op.N),
	); err != nil {
		return nil, err
	}
	return tensor.ScalarShape(), nil
}

// Do is not supported: see ErrNotVM.
func (op *CrossEntropyOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *CrossEntropyOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *CrossEntropyOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *CrossEntropyOp) String() string { return fmt.Sprintf("CrossEntropy{N=%d,V=%d}", op.N, op.V) }

// DiffWRT: the logits, not the targets.
func (op *CrossEntropyOp) DiffWRT(n int) []bool { return []bool{true, false} }

// SymDiff returns CrossEntropyGrad(dloss, logits, targets) for the logits.
func (op *CrossEntropyOp) SymDiff(in G.Nodes, out, dloss *G.Node) (G.Nodes, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want 2", op, len(in))
	}
	d, err := G.ApplyOp(&CrossEntropyBackwardOp{opBase: op.sub("logits"), N: op.N, V: op.V}, dloss, in[0], in[1])
	if err != nil {
		return nil, err
	}
	return G.Nodes{d, nil}, nil
}

// Run is Kernels.CrossEntropy, its per-row losses in workspace lent for
// the call (cuda.CrossEntropyScratchLen).
func (op *CrossEntropyOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.Scratch(cuda.CrossEntropyScratchLen(op.N), func(s *cuda.Buffer) error {
		return x.K.CrossEntropy(out, a[0], a[1], s, op.N, op.V)
	})
}

// Statistic: the loss is an fp32 scalar, not an activation.
func (op *CrossEntropyOp) Statistic() bool { return true }

// CrossEntropyBackwardOp is the logits' gradient (N, V) of the mean
// cross-entropy, from dloss (the scalar gradient of the loss: the loss
// scale), logits (N, V) and targets Int32 (N): dlogits =
// (softmax(logits) - onehot(targets))·dloss/N. Lowered to
// Kernels.CrossEntropyBackward.
type CrossEntropyBackwardOp struct {
	opBase
	N, V int
}

// Arity is 3: dloss, logits, targets.
func (op *CrossEntropyBackwardOp) Arity() int { return 3 }

// Type is a → a matrix → Int32 vector → a matrix.
func (op *CrossEntropyBackwardOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(a, tt(2, a), ids(), tt(2, a))
}

// InferShape returns (N, V).
func (op *CrossEntropyBackwardOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 3)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "dloss", s[0]),
		wantShape(op, "logits", s[1], op.N, op.V),
		wantShape(op, "targets", s[2], op.N),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, op.V}, nil
}

// Do is not supported: see ErrNotVM.
func (op *CrossEntropyBackwardOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *CrossEntropyBackwardOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *CrossEntropyBackwardOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *CrossEntropyBackwardOp) String() string {
	return fmt.Sprintf("CrossEntropyBackward{N=%d,V=%d}", op.N, op.V)
}

// Run is Kernels.CrossEntropyBackward.
func (op *CrossEntropyBackwardOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.CrossEntropyBackward(out, a[0], a[1], a[2], op.N, op.V)
}
