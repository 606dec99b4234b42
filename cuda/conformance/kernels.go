package conformance

import (
	"fmt"
	"math"
	"testing"

	"trainmem/cuda"
)

// forTypes runs f once per float storage type, each on a fresh device.
func forTypes(t *testing.T, nd NewDevice, f func(e *env, dt cuda.DType)) {
	for _, dt := range floatTypes {
		t.Run(dt.String(), func(t *testing.T) { f(newEnv(t, nd), dt) })
	}
}

// Sizes: large enough that a device which splits work over cores splits
// these (tens of thousands of elements, hundreds of rows), small enough for
// the float64 loops; the finite-difference checks use smaller ones still.

func testFill(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		b := e.out(dt, 70001)
		e.must(e.d.Fill(b, 0.1))
		_, want := e.buf(dt, []float64{float64(float32(0.1))})
		got := e.get(b)
		for i, v := range got {
			if v != want[0] {
				e.t.Fatalf("element %d is %g, want %g (0.1 as %s)", i, v, want[0], dt)
			}
		}
		compare(e.t, "Fill(0.1)", got[:1], []float64{float64(float32(0.1))}, tolFor(dt))
	})
}

func testCast(t *testing.T, nd NewDevice) {
	for _, src := range floatTypes {
		for _, dst := range floatTypes {
			t.Run(src.String()+"->"+dst.String(), func(t *testing.T) {
				e := newEnv(t, nd)
				vals := e.randn(40001)
				for i := range vals {
					vals[i] *= 10
				}
				vals[0], vals[1], vals[2] = 0, 1e-6, -3.999e4 // a subnormal and a large value in fp16
				in, stored := e.buf(src, vals)
				out := e.out(dst, len(vals))
				e.must(e.d.Cast(out, in))
				got := e.get(out)
				if src == dst {
					for i := range got {
						if got[i] != stored[i] {
							t.Fatalf("same-type cast changed element %d: %g → %g", i, stored[i], got[i])
						}
					}
					return
				}
				compare(t, "Cast", got, stored, tol{rel: tolFor(dst).rel, floor: tolFor(dst).floor})
			})
		}
	}
}

func testAdd(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		n := 40001
		a, as := e.buf(dt, e.randn(n))
		b, bs := e.buf(dt, e.randn(n))
		y := e.out(dt, n)
		e.must(e.d.Add(y, a, b))
		want := make([]float64, n)
		for i := range want {
			want[i] = as[i] + bs[i]
		}
		compare(e.t, "y = a + b", e.get(y), want, tolFor(dt))
		e.must(e.d.Add(a, a, b)) // y aliasing a
		compare(e.t, "a = a + b", e.get(a), want, tolFor(dt))
	})
}

func testEmbedding(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		B, T, C, V, P := 3, 40, 256, 50, 45 // P > T positions in wpe
		tokens, tb := e.randIDs(B*T, V)
		tokens[7] = tokens[3] // repeated ids accumulate
		tb = e.ids(tokens)
		wte, wtes := e.buf(dt, e.randn(V*C))
		wpe, wpes := e.buf(dt, e.randn(P*C))
		out := e.out(dt, B*T*C)
		e.must(e.d.Embedding(out, tb, wte, wpe, B, T, C))
		compare(e.t, "Embedding", e.get(out), refEmbedding(tokens, wtes, wpes, B, T, C), tolFor(dt))

		dout, douts := e.buf(dt, e.randn(B*T*C))
		dwte := e.out(dt, V*C)
		e.must(e.d.EmbeddingBackwardTokens(dwte, dout, tb, B, T, C))
		compare(e.t, "EmbeddingBackwardTokens", e.get(dwte), refEmbeddingBackwardTokens(douts, tokens, V, C), tolFor(dt))

		dwpe := e.out(dt, P*C)
		e.must(e.d.EmbeddingBackwardPositions(dwpe, dout, B, T, C))
		compare(e.t, "EmbeddingBackwardPositions", e.get(dwpe), refEmbeddingBackwardPositions(douts, P, B, T, C), tolFor(dt))
	})
}

func testLayerNorm(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		N, C, eps := 150, 160, float32(1e-5)
		st := stateType(dt)
		xv := e.randn(N * C)
		for i := range xv {
			xv[i] = 2*xv[i] + 0.5
		}
		x, xs := e.buf(dt, xv)
		wv, bv := e.randn(C), e.randn(C)
		for c := range wv {
			wv[c], bv[c] = 1+0.1*wv[c], 0.1*bv[c]
		}
		w, ws := e.buf(dt, wv)
		b, bs := e.buf(dt, bv)

		stats := e.out(st, 2*N)
		e.must(e.d.LayerNormStats(stats, x, N, C, eps))
		compare(e.t, "LayerNormStats", e.get(stats), refLayerNormStats(xs, N, C, float64(eps)), tolFor(st))

		// The later kernels take the reference statistics as stored, so
		// each is checked on its own.
		stats, sts := e.buf(st, refLayerNormStats(xs, N, C, float64(eps)))
		y := e.out(dt, N*C)
		e.must(e.d.LayerNorm(y, x, stats, w, b, N, C))
		compare(e.t, "LayerNorm", e.get(y), refLayerNorm(xs, sts, ws, bs, N, C), tolFor(dt))

		dy, dys := e.buf(dt, e.randn(N*C))
		wantDx, wantDw := refLayerNormBackward(dys, xs, sts, ws, N, C)
		dx := e.out(dt, N*C)
		e.must(e.d.LayerNormBackwardX(dx, dy, x, stats, w, N, C))
		compare(e.t, "LayerNormBackwardX", e.get(dx), wantDx, tolFor(dt))
		dw := e.out(dt, C)
		e.must(e.d.LayerNormBackwardW(dw, dy, x, stats, N, C))
		compare(e.t, "LayerNormBackwardW", e.get(dw), wantDw, tolFor(dt))
		db := e.out(dt, C)
		e.must(e.d.SumRows(db, dy, N, C))
		compare(e.t, "SumRows (db)", e.get(db), refSumRows(dys, N, C), tolFor(dt))
	})
	t.Run("finite differences", func(t *testing.T) {
		e := newEnv(t, nd)
		N, C, eps := 4, 12, 1e-5
		xv, wv, bv, dyv := e.randn(N*C), e.randn(C), e.randn(C), e.randn(N*C)
		x, _ := e.buf(cuda.F64, xv)
		w, _ := e.buf(cuda.F64, wv)
		dy, _ := e.buf(cuda.F64, dyv)
		stats := e.out(cuda.F64, 2*N)
		e.must(e.d.LayerNormStats(stats, x, N, C, float32(eps)))
		dx, dw := e.out(cuda.F64, N*C), e.out(cuda.F64, C)
		e.must(e.d.LayerNormBackwardX(dx, dy, x, stats, w, N, C))
		e.must(e.d.LayerNormBackwardW(dw, dy, x, stats, N, C))
		loss := func() float64 {
			return dot(dyv, refLayerNorm(xv, refLayerNormStats(xv, N, C, float64(float32(eps))), wv, bv, N, C))
		}
		fdx, fdw := finiteDiff(xv, loss), finiteDiff(wv, loss)
		compare(t, "LayerNormBackwardX vs finite differences", e.get(dx), fdx, fdTol)
		compare(t, "LayerNormBackwardW vs finite differences", e.get(dw), fdw, fdTol)
		refDx, refDw := refLayerNormBackward(dyv, xv, refLayerNormStats(xv, N, C, float64(float32(eps))), wv, N, C)
		compare(t, "reference dx vs finite differences", refDx, fdx, fdTol)
		compare(t, "reference dw vs finite differences", refDw, fdw, fdTol)
	})
}

func testBias(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		N, C := 300, 100
		y, ys := e.buf(dt, e.randn(N*C))
		b, bs := e.buf(dt, e.randn(C))
		e.must(e.d.AddBias(y, b, N, C))
		want := make([]float64, N*C)
		for i := range want {
			want[i] = ys[i] + bs[i%C]
		}
		compare(e.t, "AddBias", e.get(y), want, tolFor(dt))
		src, srcs := e.buf(dt, e.randn(N*C))
		dst := e.out(dt, C)
		e.must(e.d.SumRows(dst, src, N, C))
		compare(e.t, "SumRows", e.get(dst), refSumRows(srcs, N, C), tolFor(dt))
	})
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

func testGELU(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		n := 40001
		xv := e.randn(n)
		for i := range xv {
			xv[i] *= 3
		}
		copy(xv, []float64{20, -20, 1e4, -1e4, 0}) // saturated tails and zero
		x, xs := e.buf(dt, xv)
		y := e.out(dt, n)
		e.must(e.d.GELU(y, x))
		compare(e.t, "GELU", e.get(y), refGELU(xs), tolFor(dt))
		dy, dys := e.buf(dt, e.randn(n))
		dx := e.out(dt, n)
		e.must(e.d.GELUBackward(dx, dy, x))
		compare(e.t, "GELUBackward", e.get(dx), refGELUBackward(dys, xs), tolFor(dt))
	})
	t.Run("finite differences", func(t *testing.T) {
		e := newEnv(t, nd)
		xv, dyv := e.randn(30), e.randn(30)
		for i := range xv {
			xv[i] *= 3
		}
		x, _ := e.buf(cuda.F64, xv)
		dy, _ := e.buf(cuda.F64, dyv)
		dx := e.out(cuda.F64, len(xv))
		e.must(e.d.GELUBackward(dx, dy, x))
		fd := finiteDiff(xv, func() float64 { return dot(dyv, refGELU(xv)) })
		compare(t, "GELUBackward vs finite differences", e.get(dx), fd, fdTol)
		compare(t, "reference vs finite differences", refGELUBackward(dyv, xv), fd, fdTol)
	})
}

func testAttention(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		B, T, C, NH := 2, 33, 48, 4
		qkv, qkvs := e.buf(dt, e.randn(B*T*3*C))
		p := e.out(dt, B*NH*T*T)
		e.must(e.d.AttentionProbs(p, qkv, B, T, C, NH))
		got := e.get(p)
		compare(e.t, "AttentionProbs", got, RefAttentionProbs(qkvs, B, T, C, NH), tolFor(dt))
		for r := 0; r < B*NH*T; r++ {
			for s := r%T + 1; s < T; s++ {
				if v := got[r*T+s]; v != 0 {
					e.t.Fatalf("p[row %d, col %d] = %g above the diagonal, want exactly 0", r, s, v)
				}
			}
		}

		p, ps := e.buf(dt, RefAttentionProbs(qkvs, B, T, C, NH))
		y := e.out(dt, B*T*C)
		e.must(e.d.AttentionOut(y, qkv, p, B, T, C, NH))
		compare(e.t, "AttentionOut", e.get(y), refAttentionOut(qkvs, ps, B, T, C, NH), tolFor(dt))

		dy, dys := e.buf(dt, e.randn(B*T*C))
		scratch := e.out(stateType(dt), cuda.AttentionScratchLen(T, NH))
		dqkv := e.out(dt, B*T*3*C)
		e.must(e.d.AttentionBackward(dqkv, dy, qkv, p, scratch, B, T, C, NH))
		compare(e.t, "AttentionBackward", e.get(dqkv), refAttentionBackward(dys, qkvs, ps, B, T, C, NH), tolFor(dt))
	})
	t.Run("finite differences", func(t *testing.T) {
		e := newEnv(t, nd)
		B, T, C, NH := 2, 4, 6, 2
		qv, dyv := e.randn(B*T*3*C), e.randn(B*T*C)
		qkv, _ := e.buf(cuda.F64, qv)
		dy, _ := e.buf(cuda.F64, dyv)
		p := e.out(cuda.F64, B*NH*T*T)
		e.must(e.d.AttentionProbs(p, qkv, B, T, C, NH))
		scratch := e.out(cuda.F64, cuda.AttentionScratchLen(T, NH))
		dqkv := e.out(cuda.F64, len(qv))
		e.must(e.d.AttentionBackward(dqkv, dy, qkv, p, scratch, B, T, C, NH))
		fd := finiteDiff(qv, func() float64 {
			return dot(dyv, refAttentionOut(qv, RefAttentionProbs(qv, B, T, C, NH), B, T, C, NH))
		})
		compare(t, "AttentionBackward vs finite differences", e.get(dqkv), fd, fdTol)
		compare(t, "reference vs finite differences", refAttentionBackward(dyv, qv, RefAttentionProbs(qv, B, T, C, NH), B, T, C, NH), fd, fdTol)
	})
}

func testCrossEntropy(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		N, V := 40, 1000
		st := stateType(dt)
		lv := e.randn(N * V)
		for i := range lv {
			lv[i] *= 3
		}
		logits, ls := e.buf(dt, lv)
		targets, tb := e.randIDs(N, V)
		loss := e.out(st, 1)
		scratch := e.out(st, cuda.CrossEntropyScratchLen(N)+5)
		e.must(e.d.CrossEntropy(loss, logits, tb, scratch, N, V))
		compare(e.t, "CrossEntropy", e.get(loss), []float64{refCrossEntropy(ls, targets, N, V)}, tolFor(st))

		dloss, dls := e.buf(st, []float64{1.7})
		dlogits := e.out(dt, N*V)
		e.must(e.d.CrossEntropyBackward(dlogits, dloss, logits, tb, N, V))
		compare(e.t, "CrossEntropyBackward", e.get(dlogits), refCrossEntropyBackward(ls, targets, dls[0], N, V), tolFor(dt))
	})
	t.Run("large logits", func(t *testing.T) {
		// Logits of 1000 would overflow exp without the max subtracted.
		e := newEnv(t, nd)
		lv := []float64{1000, 999, 998, -1000, 0, 1000}
		logits, _ := e.buf(cuda.F32, lv)
		tb := e.ids([]int32{1, 2})
		loss, scratch := e.out(cuda.F32, 1), e.out(cuda.F32, 2)
		e.must(e.d.CrossEntropy(loss, logits, tb, scratch, 2, 3))
		compare(t, "CrossEntropy of large logits", e.get(loss), []float64{refCrossEntropy(lv, []int32{1, 2}, 2, 3)}, tolFor(cuda.F32))
	})
	t.Run("finite differences", func(t *testing.T) {
		e := newEnv(t, nd)
		N, V := 3, 7
		lv := e.randn(N * V)
		targets := []int32{0, 6, 3}
		logits, _ := e.buf(cuda.F64, lv)
		tb := e.ids(targets)
		dloss, _ := e.buf(cuda.F64, []float64{1.7})
		dlogits := e.out(cuda.F64, N*V)
		e.must(e.d.CrossEntropyBackward(dlogits, dloss, logits, tb, N, V))
		fd := finiteDiff(lv, func() float64 { return 1.7 * refCrossEntropy(lv, targets, N, V) })
		compare(t, "CrossEntropyBackward vs finite differences", e.get(dlogits), fd, fdTol)
		compare(t, "reference vs finite differences", refCrossEntropyBackward(lv, targets, 1.7, N, V), fd, fdTol)
	})
}

// masterChoices are the optimizer tests' cases without and with master
// weights for parameters of dt: 16-bit parameters need master weights.
func masterChoices(dt cuda.DType) []bool {
	if dt != cuda.F32 && dt != cuda.F64 {
		return []bool{true}
	}
	return []bool{false, true}
}

// weights are an optimizer test's parameter and gradient, n random values
// each: the weights are held by master, in the state type, with param an
// output of dt, when there are master weights, else by param. ps and gs are
// the weights and the gradient as stored; the reference updates ps.
type weights struct {
	param, master, grad *cuda.Buffer
	ps, gs              []float64
	dt                  cuda.DType
}

func (e *env) weights(dt cuda.DType, n int, withMaster bool) weights {
	e.t.Helper()
	w := weights{dt: dt}
	pv := e.randn(n)
	if withMaster {
		w.master, w.ps = e.buf(stateType(dt), pv)
		w.param = e.out(dt, n)
	} else {
		w.param, w.ps = e.buf(dt, pv)
	}
	w.grad, w.gs = e.buf(dt, e.randn(n))
	return w
}

// check compares the updated weights, master's and param's, with the
// reference's ps.
func (w weights) check(e *env, name string) {
	e.t.Helper()
	if w.master != nil {
		compare(e.t, name+": master", e.get(w.master), w.ps, tolFor(stateType(w.dt)))
	}
	compare(e.t, name+": param", e.get(w.param), w.ps, tolFor(w.dt))
}

func testAdam(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		n := 20000
		st := stateType(dt)
		for _, withMaster := range masterChoices(dt) {
			for _, decoupled := range []bool{false, true} {
				name := fmt.Sprintf("master=%t decoupled=%t", withMaster, decoupled)
				a := cuda.AdamArgs{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1,
					Decoupled: decoupled, Step: 3, GradScale: 0.5}
				w := e.weights(dt, n, withMaster)
				mv, vv := e.randn(n), e.uniform(n, 0, 1e-3)
				for i := range mv {
					mv[i] *= 0.01
				}
				m, ms := e.buf(st, mv)
				v, vs := e.buf(st, vv)
				e.must(e.d.Adam(w.param, w.grad, w.master, m, v, a))
				refAdam(w.ps, w.gs, ms, vs, adamArgs{lr: float64(a.LR), b1: float64(a.Beta1), b2: float64(a.Beta2),
					eps: float64(a.Eps), wd: float64(a.WeightDecay), gs: float64(a.GradScale), decoupled: decoupled, step: a.Step})
				w.check(e, name)
				compare(e.t, name+": m", e.get(m), ms, tolFor(st))
				compare(e.t, name+": v", e.get(v), vs, tolFor(st))
			}
		}
	})
}

func testSGD(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		n := 20000
		st := stateType(dt)
		for _, withMaster := range masterChoices(dt) {
			for _, mu := range []float32{0, 0.9} {
				name := fmt.Sprintf("master=%t momentum=%g", withMaster, mu)
				a := cuda.SGDArgs{LR: 0.05, Momentum: mu, WeightDecay: 0.01, GradScale: 2}
				w := e.weights(dt, n, withMaster)
				var mom *cuda.Buffer
				var moms []float64
				if mu > 0 {
					mom, moms = e.buf(st, e.randn(n))
				}
				e.must(e.d.SGD(w.param, w.grad, w.master, mom, a))
				refSGD(w.ps, w.gs, moms, float64(a.LR), float64(a.Momentum), float64(a.WeightDecay), float64(a.GradScale))
				w.check(e, name)
				if mu > 0 {
					compare(e.t, name+": momentum", e.get(mom), moms, tolFor(st))
				}
			}
		}
	})
}

func testNonFinite(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		n := 100003
		for _, tc := range []struct {
			name string
			at   int
			v    float64
			want bool
		}{
			{"finite", -1, 0, false},
			{"+Inf last", n - 1, math.Inf(1), true},
			{"-Inf middle", n / 2, math.Inf(-1), true},
			{"NaN first", 0, math.NaN(), true},
		} {
			vals := e.randn(n)
			if tc.at >= 0 {
				vals[tc.at] = tc.v
			}
			b, _ := e.buf(dt, vals)
			got, err := e.d.NonFinite(b)
			e.must(err)
			if got != tc.want {
				e.t.Errorf("%s: NonFinite = %t, want %t", tc.name, got, tc.want)
			}
		}
	})
}
