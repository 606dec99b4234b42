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

// rmsStats checks RMSNorm statistics: fp32 or fp64, one rstd for each of
// N rows.
func (c *checker) rmsStats(b *Buffer, N int) {
	c.f32or64("stats", b)
	c.length("stats", b, N, "N")
}

func (Checks) RMSNormStats(stats, x *Buffer, N, C int, eps float32) error {
	c := check("RMSNormStats")
	c.positive("N", N, "C", C)
	c.rmsStats(stats, N)
	c.floats("x", x, N*C, "N·C")
	c.finite("eps", eps)
	if c.err == nil && eps < 0 {
		c.fail("eps is %g, want ≥ 0", eps)
	}
	return c.err
}

func (Checks) RMSNorm(y, x, stats, w *Buffer, N, C int) error {
	c := check("RMSNorm")
	c.positive("N", N, "C", C)
	c.floats("y", y, N*C, "N·C")
	c.floats("x", x, N*C, "N·C")
	c.rmsStats(stats, N)
	c.floats("w", w, C, "C")
	return c.err
}

func (Checks) RMSNormBackwardX(dx, dy, x, stats, w *Buffer, N, C int) error {
	c := check("RMSNormBackwardX")
	c.positive("N", N, "C", C)
	c.floats("dx", dx, N*C, "N·C")
	c.floats("dy", dy, N*C, "N·C")
	c.floats("x", x, N*C, "N·C")
	c.rmsStats(stats, N)
	c.floats("w", w, C, "C")
	return c.err
}

func (Checks) RMSNormBackwardW(dw, dy, x, stats *Buffer, N, C int) error {
	c := check("RMSNormBackwardW")
	c.positive("N", N, "C", C)
	c.floats("dw", dw, C, "C")
	c.floats("dy", dy, N*C, "N·C")
	c.floats("x", x, N*C, "N·C")
	c.rmsStats(stats, N)
	return c.err
}
