//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the bias family (AddBias, and SumRows, the bias gradient; the column sums the layer norm's gain gradient shares).

// The family's kernels (kernels/bias.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"add_bias": "pipiii",
		"sum_rows": "pipiii",
	})
}

// SumRows: dst[c] = Σ_i src[i, c], in fp64, in a fixed order.
func (d *Device) SumRows(dst, src *cuda.Buffer, N, C int) error {
	return d.launch("SumRows", cuda.Check.SumRows(dst, src, N, C), func() *kcall { return sumRowsCall(dst, src, N, C) }, dst, src)
}

// AddBias: y[i, c] += b[c].
func (d *Device) AddBias(y, b *cuda.Buffer, N, C int) error {
	return d.launch("AddBias", cuda.Check.AddBias(y, b, N, C), func() *kcall { return addBiasCall(y, b, N, C) }, y, b)
}

func addBiasCall(y, b *cuda.Buffer, N, C int) *kcall {
	return newCall("add_bias", cuda.AllF64(y, b), gridStride(int64(N)*int64(C), elemBlock)).buf(y).buf(b).int(int64(N)).int(int64(C))
}

func sumRowsCall(dst, src *cuda.Buffer, N, C int) *kcall {
	return newCall("sum_rows", cuda.AllF64(dst, src), columnSumsLaunch(C)).buf(dst).buf(src).int(int64(N)).int(int64(C))
}
