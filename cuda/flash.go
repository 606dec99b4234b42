package cuda

// The flash-attention family of the device contract: its kernels (the
// Kernels interface embeds them), their argument checks (Checks) and what a
// caller must know of them (cuda/host/flash.go and cuda/gpu/flash.go
// implement it).
//
// Flash attention (Dao et al. 2022, "FlashAttention", Algorithms 1 and 2)
// computes causal attention without storing the T×T probabilities: the
// forward pass keeps, per query row and head, the log-sum-exp of its
// scores (LSE, fp32), and the backward pass recomputes each score from q
// and k and each probability as exp(score − LSE). qkv is laid out as for
// AttentionKernels ([q | k | v], NH query heads, KV key and value heads).
//
// The host's kernels take a tile of 64 query (or key) rows of scores at a
// time (BLAS products, in host scratch of 64·T values); the CUDA kernels
// stream one key at a time through a warp's query row, the scores of a row
// never held. Both split the work so that every output has one writer and
// no atomics: the row
// statistics (FlashAttentionStats), the output from exactly normalized
// probabilities (FlashAttentionOut), and the backward's three passes, D =
// rowsum(dO ⊙ O), then dQ by query rows, then dK and dV by key rows (the
// key row's group's query heads and later rows, as FlashAttention-2 splits
// them). The scores are computed twice in the forward pass and twice in
// the backward; the memory is the algorithm's.

// FlashHeadDimMax is the widest head the flash kernels take: the CUDA
// kernels hold a row's head in registers, 8 channels a lane of a warp.
const FlashHeadDimMax = 256

// FlashKernels are the flash-attention family.
type FlashKernels interface {
	// FlashAttentionStats: lse (B, NH, T), fp32 or fp64, the log of Σ over
	// keys s ≤ t of exp(q_t·k_s/sqrt(hd)) for query head h's row t, k the
	// key head of h's group.
	FlashAttentionStats(lse, qkv *Buffer, B, T, C, NH, KV int) error
	// FlashAttentionOut: y (B·T, C), query head h's channels of row t =
	// Σ_{s ≤ t} exp(q_t·k_s/sqrt(hd) − lse[b, h, t])·v_s, the value head of
	// h's group: AttentionOut of the same probabilities, never stored.
	FlashAttentionOut(y, qkv, lse *Buffer, B, T, C, NH, KV int) error
	// FlashAttentionBackward: dqkv (B·T, W), the gradient of
	// FlashAttentionOut through q, k and v, from dy, qkv, the output y and
	// lse. scratch is F32 (or F64) with at least FlashScratchLen(B, T, NH)
	// elements, for D.
	FlashAttentionBackward(dqkv, dy, qkv, y, lse, scratch *Buffer, B, T, C, NH, KV int) error
}

// FlashScratchLen is the scratch, in elements, that FlashAttentionBackward
// needs: D = rowsum(dy ⊙ y) of every query row and head, B·NH·T.
func FlashScratchLen(B, T, NH int) int { return B * NH * T }

// flash checks a flash layout: the attention's, and a head of at most
// FlashHeadDimMax channels.
func (c *checker) flash(B, T, C, NH, KV int) {
	c.heads(B, T, C, NH, KV)
	if c.err == nil && C/NH > FlashHeadDimMax {
		c.fail("heads of %d channels (C = %d over NH = %d): the flash kernels take at most %d", C/NH, C, NH, FlashHeadDimMax)
	}
}

// lse checks the log-sum-exp: fp32 or fp64, one a query row and head.
func (c *checker) lse(b *Buffer, B, T, NH int) {
	c.f32or64("lse", b)
	c.length("lse", b, B*NH*T, "B·NH·T")
}

func (Checks) FlashAttentionStats(lse, qkv *Buffer, B, T, C, NH, KV int) error {
	c := check("FlashAttentionStats")
	c.flash(B, T, C, NH, KV)
	c.lse(lse, B, T, NH)
	c.floats("qkv", qkv, B*T*QKVWidth(C, NH, KV), "B·T·W")
	c.disjoint("lse", lse, "qkv", qkv)
	return c.err
}

func (Checks) FlashAttentionOut(y, qkv, lse *Buffer, B, T, C, NH, KV int) error {
	c := check("FlashAttentionOut")
	c.flash(B, T, C, NH, KV)
	c.floats("y", y, B*T*C, "B·T·C")
	c.floats("qkv", qkv, B*T*QKVWidth(C, NH, KV), "B·T·W")
	c.lse(lse, B, T, NH)
	c.disjoint("y", y, "qkv", qkv)
	c.disjoint("y", y, "lse", lse)
	return c.err
}

func (Checks) FlashAttentionBackward(dqkv, dy, qkv, y, lse, scratch *Buffer, B, T, C, NH, KV int) error {
	c := check("FlashAttentionBackward")
	c.flash(B, T, C, NH, KV)
	c.qkvGrad(dqkv, dy, qkv, B, T, C, NH, KV)
	c.floats("y", y, B*T*C, "B·T·C")
	c.lse(lse, B, T, NH)
	c.f32or64("scratch", scratch)
	c.atLeast("scratch", scratch, FlashScratchLen(B, T, NH), "B·NH·T")
	c.disjointFrom("dqkv", dqkv, "dy", dy, "qkv", qkv, "y", y, "lse", lse, "scratch", scratch)
	c.disjointFrom("scratch", scratch, "dy", dy, "qkv", qkv, "y", y, "lse", lse)
	return c.err
}
