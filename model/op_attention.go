package model

// The attention family: causal probabilities, their product with the values, and the gradient of qkv.

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"trainmem/cuda"
)

// AttentionShape is what every attention op (and the rotary one) is made
// for: B sequences of T rows, the queries' C channels in NH heads of
// hd = C/NH, and KV key and value heads of hd each, shared by NH/KV query
// heads (grouped-query attention; cuda.AttentionKernels).
type AttentionShape struct {
	B, T, C, NH int
	KV          int
}

// QKVWidth is the width of the rows of qkv, [q | k | v] (cuda.QKVWidth).
func (a AttentionShape) QKVWidth() int { return cuda.QKVWidth(a.C, a.NH, a.KV) }

// qkv is an op's qkv argument (B·T, W).
func (a AttentionShape) qkv(name string) param { return arg(name, a.B*a.T, a.QKVWidth()) }

// name is an op's String: its kind and every field of the shape, then the
// op's own (extra, "" for none).
func (a AttentionShape) name(kind, extra string) string {
	return fmt.Sprintf("%s{B=%d,T=%d,C=%d,NH=%d,KV=%d%s}", kind, a.B, a.T, a.C, a.NH, a.KV, extra)
}

// AttentionProbsOp computes causal attention probabilities from qkv (B·T, W),
// laid out [q | k | v]: q C wide, NH query heads of hd = C/NH channels, k
// and v KV heads of hd each, shared by NH/KV query heads (grouped-query
// attention; W = cuda.QKVWidth). P (B, NH, T, T) is the softmax of
// q·kᵀ/sqrt(hd) over keys 0..t for query t (row t has T-1-t trailing exact
// zeros). Lowered to Kernels.AttentionProbs.
//
// Its output is a node of its own so that AttentionOut and its backward op
// read it instead of recomputing it; the op is not differentiable
// (AttentionOut marks P non-differentiable and AttentionBackward
// differentiates through P itself).
type AttentionProbsOp struct {
	opBase
	noGradient // AttentionBackward differentiates through the probabilities
	AttentionShape
}

// signature: qkv (B*T, W) → (B, NH, T, T).
func (op *AttentionProbsOp) signature() signature {
	return signature{
		check: func() error { return checkHeads(op, op.C, op.NH, op.KV) },
		args:  []param{op.qkv("qkv")},
		out:   result(op.B, op.NH, op.T, op.T),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *AttentionProbsOp) String() string {
	return op.name("AttentionProbs", "")
}

// Run is Kernels.AttentionProbs.
func (op *AttentionProbsOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.AttentionProbs(out, a[0], op.B, op.T, op.C, op.NH, op.KV)
}

// DroppedBySelective: selective checkpointing (Korthikanti et al.) drops
// the attention probabilities and recomputes them.
func (op *AttentionProbsOp) DroppedBySelective() bool { return true }

// AttentionOutOp is the attention output y (B·T, C): head h's channels of row
// b·T+t are Σ_s P[b, h, t, s]·v[b·T+s, head h/(NH/KV)], for qkv (B·T, W) and P
// (B, NH, T, T) from AttentionProbsOp. Lowered to Kernels.AttentionOut.
//
// Kept for backward: qkv (N·W elements) and P (B·NH·T·T), which
// AttentionBackward reads to produce the whole gradient of qkv (through v
// directly and through q and k via P). Differentiable in qkv only.
type AttentionOutOp struct {
	opBase
	AttentionShape
}

// signature: qkv (B*T, W), P (B, NH, T, T) → (B*T, C).
func (op *AttentionOutOp) signature() signature {
	return signature{
		check: func() error { return checkHeads(op, op.C, op.NH, op.KV) },
		args:  []param{op.qkv("qkv"), arg("P", op.B, op.NH, op.T, op.T)},
		out:   result(op.B*op.T, op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *AttentionOutOp) String() string {
	return op.name("AttentionOut", "")
}

// Run is Kernels.AttentionOut.
func (op *AttentionOutOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.AttentionOut(out, a[0], a[1], op.B, op.T, op.C, op.NH, op.KV)
}

// DiffWRT: qkv only.
func (op *AttentionOutOp) DiffWRT(n int) []bool { return []bool{true, false} }

// SymDiff returns AttentionBackward(dy, qkv, P) for qkv and nil for P.
func (op *AttentionOutOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	dqkv, err := applyOp(op.sub("qkv", &AttentionBackwardOp{AttentionShape: op.AttentionShape}), dy, in[0], in[1])
	if err != nil {
		return nil, err
	}
	return G.Nodes{dqkv, nil}, nil
}

// AttentionBackwardOp is qkv's gradient (B·T, W) of AttentionOut, from
// dy (B·T, C), qkv (B·T, W) and P (B, NH, T, T): through v directly and
// through q and k via the softmax. Lowered to Kernels.AttentionBackward,
// which also takes cuda.AttentionScratchLen(T, C, NH, KV) fp32 elements of
// workspace.
type AttentionBackwardOp struct {
	opBase
	AttentionShape
}

// signature: dy (B*T, C), qkv (B*T, W), P (B, NH, T, T) → (B*T, W).
func (op *AttentionBackwardOp) signature() signature {
	return signature{
		check: func() error { return checkHeads(op, op.C, op.NH, op.KV) },
		args:  []param{arg("dy", op.B*op.T, op.C), op.qkv("qkv"), arg("P", op.B, op.NH, op.T, op.T)},
		out:   result(op.B*op.T, op.QKVWidth()),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *AttentionBackwardOp) String() string {
	return op.name("AttentionBackward", "")
}

// Run is Kernels.AttentionBackward, its score gradients in workspace lent
// for the call (cuda.AttentionScratchLen).
func (op *AttentionBackwardOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.Scratch(cuda.AttentionScratchLen(op.T, op.C, op.NH, op.KV), func(s *cuda.Buffer) error {
		return x.K.AttentionBackward(out, a[0], a[1], a[2], s, op.B, op.T, op.C, op.NH, op.KV)
	})
}

// attnProducts are n products of every head's T×T by T×d (or T×d by d×T
// for the scores: the same FLOPs, the T×T output).
func attnProducts(B, T, C, NH int, scores, others int) []cuda.Product {
	bh, t, d := int64(B)*int64(NH), int64(T), int64(C/NH)
	var ps []cuda.Product
	for range scores {
		ps = append(ps, cuda.Product{Batch: bh, M: t, N: t, K: d})
	}
	for range others {
		ps = append(ps, cuda.Product{Batch: bh, M: t, N: d, K: t})
	}
	return ps
}

// Products of the scores, q·kᵀ (T×d by d×T) every head.
func (op *AttentionProbsOp) Products() []cuda.Product {
	return attnProducts(op.B, op.T, op.C, op.NH, 1, 0)
}

// Products of P·v (T×T by T×d) every head.
func (op *AttentionOutOp) Products() []cuda.Product {
	return attnProducts(op.B, op.T, op.C, op.NH, 0, 1)
}

// Products of the backward: dP = dy·vᵀ (a T×T output), dv = Pᵀ·dy, dq =
// dS·k, dk = dSᵀ·q (T×d outputs).
func (op *AttentionBackwardOp) Products() []cuda.Product {
	return attnProducts(op.B, op.T, op.C, op.NH, 1, 3)
}

// FLOPs of the scores q·kᵀ of every head: 2·B·T·T·C (C = NH·head size).
func (op *AttentionProbsOp) FLOPs() float64 {
	return 2 * float64(op.B) * float64(op.T) * float64(op.T) * float64(op.C)
}

// FLOPs of P·v of every head: 2·B·T·T·C.
func (op *AttentionOutOp) FLOPs() float64 {
	return 2 * float64(op.B) * float64(op.T) * float64(op.T) * float64(op.C)
}

// FLOPs of the attention's backward: dP = dy·vᵀ, dv = Pᵀ·dy, dq = dS·k
// and dk = dSᵀ·q, four products of 2·B·T·T·C.
func (op *AttentionBackwardOp) FLOPs() float64 {
	return 8 * float64(op.B) * float64(op.T) * float64(op.T) * float64(op.C)
}

// Specials: the causal softmax's exponential a kept pair of every head.
func (op *AttentionProbsOp) Specials() float64 { return op.causalScores() }
