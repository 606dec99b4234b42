//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the bias family (AddBias, and SumRows, the bias gradient; the column sums the layer norm's gain gradient shares).

// SumRows: dst[c] = Σ_i src[i, c], in fp64, in a fixed order.
func (d *Device) SumRows(dst, src *cuda.Buffer, N, C int) error {
	if err := d.begin("SumRows", cuda.Check.SumRows(dst, src, N, C), dst, src); err != nil {
		return err
	}
	defer d.leave()
	return d.run(sumRowsCall(dst, src, N, C))
}

// AddBias: y[i, c] += b[c].
func (d *Device) AddBias(y, b *cuda.Buffer, N, C int) error {
	if err := d.begin("AddBias", cuda.Check.AddBias(y, b, N, C), y, b); err != nil {
		return err
	}
	defer d.leave()
	return d.run(addBiasCall(y, b, N, C))
}
