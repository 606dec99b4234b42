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
		// Llama 3 8B: Meta's model card's 8.03B, exactly 8,030,261,248 as
		// LlamaForCausalLM counts it (embeddings 2·128256·4096, 32 blocks of
		// 218,112,000, the final norm's 4096).
		{"llama3-8b", 8030261248},
		// TinyLlama 1.1B (Zhang et al. 2024): 1,100,048,384.
		{"tinyllama-1.1b", 1100048384},
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

// Grouped-query attention's key and value heads divide the query heads,
// and a tensor-parallel split divides them too; refusals name the value
// and what would be valid.
func TestKVHeads(t *testing.T) {
	c := mustPreset(t, "tiny-llama") // 4 query heads, 2 key and value heads
	if c.KV() != 2 || c.LayerParams() != 2*64*64+2*64*32+3*64*256+2*64 {
		t.Errorf("tiny-llama: %d key and value heads, %d parameters a block", c.KV(), c.LayerParams())
	}
	for _, tc := range []struct {
		kv   int
		want string
	}{{3, "kv heads 3 does not divide heads 4 (valid: 1, 2, 4, or 0 for 4)"}, {-1, "kv heads -1"}, {8, "kv heads 8 does not divide heads 4"}} {
		bad := c
		bad.KVHeads = tc.kv
		if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("kv heads %d: %v, want %q", tc.kv, err, tc.want)
		}
	}
	if _, err := c.TensorRank(4, 0); err == nil || !strings.Contains(err.Error(), "4 tensor-parallel ranks do not divide the 2 key and value heads (valid: a divisor of them, 1, 2)") {
		t.Errorf("4 tensor-parallel ranks of 2 key and value heads: %v", err)
	}
	s := Setup{Model: c, Batch: 1, Seq: 8, Precision: BF16, Optimizer: Adam, Ranks: 1, TP: 4, PP: 1}
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "tensor-parallel ranks 4 do not divide the 2 key and value heads (valid: 1, 2)") {
		t.Errorf("a setup of 4 tensor-parallel ranks: %v", err)
	}
	r, err := c.TensorRank(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	qkv, _ := r.ParamByName("h0.attn.qkv.w")
	// rank 1 holds query rows 32..64 and key and value rows 16..32 of each
	// 32-row part: [q 0..64 | k 64..96 | v 96..128] of the whole tensor.
	if want := [][2]int{{32, 64}, {80, 96}, {112, 128}}; fmt.Sprint(qkv.Split.Ranges) != fmt.Sprint(want) || qkv.Shape[0] != 64 {
		t.Errorf("rank 1 of 2: qkv rows %v of shape %v, want %v of 64 rows", qkv.Split.Ranges, qkv.Shape, want)
	}
	if !strings.Contains(c.String(), "2 key and value heads") {
		t.Errorf("String does not give the key and value heads: %s", c)
	}
}
