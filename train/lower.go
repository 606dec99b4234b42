package train

import (
	"fmt"
	"strings"

	"gorgonia.org/gorgonia"

	"trainmem/cuda"
	"trainmem/model"
)

// kernel is an op lowered to the device: it runs the op's kernels with out
// as the op's output buffer and a its arguments in the op's order.
type kernel func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error

// lower maps an op to its kernels, once, when the schedule is compiled; an
// op the executor cannot run is an error then, not in the middle of a step.
// Each case is the op's whole meaning on the device; the kernels are
// documented in package cuda.
func lower(op gorgonia.Op) (kernel, error) {
	switch op := op.(type) {
	case *model.EmbeddingOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.dev.Embedding(out, a[0], a[1], a[2], op.B, op.T, op.C)
		}, nil
	case *model.LNStatsOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.dev.LayerNormStats(out, a[0], op.N, op.C, op.Eps)
		}, nil
	case *model.LayerNormOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.dev.LayerNorm(out, a[0], a[1], a[2], a[3], op.N, op.C)
		}, nil
	case *model.LinearOp: // y = x·Wᵀ (+ b)
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			if err := t.dev.MatMul(cuda.MatMul{TransB: true, M: op.N, N: op.Out, K: op.In, A: a[0], B: a[1], C: out, Alpha: 1}); err != nil {
				return err
			}
			if op.Bias {
				return t.dev.AddBias(out, a[2], op.N, op.Out)
			}
			return nil
		}, nil
	case *model.AttnProbsOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.dev.AttentionProbs(out, a[0], op.B, op.T, op.C, op.NH)
		}, nil
	case *model.AttnOutOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.dev.AttentionOut(out, a[0], a[1], op.B, op.T, op.C, op.NH)
		}, nil
	case *model.GELUOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error { return t.dev.GELU(out, a[0]) }, nil
	case *model.AddOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error { return t.dev.Add(out, a[0], a[1]) }, nil
	case *model.CrossEntropyOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.withScratch(cuda.CrossEntropyScratchLen(op.N), func(s *cuda.Buffer) error {
				return t.dev.CrossEntropy(out, a[0], a[1], s, op.N, op.V)
			})
		}, nil

	case *model.EmbeddingGradTokensOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.dev.EmbeddingBackwardTokens(out, a[0], a[1], op.B, op.T, op.C)
		}, nil
	case *model.EmbeddingGradPositionsOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.dev.EmbeddingBackwardPositions(out, a[0], op.B, op.T, op.C)
		}, nil
	case *model.LayerNormGradXOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.dev.LayerNormBackwardX(out, a[0], a[1], a[2], a[3], op.N, op.C)
		}, nil
	case *model.LayerNormGradWOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.dev.LayerNormBackwardW(out, a[0], a[1], a[2], op.N, op.C)
		}, nil
	case *model.SumRowsOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.dev.SumRows(out, a[0], op.N, op.C)
		}, nil
	case *model.LinearGradXOp: // dx = dy·W
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.dev.MatMul(cuda.MatMul{M: op.N, N: op.In, K: op.Out, A: a[0], B: a[1], C: out, Alpha: 1})
		}, nil
	case *model.LinearGradWOp: // dW = dyᵀ·x
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.dev.MatMul(cuda.MatMul{TransA: true, M: op.Out, N: op.In, K: op.N, A: a[0], B: a[1], C: out, Alpha: 1})
		}, nil
	case *model.AttnGradOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.withScratch(cuda.AttentionScratchLen(op.T, op.NH), func(s *cuda.Buffer) error {
				return t.dev.AttentionBackward(out, a[0], a[1], a[2], s, op.B, op.T, op.C, op.NH)
			})
		}, nil
	case *model.GELUGradOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error { return t.dev.GELUBackward(out, a[0], a[1]) }, nil
	case *model.CrossEntropyGradOp:
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
			return t.dev.CrossEntropyBackward(out, a[0], a[1], a[2], op.N, op.V)
		}, nil
	}
	if isGradientSum(op) {
		return func(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error { return t.dev.Add(out, a[0], a[1]) }, nil
	}
	return nil, fmt.Errorf("train: %T %v is not an op trainmem's executor can run", op, op)
}

// withScratch lends a kernel workspace from the allocator for one call.
func (t *Trainer) withScratch(n int, f func(*cuda.Buffer) error) error {
	s, err := t.dev.Alloc(cuda.Workspace, t.st.state, n)
	if err != nil {
		return err
	}
	defer t.dev.Free(s)
	return f(s)
}

// isGradientSum recognises gorgonia's elementwise "+" that Backpropagate
// inserts to sum a value's gradient terms (ReduceAdd). Its type is not
// exported: it is recognised by name.
func isGradientSum(op gorgonia.Op) bool {
	return fmt.Sprintf("%T", op) == "gorgonia.elemBinOp" && strings.HasPrefix(op.String(), "+ ")
}

// isStatistic reports whether an op's output is fp32 bookkeeping rather
// than an activation (layer-norm statistics, the loss).
func isStatistic(op gorgonia.Op) bool {
	switch op.(type) {
	case *model.LNStatsOp, *model.CrossEntropyOp:
		return true
	}
	return false
}

// isAttentionProbs reports whether an op makes attention probabilities, the
// values selective checkpointing drops.
func isAttentionProbs(op gorgonia.Op) bool {
	_, ok := op.(*model.AttnProbsOp)
	return ok
}
