package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// LoRA from the flags and from PEFT's adapter_config.json: the same
// adapters either way (the flags overriding the file), the dropout the
// file asks noted, and bad values refused with exit status 2.
func TestLoRAFlags(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "adapter_config.json")
	if err := os.WriteFile(cfg, []byte(`{"peft_type": "LORA", "r": 16, "lora_alpha": 32, "lora_dropout": 0.05, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"], "bias": "none"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile, errOut := mustRun(t, "estimate", "--preset", "llama2-7b", "--precision", "bf16", "--seq", "1024", "--peft-config", cfg, "--format", "csv")
	if !strings.Contains(errOut, "note: --peft-config") || !strings.Contains(errOut, "lora_dropout 0.05") {
		t.Errorf("no note on the dropout: %q", errOut)
	}
	fromFlags, _ := mustRun(t, "estimate", "--preset", "llama2-7b", "--precision", "bf16", "--seq", "1024", "--lora-rank", "16", "--lora-alpha", "32", "--lora-targets", "attention", "--format", "csv")
	if fromFile != fromFlags {
		t.Errorf("--peft-config and the same --lora flags differ:\n%s\n%s", fromFile, fromFlags)
	}
	// q, k, v and o at r 16 over 32 layers of h 4096: 32·4·16·8192 =
	// 16,777,216 adapter parameters, 16 bytes each, beside 2 bytes a
	// frozen one of the 6,738,415,616.
	for _, want := range []string{"model_states,params,33554432", "model_states,adam_v,67108864", "model_states,frozen,13476831232"} {
		if !strings.Contains(fromFile, want) {
			t.Errorf("no %s in\n%s", want, fromFile)
		}
	}
	over, _ := mustRun(t, "estimate", "--preset", "llama2-7b", "--precision", "bf16", "--seq", "1024", "--peft-config", cfg, "--lora-rank", "8", "--format", "csv")
	if !strings.Contains(over, "model_states,params,16777216") {
		t.Errorf("--lora-rank 8 did not override the file's r:\n%s", over)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"estimate", "--preset", "llama2-7b", "--lora-rank", "8", "--lora-targets", "c_attn"}, []string{`"c_attn"`, "q_proj", "all-linear"}},
		{[]string{"estimate", "--preset", "gpt2", "--lora-rank", "0"}, []string{"--lora-rank 0", "valid: 1 to"}},
		{[]string{"estimate", "--preset", "gpt2", "--lora-alpha", "16"}, []string{"--lora-alpha", "--lora-rank"}},
		{[]string{"estimate", "--preset", "gpt2", "--lora-rank", "8", "--freeze", "embeddings"}, []string{"--freeze", "valid: one of them"}},
		{[]string{"estimate", "--preset", "gpt2", "--lora-rank", "8", "--tp", "2"}, []string{"LoRA", "tensor-parallel", "not yet"}},
		{[]string{"estimate", "--preset", "gpt2", "--peft-config", filepath.Join(dir, "none.json")}, []string{"none.json"}},
		{[]string{"estimate", "--params", "7e9", "--lora-rank", "8"}, []string{"--lora-rank", "--params"}},
	} {
		wantUsage(t, tc.args, tc.want...)
	}
}

// The README's fine-tuning answer: llama2-7b with LoRA r 16 on every
// linear layer fits micro-batch 10 on a 24 GiB card with full
// checkpointing, by simulation and by formula, where full fine-tuning's
// model states alone are 107.81 GB.
func TestREADMELoRAFit(t *testing.T) {
	out, _ := mustRun(t, "fit", "--preset", "llama2-7b", "--seq", "2048", "--precision", "bf16", "--attention", "flash", "--lora-rank", "16", "--lora-targets", "all-linear", "--memory", "24GiB")
	if !strings.Contains(out, "\nfull            10 / 10") {
		t.Errorf("no micro-batch 10 with full checkpointing in\n%s", out)
	}
	full, _ := mustRun(t, "fit", "--preset", "llama2-7b", "--seq", "2048", "--precision", "bf16", "--memory", "80GiB")
	if !strings.Contains(full, "107.81 GB") {
		t.Errorf("no 107.81 GB of model states in\n%s", full)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "micro-batch 10 with\nfull checkpointing on 24 GiB") || !strings.Contains(string(readme), "are 107.81 GB") {
		t.Error("README.md no longer says what this test checks")
	}
	// fit --method all: QLoRA r 64's 6.42 GB of model states and
	// micro-batch 17 with full checkpointing on 24 GiB.
	methods, _ := mustRun(t, "fit", "--preset", "llama2-7b", "--seq", "2048", "--precision", "bf16", "--attention", "flash", "--method", "all", "--memory", "24GiB")
	if !regexp.MustCompile(`qlora r 64 +159,907,840 +full +adam +6\.42 GB \(5\.98 GiB\) +17 / 17`).MatchString(methods) {
		t.Errorf("no QLoRA r 64 of 6.42 GB at micro-batch 17 with full checkpointing in\n%s", methods)
	}
	if !strings.Contains(string(readme), "6.42 GB of model\nstates and micro-batch 17 with full checkpointing on 24 GiB") {
		t.Error("README.md no longer says what this test checks of fit --method")
	}
}

// estimate's JSON gives a fine-tune's frozen weights beside the other
// model states, which sum to its total.
func TestEstimateJSONFrozen(t *testing.T) {
	out, _ := mustRun(t, "estimate", "--preset", "gpt2", "--freeze", "layers:6", "--precision", "bf16", "--format", "json")
	var doc struct {
		States map[string]int64 `json:"model_states"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	sum := int64(0)
	for k, v := range doc.States {
		if k != "total" {
			sum += v
		}
	}
	// wte, wpe and 6 blocks of gpt2 at 2 bytes: (50257+1024)·768 + 6·7,087,872.
	if want := 2 * int64((50257+1024)*768+6*7087872); doc.States["frozen"] != want || sum != doc.States["total"] {
		t.Errorf("model_states %v: frozen want %d, and the states summing to the total", doc.States, want)
	}
	// QLoRA's: the model says its LoRA and quantization, the states the
	// codes (frozen) and their scales (quant_state), still summing up.
	out, _ = mustRun(t, "estimate", "--preset", "llama2-7b", "--lora-rank", "64", "--lora-targets", "all-linear", "--quantize", "nf4", "--precision", "bf16", "--seq", "512", "--format", "json")
	var q struct {
		Model struct {
			Trained  int64  `json:"trained_params"`
			Quantize string `json:"quantize"`
			LoRA     struct {
				Rank    int      `json:"r"`
				Targets []string `json:"target_modules"`
			} `json:"lora"`
		} `json:"model"`
		States map[string]int64 `json:"model_states"`
	}
	if err := json.Unmarshal([]byte(out), &q); err != nil {
		t.Fatal(err)
	}
	sum = 0
	for k, v := range q.States {
		if k != "total" {
			sum += v
		}
	}
	// 6,476,005,376 linear weights in 224 matrices of 4096·4096 (q, k,
	// v, o: 16,777,216 each, 262,144 blocks of 64, 1,024 scales of 256)
	// and 4096·11008 (gate, up, down: 45,088,768, 704,512 blocks, 2,752
	// scales): codes n/2, state blocks + 4·blocks/256 + 4 each.
	codes := int64(6476005376 / 2)
	state := int64(128*(262144+4*1024+4) + 96*(704512+4*2752+4))
	frozen := 2*int64(6738415616-6476005376) + codes
	if q.Model.Trained != 159907840 || q.Model.Quantize != "nf4" || q.Model.LoRA.Rank != 64 || len(q.Model.LoRA.Targets) != 7 ||
		q.States["frozen"] != frozen || q.States["quant_state"] != state || sum != q.States["total"] {
		t.Errorf("QLoRA's JSON: model %+v, states %v; want 159,907,840 trained, frozen %d, quant_state %d", q.Model, q.States, frozen, state)
	}
}

// fit --method: each way of fine-tuning with and without checkpointing and
// 8-bit states, in JSON with the adapters and the quantization named; the
// flags it searches itself refused.
func TestFitMethodFlag(t *testing.T) {
	out, _ := mustRun(t, "fit", "--preset", "gpt2", "--seq", "256", "--precision", "bf16", "--optimizer", "adamw", "--method", "qlora", "--memory", "3GiB", "--format", "json")
	var doc struct {
		Results []struct {
			Method     string `json:"method"`
			Rank       int    `json:"lora_rank"`
			Quantize   string `json:"quantize"`
			Checkpoint string `json:"checkpoint"`
			Optimizer  string `json:"optimizer"`
			Batch      int    `json:"simulated_max_micro_batch"`
			Card       int64  `json:"smallest_card_bytes"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Results) != 4 {
		t.Fatalf("%d rows, want 4 (2 policies × 2 optimizers):\n%s", len(doc.Results), out)
	}
	for _, r := range doc.Results {
		if r.Method != "qlora" || r.Rank != 64 || r.Quantize != "nf4" || r.Batch < 1 || r.Card != 16<<30 {
			t.Errorf("row %+v: want qlora r 64 in nf4, a micro-batch and the 16 GiB class", r)
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"fit", "--preset", "gpt2", "--method", "most", "--memory", "3GiB"}, []string{`"most"`, "full, lora, qlora, all"}},
		{[]string{"fit", "--preset", "gpt2", "--method", "all", "--batch", "4", "--memory", "3GiB"}, []string{"--batch with --method"}},
		{[]string{"fit", "--preset", "gpt2", "--method", "all", "--optimizer", "sgd", "--memory", "3GiB"}, []string{"sgd", "valid: adam, adamw"}},
	} {
		wantUsage(t, tc.args, tc.want...)
	}
}

// Adapters as people exchange them, end to end: a LoRA trained with
// --save-adapter and --save; --load-adapter starts from the adapters (its
// first loss is the trained model's), and the merged checkpoint --save
// wrote, loaded as a plain model, gives that loss too (within fp32's
// rounding of the merge); the flags refuse a model with no LoRA and a
// directory with no adapters.
func TestAdapterFlags(t *testing.T) {
	dir := t.TempDir()
	ad, merged := filepath.Join(dir, "adapter"), filepath.Join(dir, "merged.bin")
	mustRun(t, "train", "--preset", "tiny", "--steps", "5", "--lr", "3e-3", "--lora-rank", "4", "--lora-targets", "all-linear", "--save-adapter", ad, "--save", merged)
	first := func(args ...string) float64 {
		t.Helper()
		out := filepath.Join(t.TempDir(), "r.jsonl")
		mustRun(t, append([]string{"train", "--steps", "1", "--out", out}, args...)...)
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var rec struct {
			Loss float64 `json:"loss"`
		}
		if err := json.Unmarshal([]byte(strings.SplitN(string(b), "\n", 2)[0]), &rec); err != nil {
			t.Fatal(err)
		}
		return rec.Loss
	}
	fresh := first("--preset", "tiny", "--lora-rank", "4", "--lora-targets", "all-linear")
	loaded := first("--preset", "tiny", "--load-adapter", ad)
	plain := first("--preset", "tiny", "--load", merged)
	if math.Abs(loaded-plain) > 1e-5*plain || math.Abs(loaded-fresh) < 1e-3 {
		t.Errorf("first losses: fresh adapters %.6f, loaded ones %.6f, the merged checkpoint %.6f", fresh, loaded, plain)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"train", "--preset", "tiny", "--steps", "1", "--save-adapter", filepath.Join(dir, "x")}, []string{"--save-adapter", "no LoRA", "--lora-rank"}},
		{[]string{"train", "--preset", "tiny", "--steps", "1", "--load-adapter", filepath.Join(dir, "none")}, []string{"adapter_config.json"}},
		{[]string{"train", "--preset", "tiny", "--steps", "1", "--load-adapter", ad, "--peft-config", filepath.Join(ad, "adapter_config.json")}, []string{"give one of them"}},
	} {
		wantUsage(t, tc.args, tc.want...)
	}
}
