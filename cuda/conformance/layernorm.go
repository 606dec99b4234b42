package conformance

// The layer-norm family: its tests against the float64 references, the
// references themselves, and its calls with bad and good arguments.

import (
	"math"
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "layer norm", tests: []familyTest{{"LayerNorm", testLayerNorm}},
		invalid: invalidLayerNorm, valid: validLayerNorm})
}

func invalidLayerNorm(f *fixture) []badCall {
	d := f.d
	N, C := 6, 8
	x, y, stats := f.f32(N*C), f.f32(N*C), f.f32(2*N)
	w, bias := f.f32(C), f.f32(C)
	return []badCall{
		{"LayerNorm short x", d.LayerNorm(y.View(0, N*C), f.f32(100), stats, w, bias, N, C),
			[]string{"cuda: LayerNorm: x has 100 elements, want N·C = 48"}},
		{"LayerNormStats fp16 stats", d.LayerNormStats(f.alloc(cuda.F16, 2*N), x, N, C, 1e-5), []string{"LayerNormStats", "stats is fp16"}},
		{"LayerNormStats negative eps", d.LayerNormStats(stats, x, N, C, -1), []string{"LayerNormStats", "eps"}},
		{"LayerNormBackwardX nil w", d.LayerNormBackwardX(f.f32(N*C), f.f32(N*C), x, stats, nil, N, C), []string{"LayerNormBackwardX", "w is nil"}},
		{"LayerNormBackwardW short dw", d.LayerNormBackwardW(f.f32(C-1), f.f32(N*C), x, stats, N, C), []string{"LayerNormBackwardW", "dw has 7 elements, want C = 8"}},
	}
}

func validLayerNorm(f *fixture, dt cuda.DType) []goodCall {
	d := f.d
	N, C := 32, 64
	x, y, dy, dx := f.alloc(dt, N*C), f.alloc(dt, N*C), f.alloc(dt, N*C), f.alloc(dt, N*C)
	stats, w, b := f.alloc(stateType(dt), 2*N), f.alloc(dt, C), f.alloc(dt, C)
	return []goodCall{
		{"LayerNormStats", func() error { return d.LayerNormStats(stats, x, N, C, 1e-5) }},
		{"LayerNorm", func() error { return d.LayerNorm(y, x, stats, w, b, N, C) }},
		{"LayerNormBackwardX", func() error { return d.LayerNormBackwardX(dx, dy, x, stats, w, N, C) }},
		{"LayerNormBackwardW", func() error { return d.LayerNormBackwardW(w, dy, x, stats, N, C) }},
	}
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
		fdx, fdw := FiniteDiff(xv, loss), FiniteDiff(wv, loss)
		compare(t, "LayerNormBackwardX vs finite differences", e.get(dx), fdx, fdTol)
		compare(t, "LayerNormBackwardW vs finite differences", e.get(dw), fdw, fdTol)
		refDx, refDw := refLayerNormBackward(dyv, xv, refLayerNormStats(xv, N, C, float64(float32(eps))), wv, N, C)
		compare(t, "reference dx vs finite differences", refDx, fdx, fdTol)
		compare(t, "reference dw vs finite differences", refDw, fdw, fdTol)
	})
}

// refLayerNormStats returns per row (mean, 1/sqrt(biased var + eps)).
func refLayerNormStats(x []float64, N, C int, eps float64) []float64 {
	st := make([]float64, 2*N)
	for i := 0; i < N; i++ {
		row := x[i*C : (i+1)*C]
		mean := 0.0
		for _, v := range row {
			mean += v
		}
		mean /= float64(C)
		vr := 0.0
		for _, v := range row {
			vr += (v - mean) * (v - mean)
		}
		vr /= float64(C)
		st[2*i], st[2*i+1] = mean, 1/math.Sqrt(vr+eps)
	}
	return st
}

func refLayerNorm(x, st, w, b []float64, N, C int) []float64 {
	y := make([]float64, N*C)
	for i := 0; i < N; i++ {
		for c := 0; c < C; c++ {
			y[i*C+c] = (x[i*C+c]-st[2*i])*st[2*i+1]*w[c] + b[c]
		}
	}
	return y
}

// refLayerNormBackward returns dx and dw from the formulas in the
// contract.
func refLayerNormBackward(dy, x, st, w []float64, N, C int) (dx, dw []float64) {
	dx = make([]float64, N*C)
	dw = make([]float64, C)
	for i := 0; i < N; i++ {
		mean, rstd := st[2*i], st[2*i+1]
		mg, mgx := 0.0, 0.0
		for c := 0; c < C; c++ {
			xhat := (x[i*C+c] - mean) * rstd
			g := dy[i*C+c] * w[c]
			mg += g / float64(C)
			mgx += g * xhat / float64(C)
			dw[c] += dy[i*C+c] * xhat
		}
		for c := 0; c < C; c++ {
			xhat := (x[i*C+c] - mean) * rstd
			dx[i*C+c] = rstd * (dy[i*C+c]*w[c] - mg - xhat*mgx)
		}
	}
	return dx, dw
}
