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
