package model_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"trainmem/model"
	"trainmem/model/reference"
)

// TestReferenceFiniteDifferences checks the reference's gradient of the
// whole tiny model against central differences of its loss in float64: for
// every parameter tensor, the coordinate of largest gradient and 3 random
// ones. With h = 1e-5 the truncation error is O(h²·f”') ≈ 1e-10 and the
// rounding error O(ε·loss/h) ≈ 1e-10, so |fd - grad| ≤ 1e-8 + 1e-6·|grad|
// leaves a wide margin while a wrong term (O(|grad|)) fails.
func TestReferenceFiniteDifferences(t *testing.T) {
	cfg := model.MustPreset(t, "tiny")
	const B, T = 2, 8
	ref := reference.MustNew(t, cfg, B, T, tensor.Float64)
	params := model.TestParams(cfg, 3)
	tokens, targets := model.TestBatch(cfg, B, T, 4)
	_, grads, err := ref.Step(params, tokens, targets)
	if err != nil {
		t.Fatal(err)
	}
	lossAt := func(i int, v float64) float64 {
		old := params[i]
		params[i] = v
		l, _, err := ref.Step(params, tokens, targets)
		params[i] = old
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	const h, absTol, relTol = 1e-5, 1e-8, 1e-6
	rng := rand.New(rand.NewPCG(5, 6))
	var worst float64
	for _, p := range cfg.Params() {
		coords := []int64{p.Offset}
		for i := p.Offset; i < p.Offset+p.Count; i++ {
			if math.Abs(grads[i]) > math.Abs(grads[coords[0]]) {
				coords[0] = i
			}
		}
		for range 3 {
			coords = append(coords, p.Offset+rng.Int64N(p.Count))
		}
		for _, i := range coords {
			fd := (lossAt(int(i), params[i]+h) - lossAt(int(i), params[i]-h)) / (2 * h)
			diff := math.Abs(fd - grads[i])
			worst = math.Max(worst, diff/(absTol+relTol*math.Abs(grads[i])))
			if diff > absTol+relTol*math.Abs(grads[i]) {
				t.Errorf("%s[%d]: gradient %.10g, central difference %.10g (|diff| %.2g)", p.Name, i-p.Offset, grads[i], fd, diff)
			}
		}
	}
	t.Logf("worst |fd - grad| / tolerance: %.3f", worst)
}

// TestReferenceLossAtInit: with GPT-2's initialisation the logits are
// nearly zero (std ≈ 0.02·sqrt(h) ≈ 0.16 for tiny), so the loss is ln(V)
// plus about var/2 ≈ 0.013; a tolerance of 0.05 allows for that and the
// sampling noise of a 64-token batch.
func TestReferenceLossAtInit(t *testing.T) {
	for _, untied := range []bool{false, true} {
		cfg := model.MustPreset(t, "tiny")
		cfg.Untied = untied
		const B, T = 2, 32
		ref, err := reference.New(cfg, B, T, tensor.Float32)
		if err != nil {
			t.Fatal(err)
		}
		tokens, targets := model.TestBatch(cfg, B, T, 11)
		loss, _, err := ref.Step32(model.InitParams(cfg, 42), tokens, targets)
		ref.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := math.Log(float64(cfg.Vocab)); math.Abs(loss-want) > 0.05 {
			t.Errorf("untied=%t: loss at init %.4f, want ln(%d) = %.4f ± 0.05", untied, loss, cfg.Vocab, want)
		}
	}
}

// TestReferenceFloat32 compares the float32 reference with the float64 one:
// per tensor, max|g32 - g64| / max|g64| ≤ 1e-4 (fp32 carries about 7
// digits; the error through 2 blocks measured about 1e-6).
func TestReferenceFloat32(t *testing.T) {
	cfg := model.MustPreset(t, "tiny")
	const B, T = 2, 16
	r32 := reference.MustNew(t, cfg, B, T, tensor.Float32)
	r64 := reference.MustNew(t, cfg, B, T, tensor.Float64)
	p64 := model.TestParams(cfg, 8)
	p32 := make([]float32, len(p64))
	for i, v := range p64 {
		p32[i] = float32(v)
		p64[i] = float64(p32[i]) // the same values in both
	}
	tokens, targets := model.TestBatch(cfg, B, T, 9)
	l32, g32, err := r32.Step32(p32, tokens, targets)
	if err != nil {
		t.Fatal(err)
	}
	l64, g64, err := r64.Step(p64, tokens, targets)
	if err != nil {
		t.Fatal(err)
	}
	if e := math.Abs(l32-l64) / l64; e > 1e-6 {
		t.Errorf("loss fp32 %.8g fp64 %.8g: relative error %.2g > 1e-6", l32, l64, e)
	}
	var worst float64
	for _, p := range cfg.Params() {
		e := reference.MaxRelErr(g32[p.Offset:p.Offset+p.Count], g64[p.Offset:p.Offset+p.Count])
		worst = math.Max(worst, e)
		if e > 1e-4 {
			t.Errorf("grad %s: fp32 vs fp64 max relative error %.2g > 1e-4", p.Name, e)
		}
	}
	t.Logf("worst per-tensor fp32 relative error %.2g", worst)
	// A second step on the same machine gives the same result: the
	// TapeMachine is reset between steps and gradients do not accumulate.
	l2, g2, err := r32.Step32(p32, tokens, targets)
	if err != nil {
		t.Fatal(err)
	}
	if l2 != l32 || reference.MaxRelErr(g2, g32) != 0 {
		t.Errorf("second step: loss %v (first %v), grad difference %g: want identical", l2, l32, reference.MaxRelErr(g2, g32))
	}
}

func TestReferenceStepErrors(t *testing.T) {
	cfg := model.MustPreset(t, "tiny")
	ref := reference.MustNew(t, cfg, 1, 4, tensor.Float64)
	params := model.TestParams(cfg, 1)
	ok := []int32{1, 2, 3, 4}
	for _, tc := range []struct {
		name            string
		params          []float64
		tokens, targets []int32
		want            string
	}{
		{"short params", params[:10], ok, ok, fmt.Sprintf("10 parameters, want %d", cfg.NumParams())},
		{"short tokens", params, ok[:3], ok, "3 tokens and 4 targets, want B·T = 4"},
		{"token id", params, []int32{1, 256, 3, 4}, ok, "token id 256 at position 1 is outside the vocabulary [0, 256)"},
		{"target id", params, ok, []int32{1, 2, 3, -1}, "target id -1 at position 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ref.Step(tc.params, tc.tokens, tc.targets)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Step: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestReferenceRunNeedsParams(t *testing.T) {
	cfg := model.MustPreset(t, "tiny")
	ref := reference.MustNew(t, cfg, 1, 2, tensor.Float32)
	if _, err := ref.Run([]int32{1, 2}, []int32{2, 3}); err == nil || !strings.Contains(err.Error(), "SetParams") {
		t.Errorf("Run before SetParams: %v, want an error saying to call SetParams", err)
	}
}

func TestBuildErrors(t *testing.T) {
	tiny := model.MustPreset(t, "tiny")
	bad := tiny
	bad.Heads = 5
	for _, tc := range []struct {
		name string
		cfg  model.Config
		B, T int
		dt   tensor.Dtype
		want string
	}{
		{"seq beyond context", tiny, 2, 65, tensor.Float32, "sequence length 65 exceeds tiny's context of 64"},
		{"zero batch", tiny, 0, 8, tensor.Float32, "batch 0"},
		{"zero seq", tiny, 2, 0, tensor.Float32, "sequence length 0"},
		{"int dtype", tiny, 2, 8, tensor.Int32, "graph dtype int32 is not supported (valid: float32, float64)"},
		{"heads", bad, 2, 8, tensor.Float32, "heads 5 does not divide hidden 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := model.Build(tc.cfg, tc.B, tc.T, tc.dt)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("model.Build: %v, want an error containing %q", err, tc.want)
			}
			_, err = reference.New(tc.cfg, tc.B, tc.T, tc.dt)
			if err == nil {
				t.Fatalf("reference.New: no error, want one like %q", tc.want)
			}
		})
	}
}

// TestGraphMatchesReference evaluates model.Build's graph (forward and backward)
// with the naive float64 semantics of graph_eval_test.go and compares loss
// and every gradient with the reference on gorgonia's TapeMachine. Both are
// exact float64 computations summing in different orders: they agree to
// about 1e-14; the tolerance 1e-9 catches any wiring or semantic error
// (those are O(1)).
func TestGraphMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		untied bool
		B, T   int
		dloss  float64
	}{
		{false, 2, 8, 1},
		{true, 3, 5, 1},
		{false, 1, 64, 1},
		{false, 2, 4, 1024}, // a loss scale: gradients scale with dloss
	} {
		cfg := model.MustPreset(t, "tiny")
		cfg.Untied = tc.untied
		t.Run(fmt.Sprintf("untied=%t/B=%d/T=%d/dloss=%g", tc.untied, tc.B, tc.T, tc.dloss), func(t *testing.T) {
			gr, err := model.Build(cfg, tc.B, tc.T, tensor.Float64)
			if err != nil {
				t.Fatal(err)
			}
			ref := reference.MustNew(t, cfg, tc.B, tc.T, tensor.Float64)
			params := model.TestParams(cfg, 1)
			tokens, targets := model.TestBatch(cfg, tc.B, tc.T, 2)
			loss, grads, err := model.EvalGraph(gr, params, tokens, targets, tc.dloss)
			if err != nil {
				t.Fatal(err)
			}
			rloss, rgrads, err := ref.Step(params, tokens, targets)
			if err != nil {
				t.Fatal(err)
			}
			const tol = 1e-9
			if e := math.Abs(loss-rloss) / rloss; e > tol {
				t.Errorf("loss %.15g, reference %.15g: relative error %.2g > %g", loss, rloss, e, tol)
			}
			for _, p := range cfg.Params() {
				got := grads[p.Offset : p.Offset+p.Count]
				want := make([]float64, p.Count)
				for i, g := range rgrads[p.Offset : p.Offset+p.Count] {
					want[i] = g * tc.dloss
				}
				if e := reference.MaxRelErr(got, want); e > tol {
					t.Errorf("grad %s: max relative error %.2g > %g", p.Name, e, tol)
				}
			}
		})
	}
}
