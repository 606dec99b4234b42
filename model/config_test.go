package model

import (
	"fmt"
	"strings"
	"testing"
)

// Parameter counts of the released GPT-2 checkpoints: 124,439,808 for the
// 124M model (llm.c's train_gpt2.c prints "num_parameters: 124439808") and
// 1,557,611,200 for gpt2-xl (Hugging Face's GPT2LMHeadModel, tied head).
func TestNumParamsPublished(t *testing.T) {
	for _, tc := range []struct {
		preset string
		want   int64
	}{
		{"gpt2", 124439808},
		{"gpt2-medium", 354823168},
		{"gpt2-large", 774030080},
		{"gpt2-xl", 1557611200},
		// LLaMA 2 7B: the model card's 6,738,415,616 (Hugging Face's
		// LlamaForCausalLM of meta-llama/Llama-2-7b-hf; Touvron et al. 2023).
		{"llama2-7b", 6738415616},
	} {
		c, err := Preset(tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.NumParams(); got != tc.want {
			t.Errorf("%s: NumParams = %d, want %d", tc.preset, got, tc.want)
		}
	}
}

// The architectures beside GPT-2's change only the vector rows: an RMSNorm
// has a gain of h and no bias, and without linear biases a block loses its
// four (3h + h + 4h + h = 9h). For gpt2 with both: 124,439,808 − 12·(2h +
// 9h) − h = 124,337,664 at h = 768.
func TestNumParamsArchitectures(t *testing.T) {
	c, _ := Preset("gpt2")
	h, L := int64(c.Hidden), int64(c.Layers)
	for _, tc := range []struct {
		norm   Norm
		noBias bool
		want   int64
	}{
		{NormLayer, false, 124439808},
		{NormRMS, false, 124439808 - L*2*h - h},
		{NormLayer, true, 124439808 - L*9*h},
		{NormRMS, true, 124337664},
	} {
		c.Norm, c.NoBias = tc.norm, tc.noBias
		if got := c.NumParams(); got != tc.want {
			t.Errorf("gpt2 %v, no bias %t: NumParams = %d, want %d", tc.norm, tc.noBias, got, tc.want)
		}
	}
	// LLaMA 2 7B's blocks (Touvron et al. 2023; the model card's
	// 6,738,415,616 parameters, Hugging Face's LlamaForCausalLM): h 4096,
	// 32 layers, SwiGLU of LLaMA's width 11,008, RMSNorm, no biases, an
	// untied head, V 32000; with learned positions besides instead of its
	// rotary ones, ctx·h more.
	llama := Config{Name: "llama2-7b-blocks", Layers: 32, Hidden: 4096, Heads: 32, Vocab: 32000, Context: 4096,
		Untied: true, Norm: NormRMS, NoBias: true, MLP: MLPSwiGLU}
	if f := llama.FFNWidth(); f != 11008 {
		t.Errorf("SwiGLU's default width at h 4096: %d, want LLaMA's 11,008", f)
	}
	if got, want := llama.NumParams(), int64(6738415616+4096*4096); got != want {
		t.Errorf("llama2-7b's blocks with learned positions: NumParams = %d, want %d", got, want)
	}
	for _, bad := range []string{"", "LayerNorm", "rms"} {
		if _, err := ParseNorm(bad); err == nil || !strings.Contains(err.Error(), "valid: layernorm, rmsnorm") {
			t.Errorf("ParseNorm(%q): %v, want the valid names", bad, err)
		}
	}
	c.Norm = 7
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "norm Norm(7)") {
		t.Errorf("Validate of norm 7: %v", err)
	}
}

func TestParamTableMatchesCount(t *testing.T) {
	for _, name := range PresetNames() {
		p, _ := Preset(name)
		for _, arch := range []struct {
			norm   Norm
			noBias bool
		}{{NormLayer, false}, {NormRMS, false}, {NormLayer, true}, {NormRMS, true}} {
			for _, mlp := range []MLP{MLPGELU, MLPSwiGLU} {
				for _, tp := range []TensorRank{{}, {Size: 2, Rank: 1}} {
					c := p
					c.Norm, c.NoBias, c.MLP, c.Tensor = arch.norm, arch.noBias, mlp, tp
					if c.Validate() != nil {
						continue
					}
					paramTableMatchesCount(t, fmt.Sprintf("%s/%v/no-bias=%t/%v/tp=%d", name, c.Norm, c.NoBias, c.MLP, tp.Size), c)
				}
			}
		}
	}
}

func paramTableMatchesCount(t *testing.T, name string, c Config) {
	t.Helper()
	{
		var sum int64
		for i, p := range c.Params() {
			if p.Offset != sum {
				t.Fatalf("%s: %s at offset %d, want %d", name, p.Name, p.Offset, sum)
			}
			n := int64(1)
			for _, d := range p.Shape {
				n *= int64(d)
			}
			if n != p.Count {
				t.Fatalf("%s: row %d %s count %d != shape product %d", name, i, p.Name, p.Count, n)
			}
			sum += p.Count
		}
		if sum != c.NumParams() {
			t.Errorf("%s: table sums to %d, NumParams = %d", name, sum, c.NumParams())
		}
	}
}

func TestValidate(t *testing.T) {
	c, _ := Preset("gpt2")
	c.Heads = 7
	if err := c.Validate(); err == nil {
		t.Error("heads 7 with hidden 768 accepted")
	}
	c.Heads, c.Layers = 12, 0
	if err := c.Validate(); err == nil {
		t.Error("zero layers accepted")
	}
	if _, err := Preset("gpt5"); err == nil {
		t.Error("unknown preset accepted")
	}
}

func TestPresetOf(t *testing.T) {
	for _, name := range PresetNames() {
		c, _ := Preset(name)
		c.Name = "from a file"
		if got := PresetOf(c); got != name {
			t.Errorf("PresetOf(%s's shape) = %q", name, got)
		}
	}
	c, _ := Preset("gpt2")
	c.Layers = 13
	if got := PresetOf(c); got != "" {
		t.Errorf("a 13-layer gpt2 is preset %q", got)
	}
}
