//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: matrix products (cuBLAS, or gemm_generic for what it cannot take).

// MatMul runs C = Alpha·op(A)·op(B) + Beta·C on cuBLAS (16-bit inputs
// with fp32 accumulation, fp32, fp64), or on gemm_generic for operand
// types cuBLAS does not combine.
func (d *Device) MatMul(m cuda.MatMul) error {
	n, err := m.Checked()
	if err := d.begin("MatMul", err, m.A, m.B, m.C); err != nil {
		return err
	}
	defer d.leave()
	return d.gemm(n, skipNone)
}
