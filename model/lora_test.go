package model

import (
	"strings"
	"testing"
)

// The trainable parameters of a LoRA are PEFT's: its rule (peft/tuners/
// lora/layer.py, LoraLayer.update_layer: lora_A = nn.Linear(in_features,
// r), lora_B = nn.Linear(r, out_features), no biases) gives each targeted
// module r·(in + out), summed here over the Hugging Face modules' own
// shapes (q_proj 4096→4096, k_proj and v_proj 4096→kv, o_proj, gate_proj
// and up_proj 4096→F, down_proj F→4096; GPT-2's Conv1D c_attn 768→2304,
// c_proj 768→768 and 3072→768, c_fc 768→3072), and equals the counts PEFT's
// print_trainable_parameters() prints for these configurations:
//
//   - Llama-2-7b, r 8, q_proj and v_proj (PEFT's default for LLaMA):
//     "trainable params: 4,194,304 || all params: 6,742,609,920";
//   - Llama-2-7b, r 16 and r 64 on every linear layer (QLoRA's choice):
//     39,976,960 and 159,907,840 trainable;
//   - gpt2, r 8, c_attn (PEFT's default for GPT-2): "trainable params:
//     294,912 || all params: 124,734,720".
func TestLoRAParamsArePEFTs(t *testing.T) {
	module := func(r, in, out int) int64 { return int64(r) * int64(in+out) }
	for _, tc := range []struct {
		preset, targets string
		r               int
		printed         int64 // PEFT's trainable count, where quoted above
		all             int64 // and its all-params count
	}{
		{"llama2-7b", "q_proj,v_proj", 8, 4194304, 6742609920},
		{"llama2-7b", "all-linear", 16, 39976960, 0},
		{"llama2-7b", "all-linear", 64, 159907840, 0},
		{"gpt2", "c_attn", 8, 294912, 124734720},
		{"llama3-8b", "all-linear", 16, 0, 0},
		{"gpt2", "c_attn,c_proj,c_fc", 4, 0, 0},
		{"tinyllama-1.1b", "attention", 8, 0, 0},
	} {
		c, err := Preset(tc.preset)
		if err != nil {
			t.Fatal(err)
		}
		targets, err := c.ParseLoRATargets(tc.targets)
		if err != nil {
			t.Fatal(err)
		}
		base := c.NumParams()
		c.LoRA = LoRA{Rank: tc.r, Alpha: 16, Targets: targets}
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		// PEFT's rule over the Hugging Face modules targeted.
		h, kv, F, L := c.Hidden, c.KV()*c.HeadDim(), c.FFNWidth(), int64(c.Layers)
		shapes := map[string][2]int{
			"q_proj": {h, h}, "k_proj": {h, kv}, "v_proj": {h, kv}, "o_proj": {h, h},
			"gate_proj": {h, F}, "up_proj": {h, F}, "down_proj": {F, h},
			"c_attn": {h, 3 * h}, "attn.c_proj": {h, h}, "c_fc": {h, F}, "mlp.c_proj": {F, h},
		}
		var want int64
		for _, name := range targets.Names(c) { // GPT-2's c_proj is named as its two modules
			s, ok := shapes[name]
			if !ok {
				t.Fatalf("%s: no module %s", tc.preset, name)
			}
			want += L * module(tc.r, s[0], s[1])
		}
		got := c.NumTrained()
		if got != want {
			t.Errorf("%s r %d %s (%v): %d trained, PEFT's rule gives %d", tc.preset, tc.r, tc.targets, targets.Names(c), got, want)
		}
		if tc.printed > 0 && got != tc.printed {
			t.Errorf("%s r %d %s: %d trained, PEFT prints %d", tc.preset, tc.r, tc.targets, got, tc.printed)
		}
		if tc.all > 0 && c.NumParams() != tc.all {
			t.Errorf("%s r %d %s: %d parameters in all, PEFT prints %d", tc.preset, tc.r, tc.targets, c.NumParams(), tc.all)
		}
		if c.NumFrozen() != base {
			t.Errorf("%s: %d frozen, want the base model's %d", tc.preset, c.NumFrozen(), base)
		}
	}
}

// Target names are PEFT's for the architecture, and the shorthands; a
// name of the other architecture, or a LoRA the model cannot take, is
// refused naming what is valid.
func TestLoRATargets(t *testing.T) {
	llama, _ := Preset("llama2-7b")
	gpt2, _ := Preset("gpt2")
	for _, tc := range []struct {
		c    Config
		in   string
		want LoRATargets
	}{
		{llama, "q_proj,v_proj", TargetQ | TargetV},
		{llama, "attention", TargetQ | TargetK | TargetV | TargetO},
		{llama, "all-linear", TargetQ | TargetK | TargetV | TargetO | TargetGate | TargetUp | TargetDown},
		{gpt2, "c_attn", TargetQKV},
		{gpt2, "c_proj", TargetO | TargetDown},
		{gpt2, "all-linear", TargetQKV | TargetO | TargetFC | TargetDown},
	} {
		got, err := tc.c.ParseLoRATargets(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("%s %q: %#x %v, want %#x", tc.c.Name, tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		c  Config
		in string
	}{{llama, "c_attn"}, {gpt2, "q_proj"}, {gpt2, ""}, {llama, "lm_head"}} {
		if _, err := tc.c.ParseLoRATargets(tc.in); err == nil || !strings.Contains(err.Error(), "valid") {
			t.Errorf("%s %q: %v, want a refusal naming the valid targets", tc.c.Name, tc.in, err)
		}
	}
	for _, l := range []LoRA{{Rank: 0, Alpha: 8, Targets: TargetQ}, {Rank: 8, Alpha: 0, Targets: TargetQ}, {Rank: 8, Alpha: 8, Targets: TargetQKV}, {Rank: 5000, Alpha: 8, Targets: TargetQ}} {
		c := llama
		c.LoRA = l
		if err := c.Validate(); err == nil {
			t.Errorf("llama2-7b took LoRA %+v", l)
		}
	}
	c := llama
	c.LoRA, c.Freeze = LoRA{Rank: 8, Alpha: 8, Targets: TargetQ}, Freeze{Embeddings: true}
	if err := c.Validate(); err == nil {
		t.Error("LoRA with --freeze was accepted")
	}
}
