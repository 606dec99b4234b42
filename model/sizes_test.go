package model

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

// Shapes whose tensors pass the limits are refused by Validate with a
// *SizeError naming the tensor and the values it comes from; the first is
// the issue's: 2^16 heads and 2^24 positions make 2^64 attention scores,
// which wrapped to 0 before. (Within the field limits only the rows and the
// scores can pass their limits; the reference test below covers every
// tensor.)
func TestSizeErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Setup
		what string
		want []string // factor names
	}{
		{"scores", Setup{Model: Config{Layers: 1, Hidden: 65536, Heads: 65536, Vocab: 256, Context: 1 << 24}, Batch: 1, Seq: 1 << 24},
			"the attention scores", []string{"heads", "batch", "seq"}},
		{"rows", Setup{Model: Config{Layers: 1, Hidden: 64, Heads: 1, Vocab: 1 << 24, Context: 1 << 24}, Batch: 1 << 24, Seq: 1 << 20},
			"the rows of a batch", []string{"batch", "seq"}},
	} {
		tc.s.Ranks, tc.s.TP, tc.s.PP = 1, 1, 1
		err := tc.s.Validate()
		var se *SizeError
		if !errors.As(err, &se) || !errors.Is(err, ErrOverflow) {
			t.Errorf("%s: Validate = %v, want a *SizeError", tc.name, err)
			continue
		}
		if se.What != tc.what {
			t.Errorf("%s: %q, want %q", tc.name, se.What, tc.what)
		}
		var names []string
		for _, f := range se.Factors {
			names = append(names, f.Name)
		}
		if strings.Join(names, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: factors %v, want %v", tc.name, names, tc.want)
		}
		if _, err := tc.s.Estimate(); !errors.As(err, &se) {
			t.Errorf("%s: Estimate = %v, want the *SizeError", tc.name, err)
		}
	}
}

// An estimate whose byte counts pass int64 names every value it is
// computed from.
func TestEstimateOverflowNamesValues(t *testing.T) {
	s := Setup{Model: Config{Name: "deep", Layers: MaxLayers, Hidden: 1024, Heads: 1, Vocab: MaxVocab, Context: MaxContext},
		Batch: 16, Seq: MaxContext, Ranks: 1, TP: 1, PP: 1}
	if err := s.Validate(); err != nil {
		t.Fatalf("every tensor fits, yet: %v", err)
	}
	_, err := s.Estimate()
	var se *SizeError
	if !errors.As(err, &se) {
		t.Fatalf("Estimate = %v, want a *SizeError", err)
	}
	for _, w := range []string{"layers 16384", "hidden 1024", "batch 16", "seq 16777216", "2^63-1 bytes"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%q lacks %q", err, w)
		}
	}
}

// Validate's size check against an independent count: for random shapes
// up to the limits, a setup passes exactly when every tensor the graph
// forms, counted here in float64 (exact enough away from the boundary:
// shapes within 0.1% of a limit are skipped), is within MaxTensorElements
// and the rows within MaxRows; and when it passes, the estimate never
// wraps around (it is an error or every total is non-negative).
func TestSizeCheckAgainstReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pow := func(max int) int { return max >> r.IntN(bitsOf(max)+1) }
	n := 0
	for range 4000 {
		c := Config{Name: "r", Layers: max(1, pow(MaxLayers)), Hidden: max(1, pow(MaxHidden)), Vocab: max(1, pow(MaxVocab)), Context: max(1, pow(MaxContext))}
		c.Heads = c.Hidden >> r.IntN(bitsOf(c.Hidden)+1)
		c.Heads = max(1, c.Heads)
		s := Setup{Model: c, Batch: max(1, pow(MaxBatch)), Ranks: 1, TP: 1, PP: 1}
		s.Seq = max(1, c.Context>>r.IntN(bitsOf(c.Context)+1))
		L, h, a, V, ctx, b, T := float64(c.Layers), float64(c.Hidden), float64(c.Heads), float64(c.Vocab), float64(c.Context), float64(s.Batch), float64(s.Seq)
		phi := V*h + ctx*h + L*(12*h*h+13*h) + 2*h
		sizes := []float64{phi, V * h, ctx * h, 4 * h * h, a * b * T * T, b * T * V, 4 * b * T * h}
		ok, near := b*T <= MaxRows, math.Abs(b*T/MaxRows-1) < 1e-3
		for _, x := range sizes {
			ok = ok && x <= MaxTensorElements
			near = near || math.Abs(x/MaxTensorElements-1) < 1e-3
		}
		if near {
			continue
		}
		n++
		err := s.Validate()
		if (err == nil) != ok {
			t.Fatalf("%+v: Validate = %v, reference says fits = %v", s, err, ok)
		}
		if err != nil {
			continue
		}
		e, err := s.Estimate()
		if err != nil {
			if !errors.Is(err, ErrOverflow) {
				t.Fatalf("%+v: %v", s, err)
			}
			continue
		}
		for _, f := range Formulas() {
			if e.Total(f) < 0 || e.ActivationBytes(f) < 0 {
				t.Fatalf("%+v: %s total %d", s, f, e.Total(f))
			}
		}
		// The estimate's model states against big-integer arithmetic.
		want := new(big.Int).Mul(big.NewInt(e.Params), big.NewInt(16))
		if got := big.NewInt(e.States.Total()); got.Cmp(want) != 0 {
			t.Fatalf("%+v: model states %v, want %v", s, got, want)
		}
	}
	if n < 1000 {
		t.Errorf("only %d shapes away from the limits", n)
	}
}

func bitsOf(n int) int {
	b := 0
	for n > 1 {
		n >>= 1
		b++
	}
	return b
}
