//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the layer-norm family (statistics, normalisation, the gradients of x and the gain).

// The family's kernels (kernels/layernorm.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"layer_norm_stats":      "pipiiif",
		"layer_norm":            "pipipipipiii",
		"layer_norm_backward_x": "pipipipipiii",
		"layer_norm_backward_w": "pipipipiii",
	})
}

// LayerNormStats writes per row the mean and 1/sqrt(var+eps), two passes in fp64.
func (d *Device) LayerNormStats(stats, x *cuda.Buffer, N, C int, eps float32) error {
	return d.launch("LayerNormStats", cuda.Check.LayerNormStats(stats, x, N, C, eps), func() *kcall { return layerNormStatsCall(stats, x, N, C, eps) }, stats, x)
}

// LayerNorm: y = (x - mean)·rstd·w + b.
func (d *Device) LayerNorm(y, x, stats, w, b *cuda.Buffer, N, C int) error {
	return d.launch("LayerNorm", cuda.Check.LayerNorm(y, x, stats, w, b, N, C), func() *kcall { return layerNormCall(y, x, stats, w, b, N, C) }, y, x, stats, w, b)
}

// LayerNormBackwardX: dx = rstd·(g - mean(g) - xhat·mean(g·xhat)), the
// means in fp64.
func (d *Device) LayerNormBackwardX(dx, dy, x, stats, w *cuda.Buffer, N, C int) error {
	return d.launch("LayerNormBackwardX", cuda.Check.LayerNormBackwardX(dx, dy, x, stats, w, N, C), func() *kcall { return layerNormBackwardXCall(dx, dy, x, stats, w, N, C) }, dx, dy, x, stats, w)
}

// LayerNormBackwardW: dw[c] = Σ_i dy[i, c]·xhat[i, c], in fp64, in a fixed
// order (column sums, no atomics).
func (d *Device) LayerNormBackwardW(dw, dy, x, stats *cuda.Buffer, N, C int) error {
	return d.launch("LayerNormBackwardW", cuda.Check.LayerNormBackwardW(dw, dy, x, stats, N, C), func() *kcall { return layerNormBackwardWCall(dw, dy, x, stats, N, C) }, dw, dy, x, stats)
}

func layerNormStatsCall(stats, x *cuda.Buffer, N, C int, eps float32) *kcall {
	return newCall("layer_norm_stats", cuda.AllF64(stats, x), perRow(int64(N), rowBlock)).
		buf(stats).buf(x).int(int64(N)).int(int64(C)).f64(float64(eps))
}

func layerNormCall(y, x, stats, w, b *cuda.Buffer, N, C int) *kcall {
	return newCall("layer_norm", cuda.AllF64(y, x, stats, w, b), gridStride(int64(N)*int64(C), elemBlock)).
		buf(y).buf(x).buf(stats).buf(w).buf(b).int(int64(N)).int(int64(C))
}

func layerNormBackwardXCall(dx, dy, x, stats, w *cuda.Buffer, N, C int) *kcall {
	return newCall("layer_norm_backward_x", cuda.AllF64(dx, dy, x, stats, w), perRow(int64(N), rowBlock)).
		buf(dx).buf(dy).buf(x).buf(stats).buf(w).int(int64(N)).int(int64(C))
}

func layerNormBackwardWCall(dw, dy, x, stats *cuda.Buffer, N, C int) *kcall {
	return newCall("layer_norm_backward_w", cuda.AllF64(dw, dy, x, stats), columnSumsLaunch(C)).
		buf(dw).buf(dy).buf(x).buf(stats).int(int64(N)).int(int64(C))
}
