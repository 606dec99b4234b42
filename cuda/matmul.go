package cuda

// The matrix-product family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/matmul.go and cuda/gpu/matmul.go implement it).

// MatMulKernels are the matrix products.
type MatMulKernels interface {
	// MatMul runs one (batched) matrix multiply; see the MatMul type.
	MatMul(m MatMul) error
}

// MatMul describes C = Alpha·op(A)·op(B) + Beta·C for Batch matrices, in
// row-major order. op(A) is M×K, op(B) is K×N, C is M×N. LDA, LDB and LDC are
// the row strides of the stored matrices in elements (0 means dense: the
// stored row length). StrideA, StrideB, StrideC step from one batch element to
// the next, in elements (0 means dense: rows×LD). Batch 0 means 1. Offsets
// into a buffer are expressed with Buffer.View.
type MatMul struct {
	TransA, TransB            bool
	M, N, K                   int
	A, B, C                   *Buffer
	LDA, LDB, LDC             int
	StrideA, StrideB, StrideC int
	Batch                     int
	Alpha, Beta               float32
}

// MatMulSpan is the number of elements a batched matrix spans: the last
// element of the last matrix is at (batch-1)·stride + (rows-1)·ld + cols-1.
func MatMulSpan(batch, stride, rows, ld, cols int) int {
	return (batch-1)*stride + (rows-1)*ld + cols
}

// normalize fills in MatMul's defaults: Batch 0 → 1, LD 0 → the stored row
// length, stride 0 → rows·LD.
func (m MatMul) normalize() MatMul {
	if m.Batch == 0 {
		m.Batch = 1
	}
	ar, ac, br, bc := m.Dims()
	if m.LDA == 0 {
		m.LDA = ac
	}
	if m.LDB == 0 {
		m.LDB = bc
	}
	if m.LDC == 0 {
		m.LDC = m.N
	}
	if m.StrideA == 0 {
		m.StrideA = ar * m.LDA
	}
	if m.StrideB == 0 {
		m.StrideB = br * m.LDB
	}
	if m.StrideC == 0 {
		m.StrideC = m.M * m.LDC
	}
	return m
}

// Dims returns the stored shapes (rows, cols) of A and B.
func (m MatMul) Dims() (ar, ac, br, bc int) {
	ar, ac = m.M, m.K
	if m.TransA {
		ar, ac = m.K, m.M
	}
	br, bc = m.K, m.N
	if m.TransB {
		br, bc = m.N, m.K
	}
	return
}

// MatMul checks m.
func (Checks) MatMul(m MatMul) error {
	_, err := m.Checked()
	return err
}

// Checked checks m as every device's MatMul does and returns it with its
// defaults filled in (Batch 0 → 1, LD 0 → the stored row length, stride 0
// → rows·LD), ready for a kernel.
func (m MatMul) Checked() (MatMul, error) {
	c := check("MatMul")
	c.positive("M", m.M, "N", m.N, "K", m.K)
	if c.err == nil && m.Batch < 0 {
		c.fail("Batch is %d, want ≥ 0 (0 means 1)", m.Batch)
	}
	for _, v := range []struct {
		name string
		v    int
	}{{"LDA", m.LDA}, {"LDB", m.LDB}, {"LDC", m.LDC}, {"StrideA", m.StrideA}, {"StrideB", m.StrideB}, {"StrideC", m.StrideC}} {
		if c.err == nil && v.v < 0 {
			c.fail("%s is %d, want ≥ 0 (0 means dense)", v.name, v.v)
		}
	}
	c.float("A", m.A)
	c.float("B", m.B)
	c.float("C", m.C)
	c.finite("Alpha", m.Alpha)
	c.finite("Beta", m.Beta)
	if c.err != nil {
		return m, c.err
	}
	n := m.normalize()
	ar, ac, br, bc := n.Dims()
	switch {
	case n.LDA < ac:
		c.fail("LDA is %d, want at least the %d columns of the stored A", n.LDA, ac)
	case n.LDB < bc:
		c.fail("LDB is %d, want at least the %d columns of the stored B", n.LDB, bc)
	case n.LDC < n.N:
		c.fail("LDC is %d, want at least N = %d", n.LDC, n.N)
	case n.Batch > 1 && n.StrideC < n.M*n.LDC:
		c.fail("StrideC is %d, less than M·LDC = %d: the batch's outputs would overlap", n.StrideC, n.M*n.LDC)
	}
	c.atLeast("A", n.A, MatMulSpan(n.Batch, n.StrideA, ar, n.LDA, ac), "(Batch-1)·StrideA + (rows-1)·LDA + cols")
	c.atLeast("B", n.B, MatMulSpan(n.Batch, n.StrideB, br, n.LDB, bc), "(Batch-1)·StrideB + (rows-1)·LDB + cols")
	c.atLeast("C", n.C, MatMulSpan(n.Batch, n.StrideC, n.M, n.LDC, n.N), "(Batch-1)·StrideC + (M-1)·LDC + N")
	c.disjoint("C", n.C, "A", n.A)
	c.disjoint("C", n.C, "B", n.B)
	return n, c.err
}
