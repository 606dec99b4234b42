package model

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The config.json files of openai-community/gpt2, meta-llama/Llama-2-7b-hf,
// meta-llama/Meta-Llama-3-8B and TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T
// on the Hugging Face hub, as published (every field; nothing can be
// downloaded here, so they are written out; the last two have no
// _name_or_path, so their names are "llama").
const (
	hfGPT2 = `{
  "activation_function": "gelu_new",
  "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1,
  "bos_token_id": 50256,
  "embd_pdrop": 0.1,
  "eos_token_id": 50256,
  "initializer_range": 0.02,
  "layer_norm_epsilon": 1e-05,
  "model_type": "gpt2",
  "n_ctx": 1024,
  "n_embd": 768,
  "n_head": 12,
  "n_layer": 12,
  "n_positions": 1024,
  "resid_pdrop": 0.1,
  "summary_activation": null,
  "summary_first_dropout": 0.1,
  "summary_proj_to_labels": true,
  "summary_type": "cls_index",
  "summary_use_proj": true,
  "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
  "vocab_size": 50257
}`
	hfLlama2 = `{
  "_name_or_path": "meta-llama/Llama-2-7b-hf",
  "architectures": ["LlamaForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 11008,
  "max_position_embeddings": 4096,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "transformers_version": "4.31.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
}`
	hfLlama3 = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": 128001,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 8192,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
}`
	hfTinyLlama = `{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 2048,
  "initializer_range": 0.02,
  "intermediate_size": 5632,
  "max_position_embeddings": 2048,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 22,
  "num_key_value_heads": 4,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "float32",
  "transformers_version": "4.35.0",
  "use_cache": true,
  "vocab_size": 32000
}`
)

// A config.json gives the preset of the same model: gpt2's is the gpt2
// preset, Llama 2 7B's the llama2-7b preset (both to the field, the name
// aside), with their parameter counts.
func TestHFConfigPresets(t *testing.T) {
	for _, tc := range []struct {
		file, preset, name string
		params             int64
	}{
		{hfGPT2, "gpt2", "gpt2", 124439808},
		{hfLlama2, "llama2-7b", "meta-llama/Llama-2-7b-hf", 6738415616},
		// Meta's model card: 8.03B; TinyLlama's README: 1.1B.
		{hfLlama3, "llama3-8b", "llama", 8030261248},
		{hfTinyLlama, "tinyllama-1.1b", "llama", 1100048384},
	} {
		c, err := ParseHFConfig([]byte(tc.file))
		if err != nil {
			t.Fatalf("%s: %v", tc.preset, err)
		}
		if c.Name != tc.name {
			t.Errorf("%s: named %q, want %q", tc.preset, c.Name, tc.name)
		}
		if got := PresetOf(c); got != tc.preset {
			t.Errorf("%s's config.json reads as %+v, which is preset %q", tc.preset, c, got)
		}
		if c.NumParams() != tc.params {
			t.Errorf("%s: %d parameters, want %d", tc.preset, c.NumParams(), tc.params)
		}
	}
}

// What the config sets beyond the presets (a width, ε, θ, a tied head),
// and every refusal, by the field's name and what would be valid.
func TestHFConfigFields(t *testing.T) {
	edit := func(file string, from, to string) string {
		if !strings.Contains(file, from) {
			t.Fatalf("no %q to edit", from)
		}
		return strings.Replace(file, from, to, 1)
	}
	// LLaMA 3 8B's θ and ε, Llama 1's tied head (as some small models tie).
	c, err := ParseHFConfig([]byte(edit(edit(edit(hfLlama2, `"rope_scaling": null,`, `"rope_scaling": null, "rope_theta": 500000.0,`),
		`"rms_norm_eps": 1e-05`, `"rms_norm_eps": 1e-06`), `"tie_word_embeddings": false`, `"tie_word_embeddings": true`)))
	if err != nil {
		t.Fatal(err)
	}
	if c.Theta() != 500000 || c.Eps() != 1e-6 || c.Untied {
		t.Errorf("θ %g, ε %g, untied %t; want 500000, 1e-6, tied", c.Theta(), c.Eps(), c.Untied)
	}
	if !strings.Contains(c.String(), "norm ε 1e-06") {
		t.Errorf("the config's String does not give its ε: %s", c)
	}
	// MistralConfig's default of 8 key and value heads.
	m, err := ParseHFConfig([]byte(edit(edit(hfLlama2, `"model_type": "llama"`, `"model_type": "mistral"`), `"num_key_value_heads": 32,`, ``)))
	if err != nil || m.KV() != 8 {
		t.Errorf("mistral without num_key_value_heads: %d key and value heads (%v), want MistralConfig's 8", m.KV(), err)
	}
	g, err := ParseHFConfig([]byte(edit(hfGPT2, `"n_layer": 12,`, `"n_layer": 12, "n_inner": 2048,`)))
	if err != nil || g.FFNWidth() != 2048 || g.GPT2() {
		t.Errorf("n_inner 2048: FFN %d, GPT2 %t, %v", g.FFNWidth(), g.GPT2(), err)
	}
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"not JSON", `{"model_type": `, []string{"not a JSON config"}},
		// The findings of trying it: trailing bytes, a second object and
		// upper-case keys were accepted; Go's types stood in the errors;
		// a huge head count listed its divisors for minutes.
		{"trailing bytes", hfGPT2 + "x", []string{"more after the config's object", "valid: one JSON object and nothing after it"}},
		{"second object", hfGPT2 + `{"n_layer": 2}`, []string{"more after the config's object"}},
		{"upper-case key", edit(hfGPT2, `"n_embd"`, `"N_EMBD"`), []string{`key "N_EMBD"`, "case-sensitive", "valid: n_embd"}},
		{"fractional width", edit(hfGPT2, `"n_embd": 768`, `"n_embd": 768.5`), []string{"n_embd: a JSON number 768.5", "valid: a whole number"}},
		{"string layers", edit(hfGPT2, `"n_layer": 12`, `"n_layer": "12"`), []string{"n_layer: a JSON string", "valid: a whole number"}},
		{"array", `[1, 2]`, []string{"not a JSON config", "valid: one JSON object"}},
		{"huge heads", edit(hfLlama2, `"num_attention_heads": 32`, `"num_attention_heads": 2305843009213693951`), []string{"num_attention_heads 2305843009213693951", "out of range (valid: 1 to 1,048,576)"}},
		{"prime heads", edit(edit(hfLlama2, `"num_attention_heads": 32`, `"num_attention_heads": 1048573`), `"num_key_value_heads": 32`, `"num_key_value_heads": 2`), []string{"num_key_value_heads 2", "valid: a divisor of num_attention_heads, 1, 1048573"}},
		{"no model_type", `{"n_layer": 2}`, []string{"no model_type", "valid: gpt2, llama, mistral, qwen2"}},
		{"bert", `{"model_type": "bert"}`, []string{`model_type "bert"`, "valid: gpt2, llama"}},
		{"no layers", edit(hfGPT2, `"n_layer": 12,`, ``), []string{"no n_layer"}},
		{"erf gelu", edit(hfGPT2, `"gelu_new"`, `"gelu"`), []string{"activation_function gelu", "valid: gelu_new, gelu_pytorch_tanh"}},
		{"kv heads", edit(hfLlama2, `"num_key_value_heads": 32`, `"num_key_value_heads": 3`), []string{"num_key_value_heads 3", "must divide the query heads", "valid: a divisor of num_attention_heads, 1, 2, 4, 8, 16, 32"}},
		{"gelu llama", edit(hfLlama2, `"silu"`, `"gelu"`), []string{"hidden_act gelu", "valid: silu"}},
		{"rope scaling", edit(hfLlama2, `"rope_scaling": null`, `"rope_scaling": {"type": "linear", "factor": 2.0}`), []string{"rope_scaling", "linear", "valid: null"}},
		{"head dim", edit(hfLlama2, `"use_cache": true`, `"head_dim": 64`), []string{"head_dim 64", "valid: 128"}},
		{"qwen2", edit(hfLlama2, `"model_type": "llama"`, `"model_type": "qwen2"`), []string{"qwen2", "q, k and v projections have biases"}},
		{"mistral window", edit(edit(hfLlama2, `"model_type": "llama"`, `"model_type": "mistral"`), `"use_cache": true`, `"sliding_window": 1024`), []string{"sliding_window 1024", "valid: null, or at least max_position_embeddings, 4096"}},
		{"epsilon", edit(hfLlama2, `"rms_norm_eps": 1e-05`, `"rms_norm_eps": 0`), []string{"rms_norm_eps 0", "valid: above 0"}},
		{"no heads", edit(edit(edit(hfLlama2, `"num_attention_heads": 32`, `"num_attention_heads": 0`), `"num_key_value_heads": 32`, `"num_key_value_heads": 0`), `"use_cache": true`, `"head_dim": 64`), []string{"num_attention_heads 0", "not a head count"}},
		{"no width", edit(hfLlama2, `"intermediate_size": 11008`, `"intermediate_size": 0`), []string{"intermediate_size 0", "not an MLP width"}},
		{"gpt2 width", edit(hfGPT2, `"n_layer": 12,`, `"n_layer": 12, "n_inner": -1,`), []string{"n_inner -1"}},
		{"unscaled gpt2", edit(hfGPT2, `"n_layer": 12,`, `"n_layer": 12, "scale_attn_weights": false,`), []string{"scale_attn_weights false", "valid: true"}},
		{"mistral defaults to a window of 4096", edit(edit(edit(hfLlama2, `"model_type": "llama"`, `"model_type": "mistral"`), `"max_position_embeddings": 4096`, `"max_position_embeddings": 32768`), `"use_cache": true`, `"use_cache": true`), []string{"sliding_window 4096", "32768"}},
		{"attention bias alone", edit(hfLlama2, `"use_cache": true`, `"attention_bias": true`), []string{"attention_bias true", "or mlp_bias true too"}},
		{"heads", edit(edit(hfLlama2, `"num_attention_heads": 32`, `"num_attention_heads": 30`), `"num_key_value_heads": 32`, `"num_key_value_heads": 30`), []string{"heads 30 does not divide hidden 4096"}},
	} {
		if _, err := ParseHFConfig([]byte(tc.file)); err == nil {
			t.Errorf("%s: accepted", tc.name)
		} else {
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: %q lacks %q", tc.name, err, w)
				}
			}
		}
	}
	// Both biases are all of the linear layers' biases; a mistral window
	// of null is none.
	b, err := ParseHFConfig([]byte(edit(hfLlama2, `"use_cache": true`, `"attention_bias": true, "mlp_bias": true`)))
	if err != nil || b.NoBias {
		t.Errorf("attention_bias and mlp_bias: no bias %t, %v", b.NoBias, err)
	}
	if _, err := ParseHFConfig([]byte(edit(edit(edit(hfLlama2, `"model_type": "llama"`, `"model_type": "mistral"`), `"max_position_embeddings": 4096`, `"max_position_embeddings": 32768`), `"use_cache": true`, `"sliding_window": null`))); err != nil {
		t.Errorf("mistral with sliding_window null: %v", err)
	}
	// Mistral with its window at the context is full attention.
	if _, err := ParseHFConfig([]byte(edit(edit(hfLlama2, `"model_type": "llama"`, `"model_type": "mistral"`), `"use_cache": true`, `"sliding_window": 4096`))); err != nil {
		t.Errorf("mistral with a window of its context: %v", err)
	}
	// The file: named in the error, and a file too large for a config is
	// refused before it is read.
	dir := t.TempDir()
	bad := filepath.Join(dir, "config.json")
	if err := os.WriteFile(bad, []byte(`{"model_type": "t5"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadHFConfig(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), `model_type "t5"`) {
		t.Errorf("ReadHFConfig of a t5 config: %v", err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, make([]byte, hfConfigBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadHFConfig(big); err == nil || !strings.Contains(err.Error(), "more than a config.json's") {
		t.Errorf("ReadHFConfig of a large file: %v", err)
	}
}
