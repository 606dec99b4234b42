package model

import (
	"math"
	"strings"
	"testing"
)

// TestInitParams checks GPT-2's scheme tensor by tensor on gpt2-sized
// blocks (enough samples for tight statistics): a sample standard deviation
// of n normal draws has relative standard error 1/sqrt(2n), under 0.2% for
// n ≥ 147,456 (a 384×384 matrix), so a 2% tolerance is over 10 standard
// errors; the mean's standard error is std/sqrt(n), under 0.003·std.
func TestInitParams(t *testing.T) {
	cfg := Config{Name: "init-test", Layers: 3, Hidden: 384, Heads: 6, Vocab: 1000, Context: 256, Untied: true}
	params := InitParams(cfg, 7)
	if int64(len(params)) != cfg.NumParams() {
		t.Fatalf("%d values, want %d", len(params), cfg.NumParams())
	}
	residual := 0.02 / math.Sqrt(2*3)
	for _, p := range cfg.Params() {
		v := params[p.Offset : p.Offset+p.Count]
		var want struct {
			std, constant float64
			random        bool
		}
		switch {
		case strings.HasSuffix(p.Name, ".w") && len(p.Shape) == 1: // layer-norm gains
			want.constant = 1
		case len(p.Shape) == 1: // biases
			want.constant = 0
		case strings.HasSuffix(p.Name, "attn.proj.w"), strings.HasSuffix(p.Name, "mlp.proj.w"):
			want.random, want.std = true, residual
		default: // wte, wpe, qkv, fc, lm_head
			want.random, want.std = true, 0.02
		}
		if !want.random {
			for i, x := range v {
				if float64(x) != want.constant {
					t.Errorf("%s[%d] = %v, want %v", p.Name, i, x, want.constant)
					break
				}
			}
			continue
		}
		var sum, sq float64
		for _, x := range v {
			sum += float64(x)
			sq += float64(x) * float64(x)
		}
		n := float64(len(v))
		mean := sum / n
		std := math.Sqrt(sq/n - mean*mean)
		if math.Abs(std-want.std)/want.std > 0.02 {
			t.Errorf("%s: std %.5f, want %.5f ± 2%%", p.Name, std, want.std)
		}
		if math.Abs(mean) > 0.01*want.std+4*want.std/math.Sqrt(n) {
			t.Errorf("%s: mean %.2g, want 0", p.Name, mean)
		}
	}
}

func TestInitParamsDeterministic(t *testing.T) {
	cfg := mustPreset(t, "tiny")
	a, b, c := InitParams(cfg, 1), InitParams(cfg, 1), InitParams(cfg, 2)
	same, differ := true, 0
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			same = false
		}
		if a[i] != c[i] {
			differ++
		}
	}
	if !same {
		t.Error("the same seed gave different parameters")
	}
	// Only the random (2-D) tensors differ between seeds, and all but a
	// vanishing fraction of their values do.
	var want int
	for _, p := range cfg.Params() {
		if len(p.Shape) == 2 {
			want += int(p.Count)
		}
	}
	if differ < want*999/1000 || differ > want {
		t.Errorf("seeds 1 and 2 differ in %d values, want about %d", differ, want)
	}
	// A tensor's values depend only on the seed and its table index, not
	// on the model's other sizes: wte of an untied model matches the tied.
	untied := cfg
	untied.Untied = true
	u := InitParams(untied, 1)
	wte, _ := cfg.ParamByName("wte")
	for i := wte.Offset; i < wte.Offset+wte.Count; i++ {
		if u[i] != a[i] {
			t.Fatalf("wte[%d] differs between tied and untied models: %v vs %v", i, u[i], a[i])
		}
	}
}
