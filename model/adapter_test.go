package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The adapters' tensors are PEFT's: the names get_peft_model_state_dict
// gives a LoraModel of transformers' LlamaForCausalLM and GPT2LMHeadModel
// (base_model.model.<module>.lora_A.weight, (r, in), and lora_B, (out,
// r); GPT-2's Conv1D modules too), and their elements the trainable
// parameters PEFT prints (TestLoRAParamsArePEFTs).
func TestAdapterTensors(t *testing.T) {
	for _, tc := range []struct {
		preset, targets string
		rank            int
		tensors         int
		first           AdapterTensor // the first two tensors
		second          AdapterTensor
		named           map[string][2]int // more names and shapes
	}{
		{"llama2-7b", "q_proj,v_proj", 8, 128,
			AdapterTensor{Name: "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", Shape: [2]int{8, 4096}},
			AdapterTensor{Name: "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", Shape: [2]int{4096, 8}},
			map[string][2]int{"base_model.model.model.layers.31.self_attn.v_proj.lora_B.weight": {4096, 8}}},
		{"llama3-8b", "all-linear", 16, 448,
			AdapterTensor{Name: "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight", Shape: [2]int{16, 4096}},
			AdapterTensor{Name: "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight", Shape: [2]int{4096, 16}},
			map[string][2]int{"base_model.model.model.layers.3.self_attn.k_proj.lora_B.weight": {1024, 16}, // 8 key heads of 128
				"base_model.model.model.layers.3.mlp.up_proj.lora_B.weight":   {14336, 16},
				"base_model.model.model.layers.3.mlp.down_proj.lora_A.weight": {16, 14336}}},
		{"gpt2", "c_attn", 8, 24,
			AdapterTensor{Name: "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight", Shape: [2]int{8, 768}},
			AdapterTensor{Name: "base_model.model.transformer.h.0.attn.c_attn.lora_B.weight", Shape: [2]int{2304, 8}},
			map[string][2]int{"base_model.model.transformer.h.11.attn.c_attn.lora_B.weight": {2304, 8}}},
		{"gpt2", "all-linear", 4, 96,
			AdapterTensor{Name: "base_model.model.transformer.h.0.attn.c_attn.lora_A.weight", Shape: [2]int{4, 768}},
			AdapterTensor{Name: "base_model.model.transformer.h.0.attn.c_attn.lora_B.weight", Shape: [2]int{2304, 4}},
			map[string][2]int{"base_model.model.transformer.h.5.mlp.c_proj.lora_A.weight": {4, 3072}, "base_model.model.transformer.h.5.attn.c_proj.lora_B.weight": {768, 4}}},
	} {
		c, err := Preset(tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		tg, err := c.ParseLoRATargets(tc.targets)
		if err != nil {
			t.Fatal(err)
		}
		c.LoRA = LoRA{Rank: tc.rank, Alpha: 16, Targets: tg}
		ts, err := c.AdapterTensors()
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != tc.tensors {
			t.Errorf("%s %s: %d tensors, want %d", tc.preset, tc.targets, len(ts), tc.tensors)
		}
		var sum int64
		byName := map[string]AdapterTensor{}
		for _, x := range ts {
			sum += x.Count
			byName[x.Name] = x
			if int64(x.Shape[0])*int64(x.Shape[1]) != x.Count {
				t.Errorf("%s: shape %v of %d elements", x.Name, x.Shape, x.Count)
			}
		}
		if sum != c.NumTrained() {
			t.Errorf("%s %s: the tensors hold %d elements, the trained parameters are %d", tc.preset, tc.targets, sum, c.NumTrained())
		}
		if ts[0].Name != tc.first.Name || ts[0].Shape != tc.first.Shape || ts[1].Name != tc.second.Name || ts[1].Shape != tc.second.Shape {
			t.Errorf("%s %s: first tensors %s %v, %s %v", tc.preset, tc.targets, ts[0].Name, ts[0].Shape, ts[1].Name, ts[1].Shape)
		}
		for name, shape := range tc.named {
			if x, ok := byName[name]; !ok || x.Shape != shape {
				t.Errorf("%s %s: %s is %v (present %t), want %v", tc.preset, tc.targets, name, x.Shape, ok, shape)
			}
		}
	}
}

// WriteAdapter then LoadAdapter gives the adapters back bit for bit and
// leaves the rest of the table alone; a file of another LoRA is refused by
// the tensor it lacks or has too many, or one of another shape.
func TestAdapterRoundTrip(t *testing.T) {
	c, err := Preset("tiny-llama")
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := c.ParseLoRATargets("all-linear")
	c.LoRA = LoRA{Rank: 4, Alpha: 8, Targets: tg, RSLoRA: true}
	params := InitParams(c, 3)
	for _, p := range c.Params() {
		if strings.HasSuffix(p.Name, ".lora_b") {
			for i := p.Offset; i < p.Offset+p.Count; i++ {
				params[i] = float32(i%97) / 1000
			}
		}
	}
	dir := t.TempDir()
	if err := WriteAdapter(dir, c, params); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, len(params))
	for i := range got {
		got[i] = -7
	}
	if err := LoadAdapter(dir, c, got); err != nil {
		t.Fatal(err)
	}
	for _, p := range c.Params() {
		for i := p.Offset; i < p.Offset+p.Count; i++ {
			if p.Frozen && got[i] != -7 || !p.Frozen && got[i] != params[i] {
				t.Fatalf("%s[%d] = %v after the round trip, want %v", p.Name, i-p.Offset, got[i], params[i])
			}
		}
	}
	l, _, err := ReadAdapterConfig(dir, c)
	if err != nil {
		t.Fatal(err)
	}
	if l != c.LoRA {
		t.Errorf("adapter_config.json reads back as %+v, want %+v", l, c.LoRA)
	}
	// Another LoRA's file: fewer targets (a tensor too many), a larger
	// rank (another shape), more targets (a tensor missing).
	for _, tc := range []struct {
		targets string
		rank    int
		want    string
	}{{"q_proj,v_proj", 4, "is no adapter of"}, {"all-linear", 8, "has shape [4 64], want [8 64]"}} {
		o := c
		o.LoRA.Rank = tc.rank
		if o.LoRA.Targets, err = o.ParseLoRATargets(tc.targets); err != nil {
			t.Fatal(err)
		}
		err := LoadAdapter(dir, o, make([]float32, o.NumParams()))
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), AdapterWeightsFile) {
			t.Errorf("a file of r 4 on all-linear for r %d on %s: %v, want %q naming the file", tc.rank, tc.targets, err, tc.want)
		}
	}
	small := c
	small.LoRA.Targets, _ = small.ParseLoRATargets("q_proj")
	sdir := t.TempDir()
	if err := WriteAdapter(sdir, small, InitParams(small, 1)); err != nil {
		t.Fatal(err)
	}
	if err := LoadAdapter(sdir, c, make([]float32, c.NumParams())); err == nil || !strings.Contains(err.Error(), "no tensor base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight") {
		t.Errorf("a file of q_proj only for all-linear: %v", err)
	}
	if err := os.WriteFile(filepath.Join(sdir, AdapterWeightsFile), []byte("not safetensors"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := LoadAdapter(sdir, small, make([]float32, small.NumParams())); err == nil || !strings.Contains(err.Error(), "--load-adapter") {
		t.Errorf("a broken file: %v", err)
	}
}

// InitAdapters initialises a LoRA's rows as InitParams does and leaves
// the base's (a file's) alone: adapters over loaded base weights train
// (A random, B zero), where zero adapters would never move.
func TestInitAdapters(t *testing.T) {
	c, err := Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	c.LoRA = LoRA{Rank: 2, Alpha: 8, Targets: TargetQKV | TargetDown}
	want := InitParams(c, 5)
	got := make([]float32, len(want))
	for i := range got {
		got[i] = 3
	}
	InitAdapters(c, 5, got)
	for _, p := range c.Params() {
		for i := p.Offset; i < p.Offset+p.Count; i++ {
			if adapter := !p.Frozen; adapter && got[i] != want[i] || !adapter && got[i] != 3 {
				t.Fatalf("%s[%d] = %v, want %v", p.Name, i-p.Offset, got[i], map[bool]float32{true: want[i], false: 3}[adapter])
			}
		}
	}
}
