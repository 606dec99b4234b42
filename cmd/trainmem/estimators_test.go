package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// estimate sets DeepSpeed's table and Megatron-LM's report beside its own:
// gpt2-xl in fp16 over 64 ranks at ZeRO-3 is the 759,722,950 bytes
// a GPU by DeepSpeed's functions (4·wte + int(18Φ/64)), 4 GPUs a node
// making 16 nodes, and a buffer factor of 2 scaling only the CPU column.
func TestEstimateEstimators(t *testing.T) {
	out, errOut, code := runArgs(t, "estimate", "--preset", "gpt2-xl", "--seq", "1024", "--precision", "fp16", "--ranks", "64", "--zero", "3",
		"--gpus-per-node", "4", "--buffer-factor", "2", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var d struct {
		Estimators struct {
			DeepSpeed struct {
				Estimator string  `json:"estimator"`
				Largest   int64   `json:"largest_layer_params"`
				Nodes     int     `json:"num_nodes"`
				PerNode   int     `json:"num_gpus_per_node"`
				Factor    float64 `json:"additional_buffer_factor"`
				Options   []struct {
					Options string `json:"options"`
					GPU     int64  `json:"gpu_bytes"`
					CPU     int64  `json:"cpu_bytes_per_node"`
					This    bool   `json:"this_setup"`
				} `json:"options"`
			} `json:"deepspeed"`
			Megatron struct {
				WeightsAndOptimizer int64   `json:"weights_and_optimizer_bytes"`
				BytesPerParam       float64 `json:"bytes_per_param"`
			} `json:"megatron"`
		} `json:"estimators"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	ds := d.Estimators.DeepSpeed
	if ds.Estimator != "estimate_zero3_model_states_mem_needs" || ds.Largest != 80411200 || ds.Nodes != 16 || ds.PerNode != 4 || ds.Factor != 2 || len(ds.Options) != 6 {
		t.Fatalf("deepspeed: %+v", ds)
	}
	// offload none, zero_init=1: 4·largest_layer_params·num_gpus_per_node·factor.
	this := ds.Options[4]
	if !this.This || this.Options != "offload_param=none, offload_optimizer=none, zero_init=1" || this.GPU != 759722950 || this.CPU != 80411200*4*4*2 {
		t.Errorf("the setup's row: %+v", this)
	}
	if m := d.Estimators.Megatron; m.BytesPerParam != 6+12.0/64 || m.WeightsAndOptimizer == 0 {
		t.Errorf("megatron: %+v", m)
	}
	// Offloading the weights and the optimizer: DeepSpeed's row of the
	// setup is offload_param=cpu, and trainmem's node holds its 8 ranks'
	// offloaded states, 16 bytes for each of their ceil(Φ/8) parameters:
	// 16Φ = 24,921,779,200 bytes.
	off, _, code := runArgs(t, "estimate", "--preset", "gpt2-xl", "--seq", "1024", "--precision", "bf16", "--ranks", "8", "--zero", "3", "--offload", "params")
	if code != 0 {
		t.Fatalf("--offload params: exit %d", code)
	}
	for _, want := range []string{"offload_param=cpu, offload_optimizer=cpu, zero_init=1 (this setup)", "24,921,779,200", "offloaded to host memory, a rank's"} {
		if !strings.Contains(off, want) {
			t.Errorf("--offload params: the estimate lacks %q:\n%s", want, off)
		}
	}
	text, _, _ := runArgs(t, "estimate", "--params", "7.5B", "--precision", "bf16", "--ranks", "64", "--zero", "3", "--largest-layer", "200M")
	for _, want := range []string{"deepspeed: estimate_zero3, 8 nodes × 8 GPUs, largest layer 200,000,000 parameters", "megatron: no Megatron-LM estimate"} {
		if !strings.Contains(text, want) {
			t.Errorf("--params text lacks %q:\n%s", want, text)
		}
	}
}

func TestEstimatorFlagsRefused(t *testing.T) {
	base := []string{"estimate", "--preset", "gpt2", "--precision", "bf16", "--ranks", "8", "--zero", "2"}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--gpus-per-node", "3"}, []string{"3 GPUs a node do not divide the world of 8 ranks", "valid: 1, 2, 4, 8"}},
		{[]string{"--gpus-per-node", "-2"}, []string{"--gpus-per-node"}},
		{[]string{"--buffer-factor", "0"}, []string{"-buffer-factor", "positive number"}},
		{[]string{"--buffer-factor", "NaN"}, []string{"-buffer-factor", "NaN"}},
		{[]string{"--largest-layer", "80M"}, []string{"largest layer of 80000000 parameters given for a model shape"}},
		{[]string{"--largest-layer", "lots"}, []string{"-largest-layer", "positive parameter count"}},
	} {
		wantUsage(t, append(append([]string{}, base...), c.args...), c.want...)
	}
}

// fit --batch (or --params) answers the fewest ranks by DeepSpeed's and
// Megatron-LM's own figures too. 7.5B in fp16 on 16 GiB a GPU: DeepSpeed's
// estimate_zero2 without offload needs 2Φ + int(18Φ/N) ≤ 17,179,869,184,
// so 18Φ/N ≤ 2,179,869,184 and N ≥ 61.93: 62 ranks; estimate_zero3 with a
// 200M largest layer 4·2e8 + 18Φ/N: N ≥ 8.24, 9 ranks; with the optimizer
// offloaded, 2Φ alone (14.0 GiB) fits on one. --gpus-per-node is refused:
// no node split changes a GPU's figure.
func TestFitByEstimators(t *testing.T) {
	out, errOut, code := runArgs(t, "fit", "--params", "7.5B", "--precision", "fp16", "--largest-layer", "200M", "--memory", "16GiB", "--format", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var d struct {
		Estimators []struct {
			Estimator string `json:"estimator"`
			Options   string `json:"options"`
			MinRanks  int    `json:"min_ranks"`
			GPU       int64  `json:"gpu_bytes"`
		} `json:"estimators"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		"estimate_zero2 (offload_optimizer=none)":                                  62,
		"estimate_zero2 (offload_optimizer=cpu)":                                   1,
		"estimate_zero3 (offload_param=none, offload_optimizer=none, zero_init=1)": 9,
		"estimate_zero3 (offload_param=cpu, offload_optimizer=cpu, zero_init=1)":   1,
	}
	for _, e := range d.Estimators {
		if n, ok := want[e.Options]; ok {
			if e.MinRanks != n {
				t.Errorf("%s: %d ranks, want %d", e.Options, e.MinRanks, n)
			}
			delete(want, e.Options)
		}
		if e.Estimator == "deepspeed" && e.Options == "estimate_zero2 (offload_optimizer=none)" && e.GPU != 15000000000+int64(18*7500000000/62) {
			t.Errorf("%s at 62 ranks: %d bytes, want 2Φ + int(18Φ/62)", e.Options, e.GPU)
		}
	}
	if len(want) > 0 {
		t.Errorf("rows missing: %v in %s", want, out)
	}
	text, _ := mustRun(t, "fit", "--preset", "gpt2-xl", "--precision", "fp16", "--batch", "4", "--seq", "1024", "--checkpoint", "full", "--memory", "16GiB")
	for _, w := range []string{"by the estimators' own figures", "megatron, distributed optimizer", "deepspeed, estimate_zero3 (offload_param=none, offload_optimizer=none, zero_init=1)"} {
		if !strings.Contains(text, w) {
			t.Errorf("fit's text lacks %q:\n%s", w, text)
		}
	}
	wantUsage(t, []string{"fit", "--params", "7.5B", "--memory", "16GiB", "--gpus-per-node", "4"}, "--gpus-per-node", "no node split")
}
