package cuda

import (
	"math"
	"testing"
)

// TestAdamCorrections checks Corrections against β^t by repeated
// multiplication, and the rewritten update m·c1/(sqrt(v)·c2 + ε) against
// Adam's m̂/(sqrt(v̂) + ε) (Kingma and Ba, 2015, Algorithm 1) in float64.
func TestAdamCorrections(t *testing.T) {
	for _, a := range []AdamArgs{
		{Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1},
		{Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, Step: 7},
		{Beta1: 0.5, Beta2: 0.99, Eps: 1e-6, Step: 1000},
	} {
		p1, p2 := 1.0, 1.0
		for range a.Step {
			p1 *= float64(a.Beta1)
			p2 *= float64(a.Beta2)
		}
		c1, c2 := a.Corrections()
		if want := 1 / (1 - p1); math.Abs(c1-want) > 1e-12*want {
			t.Errorf("%+v: c1 = %v, want %v", a, c1, want)
		}
		if want := 1 / math.Sqrt(1-p2); math.Abs(c2-want) > 1e-12*want {
			t.Errorf("%+v: c2 = %v, want %v", a, c2, want)
		}
		m, v := 0.01, 1e-4
		want := (m / (1 - p1)) / (math.Sqrt(v/(1-p2)) + float64(a.Eps))
		if got := m * c1 / (math.Sqrt(v)*c2 + float64(a.Eps)); math.Abs(got-want) > 1e-12*math.Abs(want) {
			t.Errorf("%+v: update %v, want %v", a, got, want)
		}
	}
}
