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

func (Checks) LayerNormStats(stats, x *Buffer, N, C int, eps float32) error {
	c := check("LayerNormStats")
	c.positive("N", N, "C", C)
	c.stats(stats, N, 2)
	c.rows(N, C, "x", x)
	c.eps(eps)
	return c.err
}

func (Checks) LayerNorm(y, x, stats, w, b *Buffer, N, C int) error {
	c := check("LayerNorm")
	c.positive("N", N, "C", C)
	c.rows(N, C, "y", y, "x", x)
	c.stats(stats, N, 2)
	c.channels(C, "w", w, "b", b)
	return c.err
}

func (Checks) LayerNormBackwardX(dx, dy, x, stats, w *Buffer, N, C int) error {
	c := check("LayerNormBackwardX")
	c.positive("N", N, "C", C)
	c.rows(N, C, "dx", dx, "dy", dy, "x", x)
	c.stats(stats, N, 2)
	c.channels(C, "w", w)
	return c.err
}

func (Checks) LayerNormBackwardW(dw, dy, x, stats *Buffer, N, C int) error {
	c := check("LayerNormBackwardW")
	c.positive("N", N, "C", C)
	c.channels(C, "dw", dw)
	c.rows(N, C, "dy", dy, "x", x)
	c.stats(stats, N, 2)
	return c.err
}
