package host

import (
	"math"
	"math/rand/v2"
	"testing"
)

// ulps is how many float64 steps b lies from a.
func ulps(a, b float64) float64 {
	if a == b {
		return 0
	}
	return math.Abs(a-b) / (math.Nextafter(a, math.Inf(1)) - a)
}

// TestExpLoop checks expLoop against math.Exp: within 2 ulp over the
// whole range (a dense sweep and random arguments), and the special values
// exactly.
func TestExpLoop(t *testing.T) {
	var xs []float64
	for x := -720.0; x <= 720; x += 0.0137 {
		xs = append(xs, x)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		xs = append(xs, (rng.Float64()-0.5)*40, -rng.ExpFloat64()*50, rng.NormFloat64()*1e-6)
	}
	// The ends of the fast range, and where 2^(k/256) changes octave.
	xs = append(xs, -708, -707.9999, 708.9999, 709, 0, math.Copysign(0, -1), math.Ln2, -math.Ln2, math.Ln2/512, -math.Ln2/512,
		1e-300, -1e-300, 745.2, -745.2, -750, 750, math.Inf(1), math.Inf(-1), math.NaN())
	got := append([]float64(nil), xs...)
	expLoop(got)
	worst, at := 0.0, 0.0
	for i, x := range xs {
		want := math.Exp(x)
		switch {
		case math.IsNaN(want):
			if !math.IsNaN(got[i]) {
				t.Errorf("exp(%v) = %v, want NaN", x, got[i])
			}
			continue
		case math.IsInf(want, 0) || want == 0:
			if got[i] != want {
				t.Errorf("exp(%v) = %v, want %v", x, got[i], want)
			}
			continue
		}
		if u := ulps(want, got[i]); u > worst {
			worst, at = u, x
		}
	}
	t.Logf("%d arguments, worst %.2f ulp at %v", len(xs), worst, at)
	if worst > 2 {
		t.Errorf("exp is %.2f ulp from math.Exp at %v, want at most 2", worst, at)
	}
}

func BenchmarkExp(b *testing.B) {
	xs := make([]float64, 4096)
	for i := range xs {
		xs[i] = -float64(i%1000) / 100
	}
	a := make([]float64, len(xs))
	row := make([]float32, len(xs))
	for i, x := range xs {
		row[i] = float32(x)
	}
	for _, k := range []struct {
		name string
		f    func()
	}{
		{"math.Exp", func() {
			for i, x := range xs {
				a[i] = math.Exp(x)
			}
		}},
		{"expLoop", func() { copy(a, xs); expLoop(a) }},
		// The shifted exponentials of cross entropy and the softmax, with
		// the AVX2 twin where it runs.
		{"expShiftedSum", func() {
			var sums [4]float64
			for c0 := 0; c0 < len(row); c0 += expChunk {
				expShiftedSum(a[c0:], row[c0:c0+expChunk], 0, &sums)
			}
		}},
	} {
		b.Run(k.name, func(b *testing.B) {
			for b.Loop() {
				k.f()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(xs)), "ns/elem")
		})
	}
}
