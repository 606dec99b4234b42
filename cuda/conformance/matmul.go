package conformance

// The matrix products: its tests against the float64 references, the
// references themselves, and its calls with bad and good arguments.

import (
	"fmt"
	"math"
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "matrix products", tests: []familyTest{{"MatMul", testMatMul}},
		invalid: invalidMatMul, valid: validMatMul})
}

func invalidMatMul(f *fixture) []badCall {
	d := f.d
	x := f.f32(48)
	return []badCall{
		{"MatMul short A", d.MatMul(cuda.MatMul{M: 4, N: 4, K: 4, A: f.f32(15), B: f.f32(16), C: f.f32(16), Alpha: 1}), []string{"MatMul", "A has 15 elements"}},
		{"MatMul small LDA", d.MatMul(cuda.MatMul{M: 4, N: 4, K: 4, LDA: 3, A: f.f32(16), B: f.f32(16), C: f.f32(16), Alpha: 1}), []string{"MatMul", "LDA is 3"}},
		{"MatMul overlapping batch outputs", d.MatMul(cuda.MatMul{M: 2, N: 2, K: 2, Batch: 2, StrideC: 2, A: f.f32(8), B: f.f32(8), C: f.f32(8), Alpha: 1}), []string{"MatMul", "StrideC is 2"}},
		{"MatMul C overlaps A", d.MatMul(cuda.MatMul{M: 2, N: 2, K: 2, A: x.View(0, 4), B: f.f32(4), C: x.View(2, 4), Alpha: 1}), []string{"MatMul", "C", "overlaps A"}},
		{"MatMul zero K", d.MatMul(cuda.MatMul{M: 2, N: 2, K: 0, A: f.f32(4), B: f.f32(4), C: f.f32(4), Alpha: 1}), []string{"MatMul", "K is 0"}},
		{"MatMul NaN alpha", d.MatMul(cuda.MatMul{M: 2, N: 2, K: 2, A: f.f32(4), B: f.f32(4), C: f.f32(4), Alpha: float32(math.NaN())}), []string{"MatMul", "Alpha"}},
	}
}

func validMatMul(f *fixture, dt cuda.DType) []goodCall {
	N, C, V := 32, 64, 300
	x, wte, logits := f.alloc(dt, N*C), f.alloc(dt, V*C), f.alloc(dt, N*V)
	return []goodCall{{"MatMul", func() error {
		return f.d.MatMul(cuda.MatMul{TransB: true, M: N, N: V, K: C, A: x, B: wte, C: logits, Alpha: 1})
	}}}
}

// matmulCases are every transpose combination with dense and padded
// leading dimensions, batches with padded strides, and scalings.
func matmulCases() []mm {
	var cs []mm
	for _, tA := range []bool{false, true} {
		for _, tB := range []bool{false, true} {
			cs = append(cs,
				mm{tA: tA, tB: tB, M: 13, N: 17, K: 19, batch: 1, alpha: 1},
				mm{tA: tA, tB: tB, M: 9, N: 11, K: 7, lda: 3, ldb: 5, ldc: 2, batch: 1, alpha: 0.5, beta: -0.75},
				mm{tA: tA, tB: tB, M: 6, N: 5, K: 8, lda: 1, ldb: 2, ldc: 3, strideA: 7, strideB: 9, strideC: 11, batch: 3, alpha: 1.25, beta: 0.5},
				mm{tA: tA, tB: tB, M: 67, N: 129, K: 300, batch: 1, alpha: 1},
			)
		}
	}
	return cs
}

// dims fills in the defaults of a case whose lds and strides are given as
// padding beyond dense, and returns the element counts of A, B and C.
func (m *mm) dims() (na, nb, nc int) {
	ar, ac := m.M, m.K
	if m.tA {
		ar, ac = m.K, m.M
	}
	br, bc := m.K, m.N
	if m.tB {
		br, bc = m.N, m.K
	}
	m.lda += ac
	m.ldb += bc
	m.ldc += m.N
	m.strideA += ar * m.lda
	m.strideB += br * m.ldb
	m.strideC += m.M * m.ldc
	span := func(stride, rows, ld, cols int) int { return (m.batch-1)*stride + (rows-1)*ld + cols }
	return span(m.strideA, ar, m.lda, ac), span(m.strideB, br, m.ldb, bc), span(m.strideC, m.M, m.ldc, m.N)
}

func (m mm) String() string {
	t := func(b bool) string {
		if b {
			return "T"
		}
		return "N"
	}
	return fmt.Sprintf("%s%s_%dx%dx%d_batch%d_lds%d,%d,%d_alpha%g_beta%g", t(m.tA), t(m.tB), m.M, m.N, m.K, m.batch, m.lda, m.ldb, m.ldc, m.alpha, m.beta)
}

func testMatMul(t *testing.T, nd NewDevice) {
	run := func(e *env, m mm, da, db, dc cuda.DType, dense bool) {
		na, nb, nc := m.dims()
		a, as := e.buf(da, e.randn(na))
		b, bs := e.buf(db, e.randn(nb))
		var c *cuda.Buffer
		var cs []float64
		if m.beta == 0 {
			c = e.out(dc, nc) // NaN everywhere: must not propagate, gaps must stay
			cs = e.get(c)
		} else {
			c, cs = e.buf(dc, e.randn(nc))
		}
		arg := cuda.MatMul{TransA: m.tA, TransB: m.tB, M: m.M, N: m.N, K: m.K, A: a, B: b, C: c,
			Alpha: float32(m.alpha), Beta: float32(m.beta), Batch: m.batch}
		if !dense {
			arg.LDA, arg.LDB, arg.LDC = m.lda, m.ldb, m.ldc
			arg.StrideA, arg.StrideB, arg.StrideC = m.strideA, m.strideB, m.strideC
		}
		e.must(e.d.MatMul(arg))
		tl := tolFor(dc)
		if dc == cuda.F64 && (da != cuda.F64 || db != cuda.F64) {
			tl = tolFor(cuda.F32) // the product is fp32 unless every operand is fp64
		}
		compare(e.t, m.String(), e.get(c), refMatMul(m, as, bs, cs), tl)
	}
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		for i, m := range matmulCases() {
			// Dense cases leave LD and strides 0 (the defaults); the
			// others pass them.
			dense := i%4 == 0 || i%4 == 3
			run(e, m, dt, dt, dt, dense)
		}
	})
	t.Run("mixed types", func(t *testing.T) {
		e := newEnv(t, nd)
		for _, ts := range [][3]cuda.DType{{cuda.F16, cuda.BF16, cuda.F32}, {cuda.F64, cuda.F32, cuda.F16}, {cuda.F32, cuda.F64, cuda.F64}} {
			m := mm{tB: true, M: 7, N: 9, K: 11, ldc: 2, batch: 2, strideC: 3, alpha: 1, beta: 0.5}
			e.t.Run(fmt.Sprint(ts[0], ts[1], ts[2]), func(t *testing.T) {
				run(&env{t: t, d: e.d, rng: e.rng}, m, ts[0], ts[1], ts[2], false)
			})
		}
	})
}

// mm is a MatMul in plain numbers, with every default filled in.
type mm struct {
	tA, tB                    bool
	M, N, K                   int
	lda, ldb, ldc             int
	strideA, strideB, strideC int
	batch                     int
	alpha, beta               float64
}

// refMatMul returns C after C = alpha·op(A)·op(B) + beta·C; elements of C
// outside the M×N matrices are kept. With beta = 0, C is not read.
func refMatMul(m mm, a, b, c []float64) []float64 {
	out := append([]float64(nil), c...)
	for p := 0; p < m.batch; p++ {
		for i := 0; i < m.M; i++ {
			for j := 0; j < m.N; j++ {
				s := 0.0
				for k := 0; k < m.K; k++ {
					var av, bv float64
					if m.tA {
						av = a[p*m.strideA+k*m.lda+i]
					} else {
						av = a[p*m.strideA+i*m.lda+k]
					}
					if m.tB {
						bv = b[p*m.strideB+j*m.ldb+k]
					} else {
						bv = b[p*m.strideB+k*m.ldb+j]
					}
					s += av * bv
				}
				at := p*m.strideC + i*m.ldc + j
				if m.beta == 0 {
					out[at] = m.alpha * s
				} else {
					out[at] = m.alpha*s + m.beta*c[at]
				}
			}
		}
	}
	return out
}
