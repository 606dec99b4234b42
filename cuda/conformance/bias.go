package conformance

// The bias family (AddBias, SumRows): its tests against the float64
// references, the references themselves, and its calls with bad and good
// arguments.

import (
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "bias", tests: []familyTest{{"Bias", testBias}}, invalid: invalidBias, valid: validBias})
}

func invalidBias(f *fixture) []badCall {
	d := f.d
	N, C := 6, 8
	return []badCall{
		{"SumRows short dst", d.SumRows(f.f32(3), f.f32(N*C), N, C), []string{"SumRows", "dst has 3 elements"}},
		{"AddBias short b", d.AddBias(f.f32(N*C), f.f32(3), N, C), []string{"AddBias", "b has 3 elements"}},
	}
}

func validBias(f *fixture, dt cuda.DType) []goodCall {
	d := f.d
	N, C := 32, 64
	y, dy, b := f.alloc(dt, N*C), f.alloc(dt, N*C), f.alloc(dt, C)
	return []goodCall{
		{"SumRows", func() error { return d.SumRows(b, dy, N, C) }},
		{"AddBias", func() error { return d.AddBias(y, b, N, C) }},
	}
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

func refSumRows(src []float64, N, C int) []float64 {
	d := make([]float64, C)
	for i := 0; i < N; i++ {
		for c := 0; c < C; c++ {
			d[c] += src[i*C+c]
		}
	}
	return d
}
