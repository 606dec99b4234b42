package conformance

// The rotary family: its tests against the float64 references, the
// references themselves, and its calls with bad and good arguments.

import (
	"math"
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "RoPE", tests: []familyTest{{"RoPE", testRoPE}}, invalid: invalidRoPE, valid: validRoPE})
}

func invalidRoPE(f *fixture) []badCall {
	d := f.d
	x := f.f32(2 * 3 * 3 * 8)
	return []badCall{
		{"RoPE length", d.RoPE(f.f32(10), x, 2, 3, 8, 2, 2, 1e4), []string{"RoPE", "y has 10 elements", "B·T·W"}},
		{"RoPE odd head", d.RoPE(f.f32(2*3*3*6), f.f32(2*3*3*6), 2, 3, 6, 2, 2, 1e4), []string{"RoPE", "head size", "even"}},
		{"RoPE theta", d.RoPE(f.f32(144), x, 2, 3, 8, 2, 2, 1), []string{"RoPE", "theta is 1"}},
		{"RoPE KV", d.RoPE(f.f32(144), x, 2, 3, 8, 2, 3, 1e4), []string{"RoPE", "KV = 3 key and value heads do not divide NH = 2"}},
		{"RoPE grouped length", d.RoPE(f.f32(144), x, 2, 3, 8, 2, 1, 1e4), []string{"RoPE", "y has 144 elements, want B·T·W = 96"}},
		{"RoPEBackward nil dy", d.RoPEBackward(f.f32(144), nil, 2, 3, 8, 2, 2, 1e4), []string{"RoPEBackward", "dy is nil"}},
	}
}

func validRoPE(f *fixture, dt cuda.DType) []goodCall {
	const B, T, C, NH, KV = 2, 16, 64, 4, 2
	W := cuda.QKVWidth(C, NH, KV)
	x, y := f.alloc(dt, B*T*W), f.alloc(dt, B*T*W)
	return []goodCall{
		{"RoPE", func() error { return f.d.RoPE(y, x, B, T, C, NH, KV, 1e4) }},
		{"RoPEBackward", func() error { return f.d.RoPEBackward(x, y, B, T, C, NH, KV, 1e4) }},
	}
}

func testRoPE(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		for _, kv := range []int{6, 2} { // multi-head, and grouped: 3 query heads a key head
			B, T, C, NH, theta := 3, 37, 96, 6, float32(10000)
			W := cuda.QKVWidth(C, NH, kv)
			x, xs := e.buf(dt, e.randn(B*T*W))
			y := e.out(dt, B*T*W)
			e.must(e.d.RoPE(y, x, B, T, C, NH, kv, theta))
			compare(e.t, "RoPE", e.get(y), refRoPE(xs, B, T, C, NH, kv, float64(theta), 1), tolFor(dt))
			dy, dys := e.buf(dt, e.randn(B*T*W))
			dx := e.out(dt, B*T*W)
			e.must(e.d.RoPEBackward(dx, dy, B, T, C, NH, kv, theta))
			compare(e.t, "RoPEBackward", e.get(dx), refRoPE(dys, B, T, C, NH, kv, float64(theta), -1), tolFor(dt))
		}
	})
	t.Run("finite differences", func(t *testing.T) {
		e := newEnv(t, nd)
		B, T, C, NH, KV, theta := 2, 5, 8, 2, 1, 500.0
		W := cuda.QKVWidth(C, NH, KV)
		xv, dyv := e.randn(B*T*W), e.randn(B*T*W)
		dy, _ := e.buf(cuda.F64, dyv)
		dx := e.out(cuda.F64, len(xv))
		e.must(e.d.RoPEBackward(dx, dy, B, T, C, NH, KV, float32(theta)))
		fd := FiniteDiff(xv, func() float64 { return dot(dyv, refRoPE(xv, B, T, C, NH, KV, theta, 1)) })
		compare(t, "RoPEBackward vs finite differences", e.get(dx), fd, fdTol)
	})
}

// refRoPE rotates the pairs (i, i + hs/2) of every query head and every
// key head of rows [q | k | v] (W = QKVWidth wide) by sign·t·theta^(-2i/hs)
// as the matrix [[cos, −sin], [sin, cos]], t the row's position, v
// unchanged.
func refRoPE(x []float64, B, T, C, NH, KV int, theta, sign float64) []float64 {
	y := append([]float64(nil), x...)
	hs, W := C/NH, cuda.QKVWidth(C, NH, KV)
	for r := range B * T {
		t := float64(r % T)
		for part, heads := range []int{NH, KV} {
			for h := range heads {
				for i := range hs / 2 {
					ang := sign * t / math.Pow(theta, float64(2*i)/float64(hs))
					head := W*r + part*C + h*hs
					a, b := head+i, head+i+hs/2
					y[a] = x[a]*math.Cos(ang) - x[b]*math.Sin(ang)
					y[b] = x[b]*math.Cos(ang) + x[a]*math.Sin(ang)
				}
			}
		}
	}
	return y
}
