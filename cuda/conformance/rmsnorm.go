package conformance

// The RMSNorm family: its tests against the float64 references, the
// references themselves, and its calls with bad and good arguments.

import (
	"math"
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "RMSNorm", tests: []familyTest{{"RMSNorm", testRMSNorm}},
		invalid: invalidRMSNorm, valid: validRMSNorm})
}

func testRMSNorm(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		N, C, eps := 150, 160, float32(1e-5)
		st := stateType(dt)
		xv := e.randn(N * C)
		for i := range xv {
			xv[i] = 2*xv[i] + 0.5 // a mean far from 0: RMSNorm does not subtract it
		}
		x, xs := e.buf(dt, xv)
		wv := e.randn(C)
		for c := range wv {
			wv[c] = 1 + 0.1*wv[c]
		}
		w, ws := e.buf(dt, wv)

		stats := e.out(st, N)
		e.must(e.d.RMSNormStats(stats, x, N, C, eps))
		compare(e.t, "RMSNormStats", e.get(stats), refRMSNormStats(xs, N, C, float64(eps)), tolFor(st))

		// The later kernels take the reference statistics as stored, so
		// each is checked on its own.
		stats, sts := e.buf(st, refRMSNormStats(xs, N, C, float64(eps)))
		y := e.out(dt, N*C)
		e.must(e.d.RMSNorm(y, x, stats, w, N, C))
		compare(e.t, "RMSNorm", e.get(y), refRMSNorm(xs, sts, ws, N, C), tolFor(dt))

		dy, dys := e.buf(dt, e.randn(N*C))
		wantDx, wantDw := refRMSNormBackward(dys, xs, sts, ws, N, C)
		dx := e.out(dt, N*C)
		e.must(e.d.RMSNormBackwardX(dx, dy, x, stats, w, N, C))
		compare(e.t, "RMSNormBackwardX", e.get(dx), wantDx, tolFor(dt))
		dw := e.out(dt, C)
		e.must(e.d.RMSNormBackwardW(dw, dy, x, stats, N, C))
		compare(e.t, "RMSNormBackwardW", e.get(dw), wantDw, tolFor(dt))
	})
	t.Run("finite differences", func(t *testing.T) {
		e := newEnv(t, nd)
		N, C, eps := 4, 12, 1e-5
		xv, wv, dyv := e.randn(N*C), e.randn(C), e.randn(N*C)
		x, _ := e.buf(cuda.F64, xv)
		w, _ := e.buf(cuda.F64, wv)
		dy, _ := e.buf(cuda.F64, dyv)
		stats := e.out(cuda.F64, N)
		e.must(e.d.RMSNormStats(stats, x, N, C, float32(eps)))
		dx, dw := e.out(cuda.F64, N*C), e.out(cuda.F64, C)
		e.must(e.d.RMSNormBackwardX(dx, dy, x, stats, w, N, C))
		e.must(e.d.RMSNormBackwardW(dw, dy, x, stats, N, C))
		loss := func() float64 {
			return dot(dyv, refRMSNorm(xv, refRMSNormStats(xv, N, C, float64(float32(eps))), wv, N, C))
		}
		fdx, fdw := FiniteDiff(xv, loss), FiniteDiff(wv, loss)
		compare(t, "RMSNormBackwardX vs finite differences", e.get(dx), fdx, fdTol)
		compare(t, "RMSNormBackwardW vs finite differences", e.get(dw), fdw, fdTol)
		refDx, refDw := refRMSNormBackward(dyv, xv, refRMSNormStats(xv, N, C, float64(float32(eps))), wv, N, C)
		compare(t, "reference dx vs finite differences", refDx, fdx, fdTol)
		compare(t, "reference dw vs finite differences", refDw, fdw, fdTol)
	})
}

// refRMSNormStats is 1/sqrt(mean(x²) + eps) per row.
func refRMSNormStats(x []float64, N, C int, eps float64) []float64 {
	st := make([]float64, N)
	for i := 0; i < N; i++ {
		ms := 0.0
		for _, v := range x[i*C : (i+1)*C] {
			ms += v * v
		}
		st[i] = 1 / math.Sqrt(ms/float64(C)+eps)
	}
	return st
}

func refRMSNorm(x, st, w []float64, N, C int) []float64 {
	y := make([]float64, N*C)
	for i := 0; i < N; i++ {
		for c := 0; c < C; c++ {
			y[i*C+c] = x[i*C+c] * st[i] * w[c]
		}
	}
	return y
}

// refRMSNormBackward returns dx and dw from the formulas in the contract.
func refRMSNormBackward(dy, x, st, w []float64, N, C int) (dx, dw []float64) {
	dx = make([]float64, N*C)
	dw = make([]float64, C)
	for i := 0; i < N; i++ {
		rstd := st[i]
		mgx := 0.0
		for c := 0; c < C; c++ {
			xhat := x[i*C+c] * rstd
			mgx += dy[i*C+c] * w[c] * xhat / float64(C)
			dw[c] += dy[i*C+c] * xhat
		}
		for c := 0; c < C; c++ {
			dx[i*C+c] = rstd * (dy[i*C+c]*w[c] - x[i*C+c]*rstd*mgx)
		}
	}
	return dx, dw
}

func invalidRMSNorm(f *fixture) []badCall {
	d := f.d
	N, C := 6, 8
	x, y, stats, w := f.f32(N*C), f.f32(N*C), f.f32(N), f.f32(C)
	return []badCall{
		{"RMSNorm short x", d.RMSNorm(y, f.f32(100), stats, w, N, C), []string{"cuda: RMSNorm: x has 100 elements, want N·C = 48"}},
		{"RMSNorm layer-norm stats", d.RMSNorm(y, x, f.f32(2*N), w, N, C), []string{"RMSNorm", "stats has 12 elements, want N = 6"}},
		{"RMSNormStats fp16 stats", d.RMSNormStats(f.alloc(cuda.F16, N), x, N, C, 1e-5), []string{"RMSNormStats", "stats is fp16"}},
		{"RMSNormStats NaN eps", d.RMSNormStats(stats, x, N, C, float32(math.NaN())), []string{"RMSNormStats", "eps"}},
		{"RMSNormStats negative eps", d.RMSNormStats(stats, x, N, C, -1), []string{"RMSNormStats", "eps is -1, want ≥ 0"}},
		{"RMSNormBackwardX nil w", d.RMSNormBackwardX(f.f32(N*C), f.f32(N*C), x, stats, nil, N, C), []string{"RMSNormBackwardX", "w is nil"}},
		{"RMSNormBackwardW short dw", d.RMSNormBackwardW(f.f32(C-1), f.f32(N*C), x, stats, N, C), []string{"RMSNormBackwardW", "dw has 7 elements, want C = 8"}},
		{"RMSNormBackwardW zero C", d.RMSNormBackwardW(f.f32(C), f.f32(N*C), x, stats, N, 0), []string{"RMSNormBackwardW", "C is 0"}},
	}
}

func validRMSNorm(f *fixture, dt cuda.DType) []goodCall {
	d := f.d
	N, C := 32, 64
	x, y, dy, dx := f.alloc(dt, N*C), f.alloc(dt, N*C), f.alloc(dt, N*C), f.alloc(dt, N*C)
	stats, w := f.alloc(stateType(dt), N), f.alloc(dt, C)
	return []goodCall{
		{"RMSNormStats", func() error { return d.RMSNormStats(stats, x, N, C, 1e-5) }},
		{"RMSNorm", func() error { return d.RMSNorm(y, x, stats, w, N, C) }},
		{"RMSNormBackwardX", func() error { return d.RMSNormBackwardX(dx, dy, x, stats, w, N, C) }},
		{"RMSNormBackwardW", func() error { return d.RMSNormBackwardW(w, dy, x, stats, N, C) }},
	}
}
