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

// SymDiff returns CrossEntropyBackward(dloss, logits, targets) for the logits.
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

// The vocabulary-parallel cross entropy (Megatron-LM's, tensor.go): a
// tensor-parallel rank holds its part of the logits, the V columns from
// id Lo of a vocabulary of Vocab, and no rank holds them all; the rows'
// maxima, sums of exponentials and target logits are reduced over the
// tensor group instead.

// CrossEntropyStatsOp is the row statistics (3, N) of a part of the logits
// (N, V), reduced over the tensor group: each row's largest logit over the
// whole vocabulary (Kernels.CrossEntropyPartMax, then an all-reduce of the
// maxima), its sum of exponentials after that shift and its target's logit
// (Kernels.CrossEntropyPartSums, then an all-reduce of both). Kept for
// backward: it is what CrossEntropyPartBackwardOp reads in place of the
// other ranks' logits. Not differentiable: CrossEntropyPartOp marks its
// input non-differentiable.
type CrossEntropyStatsOp struct {
	opBase
	noGradient
	N, V, Lo, Vocab int
}

// signature: logits (N, V), targets (N) token ids → (3, N).
func (op *CrossEntropyStatsOp) signature() signature {
	return signature{
		args: []param{arg("logits", op.N, op.V), tokenArg("targets", op.N)},
		out:  result(3, op.N),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *CrossEntropyStatsOp) String() string {
	return fmt.Sprintf("CrossEntropyStats{N=%d,V=%d,Lo=%d,Vocab=%d}", op.N, op.V, op.Lo, op.Vocab)
}

// Run is the two partial statistics and their reductions.
func (op *CrossEntropyStatsOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	if err := x.hasTensor(op); err != nil {
		return err
	}
	if err := x.K.CrossEntropyPartMax(out, a[0], op.N, op.V); err != nil {
		return err
	}
	if err := x.Tensor.AllReduceMax(out.View(0, op.N)); err != nil {
		return err
	}
	if err := x.K.CrossEntropyPartSums(out, a[0], a[1], op.N, op.V, cuda.VocabPart{Lo: op.Lo, V: op.Vocab}); err != nil {
		return err
	}
	return x.allReduce(op, out.View(op.N, 2*op.N))
}

// Statistic: the rows' statistics are fp32 bookkeeping.
func (op *CrossEntropyStatsOp) Statistic() bool { return true }

// CrossEntropyPartOp is the mean cross entropy of a part of the logits
// (N, V), from the rows' reduced statistics (CrossEntropyStatsOp): the
// mean of log sum + max - target logit, the same scalar on every rank.
// Lowered to Kernels.CrossEntropyPartLoss. Kept for backward: the logits
// part, the targets and the statistics. Differentiable in the logits.
type CrossEntropyPartOp struct {
	opBase
	N, V, Lo, Vocab int
}

// signature: logits (N, V), targets (N) token ids, stats (3, N) → a scalar.
func (op *CrossEntropyPartOp) signature() signature {
	return signature{
		args: []param{arg("logits", op.N, op.V), tokenArg("targets", op.N), arg("stats", 3, op.N)},
		out:  result(),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *CrossEntropyPartOp) String() string {
	return fmt.Sprintf("CrossEntropyPart{N=%d,V=%d,Lo=%d,Vocab=%d}", op.N, op.V, op.Lo, op.Vocab)
}

// DiffWRT: the logits, not the targets or the statistics.
func (op *CrossEntropyPartOp) DiffWRT(n int) []bool { return []bool{true, false, false} }

// SymDiff returns CrossEntropyPartBackward(dloss, logits, targets, stats)
// for the logits.
func (op *CrossEntropyPartOp) SymDiff(in G.Nodes, out, dloss *G.Node) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	d, err := applyOp(op.sub("logits", &CrossEntropyPartBackwardOp{N: op.N, V: op.V, Lo: op.Lo, Vocab: op.Vocab}), dloss, in[0], in[1], in[2])
	if err != nil {
		return nil, err
	}
	return G.Nodes{d, nil, nil}, nil
}

// Run is Kernels.CrossEntropyPartLoss.
func (op *CrossEntropyPartOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.CrossEntropyPartLoss(out, a[2], op.N)
}

// Statistic: the loss is an fp32 scalar, not an activation.
func (op *CrossEntropyPartOp) Statistic() bool { return true }

// CrossEntropyPartBackwardOp is a logits part's gradient (N, V) from dloss
// (the loss scale), the part, the targets and the reduced statistics:
// (exp(logits - max)/sum - onehot(targets - Lo))·dloss/N. Lowered to
// Kernels.CrossEntropyPartBackward.
type CrossEntropyPartBackwardOp struct {
	opBase
	N, V, Lo, Vocab int
}

// signature: dloss a scalar, logits (N, V), targets (N) token ids, stats
// (3, N) → (N, V).
func (op *CrossEntropyPartBackwardOp) signature() signature {
	return signature{
		args: []param{arg("dloss"), arg("logits", op.N, op.V), tokenArg("targets", op.N), arg("stats", 3, op.N)},
		out:  result(op.N, op.V),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *CrossEntropyPartBackwardOp) String() string {
	return fmt.Sprintf("CrossEntropyPartBackward{N=%d,V=%d,Lo=%d,Vocab=%d}", op.N, op.V, op.Lo, op.Vocab)
}

// Run is Kernels.CrossEntropyPartBackward.
func (op *CrossEntropyPartBackwardOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.CrossEntropyPartBackward(out, a[0], a[1], a[2], a[3], op.N, op.V, cuda.VocabPart{Lo: op.Lo, V: op.Vocab})
}

// Specials: an exponential a logit, forward (the softmax's sum) and
// backward (the softmax again); the vocabulary-parallel statistics and
// backward over their part of it (the loss op reads the statistics only).
func (op *CrossEntropyOp) Specials() float64         { return float64(op.N) * float64(op.V) }
func (op *CrossEntropyBackwardOp) Specials() float64 { return float64(op.N) * float64(op.V) }
func (op *CrossEntropyStatsOp) Specials() float64    { return float64(op.N) * float64(op.V) }
func (op *CrossEntropyPartBackwardOp) Specials() float64 {
	return float64(op.N) * float64(op.V)
}
