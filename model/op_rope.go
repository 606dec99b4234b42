package model

// The rotary family: rotary position embedding of the queries and keys,
// and its gradient.

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"trainmem/cuda"
)

// RoPEOp rotates the queries and keys of qkv (B·T, W), rows [q | k | v]
// of NH query heads and KV key and value heads, by their positions (Kernels.RoPE: rotate_half's pairing,
// angle t·Theta^(-2i/hs)); v passes through. Its angles are computed in
// the kernel, so it keeps no table.
//
// Kept for backward: nothing (the rotation is linear: its gradient is the
// inverse rotation of dy). Differentiable in qkv.
type RoPEOp struct {
	opBase
	AttentionShape         // its KV key heads rotated after the NH query heads
	Theta          float32 // the rotary base θ
}

// signature: qkv (B·T, W) → (B·T, W).
func (op *RoPEOp) signature() signature {
	return signature{
		args: []param{op.qkv("qkv")},
		out:  result(op.B*op.T, op.QKVWidth()),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *RoPEOp) String() string {
	return op.name("RoPE", fmt.Sprintf(",Theta=%g", op.Theta))
}

// DiffWRT: qkv.
func (op *RoPEOp) DiffWRT(n int) []bool { return []bool{true} }

// SymDiff returns RoPEBackward(dy).
func (op *RoPEOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	dx, err := applyOp(op.sub("qkv", &RoPEBackwardOp{AttentionShape: op.AttentionShape, Theta: op.Theta}), dy)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx}, nil
}

// Run is Kernels.RoPE.
func (op *RoPEOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.RoPE(out, a[0], op.B, op.T, op.C, op.NH, op.KV, op.Theta)
}

// RoPEBackwardOp is qkv's gradient (B·T, W) of RoPE from dy (B·T, W):
// the rotation by the opposite angles. Lowered to Kernels.RoPEBackward.
type RoPEBackwardOp struct {
	opBase
	AttentionShape         // its KV key heads rotated after the NH query heads
	Theta          float32 // the rotary base θ
}

// signature: dy (B·T, W) → (B·T, W).
func (op *RoPEBackwardOp) signature() signature {
	return signature{
		args: []param{op.qkv("dy")},
		out:  result(op.B*op.T, op.QKVWidth()),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *RoPEBackwardOp) String() string {
	return op.name("RoPEBackward", fmt.Sprintf(",Theta=%g", op.Theta))
}

// Run is Kernels.RoPEBackward.
func (op *RoPEBackwardOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	return x.K.RoPEBackward(out, a[0], op.B, op.T, op.C, op.NH, op.KV, op.Theta)
}

// Specials: the T positions' angles, a power, a sine and a cosine each
// of a head's hs/2 pairs, once a call (the same for every sequence and
// head).
func (op *RoPEOp) Specials() float64         { return ropeSpecials(op.AttentionShape) }
func (op *RoPEBackwardOp) Specials() float64 { return ropeSpecials(op.AttentionShape) }

func ropeSpecials(sh AttentionShape) float64 {
	return 3 * float64(sh.T) * float64(sh.C/sh.NH/2)
}
