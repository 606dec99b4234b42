package cuda

// The layer-norm family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/layernorm.go and cuda/gpu/layernorm.go implement it).

// LayerNormKernels are the layer-norm family: the row statistics, the
// normalisation and the gradients of its input and gain.
type LayerNormKernels interface {
	// LayerNormStats writes stats (F32, or F64 for fp64 runs; N×2) = per row
	// (mean, 1/sqrt(var+eps)), var the biased variance over C.
	LayerNormStats(stats, x *Buffer, N, C int, eps float32) error
	// LayerNorm: y = (x - mean)·rstd·w + b, with stats from LayerNormStats.
	LayerNorm(y, x, stats, w, b *Buffer, N, C int) error
	// LayerNormBackwardX: dx = rstd·(g - mean_c(g) - xhat·mean_c(g·xhat)),
	// g = dy·w, xhat = (x - mean)·rstd.
	LayerNormBackwardX(dx, dy, x, stats, w *Buffer, N, C int) error
	// LayerNormBackwardW: dw[c] = Σ_i dy[i, c]·xhat[i, c].
	LayerNormBackwardW(dw, dy, x, stats *Buffer, N, C int) error
}

// stats checks layer-norm statistics: fp32 or fp64, a (mean, rstd) pair
// for each of N rows.
func (c *checker) stats(b *Buffer, N int) {
	c.f32or64("stats", b)
	c.length("stats", b, 2*N, "2·N")
}

func (Checks) LayerNormStats(stats, x *Buffer, N, C int, eps float32) error {
	c := check("LayerNormStats")
	c.positive("N", N, "C", C)
	c.stats(stats, N)
	c.floats("x", x, N*C, "N·C")
	c.finite("eps", eps)
	if c.err == nil && eps < 0 {
		c.fail("eps is %g, want ≥ 0", eps)
	}
	return c.err
}

func (Checks) LayerNorm(y, x, stats, w, b *Buffer, N, C int) error {
	c := check("LayerNorm")
	c.positive("N", N, "C", C)
	c.floats("y", y, N*C, "N·C")
	c.floats("x", x, N*C, "N·C")
	c.stats(stats, N)
	c.floats("w", w, C, "C")
	c.floats("b", b, C, "C")
	return c.err
}

func (Checks) LayerNormBackwardX(dx, dy, x, stats, w *Buffer, N, C int) error {
	c := check("LayerNormBackwardX")
	c.positive("N", N, "C", C)
	c.floats("dx", dx, N*C, "N·C")
	c.floats("dy", dy, N*C, "N·C")
	c.floats("x", x, N*C, "N·C")
	c.stats(stats, N)
	c.floats("w", w, C, "C")
	return c.err
}

func (Checks) LayerNormBackwardW(dw, dy, x, stats *Buffer, N, C int) error {
	c := check("LayerNormBackwardW")
	c.positive("N", N, "C", C)
	c.floats("dw", dw, C, "C")
	c.floats("dy", dy, N*C, "N·C")
	c.floats("x", x, N*C, "N·C")
	c.stats(stats, N)
	return c.err
}
