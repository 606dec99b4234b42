package model

import (
	"strings"
	"testing"
)

// qloraAdapterConfig is an adapter_config.json as PEFT 0.10 writes it for
// the QLoRA recipe on Llama 2 7B (r 64, α 16, dropout 0.1, every linear
// layer), field for field.
const qloraAdapterConfig = `{
  "alpha_pattern": {},
  "auto_mapping": null,
  "base_model_name_or_path": "meta-llama/Llama-2-7b-hf",
  "bias": "none",
  "fan_in_fan_out": false,
  "inference_mode": true,
  "init_lora_weights": true,
  "layer_replication": null,
  "layers_pattern": null,
  "layers_to_transform": null,
  "loftq_config": {},
  "lora_alpha": 16,
  "lora_dropout": 0.1,
  "megatron_config": null,
  "megatron_core": "megatron.core",
  "modules_to_save": null,
  "peft_type": "LORA",
  "r": 64,
  "rank_pattern": {},
  "revision": null,
  "target_modules": ["down_proj", "up_proj", "gate_proj", "o_proj", "v_proj", "k_proj", "q_proj"],
  "task_type": "CAUSAL_LM",
  "use_dora": false,
  "use_rslora": false
}`

// PEFT's adapter_config.json reads as the LoRA it describes; its defaults
// are LoraConfig's; what trainmem cannot honour is refused by field name,
// and a dropout it does not model is noted.
func TestPEFTConfig(t *testing.T) {
	llama, _ := Preset("llama2-7b")
	gpt2, _ := Preset("gpt2")
	l, notes, err := ParsePEFTConfig([]byte(qloraAdapterConfig), llama)
	if err != nil {
		t.Fatal(err)
	}
	all := TargetQ | TargetK | TargetV | TargetO | TargetGate | TargetUp | TargetDown
	if want := (LoRA{Rank: 64, Alpha: 16, Targets: all}); l != want {
		t.Errorf("read %+v, want %+v", l, want)
	}
	if l.Scale() != 0.25 {
		t.Errorf("scale %g, want α/r = 0.25", l.Scale())
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "lora_dropout 0.1") {
		t.Errorf("notes %q, want one on lora_dropout", notes)
	}
	// LoraConfig's defaults: r 8, α 8, the architecture's targets.
	if l, _, err := ParsePEFTConfig([]byte(`{"peft_type": "LORA"}`), gpt2); err != nil || l != (LoRA{Rank: 8, Alpha: 8, Targets: TargetQKV}) {
		t.Errorf("defaults on gpt2: %+v %v", l, err)
	}
	if l, _, err := ParsePEFTConfig([]byte(`{"peft_type": "LORA", "r": 16, "lora_alpha": 32, "use_rslora": true, "target_modules": "all-linear"}`), llama); err != nil || !l.RSLoRA || l.Scale() != 8 || l.Targets != all {
		t.Errorf("rslora, all-linear: %+v %v", l, err)
	}
	for _, tc := range []struct{ json, want string }{
		{`{"peft_type": "PREFIX_TUNING"}`, "peft_type"},
		{`{"peft_type": "LORA", "use_dora": true}`, "use_dora"},
		{`{"peft_type": "LORA", "bias": "all"}`, "bias"},
		{`{"peft_type": "LORA", "modules_to_save": ["lm_head"]}`, "modules_to_save"},
		{`{"peft_type": "LORA", "layers_to_transform": [0, 1]}`, "layers_to_transform"},
		{`{"peft_type": "LORA", "rank_pattern": {"q_proj": 4}}`, "rank_pattern"},
		{`{"peft_type": "LORA", "target_modules": ".*proj"}`, "regular expression"},
		{`{"peft_type": "LORA", "target_modules": ["c_attn"]}`, "c_attn"},
		{`{"peft_type": "LORA", "r": 0}`, "rank 0"},
		{`{"peft_type": "LORA", "r": "8"}`, "r: a JSON string"},
		{`{"peft_type": "LORA", "R": 8}`, "case-sensitive"},
		{`[1]`, "one JSON object"},
	} {
		if _, _, err := ParsePEFTConfig([]byte(tc.json), llama); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "valid") {
			t.Errorf("%s: %v, want a refusal naming %q and what is valid", tc.json, err, tc.want)
		}
	}
}
