package conformance

// The norm family, both variants (the layer norm and RMSNorm): its tests
// against the float64 references, the references themselves, and its calls
// with bad and good arguments.

import (
	"fmt"
	"math"
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "norm", tests: []familyTest{
		{"LayerNorm", func(t *testing.T, nd NewDevice) { testNorm(t, nd, cuda.NormLayer) }},
		{"RMSNorm", func(t *testing.T, nd NewDevice) { testNorm(t, nd, cuda.NormRMS) }},
	}, invalid: invalidNorm, valid: validNorm})
}

func invalidNorm(f *fixture) []badCall {
	d := f.d
	N, C := 6, 8
	x, y, w, bias := f.f32(N*C), f.f32(N*C), f.f32(C), f.f32(C)
	ln, rms := f.f32(2*N), f.f32(N) // each variant's statistics
	L, R := cuda.NormLayer, cuda.NormRMS
	return []badCall{
		{"LayerNorm short x", d.Norm(L, y.View(0, N*C), f.f32(100), ln, w, bias, N, C),
			[]string{"cuda: LayerNorm: x has 100 elements, want N·C = 48"}},
		{"LayerNorm RMSNorm's stats", d.Norm(L, y, x, rms, w, bias, N, C), []string{"LayerNorm", "stats has 6 elements, want 2·N = 12"}},
		{"LayerNorm nil b", d.Norm(L, y, x, ln, w, nil, N, C), []string{"LayerNorm", "b is nil"}},
		{"LayerNormStats fp16 stats", d.NormStats(L, f.alloc(cuda.F16, 2*N), x, N, C, 1e-5), []string{"LayerNormStats", "stats is fp16"}},
		{"LayerNormStats negative eps", d.NormStats(L, ln, x, N, C, -1), []string{"LayerNormStats", "eps"}},
		{"LayerNormBackwardX nil w", d.NormBackwardX(L, f.f32(N*C), f.f32(N*C), x, ln, nil, N, C), []string{"LayerNormBackwardX", "w is nil"}},
		{"LayerNormBackwardW short dw", d.NormBackwardW(L, f.f32(C-1), f.f32(N*C), x, ln, N, C), []string{"LayerNormBackwardW", "dw has 7 elements, want C = 8"}},
		{"RMSNorm short x", d.Norm(R, y, f.f32(100), rms, w, nil, N, C), []string{"cuda: RMSNorm: x has 100 elements, want N·C = 48"}},
		{"RMSNorm layer-norm stats", d.Norm(R, y, x, ln, w, nil, N, C), []string{"RMSNorm", "stats has 12 elements, want N = 6"}},
		{"RMSNorm with a bias", d.Norm(R, y, x, rms, w, bias, N, C), []string{"RMSNorm", "want nil (RMSNorm has no bias)"}},
		{"RMSNormStats fp16 stats", d.NormStats(R, f.alloc(cuda.F16, N), x, N, C, 1e-5), []string{"RMSNormStats", "stats is fp16"}},
		{"RMSNormStats NaN eps", d.NormStats(R, rms, x, N, C, float32(math.NaN())), []string{"RMSNormStats", "eps"}},
		{"RMSNormStats negative eps", d.NormStats(R, rms, x, N, C, -1), []string{"RMSNormStats", "eps is -1, want ≥ 0"}},
		{"RMSNormBackwardX nil w", d.NormBackwardX(R, f.f32(N*C), f.f32(N*C), x, rms, nil, N, C), []string{"RMSNormBackwardX", "w is nil"}},
		{"RMSNormBackwardW short dw", d.NormBackwardW(R, f.f32(C-1), f.f32(N*C), x, rms, N, C), []string{"RMSNormBackwardW", "dw has 7 elements, want C = 8"}},
		{"RMSNormBackwardW zero C", d.NormBackwardW(R, f.f32(C), f.f32(N*C), x, rms, N, 0), []string{"RMSNormBackwardW", "C is 0"}},
		{"a norm that is no variant", d.NormStats(cuda.Norm(7), rms, x, N, C, 1e-5), []string{"unknown norm Norm(7) (valid: layernorm, rmsnorm)"}},
	}
}

func validNorm(f *fixture, dt cuda.DType) []goodCall {
	d := f.d
	N, C := 32, 64
	var calls []goodCall
	for _, n := range []cuda.Norm{cuda.NormLayer, cuda.NormRMS} {
		x, y, dy, dx := f.alloc(dt, N*C), f.alloc(dt, N*C), f.alloc(dt, N*C), f.alloc(dt, N*C)
		stats, w := f.alloc(stateType(dt), n.Stats()*N), f.alloc(dt, C)
		var b *cuda.Buffer
		if n.Bias() {
			b = f.alloc(dt, C)
		}
		calls = append(calls,
			goodCall{n.Kernel("Stats"), func() error { return d.NormStats(n, stats, x, N, C, 1e-5) }},
			goodCall{n.Kernel(""), func() error { return d.Norm(n, y, x, stats, w, b, N, C) }},
			goodCall{n.Kernel("BackwardX"), func() error { return d.NormBackwardX(n, dx, dy, x, stats, w, N, C) }},
			goodCall{n.Kernel("BackwardW"), func() error { return d.NormBackwardW(n, w, dy, x, stats, N, C) }})
	}
	return calls
}

func testNorm(t *testing.T, nd NewDevice, n cuda.Norm) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		N, C, eps := 150, 160, float32(1e-5)
		st := stateType(dt)
		xv := e.randn(N * C)
		for i := range xv {
			xv[i] = 2*xv[i] + 0.5 // a mean far from 0: RMSNorm does not subtract it
		}
		x, xs := e.buf(dt, xv)
		wv, bv := e.randn(C), e.randn(C)
		for c := range wv {
			wv[c], bv[c] = 1+0.1*wv[c], 0.1*bv[c]
		}
		w, ws := e.buf(dt, wv)
		var b *cuda.Buffer
		var bs []float64
		if n.Bias() {
			b, bs = e.buf(dt, bv)
		}
		k := n.Stats()

		stats := e.out(st, k*N)
		e.must(e.d.NormStats(n, stats, x, N, C, eps))
		compare(e.t, n.Kernel("Stats"), e.get(stats), refNormStats(n, xs, N, C, float64(eps)), tolFor(st))

		// The later kernels take the reference statistics as stored, so
		// each is checked on its own.
		stats, sts := e.buf(st, refNormStats(n, xs, N, C, float64(eps)))
		y := e.out(dt, N*C)
		e.must(e.d.Norm(n, y, x, stats, w, b, N, C))
		compare(e.t, n.Kernel(""), e.get(y), refNorm(n, xs, sts, ws, bs, N, C), tolFor(dt))

		dy, dys := e.buf(dt, e.randn(N*C))
		wantDx, wantDw := refNormBackward(n, dys, xs, sts, ws, N, C)
		dx := e.out(dt, N*C)
		e.must(e.d.NormBackwardX(n, dx, dy, x, stats, w, N, C))
		compare(e.t, n.Kernel("BackwardX"), e.get(dx), wantDx, tolFor(dt))
		dw := e.out(dt, C)
		e.must(e.d.NormBackwardW(n, dw, dy, x, stats, N, C))
		compare(e.t, n.Kernel("BackwardW"), e.get(dw), wantDw, tolFor(dt))
		if n.Bias() {
			db := e.out(dt, C)
			e.must(e.d.SumRows(db, dy, N, C))
			compare(e.t, "SumRows (db)", e.get(db), refSumRows(dys, N, C), tolFor(dt))
		}
	})
	t.Run("finite differences", func(t *testing.T) {
		e := newEnv(t, nd)
		N, C, eps := 4, 12, 1e-5
		xv, wv, bv, dyv := e.randn(N*C), e.randn(C), e.randn(C), e.randn(N*C)
		if !n.Bias() {
			bv = nil
		}
		x, _ := e.buf(cuda.F64, xv)
		w, _ := e.buf(cuda.F64, wv)
		dy, _ := e.buf(cuda.F64, dyv)
		stats := e.out(cuda.F64, n.Stats()*N)
		e.must(e.d.NormStats(n, stats, x, N, C, float32(eps)))
		dx, dw := e.out(cuda.F64, N*C), e.out(cuda.F64, C)
		e.must(e.d.NormBackwardX(n, dx, dy, x, stats, w, N, C))
		e.must(e.d.NormBackwardW(n, dw, dy, x, stats, N, C))
		loss := func() float64 {
			return dot(dyv, refNorm(n, xv, refNormStats(n, xv, N, C, float64(float32(eps))), wv, bv, N, C))
		}
		fdx, fdw := FiniteDiff(xv, loss), FiniteDiff(wv, loss)
		compare(t, n.Kernel("BackwardX")+" vs finite differences", e.get(dx), fdx, fdTol)
		compare(t, n.Kernel("BackwardW")+" vs finite differences", e.get(dw), fdw, fdTol)
		refDx, refDw := refNormBackward(n, dyv, xv, refNormStats(n, xv, N, C, float64(float32(eps))), wv, N, C)
		compare(t, "reference dx vs finite differences", refDx, fdx, fdTol)
		compare(t, "reference dw vs finite differences", refDw, fdw, fdTol)
	})
}

// refNormStats returns per row the layer norm's (mean, 1/sqrt(biased var
// + eps)), or RMSNorm's 1/sqrt(mean(x²) + eps), by their definitions.
func refNormStats(n cuda.Norm, x []float64, N, C int, eps float64) []float64 {
	var st []float64
	for i := 0; i < N; i++ {
		row := x[i*C : (i+1)*C]
		switch n {
		case cuda.NormLayer:
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
			st = append(st, mean, 1/math.Sqrt(vr+eps))
		case cuda.NormRMS:
			ms := 0.0
			for _, v := range row {
				ms += v * v
			}
			st = append(st, 1/math.Sqrt(ms/float64(C)+eps))
		default:
			panic(fmt.Sprintf("conformance: norm %v", n))
		}
	}
	return st
}

// refNorm is the layer norm's (x - mean)·rstd·w + b, or RMSNorm's
// x·rstd·w, from refNormStats's statistics.
func refNorm(n cuda.Norm, x, st, w, b []float64, N, C int) []float64 {
	y := make([]float64, N*C)
	for i := 0; i < N; i++ {
		for c := 0; c < C; c++ {
			if n == cuda.NormRMS {
				y[i*C+c] = x[i*C+c] * st[i] * w[c]
			} else {
				y[i*C+c] = (x[i*C+c]-st[2*i])*st[2*i+1]*w[c] + b[c]
			}
		}
	}
	return y
}

// refNormBackward returns dx and dw from the formulas in the contract:
// the layer norm's dx = rstd·(g - mean(g) - xhat·mean(g·xhat)) and
// RMSNorm's dx = rstd·(g - xhat·mean(g·xhat)), g = dy·w.
func refNormBackward(n cuda.Norm, dy, x, st, w []float64, N, C int) (dx, dw []float64) {
	dx = make([]float64, N*C)
	dw = make([]float64, C)
	for i := 0; i < N; i++ {
		mean, rstd := 0.0, st[i]
		if n == cuda.NormLayer {
			mean, rstd = st[2*i], st[2*i+1]
		}
		mg, mgx := 0.0, 0.0
		for c := 0; c < C; c++ {
			xhat := (x[i*C+c] - mean) * rstd
			g := dy[i*C+c] * w[c]
			mg += g / float64(C)
			mgx += g * xhat / float64(C)
			dw[c] += dy[i*C+c] * xhat
		}
		if n == cuda.NormRMS {
			mg = 0
		}
		for c := 0; c < C; c++ {
			xhat := (x[i*C+c] - mean) * rstd
			dx[i*C+c] = rstd * (dy[i*C+c]*w[c] - mg - xhat*mgx)
		}
	}
	return dx, dw
}
