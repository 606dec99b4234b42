package cuda

// The attention family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/attention.go and cuda/gpu/attention.go implement it).

// AttentionKernels are the attention family: the causal softmax of the
// scores, its product with the values and the gradient of qkv.
//
// qkv (B·T, W) rows are laid out [q | k | v]: q is C wide, NH query heads
// of hd = C/NH channels; k and v are KV·hd wide each, KV key and value
// heads (grouped-query attention, Ainslie et al. 2023: KV = NH is
// multi-head attention, 1 multi-query), W = QKVWidth(C, NH, KV). Query
// head h attends with key and value head h/(NH/KV).
type AttentionKernels interface {
	// AttentionProbs: p (B, NH, T, T) is the causal softmax of
	// q·kᵀ/sqrt(hd) of each query head with its key head: row t has T-1-t
	// trailing exact zeros.
	AttentionProbs(p, qkv *Buffer, B, T, C, NH, KV int) error
	// AttentionOut: y (B·T, C), query head h's channels = p[b, h]·v[b, h/(NH/KV)].
	AttentionOut(y, qkv, p *Buffer, B, T, C, NH, KV int) error
	// AttentionBackward: dqkv (B·T, W), the gradient of AttentionOut through
	// both q·kᵀ (via p) and v, a key or value head's summed over the query
	// heads of its group. scratch is F32 (or F64) with at least
	// AttentionScratchLen(T, C, NH, KV) elements.
	AttentionBackward(dqkv, dy, qkv, p, scratch *Buffer, B, T, C, NH, KV int) error
}

// QKVWidth is the width W of a qkv row: C query channels and the KV key
// and value heads of C/NH channels each, C + 2·KV·C/NH (3C when KV = NH).
func QKVWidth(C, NH, KV int) int { return C + 2*KV*(C/NH) }

// AttentionScratchLen is the F32 scratch, in elements, that AttentionBackward
// needs: one batch element's score gradients, NH·T·T, and with grouped
// heads (KV < NH) room for one batch element's key or value gradients,
// T·KV·C/NH, which a group's query heads sum into in fp32 before they are
// rounded once to 16-bit storage.
func AttentionScratchLen(T, C, NH, KV int) int {
	n := NH * T * T
	if KV < NH {
		n += T * KV * (C / NH)
	}
	return n
}

// heads checks a layout of NH query heads over C channels and KV key and
// value heads shared by NH/KV query heads each.
func (c *checker) heads(B, T, C, NH, KV int) {
	c.positive("B", B, "T", T, "C", C, "NH", NH, "KV", KV)
	if c.err == nil && C%NH != 0 {
		c.fail("C = %d is not a multiple of NH = %d", C, NH)
	}
	if c.err == nil && NH%KV != 0 {
		c.fail("KV = %d key and value heads do not divide NH = %d query heads", KV, NH)
	}
}

func (Checks) AttentionProbs(p, qkv *Buffer, B, T, C, NH, KV int) error {
	c := check("AttentionProbs")
	c.heads(B, T, C, NH, KV)
	W := QKVWidth(C, NH, KV)
	c.floats("p", p, B*NH*T*T, "B·NH·T·T")
	c.floats("qkv", qkv, B*T*W, "B·T·W")
	c.disjoint("p", p, "qkv", qkv)
	return c.err
}

func (Checks) AttentionOut(y, qkv, p *Buffer, B, T, C, NH, KV int) error {
	c := check("AttentionOut")
	c.heads(B, T, C, NH, KV)
	W := QKVWidth(C, NH, KV)
	c.floats("y", y, B*T*C, "B·T·C")
	c.floats("qkv", qkv, B*T*W, "B·T·W")
	c.floats("p", p, B*NH*T*T, "B·NH·T·T")
	c.disjoint("y", y, "qkv", qkv)
	c.disjoint("y", y, "p", p)
	return c.err
}

func (Checks) AttentionBackward(dqkv, dy, qkv, p, scratch *Buffer, B, T, C, NH, KV int) error {
	c := check("AttentionBackward")
	c.heads(B, T, C, NH, KV)
	c.qkvGrad(dqkv, dy, qkv, B, T, C, NH, KV)
	c.floats("p", p, B*NH*T*T, "B·NH·T·T")
	c.f32or64("scratch", scratch)
	if KV < NH {
		c.atLeast("scratch", scratch, AttentionScratchLen(T, C, NH, KV), "NH·T·T + T·KV·C/NH")
	} else {
		c.atLeast("scratch", scratch, AttentionScratchLen(T, C, NH, KV), "NH·T·T")
	}
	c.disjointFrom("dqkv", dqkv, "dy", dy, "qkv", qkv, "p", p, "scratch", scratch)
	c.disjointFrom("scratch", scratch, "dy", dy, "qkv", qkv, "p", p)
	return c.err
}

// qkvGrad checks what every attention backward takes and makes: qkv's
// gradient dqkv and qkv (B·T·W), and the output's gradient dy (B·T·C).
func (c *checker) qkvGrad(dqkv, dy, qkv *Buffer, B, T, C, NH, KV int) {
	W := QKVWidth(C, NH, KV)
	c.floats("dqkv", dqkv, B*T*W, "B·T·W")
	c.floats("dy", dy, B*T*C, "B·T·C")
	c.floats("qkv", qkv, B*T*W, "B·T·W")
}
