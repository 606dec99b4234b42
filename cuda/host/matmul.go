package host

import "trainmem/cuda"

// The host's MatMul: every batch element is one BLAS GEMM on the buffers'
// own memory (F32, F64) or on fp32 copies (F16, BF16, and F64 operands of
// an fp32 product), which are host-private scratch outside the allocator by
// design (docs/architecture.md).

// gemm runs one row-major GEMM of the compute type on the device's BLAS.
func gemm[F float](be gemmBackend, tA, tB bool, m, n, k int, alpha F, a []F, lda int, b []F, ldb int, beta F, c []F, ldc int) {
	switch a := any(a).(type) {
	case []float32:
		be.sgemm(tA, tB, m, n, k, float32(alpha), a, lda, any(b).([]float32), ldb, float32(beta), any(c).([]float32), ldc)
	case []float64:
		be.dgemm(tA, tB, m, n, k, float64(alpha), a, lda, any(b).([]float64), ldb, float64(beta), any(c).([]float64), ldc)
	}
}

// whole returns elements [0, n) of v: the buffer's memory, or a copy
// decoded in parallel into scratch that release gives back.
func whole[F float](h *Device, v vec[F], n int) (s []F, release func()) {
	if v.raw != nil {
		return v.raw[:n:n], func() {}
	}
	s = getScratch[F](n)
	h.parallel(n, convertGrain, func(lo, hi int) { Decode(v.b, lo, s[lo:hi]) })
	return s, func() { putScratch(s) }
}

// MatMul runs C = Alpha·op(A)·op(B) + Beta·C for each batch element.
// With Beta = 0, C is not read (NaNs in it do not propagate), as in BLAS.
func (h *Device) MatMul(m cuda.MatMul) error {
	n, err := m.Checked()
	if err := h.begin("MatMul", err, m.A, m.B, m.C); err != nil {
		return err
	}
	instance(cuda.AllF64(n.A, n.B, n.C), matmulKernel[float64], matmulKernel[float32])(h, n)
	return nil
}

func matmulKernel[F float](h *Device, m cuda.MatMul) {
	ar, ac, br, bc := m.Dims()
	spanA := cuda.MatMulSpan(m.Batch, m.StrideA, ar, m.LDA, ac)
	spanB := cuda.MatMulSpan(m.Batch, m.StrideB, br, m.LDB, bc)
	spanC := cuda.MatMulSpan(m.Batch, m.StrideC, m.M, m.LDC, m.N)
	one := func(rows, ld, cols int) int { return cuda.MatMulSpan(1, 0, rows, ld, cols) }
	a, relA := whole(h, mkvec[F](m.A), spanA)
	defer relA()
	b, relB := whole(h, mkvec[F](m.B), spanB)
	defer relB()
	vc := mkvec[F](m.C)
	var c []F
	switch {
	case vc.raw != nil:
		c = vc.raw[:spanC]
	case m.Beta != 0:
		var relC func()
		c, relC = whole(h, vc, spanC)
		defer relC()
	default:
		c = getScratch[F](spanC)
		defer putScratch(c)
	}
	for i := 0; i < m.Batch; i++ {
		oa, ob, oc := i*m.StrideA, i*m.StrideB, i*m.StrideC
		gemm(h.blas, m.TransA, m.TransB, m.M, m.N, m.K, F(m.Alpha),
			a[oa:oa+one(ar, m.LDA, ac)], m.LDA, b[ob:ob+one(br, m.LDB, bc)], m.LDB,
			F(m.Beta), c[oc:oc+one(m.M, m.LDC, m.N)], m.LDC)
	}
	if vc.raw == nil {
		// Store the M×N rows only: elements between them (other data in
		// a strided view) stay as they were.
		rows := m.Batch * m.M
		h.parallel(rows, rowGrain(m.N), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				off := (r/m.M)*m.StrideC + (r%m.M)*m.LDC
				vc.put(off, c[off:off+m.N])
			}
		})
	}
}
