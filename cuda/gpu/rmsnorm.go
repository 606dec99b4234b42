//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the RMSNorm family (the row statistic, the
// normalisation, the gradients of x and the gain).

// The family's kernels (kernels/rmsnorm.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"rms_norm_stats":      "pipiiif",
		"rms_norm":            "pipipipiii",
		"rms_norm_backward_x": "pipipipipiii",
		"rms_norm_backward_w": "pipipipiii",
	})
}

// RMSNormStats writes per row 1/sqrt(mean(x²)+eps), the sum in fp64.
func (d *Device) RMSNormStats(stats, x *cuda.Buffer, N, C int, eps float32) error {
	return d.launch("RMSNormStats", cuda.Check.RMSNormStats(stats, x, N, C, eps), func() *kcall { return rmsNormStatsCall(stats, x, N, C, eps) }, stats, x)
}

// RMSNorm: y = x·rstd·w.
func (d *Device) RMSNorm(y, x, stats, w *cuda.Buffer, N, C int) error {
	return d.launch("RMSNorm", cuda.Check.RMSNorm(y, x, stats, w, N, C), func() *kcall { return rmsNormCall(y, x, stats, w, N, C) }, y, x, stats, w)
}

// RMSNormBackwardX: dx = rstd·(g - xhat·mean(g·xhat)), the mean in fp64.
func (d *Device) RMSNormBackwardX(dx, dy, x, stats, w *cuda.Buffer, N, C int) error {
	return d.launch("RMSNormBackwardX", cuda.Check.RMSNormBackwardX(dx, dy, x, stats, w, N, C), func() *kcall { return rmsNormBackwardXCall(dx, dy, x, stats, w, N, C) }, dx, dy, x, stats, w)
}

// RMSNormBackwardW: dw[c] = Σ_i dy[i, c]·xhat[i, c], in fp64, in a fixed
// order (column sums, no atomics).
func (d *Device) RMSNormBackwardW(dw, dy, x, stats *cuda.Buffer, N, C int) error {
	return d.launch("RMSNormBackwardW", cuda.Check.RMSNormBackwardW(dw, dy, x, stats, N, C), func() *kcall { return rmsNormBackwardWCall(dw, dy, x, stats, N, C) }, dw, dy, x, stats)
}

func rmsNormStatsCall(stats, x *cuda.Buffer, N, C int, eps float32) *kcall {
	return newCall("rms_norm_stats", cuda.AllF64(stats, x), perRow(int64(N), rowBlock)).
		buf(stats).buf(x).int(int64(N)).int(int64(C)).f64(float64(eps))
}

func rmsNormCall(y, x, stats, w *cuda.Buffer, N, C int) *kcall {
	return newCall("rms_norm", cuda.AllF64(y, x, stats, w), gridStride(int64(N)*int64(C), elemBlock)).
		buf(y).buf(x).buf(stats).buf(w).int(int64(N)).int(int64(C))
}

func rmsNormBackwardXCall(dx, dy, x, stats, w *cuda.Buffer, N, C int) *kcall {
	return newCall("rms_norm_backward_x", cuda.AllF64(dx, dy, x, stats, w), perRow(int64(N), rowBlock)).
		buf(dx).buf(dy).buf(x).buf(stats).buf(w).int(int64(N)).int(int64(C))
}

func rmsNormBackwardWCall(dw, dy, x, stats *cuda.Buffer, N, C int) *kcall {
	return newCall("rms_norm_backward_w", cuda.AllF64(dw, dy, x, stats), columnSumsLaunch(C)).
		buf(dw).buf(dy).buf(x).buf(stats).int(int64(N)).int(int64(C))
}
