package cuda

// The attention family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/attention.go and cuda/gpu/attention.go implement it).

// AttentionKernels are the attention family: the causal softmax of the
// scores, its product with the values and the gradient of qkv.
type AttentionKernels interface {
	// AttentionProbs: for qkv (B·T, 3C) laid out as [q | k | v], each C wide
	// and split into NH heads of C/NH channels, p (B, NH, T, T) is the causal
	// softmax of q·kᵀ/sqrt(C/NH): row t has T-1-t trailing exact zeros.
	AttentionProbs(p, qkv *Buffer, B, T, C, NH int) error
	// AttentionOut: y (B·T, C), head h's channels = p[b, h]·v[b, h].
	AttentionOut(y, qkv, p *Buffer, B, T, C, NH int) error
	// AttentionBackward: dqkv (B·T, 3C), the gradient of AttentionOut through
	// both q·kᵀ (via p) and v. scratch is F32 (or F64) with at least
	// AttentionScratchLen(T, NH) elements.
	AttentionBackward(dqkv, dy, qkv, p, scratch *Buffer, B, T, C, NH int) error
}

// AttentionScratchLen is the F32 scratch, in elements, that AttentionBackward
// needs: one batch element's score gradients, NH·T·T.
func AttentionScratchLen(T, NH int) int { return NH * T * T }

func (c *checker) heads(B, T, C, NH int) {
	c.positive("B", B, "T", T, "C", C, "NH", NH)
	if c.err == nil && C%NH != 0 {
		c.fail("C = %d is not a multiple of NH = %d", C, NH)
	}
}

func (Checks) AttentionProbs(p, qkv *Buffer, B, T, C, NH int) error {
	c := check("AttentionProbs")
	c.heads(B, T, C, NH)
	c.floats("p", p, B*NH*T*T, "B·NH·T·T")
	c.floats("qkv", qkv, B*T*3*C, "B·T·3C")
	c.disjoint("p", p, "qkv", qkv)
	return c.err
}

func (Checks) AttentionOut(y, qkv, p *Buffer, B, T, C, NH int) error {
	c := check("AttentionOut")
	c.heads(B, T, C, NH)
	c.floats("y", y, B*T*C, "B·T·C")
	c.floats("qkv", qkv, B*T*3*C, "B·T·3C")
	c.floats("p", p, B*NH*T*T, "B·NH·T·T")
	c.disjoint("y", y, "qkv", qkv)
	c.disjoint("y", y, "p", p)
	return c.err
}

func (Checks) AttentionBackward(dqkv, dy, qkv, p, scratch *Buffer, B, T, C, NH int) error {
	c := check("AttentionBackward")
	c.heads(B, T, C, NH)
	c.floats("dqkv", dqkv, B*T*3*C, "B·T·3C")
	c.floats("dy", dy, B*T*C, "B·T·C")
	c.floats("qkv", qkv, B*T*3*C, "B·T·3C")
	c.floats("p", p, B*NH*T*T, "B·NH·T·T")
	c.f32or64("scratch", scratch)
	c.atLeast("scratch", scratch, AttentionScratchLen(T, NH), "NH·T·T")
	for _, in := range []struct {
		name string
		b    *Buffer
	}{{"dy", dy}, {"qkv", qkv}, {"p", p}, {"scratch", scratch}} {
		c.disjoint("dqkv", dqkv, in.name, in.b)
	}
	c.disjoint("scratch", scratch, "dy", dy)
	c.disjoint("scratch", scratch, "qkv", qkv)
	c.disjoint("scratch", scratch, "p", p)
	return c.err
}
