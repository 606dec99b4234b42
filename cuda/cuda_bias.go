//go:build trainmem_cuda

package cuda

// The CUDA device's kernels: the bias family (AddBias, and SumRows, the bias gradient; the column sums the layer norm's gain gradient shares).

// SumRows: dst[c] = Σ_i src[i, c], in fp64, in a fixed order.
func (d *CUDA) SumRows(dst, src *Buffer, N, C int) error {
	if err := d.begin("SumRows", checkSumRows(dst, src, N, C), dst, src); err != nil {
		return err
	}
	defer d.leave()
	return d.run(sumRowsCall(dst, src, N, C))
}

// AddBias: y[i, c] += b[c].
func (d *CUDA) AddBias(y, b *Buffer, N, C int) error {
	if err := d.begin("AddBias", checkAddBias(y, b, N, C), y, b); err != nil {
		return err
	}
	defer d.leave()
	return d.run(addBiasCall(y, b, N, C))
}
