package cuda

// The rotary family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/rope.go and cuda/gpu/rope.go implement it).
//
// Rotary position embedding (Su et al. 2021, "RoFormer"; LLaMA's) rotates
// each head's query and key channels by angles that grow with the
// position, in the pairing of Hugging Face's rotate_half (GPT-NeoX's): the
// head's channel i < hs/2 with channel i + hs/2, by t·θ^(-2i/hs) at
// position t. The angles are computed in the kernel, in float64, from t, i
// and θ: no table is kept.

// RoPEKernels are the rotary family: the rotation and its inverse, which
// is its gradient.
type RoPEKernels interface {
	// RoPE: for x, y (B·T, W) rows [q | k | v] of NH query heads and KV
	// key and value heads of hs = C/NH channels (W = QKVWidth(C, NH, KV);
	// AttentionKernels), y's q and k are x's rotated (a' = a·cos − b·sin,
	// b' = b·cos + a·sin for a = channel i, b = channel i + hs/2 of a
	// head, angle t·theta^(-2i/hs), t = row mod T) and y's v is x's.
	RoPE(y, x *Buffer, B, T, C, NH, KV int, theta float32) error
	// RoPEBackward: dx = the rotation by the opposite angles of dy (the
	// rotation's transpose), v's gradient passed through.
	RoPEBackward(dx, dy *Buffer, B, T, C, NH, KV int, theta float32) error
}

func (Checks) RoPE(y, x *Buffer, B, T, C, NH, KV int, theta float32) error {
	return checkRoPE("RoPE", "y", y, "x", x, B, T, C, NH, KV, theta)
}

func (Checks) RoPEBackward(dx, dy *Buffer, B, T, C, NH, KV int, theta float32) error {
	return checkRoPE("RoPEBackward", "dx", dx, "dy", dy, B, T, C, NH, KV, theta)
}

func checkRoPE(kernel, outName string, out *Buffer, inName string, in *Buffer, B, T, C, NH, KV int, theta float32) error {
	c := check(kernel)
	c.heads(B, T, C, NH, KV)
	if c.err == nil && (C/NH)%2 != 0 {
		c.fail("C = %d over NH = %d heads: the head size must be even", C, NH)
	}
	if c.err == nil && !(theta > 1) {
		c.fail("theta is %g, want > 1", theta)
	}
	W := QKVWidth(C, NH, KV)
	c.floats(outName, out, B*T*W, "B·T·W")
	c.floats(inName, in, B*T*W, "B·T·W")
	c.disjoint(outName, out, inName, in)
	return c.err
}
