package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Golden files for the outputs that are deterministic: without a measured
// run (no timings, no host name), text and JSON, and the sweep's memory.
func TestValidateGolden(t *testing.T) {
	xl := []string{"validate", "--preset", "gpt2-xl", "--batch", "32", "--seq", "1000", "--precision", "fp16", "--no-measure"}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"validate_tiny.txt", []string{"validate", "--no-measure"}},
		{"validate_gpt2-xl.txt", xl},
		{"validate_gpt2-xl_full.json", append(append([]string{}, xl...), "--checkpoint", "full", "--format", "json")},
		{"validate_sweep_gpt2-xl.txt", []string{"validate", "--sweep", "checkpoint", "--preset", "gpt2-xl", "--batch", "32", "--seq", "1000", "--precision", "fp16", "--no-measure"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _ := mustRun(t, tc.args...)
			golden(t, tc.name, out)
		})
	}
}

type validateJSON struct {
	Model struct {
		Params int64 `json:"params"`
	} `json:"model"`
	Device string `json:"device"`
	Rows   []struct {
		Category  string            `json:"category"`
		Estimate  map[string]*int64 `json:"estimate"`
		Simulated *int64            `json:"simulated"`
		Measured  *int64            `json:"measured"`
	} `json:"rows"`
	Explanations []string          `json:"explanations"`
	Sources      map[string]string `json:"sources"`
}

// The measured report on tiny (the default setup): the JSON has every row
// with exact bytes, measured equal to simulated, model states at 16 bytes a
// parameter under mixed-precision Adam; the text has the table and the
// explanations; progress goes to stderr.
func TestValidateMeasured(t *testing.T) {
	out, errOut := mustRun(t, "validate", "--precision", "fp16", "--steps", "2", "--format", "json")
	if !strings.Contains(errOut, "step 2/2") {
		t.Errorf("no progress on stderr: %q", errOut)
	}
	var doc validateJSON
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.Device, "host") || len(doc.Explanations) == 0 || doc.Sources["korthikanti"] == "" {
		t.Errorf("device %q, %d explanations, sources %v", doc.Device, len(doc.Explanations), doc.Sources)
	}
	rows := map[string]int{}
	for i, r := range doc.Rows {
		rows[r.Category] = i
		if r.Simulated == nil || r.Measured == nil || *r.Simulated != *r.Measured {
			t.Errorf("%s: simulated %v, measured %v", r.Category, r.Simulated, r.Measured)
		}
		if len(r.Estimate) != 3 {
			t.Errorf("%s: estimate %v, want the three formulas", r.Category, r.Estimate)
		}
	}
	for _, c := range []string{"params", "grads", "master", "adam_m", "adam_v", "model_states", "activations", "temporaries", "workspace",
		"allocator_rounding", "total_peak", "reserved_minus_allocated", "peak_reserved"} {
		if _, ok := rows[c]; !ok {
			t.Errorf("no row %q", c)
		}
	}
	if ms := doc.Rows[rows["model_states"]]; *ms.Measured != 16*doc.Model.Params {
		t.Errorf("model states measured %d bytes, want 16·Φ = %d", *ms.Measured, 16*doc.Model.Params)
	}
	if tmp := doc.Rows[rows["temporaries"]]; tmp.Estimate["zero_paper"] != nil {
		t.Errorf("temporaries: zero_paper says %d, want null", *tmp.Estimate["zero_paper"])
	}

	out, _, code := runArgs(t, "validate", "--steps", "2", "--checkpoint", "every:2")
	for _, w := range []string{"model     tiny", "checkpoint every:2", "measured  default corpus, 2 steps on host", "total peak (allocated)", "why they differ", "dropout masks", "byte for byte, in every row"} {
		if code != 0 || !strings.Contains(out, w) {
			t.Errorf("exit %d; text lacks %q:\n%s", code, w, out)
		}
	}
}

// The measured sweep: every policy, the bar charts, and the plot file.
func TestValidateSweep(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "sweep.svg")
	out, errOut := mustRun(t, "validate", "--sweep", "checkpoint", "--steps", "2", "--batch", "4", "--seq", "32", "--plot", plot)
	for _, w := range []string{"none", "selective", "full", "sqrt", "step time (median)", "activation memory (measured peak)", "█", "plot written to"} {
		if !strings.Contains(out, w) {
			t.Errorf("sweep text lacks %q:\n%s", w, out)
		}
	}
	if !strings.Contains(errOut, "sweep: step 2/2") {
		t.Errorf("no progress on stderr: %q", errOut)
	}
	if b, err := os.ReadFile(plot); err != nil || !strings.Contains(string(b), "<svg") {
		t.Errorf("plot: %v", err)
	}
	out, errOut, code := runArgs(t, "validate", "--sweep", "checkpoint", "--no-measure", "--format", "json")
	var doc struct {
		Setup map[string]any `json:"setup"`
		Rows  []struct {
			Policy    string           `json:"policy"`
			Estimate  map[string]int64 `json:"estimate"`
			Simulated int64            `json:"simulated"`
			Measured  *int64           `json:"measured"`
			StepMs    *float64         `json:"step_ms"`
		} `json:"rows"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &doc) != nil || len(doc.Rows) != 4 {
		t.Fatalf("exit %d (%s): %s", code, errOut, out)
	}
	if _, ok := doc.Setup["checkpoint"]; ok {
		t.Error("the sweep's setup names one checkpoint policy")
	}
	for _, r := range doc.Rows {
		if r.Measured != nil || r.StepMs != nil || r.Estimate["trainmem"] != r.Simulated {
			t.Errorf("%s: measured %v, step %v, trainmem %d vs simulated %d", r.Policy, r.Measured, r.StepMs, r.Estimate["trainmem"], r.Simulated)
		}
	}
}

// Bad input: one line naming the value and what is valid, exit 2.
func TestValidateBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--checkpoint", "half"}, []string{`"half"`, "none, full, every:K", "sqrt, selective"}},
		{[]string{"--checkpoint", "every:0"}, []string{"every:0", "K must be a positive integer", "valid"}},
		{[]string{"--checkpoint", "every:3"}, []string{"every:3", "valid", "K from 1 to the 2 layers"}},
		{[]string{"--checkpoint", "every:x"}, []string{"every:x", "valid"}},
		{[]string{"--sweep", "batch"}, []string{`"batch"`, "valid: checkpoint"}},
		{[]string{"--sweep", "checkpoint", "--checkpoint", "full"}, []string{"--checkpoint full", "every policy"}},
		{[]string{"--sweep", "checkpoint", "--plot", "out.gif"}, []string{"out.gif", ".svg, .png"}},
		{[]string{"--plot", "out.svg"}, []string{"--plot", "--sweep checkpoint"}},
		{[]string{"--sweep", "checkpoint", "--steps", "1"}, []string{"--steps 1", "at least 2"}},
		{[]string{"--steps", "-1"}, []string{"--steps -1", "positive"}},
		{[]string{"--format", "csv"}, []string{`"csv"`, "-format", "valid: text, json"}},
		{[]string{"--ranks", "9"}, []string{"--ranks 9", "at most 8", "--no-measure"}},
		{[]string{"--ranks", "2", "--sweep", "checkpoint"}, []string{"--sweep checkpoint runs one rank"}},
		{[]string{"--tp", "3"}, []string{"tensor-parallel ranks 3", "do not divide the 4 heads"}},
		{[]string{"--tp", "2", "--ranks", "8"}, []string{"--ranks 8 with --tp 2 and --pp 1 (16 ranks)", "at most 8"}},
		{[]string{"--device", "tpu"}, []string{`"tpu"`, "host, cuda"}},
		{[]string{"--device", "cuda"}, []string{"--device cuda", "make build-cuda", "-tags trainmem_cuda"}},
		{[]string{"--seq", "65"}, []string{"65", "valid"}},
		{[]string{"--preset", "gpt5"}, []string{`"gpt5"`, "gpt2-xl"}},
	} {
		wantUsage(t, append([]string{"validate"}, tc.args...), tc.want...)
	}
	// A measured run that cannot fit the host (6b at b=64, s=2048
	// reserves terabytes) is refused as bad input for this machine, and
	// says how to do without one.
	_, errOut, code := runArgs(t, "validate", "--preset", "6b", "--batch", "64", "--seq", "2048")
	if code != 2 || !strings.Contains(errOut, "--no-measure") || !strings.Contains(errOut, "free") {
		t.Errorf("6b measured on the host: exit %d: %s", code, errOut)
	}
}

func TestValidateHelp(t *testing.T) {
	_, errOut, code := runArgs(t, "validate", "-h")
	for _, w := range []string{"usage: trainmem validate", "-sweep", "-no-measure", "-device", "-plot", "-checkpoint"} {
		if code != 0 || !strings.Contains(errOut, w) {
			t.Errorf("validate -h: exit %d, lacks %q", code, w)
		}
	}
}

func TestValidateRanks(t *testing.T) {
	for _, set := range [][]string{{"--zero", "0", "--bucket-mb", "0.1"}, {"--zero", "1"}, {"--zero", "2", "--bucket-mb", "0.1"}, {"--zero", "3"}, {"--data-parallel", "ps"}} {
		args := append([]string{"validate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--precision", "bf16", "--ranks", "3", "--steps", "2", "--format", "json"}, set...)
		out, _ := mustRun(t, args...)
		doc := parseRankReport(t, strings.Join(set, " "), out)
		if len(doc.Ranks) != 3 {
			t.Fatalf("%v: %d ranks, want 3", set, len(doc.Ranks))
		}
		for _, r := range doc.Ranks {
			if len(r.Measured) == 0 || r.MeasSent == nil || *r.MeasSent != r.SimSent || r.SimSent == 0 {
				t.Errorf("%v rank %d: sent %d simulated, %v measured", set, r.Rank, r.SimSent, r.MeasSent)
			}
			for c, v := range r.Simulated {
				if r.Measured[c] != v {
					t.Errorf("%v rank %d %s: simulated %d, measured %d", set, r.Rank, c, v, r.Measured[c])
				}
			}
		}
	}
	out, _ := mustRun(t, "validate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--ranks", "64", "--zero", "3", "--no-measure")
	for _, want := range []string{"ranks simulated: 0, 1, 2, 32, 62, 63", "zero_paper", "gathered", "the ZeRO paper, Section 7"} {
		if !strings.Contains(out, want) {
			t.Errorf("validate --ranks 64 --no-measure lacks %q:\n%s", want, out)
		}
	}
}
