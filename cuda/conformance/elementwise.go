package conformance

// The elementwise family (Fill, Cast, Add, NonFinite): its tests against
// the float64 references, the references themselves, and its calls with
// bad and good arguments.

import (
	"fmt"
	"math"
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "elementwise",
		tests:   []familyTest{{"Fill", testFill}, {"Cast", testCast}, {"Add", testAdd}, {"NonFinite", testNonFinite}},
		invalid: invalidElementwise, valid: validElementwise})
}

func invalidElementwise(f *fixture) []badCall {
	d := f.d
	y := f.f32(48)
	freed := f.f32(4)
	d.Free(freed)
	return []badCall{
		{"Add length mismatch", d.Add(f.f32(5), f.f32(5), f.f32(6)), []string{"Add", "b has 6 elements"}},
		{"Cast int32", d.Cast(f.f32(6), f.alloc(cuda.I32, 6)), []string{"Cast", "src is int32"}},
		{"Cast overlapping views", d.Cast(y.View(1, 4), y.View(0, 4)), []string{"Cast", "dst", "overlaps src"}},
		{"Fill freed", d.Fill(freed, 0), []string{"Fill", "dst", "was freed"}},
		{"NonFinite int32", nonFiniteErr(d, f.alloc(cuda.I32, 6)), []string{"NonFinite", "x is int32"}},
	}
}

func nonFiniteErr(d cuda.Device, b *cuda.Buffer) error {
	_, err := d.NonFinite(b)
	return err
}

func validElementwise(f *fixture, dt cuda.DType) []goodCall {
	d := f.d
	x, y := f.alloc(dt, 2048), f.alloc(dt, 2048)
	return []goodCall{
		{"Fill", func() error { return d.Fill(x, 1) }},
		{"Cast", func() error { return d.Cast(y, x) }},
		{"Add", func() error { return d.Add(y, x, y) }},
		{"NonFinite", func() error {
			bad, err := d.NonFinite(x)
			if err == nil && bad {
				return fmt.Errorf("NonFinite is true on a device that does not compute")
			}
			return err
		}},
	}
}

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
