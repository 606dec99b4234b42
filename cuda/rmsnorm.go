package cuda

// The RMSNorm family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/rmsnorm.go and cuda/gpu/rmsnorm.go implement it).
//
// RMSNorm (Zhang and Sennrich 2019, as LLaMA uses it) scales each row by the
// reciprocal of its root mean square and a gain; it has no mean and no bias:
// y = x·rstd·w, rstd = 1/sqrt(mean_c(x²) + eps).

// RMSNormKernels are the RMSNorm family: the row statistic, the
// normalisation and the gradients of its input and gain.
type RMSNormKernels interface {
	// RMSNormStats writes stats (F32, or F64 for fp64 runs; N) = per row
	// 1/sqrt(mean_c(x²) + eps), the sum of squares in float64.
	RMSNormStats(stats, x *Buffer, N, C int, eps float32) error
	// RMSNorm: y = x·rstd·w, with stats from RMSNormStats.
	RMSNorm(y, x, stats, w *Buffer, N, C int) error
	// RMSNormBackwardX: dx = rstd·(g - xhat·mean_c(g·xhat)), g = dy·w,
	// xhat = x·rstd.
	RMSNormBackwardX(dx, dy, x, stats, w *Buffer, N, C int) error
	// RMSNormBackwardW: dw[c] = Σ_i dy[i, c]·xhat[i, c].
	RMSNormBackwardW(dw, dy, x, stats *Buffer, N, C int) error
}

func (Checks) RMSNormStats(stats, x *Buffer, N, C int, eps float32) error {
	c := check("RMSNormStats")
	c.positive("N", N, "C", C)
	c.stats(stats, N, 1)
	c.rows(N, C, "x", x)
	c.eps(eps)
	return c.err
}

func (Checks) RMSNorm(y, x, stats, w *Buffer, N, C int) error {
	c := check("RMSNorm")
	c.positive("N", N, "C", C)
	c.rows(N, C, "y", y, "x", x)
	c.stats(stats, N, 1)
	c.channels(C, "w", w)
	return c.err
}

func (Checks) RMSNormBackwardX(dx, dy, x, stats, w *Buffer, N, C int) error {
	c := check("RMSNormBackwardX")
	c.positive("N", N, "C", C)
	c.rows(N, C, "dx", dx, "dy", dy, "x", x)
	c.stats(stats, N, 1)
	c.channels(C, "w", w)
	return c.err
}

func (Checks) RMSNormBackwardW(dw, dy, x, stats *Buffer, N, C int) error {
	c := check("RMSNormBackwardW")
	c.positive("N", N, "C", C)
	c.channels(C, "dw", dw)
	c.rows(N, C, "dy", dy, "x", x)
	c.stats(stats, N, 1)
	return c.err
}
