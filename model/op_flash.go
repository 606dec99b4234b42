package model

// The flash-attention family (cuda/flash.go): the row log-sum-exp of the
// scores, the output of the normalized probabilities, and the gradient of
// qkv, with no T×T tensor kept.

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"trainmem/cuda"
)

// FlashAttentionStatsOp is the log-sum-exp of every causal row of scores
// from qkv (B·T, W) laid out as for AttentionProbsOp: lse (B, NH, T), fp32
// bookkeeping (Statistic). Lowered to Kernels.FlashAttentionStats. Not
// differentiable: FlashAttentionOut marks it so, and the backward reads it.
type FlashAttentionStatsOp struct {
	opBase
	noGradient
	AttentionShape
}

// signature: qkv (B·T, W) → (B, NH, T).
func (op *FlashAttentionStatsOp) signature() signature {
	return signature{
		check: func() error { return checkFlash(op, op.C, op.NH, op.KV) },
		args:  []param{op.qkv("qkv")},
		out:   result(op.B, op.NH, op.T),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *FlashAttentionStatsOp) String() string {
	return op.name("FlashAttentionStats", "")
}

// Run is Kernels.FlashAttentionStats.
func (op *FlashAttentionStatsOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.FlashAttentionStats(out, a[0], op.B, op.T, op.C, op.NH, op.KV)
}

// Statistic: the log-sum-exp is fp32 bookkeeping, as Dao et al. keep it.
func (op *FlashAttentionStatsOp) Statistic() bool { return true }

// FlashAttentionOutOp is the attention output y (B·T, C) of AttentionOutOp,
// from qkv and the log-sum-exp instead of stored probabilities. Lowered to
// Kernels.FlashAttentionOut.
//
// Kept for backward: qkv, the op's own output y and lse, which
// FlashAttentionBackward reads to recompute each probability.
// Differentiable in qkv only.
type FlashAttentionOutOp struct {
	opBase
	AttentionShape
}

// signature: qkv (B·T, W), lse (B, NH, T) → (B·T, C).
func (op *FlashAttentionOutOp) signature() signature {
	return signature{
		check: func() error { return checkFlash(op, op.C, op.NH, op.KV) },
		args:  []param{op.qkv("qkv"), arg("lse", op.B, op.NH, op.T)},
		out:   result(op.B*op.T, op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *FlashAttentionOutOp) String() string {
	return op.name("FlashAttentionOut", "")
}

// Run is Kernels.FlashAttentionOut.
func (op *FlashAttentionOutOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.FlashAttentionOut(out, a[0], a[1], op.B, op.T, op.C, op.NH, op.KV)
}

// DiffWRT: qkv only.
func (op *FlashAttentionOutOp) DiffWRT(n int) []bool { return []bool{true, false} }

// SymDiff returns FlashAttentionBackward(dy, qkv, y, lse) for qkv and nil
// for lse.
func (op *FlashAttentionOutOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	dqkv, err := applyOp(op.sub("qkv", &FlashAttentionBackwardOp{AttentionShape: op.AttentionShape}), dy, in[0], out, in[1])
	if err != nil {
		return nil, err
	}
	return G.Nodes{dqkv, nil}, nil
}

// FlashAttentionBackwardOp is qkv's gradient (B·T, W) of FlashAttentionOut
// from dy (B·T, C), qkv, the output y (B·T, C) and lse (B, NH, T).
// Lowered to Kernels.FlashAttentionBackward, which also takes
// cuda.FlashScratchLen(B, T, NH) fp32 elements of workspace (D).
type FlashAttentionBackwardOp struct {
	opBase
	AttentionShape
}

// signature: dy (B·T, C), qkv (B·T, W), y (B·T, C), lse (B, NH, T) → (B·T, W).
func (op *FlashAttentionBackwardOp) signature() signature {
	return signature{
		check: func() error { return checkFlash(op, op.C, op.NH, op.KV) },
		args:  []param{arg("dy", op.B*op.T, op.C), op.qkv("qkv"), arg("y", op.B*op.T, op.C), arg("lse", op.B, op.NH, op.T)},
		out:   result(op.B*op.T, op.QKVWidth()),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *FlashAttentionBackwardOp) String() string {
	return op.name("FlashAttentionBackward", "")
}

// Run is Kernels.FlashAttentionBackward, D in workspace lent for the call.
func (op *FlashAttentionBackwardOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.Scratch(cuda.FlashScratchLen(op.B, op.T, op.NH), func(s *cuda.Buffer) error {
		return x.K.FlashAttentionBackward(out, a[0], a[1], a[2], a[3], s, op.B, op.T, op.C, op.NH, op.KV)
	})
}

// checkFlash is checkHeads and a head of at most cuda.FlashHeadDimMax.
func checkFlash(op G.Op, c, nh, kv int) error {
	if err := checkHeads(op, c, nh, kv); err != nil {
		return err
	}
	if c/nh > cuda.FlashHeadDimMax {
		return fmt.Errorf("model: %v: heads of %d channels, wider than the flash kernels' %d", op, c/nh, cuda.FlashHeadDimMax)
	}
	return nil
}

// causalPairs is the (query, key) pairs of B causal rows of T, each head's:
// B·T·(T+1)/2, the scores the flash kernels compute.
func causalPairs(B, T int) float64 { return float64(B) * float64(T) * float64(T+1) / 2 }

// FusedAttention marks the flash ops as fused attention kernels.
func (op *FlashAttentionStatsOp) FusedAttention()    {}
func (op *FlashAttentionOutOp) FusedAttention()      {}
func (op *FlashAttentionBackwardOp) FusedAttention() {}

// FLOPs of the log-sum-exp: a score (2 a channel) for every causal pair of
// every head, 2·C·B·T(T+1)/2.
func (op *FlashAttentionStatsOp) FLOPs() float64 { return 2 * float64(op.C) * causalPairs(op.B, op.T) }

// FLOPs of the output: each causal pair's score again and its share of
// p·v, 4·C·B·T(T+1)/2.
func (op *FlashAttentionOutOp) FLOPs() float64 { return 4 * float64(op.C) * causalPairs(op.B, op.T) }

// FLOPs of the backward: D (2·B·T·C), then per causal pair the dQ pass's
// score, dy·v and dS·k (6 a channel) and the dK and dV pass's score, dy·v,
// dS·q and p·dy (8 a channel).
func (op *FlashAttentionBackwardOp) FLOPs() float64 {
	return 14*float64(op.C)*causalPairs(op.B, op.T) + 2*float64(op.B)*float64(op.T)*float64(op.C)
}

// Specials: an exponential a causal pair of every head, in each pass
// (the statistics, the output and the backward recompute them).
func (op *FlashAttentionStatsOp) Specials() float64    { return op.causalScores() }
func (op *FlashAttentionOutOp) Specials() float64      { return op.causalScores() }
func (op *FlashAttentionBackwardOp) Specials() float64 { return op.causalScores() }

// causalScores is the scores a causal mask keeps over every head: B·NH
// pairs (s ≤ t) of T positions.
func (sh AttentionShape) causalScores() float64 { return float64(sh.NH) * causalPairs(sh.B, sh.T) }
