package conformance

// The SwiGLU family: its tests against the float64 references, the
// references themselves, and its calls with bad and good arguments.

import (
	"math"
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "SwiGLU", tests: []familyTest{{"SwiGLU", testSwiGLU}}, invalid: invalidSwiGLU, valid: validSwiGLU})
}

func invalidSwiGLU(f *fixture) []badCall {
	d := f.d
	x := f.f32(2 * 3 * 4)
	return []badCall{
		{"SwiGLU y length", d.SwiGLU(f.f32(13), x, 3, 4), []string{"SwiGLU", "y has 13 elements", "N·F"}},
		{"SwiGLU x length", d.SwiGLU(f.f32(12), f.f32(12), 3, 4), []string{"SwiGLU", "x has 12 elements", "2·N·F"}},
		{"SwiGLU zero F", d.SwiGLU(f.f32(12), x, 3, 0), []string{"SwiGLU", "F"}},
		{"SwiGLU in place", d.SwiGLU(x.View(0, 12), x, 3, 4), []string{"SwiGLU", "overlaps"}},
		{"SwiGLUBackward nil dy", d.SwiGLUBackward(f.f32(24), nil, x, 3, 4), []string{"SwiGLUBackward", "dy is nil"}},
		{"SwiGLUBackward dx length", d.SwiGLUBackward(f.f32(12), f.f32(12), x, 3, 4), []string{"SwiGLUBackward", "dx has 12 elements"}},
	}
}

func validSwiGLU(f *fixture, dt cuda.DType) []goodCall {
	const N, F = 16, 96
	x, y, dy, dx := f.alloc(dt, 2*N*F), f.alloc(dt, N*F), f.alloc(dt, N*F), f.alloc(dt, 2*N*F)
	return []goodCall{
		{"SwiGLU", func() error { return f.d.SwiGLU(y, x, N, F) }},
		{"SwiGLUBackward", func() error { return f.d.SwiGLUBackward(dx, dy, x, N, F) }},
	}
}

func testSwiGLU(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		N, F := 37, 601 // F past one expChunk of the host's exponential
		xv := e.randn(2 * N * F)
		for i := range xv {
			xv[i] *= 3
		}
		copy(xv, []float64{40, -40, 0, 1e4, -1e4}) // saturated gates and zero
		x, xs := e.buf(dt, xv)
		y := e.out(dt, N*F)
		e.must(e.d.SwiGLU(y, x, N, F))
		compare(e.t, "SwiGLU", e.get(y), refSwiGLU(xs, N, F), tolFor(dt))
		dy, dys := e.buf(dt, e.randn(N*F))
		dx := e.out(dt, 2*N*F)
		e.must(e.d.SwiGLUBackward(dx, dy, x, N, F))
		compare(e.t, "SwiGLUBackward", e.get(dx), refSwiGLUBackward(dys, xs, N, F), tolFor(dt))
	})
	t.Run("finite differences", func(t *testing.T) {
		e := newEnv(t, nd)
		N, F := 3, 7
		xv, dyv := e.randn(2*N*F), e.randn(N*F)
		for i := range xv {
			xv[i] *= 2
		}
		x, _ := e.buf(cuda.F64, xv)
		dy, _ := e.buf(cuda.F64, dyv)
		dx := e.out(cuda.F64, 2*N*F)
		e.must(e.d.SwiGLUBackward(dx, dy, x, N, F))
		fd := FiniteDiff(xv, func() float64 { return dot(dyv, refSwiGLU(xv, N, F)) })
		compare(t, "SwiGLUBackward vs finite differences", e.get(dx), fd, fdTol)
		compare(t, "reference vs finite differences", refSwiGLUBackward(dyv, xv, N, F), fd, fdTol)
	})
}

// refSwiGLU is silu(g)·u a row, silu(g) = g/(1 + e^(-g)), for rows
// [g (F) | u (F)].
func refSwiGLU(x []float64, N, F int) []float64 {
	y := make([]float64, N*F)
	for i := range N {
		for j := range F {
			g, u := x[2*F*i+j], x[2*F*i+F+j]
			y[F*i+j] = g / (1 + math.Exp(-g)) * u
		}
	}
	return y
}

// refSwiGLUBackward differentiates refSwiGLU by hand: with s = 1/(1 +
// e^(-g)), d(g·s)/dg = s + g·s·(1 - s), and d(silu(g)·u)/du = silu(g).
func refSwiGLUBackward(dy, x []float64, N, F int) []float64 {
	dx := make([]float64, 2*N*F)
	for i := range N {
		for j := range F {
			g, u, d := x[2*F*i+j], x[2*F*i+F+j], dy[F*i+j]
			s := 1 / (1 + math.Exp(-g))
			dx[2*F*i+j] = d * u * (s + g*s*(1-s))
			dx[2*F*i+F+j] = d * g * s
		}
	}
	return dx
}
