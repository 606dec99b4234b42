//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: matrix products (cuBLAS, or gemm_generic for what it cannot take).

// The family's kernels (kernels/matmul.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"gemm_generic": "iiiiifpiiipiiifpiiii",
	})
}

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

// gemmGenericCall runs a normalized MatMul (every LD and stride set) on
// gemm_generic.
func gemmGenericCall(n cuda.MatMul, skip int) *kcall {
	return newCall("gemm_generic", cuda.AllF64(n.A, n.B, n.C), gemmLaunch(n.M, n.N, n.Batch)).
		flag(n.TransA).flag(n.TransB).int(int64(n.M)).int(int64(n.N)).int(int64(n.K)).f64(float64(n.Alpha)).
		buf(n.A).int(int64(n.LDA)).int(int64(n.StrideA)).
		buf(n.B).int(int64(n.LDB)).int(int64(n.StrideB)).
		f64(float64(n.Beta)).buf(n.C).int(int64(n.LDC)).int(int64(n.StrideC)).int(int64(skip))
}

// Triangular operands of gemm_generic: products with A's known zeros are
// skipped (kernels/matmul.cuh).
const (
	skipNone  = 0
	skipLower = 1 // A[m, k] = 0 for k > m
	skipUpper = 2 // A[m, k] = 0 for k < m
)
