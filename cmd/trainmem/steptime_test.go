package main

import (
	"encoding/json"
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
		{[]string{"estimate", "--preset", "gpt2", "--gpu", "a100", "--network", "nvlink=300,net=0"}, []string{`net`, "0 < value"}},
		{[]string{"estimate", "--preset", "gpt2", "--network", "p5"}, []string{"--network", "with --gpu"}},
		{[]string{"estimate", "--preset", "gpt2", "--gpu", "b200"}, []string{`"b200"`, "valid: h100-pcie"}},
		{[]string{"estimate", "--params", "7e9", "--gpu", "a100"}, []string{"needs a model's shape"}},
	} {
		wantUsage(t, tc.args, tc.want...)
	}
}
