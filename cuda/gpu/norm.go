//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the norm family (statistics, normalisation,
// the gradients of x and the gain), both variants, the variant passed to
// the CUDA C as its first argument (kernels/norm.cuh).

// The family's kernels and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"norm_stats":      "ipipiiif",
		"norm":            "ipipipipipiii",
		"norm_backward_x": "ipipipipipiii",
		"norm_backward_w": "ipipipipiii",
	})
}

// NormStats writes per row the layer norm's mean and 1/sqrt(var+eps), or
// RMSNorm's 1/sqrt(mean(x²)+eps), the sums in fp64.
func (d *Device) NormStats(n cuda.Norm, stats, x *cuda.Buffer, N, C int, eps float32) error {
	return d.launch(n.Kernel("Stats"), cuda.Check.NormStats(n, stats, x, N, C, eps), func() *kcall { return normStatsCall(n, stats, x, N, C, eps) }, stats, x)
}

// Norm: y = (x - mean)·rstd·w + b (RMSNorm: x·rstd·w).
func (d *Device) Norm(n cuda.Norm, y, x, stats, w, b *cuda.Buffer, N, C int) error {
	return d.launch(n.Kernel(""), cuda.Check.Norm(n, y, x, stats, w, b, N, C), func() *kcall { return normCall(n, y, x, stats, w, b, N, C) }, y, x, stats, w, b)
}

// NormBackwardX: dx = rstd·(g - mean_c(g) - xhat·mean_c(g·xhat)), g = dy·w
// (RMSNorm: no mean_c(g)), the means in fp64.
func (d *Device) NormBackwardX(n cuda.Norm, dx, dy, x, stats, w *cuda.Buffer, N, C int) error {
	return d.launch(n.Kernel("BackwardX"), cuda.Check.NormBackwardX(n, dx, dy, x, stats, w, N, C), func() *kcall { return normBackwardXCall(n, dx, dy, x, stats, w, N, C) }, dx, dy, x, stats, w)
}

// NormBackwardW: dw[c] = Σ_i dy[i, c]·xhat[i, c], in fp64, in a fixed
// order (column sums, no atomics).
func (d *Device) NormBackwardW(n cuda.Norm, dw, dy, x, stats *cuda.Buffer, N, C int) error {
	return d.launch(n.Kernel("BackwardW"), cuda.Check.NormBackwardW(n, dw, dy, x, stats, N, C), func() *kcall { return normBackwardWCall(n, dw, dy, x, stats, N, C) }, dw, dy, x, stats)
}

func normStatsCall(n cuda.Norm, stats, x *cuda.Buffer, N, C int, eps float32) *kcall {
	return newCall("norm_stats", cuda.AllF64(stats, x), perRow(int64(N), rowBlock)).
		int(int64(n)).buf(stats).buf(x).int(int64(N)).int(int64(C)).f64(float64(eps))
}

func normCall(n cuda.Norm, y, x, stats, w, b *cuda.Buffer, N, C int) *kcall {
	return newCall("norm", cuda.AllF64(y, x, stats, w, b), gridStride(int64(N)*int64(C), elemBlock)).
		int(int64(n)).buf(y).buf(x).buf(stats).buf(w).buf(b).int(int64(N)).int(int64(C))
}

func normBackwardXCall(n cuda.Norm, dx, dy, x, stats, w *cuda.Buffer, N, C int) *kcall {
	return newCall("norm_backward_x", cuda.AllF64(dx, dy, x, stats, w), perRow(int64(N), rowBlock)).
		int(int64(n)).buf(dx).buf(dy).buf(x).buf(stats).buf(w).int(int64(N)).int(int64(C))
}

func normBackwardWCall(n cuda.Norm, dw, dy, x, stats *cuda.Buffer, N, C int) *kcall {
	return newCall("norm_backward_w", cuda.AllF64(dw, dy, x, stats), columnSumsLaunch(C)).
		int(int64(n)).buf(dw).buf(dy).buf(x).buf(stats).int(int64(N)).int(int64(C))
}
