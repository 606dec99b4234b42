package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// estimate --gpu: the step's time by formula in text and JSON, each
// checkpoint policy's time beside its memory (recomputing costs time:
// full recomputation is slower than none, by about its extra FLOPs), and
// the flags' bad input refused by name.
func TestEstimateStepTime(t *testing.T) {
	out, _ := mustRun(t, "estimate", "--preset", "gpt2-xl", "--batch", "8", "--seq", "1024", "--precision", "bf16", "--ranks", "16", "--gpu", "a100", "--network", "p4d", "--format", "json")
	var doc struct {
		StepTime struct {
			Card     string  `json:"card"`
			Network  string  `json:"network"`
			GPUs     int     `json:"gpus"`
			StepMs   float64 `json:"step_ms"`
			DataComm float64 `json:"data_comm_ms"`
			MFU      float64 `json:"mfu"`
			HFU      float64 `json:"hfu"`
		} `json:"step_time"`
		Policies []struct {
			Policy    string  `json:"policy"`
			StepMs    float64 `json:"step_ms"`
			Recompute float64 `json:"recompute_fraction"`
		} `json:"checkpoint_policies"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	st := doc.StepTime
	if st.Card != "A100 SXM 80GB" || st.Network != "p4d" || st.GPUs != 16 || !(st.StepMs > 0) || !(st.MFU > 0.2 && st.MFU < 0.87) || st.HFU != st.MFU || !(st.DataComm > 0) {
		t.Errorf("step_time %+v: want 16 A100s over p4d, a step, an MFU under the matmul fraction, HFU = MFU without recomputation, the gradients' all-reduce", st)
	}
	times := map[string]float64{}
	for _, p := range doc.Policies {
		times[p.Policy] = p.StepMs
	}
	if none, full := times["none"], times["full"]; !(none > 0 && full > 1.15*none && full < 1.45*none) {
		t.Errorf("policies' steps %v: full recomputation should cost about a third more than none", times)
	}
	text, _ := mustRun(t, "estimate", "--preset", "gpt2-xl", "--batch", "8", "--seq", "1024", "--precision", "bf16", "--gpu", "h100")
	for _, want := range []string{"step time by formula on 1 × H100 SXM, dgx-h100", "MFU", "optimizer step", "recompute    step    MFU"} {
		if !strings.Contains(text, want) {
			t.Errorf("estimate --gpu h100 text lacks %q:\n%s", want, text)
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"estimate", "--preset", "gpt2", "--gpu", "a100", "--network", "infiniband"}, []string{`"infiniband"`, "dgx-a100, dgx-h100, p4d, p5"}},
		{[]string{"estimate", "--preset", "gpt2", "--gpu", "a100", "--network", "nvlink=300,net=0"}, []string{`net "0"`, "out of range", "0.001 to 1e6 GB/s"}},
		{[]string{"estimate", "--preset", "gpt2", "--network", "p5"}, []string{"--network", "with --gpu"}},
		{[]string{"estimate", "--preset", "gpt2", "--gpu", "b200"}, []string{`"b200"`, "valid: h100-pcie"}},
		{[]string{"estimate", "--params", "7e9", "--gpu", "a100"}, []string{"needs a model's shape"}},
	} {
		wantUsage(t, tc.args, tc.want...)
	}
}

// fit --objective time on the issue's own example, llama3-8b on 8 H100s
// at a global batch of 128 sequences of 8192 (NVIDIA's Megatron-Bridge
// recipe llama3_8b_pretrain_8gpu_h100_bf16_config: GBS 128, MBS 1, tp 1,
// pp 1, cp 2): the fastest layout fits, plain data parallelism over 8 does
// not (16 bytes a parameter of states alone pass 80 GiB), and the flags'
// bad input is refused by name.
func TestFitObjectiveTime(t *testing.T) {
	out, _ := mustRun(t, "fit", "--preset", "llama3-8b", "--seq", "8192", "--precision", "bf16", "--attention", "flash", "--checkpoint", "full",
		"--gpus", "8", "--memory", "80GiB", "--objective", "time", "--global-batch", "128", "--gpu", "h100", "--format", "json")
	var doc struct {
		Question string `json:"question"`
		Layouts  []struct {
			TP, PP, DP int
			NotFit     string  `json:"not_fit"`
			Micro      int     `json:"micro_batch"`
			Headroom   int64   `json:"headroom_bytes"`
			CommShare  float64 `json:"comm_and_bubble_share"`
			StepTime   *struct {
				StepMs float64 `json:"step_ms"`
				MFU    float64 `json:"mfu"`
			} `json:"step_time"`
		} `json:"layouts"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Question != "fastest_layout" || len(doc.Layouts) == 0 {
		t.Fatalf("fit --objective time: %s", out)
	}
	best := doc.Layouts[0]
	if best.StepTime == nil || best.Micro < 1 || best.Headroom < 0 || !(best.StepTime.MFU > 0.2 && best.StepTime.MFU < 0.803) {
		t.Errorf("fastest layout %+v: want a fitting micro-batch, headroom ≥ 0, an MFU under the H100's matmul fraction", best)
	}
	t.Logf("llama3-8b on 8 H100s: fastest tp %d × pp %d × dp %d, micro-batch %d, step %.2f s, MFU %.1f%%", best.TP, best.PP, best.DP, best.Micro, best.StepTime.StepMs/1e3, 100*best.StepTime.MFU)
	// The README's example says this answer.
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	said := fmt.Sprintf("tp %d × pp %d × dp %d\nat micro-batch %d, %.1f s a step, MFU %.1f%%", best.TP, best.PP, best.DP, best.Micro, best.StepTime.StepMs/1e3, 100*best.StepTime.MFU)
	if !strings.Contains(strings.Join(strings.Fields(string(readme)), " "), strings.Join(strings.Fields(said), " ")) {
		t.Errorf("README.md no longer says fit --objective time's answer: %q", said)
	}
	for _, l := range doc.Layouts {
		if l.TP == 1 && l.PP == 1 && !strings.Contains(l.NotFit, "does not fit") {
			t.Errorf("tp 1 × pp 1 × dp 8 under ZeRO-0: %+v, want it not to fit", l)
		}
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"fit", "--preset", "gpt2", "--memory", "8GiB", "--gpus", "4", "--objective", "speed"}, []string{`"speed"`, "valid: memory, time"}},
		{[]string{"fit", "--preset", "gpt2", "--memory", "8GiB", "--objective", "time"}, []string{"--gpus"}},
		{[]string{"fit", "--preset", "gpt2", "--memory", "8GiB", "--gpus", "4", "--global-batch", "8"}, []string{"--global-batch", "--objective time"}},
		{[]string{"fit", "--preset", "gpt2", "--memory", "8GiB", "--gpus", "4", "--objective", "time", "--batch", "2"}, []string{"--batch", "--global-batch"}},
		{[]string{"fit", "--preset", "gpt2", "--memory", "8GiB", "--gpus", "4", "--objective", "time", "--gpu", "none"}, []string{"needs a card"}},
		{[]string{"fit", "--preset", "gpt2", "--memory", "8GiB", "--gpus", "4", "--objective", "time", "--global-batch", "0"}, []string{"--global-batch 0"}},
		{[]string{"fit", "--preset", "gpt2", "--memory", "8GiB", "--gpus", "4", "--objective", "time", "--network", "x"}, []string{`"x"`, "p5"}},
	} {
		wantUsage(t, tc.args, tc.want...)
	}
}
