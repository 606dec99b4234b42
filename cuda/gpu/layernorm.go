//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the layer-norm family (statistics, normalisation, the gradients of x and the gain).

// LayerNormStats writes per row the mean and 1/sqrt(var+eps), two passes in fp64.
func (d *Device) LayerNormStats(stats, x *cuda.Buffer, N, C int, eps float32) error {
	if err := d.begin("LayerNormStats", cuda.Check.LayerNormStats(stats, x, N, C, eps), stats, x); err != nil {
		return err
	}
	defer d.leave()
	return d.run(layerNormStatsCall(stats, x, N, C, eps))
}

// LayerNorm: y = (x - mean)·rstd·w + b.
func (d *Device) LayerNorm(y, x, stats, w, b *cuda.Buffer, N, C int) error {
	if err := d.begin("LayerNorm", cuda.Check.LayerNorm(y, x, stats, w, b, N, C), y, x, stats, w, b); err != nil {
		return err
	}
	defer d.leave()
	return d.run(layerNormCall(y, x, stats, w, b, N, C))
}

// LayerNormBackwardX: dx = rstd·(g - mean(g) - xhat·mean(g·xhat)), the
// means in fp64.
func (d *Device) LayerNormBackwardX(dx, dy, x, stats, w *cuda.Buffer, N, C int) error {
	err := cuda.Check.LayerNormBackwardX(dx, dy, x, stats, w, N, C)
	if err := d.begin("LayerNormBackwardX", err, dx, dy, x, stats, w); err != nil {
		return err
	}
	defer d.leave()
	return d.run(layerNormBackwardXCall(dx, dy, x, stats, w, N, C))
}

// LayerNormBackwardW: dw[c] = Σ_i dy[i, c]·xhat[i, c], in fp64, in a fixed
// order (column sums, no atomics).
func (d *Device) LayerNormBackwardW(dw, dy, x, stats *cuda.Buffer, N, C int) error {
	err := cuda.Check.LayerNormBackwardW(dw, dy, x, stats, N, C)
	if err := d.begin("LayerNormBackwardW", err, dw, dy, x, stats); err != nil {
		return err
	}
	defer d.leave()
	return d.run(layerNormBackwardWCall(dw, dy, x, stats, N, C))
}
