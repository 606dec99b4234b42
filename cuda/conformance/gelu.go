package conformance

// The GELU family: its tests against the float64 references, the
// references themselves, and its calls with bad and good arguments.

import (
	"math"
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "GELU", tests: []familyTest{{"GELU", testGELU}}, invalid: invalidGELU, valid: validGELU})
}

func invalidGELU(f *fixture) []badCall {
	d := f.d
	return []badCall{
		{"GELU length", d.GELU(f.f32(4), f.f32(5)), []string{"GELU", "x has 5 elements"}},
		{"GELUBackward nil dy", d.GELUBackward(f.f32(4), nil, f.f32(4)), []string{"GELUBackward", "dy is nil"}},
	}
}

func validGELU(f *fixture, dt cuda.DType) []goodCall {
	x, y, dy, dx := f.alloc(dt, 2048), f.alloc(dt, 2048), f.alloc(dt, 2048), f.alloc(dt, 2048)
	return []goodCall{
		{"GELU", func() error { return f.d.GELU(y, x) }},
		{"GELUBackward", func() error { return f.d.GELUBackward(dx, dy, x) }},
	}
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
		fd := FiniteDiff(xv, func() float64 { return dot(dyv, refGELU(xv)) })
		compare(t, "GELUBackward vs finite differences", e.get(dx), fd, fdTol)
		compare(t, "reference vs finite differences", refGELUBackward(dyv, xv), fd, fdTol)
	})
}

func refGELU(x []float64) []float64 {
	y := make([]float64, len(x))
	k := math.Sqrt(2 / math.Pi)
	for i, v := range x {
		y[i] = 0.5 * v * (1 + math.Tanh(k*(v+geluA*v*v*v)))
	}
	return y
}

// refGELUBackward differentiates refGELU by hand: with u = k·(x + a·x³),
// d/dx [x/2·(1+tanh u)] = (1+tanh u)/2 + x/2·sech²(u)·k·(1 + 3a·x²).
func refGELUBackward(dy, x []float64) []float64 {
	dx := make([]float64, len(x))
	k := math.Sqrt(2 / math.Pi)
	for i, v := range x {
		u := k * (v + geluA*v*v*v)
		sech := 1 / math.Cosh(u)
		dx[i] = dy[i] * ((1+math.Tanh(u))/2 + v/2*sech*sech*k*(1+3*geluA*v*v))
	}
	return dx
}

const geluA = 0.044715
