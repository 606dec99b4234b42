package model

// The cross-entropy family: the mean loss over rows and the gradient of the logits.

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"trainmem/cuda"
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

// signature: logits (N, V), targets (N) token ids → a scalar.
func (op *CrossEntropyOp) signature() signature {
	return signature{
		args: []param{arg("logits", op.N, op.V), tokenArg("targets", op.N)},
		out:  result(),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *CrossEntropyOp) String() string { return fmt.Sprintf("CrossEntropy{N=%d,V=%d}", op.N, op.V) }

// DiffWRT: the logits, not the targets.
func (op *CrossEntropyOp) DiffWRT(n int) []bool { return []bool{true, false} }

// SymDiff returns CrossEntropyGrad(dloss, logits, targets) for the logits.
func (op *CrossEntropyOp) SymDiff(in G.Nodes, out, dloss *G.Node) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	d, err := applyOp(op.sub("logits", &CrossEntropyBackwardOp{N: op.N, V: op.V}), dloss, in[0], in[1])
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

// signature: dloss a scalar, logits (N, V), targets (N) token ids → (N, V).
func (op *CrossEntropyBackwardOp) signature() signature {
	return signature{
		args: []param{arg("dloss"), arg("logits", op.N, op.V), tokenArg("targets", op.N)},
		out:  result(op.N, op.V),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *CrossEntropyBackwardOp) String() string {
	return fmt.Sprintf("CrossEntropyBackward{N=%d,V=%d}", op.N, op.V)
}

// Run is Kernels.CrossEntropyBackward.
func (op *CrossEntropyBackwardOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.CrossEntropyBackward(out, a[0], a[1], a[2], op.N, op.V)
}
