package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"trainmem/model"
	"trainmem/zero"
	"unicode/utf8"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// runArgs runs trainmem with args and returns stdout, stderr and the exit
// status main would give.
func runArgs(t testing.TB, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	if err != nil {
		errb.WriteString("trainmem: " + err.Error() + "\n")
	}
	return out.String(), errb.String(), exitCode(err)
}

// mustRun runs trainmem with args, fails t unless it exits 0, and returns
// stdout and stderr.
func mustRun(t testing.TB, args ...string) (string, string) {
	t.Helper()
	out, errOut, code := runArgs(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	return out, errOut
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/trainmem -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test ./cmd/trainmem -update rewrites it after review):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// The README's main command: the source articles' setup.
var xlArgs = []string{"estimate", "--preset", "gpt2-xl", "--batch", "32", "--seq", "1000", "--precision", "fp16"}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"estimate_gpt2-xl.txt", xlArgs},
		{"estimate_gpt2-xl.json", append(append([]string{}, xlArgs...), "--format", "json")},
		{"estimate_gpt2-xl.csv", append(append([]string{}, xlArgs...), "--format", "csv")},
		{"estimate_gpt2-xl_full.txt", append(append([]string{}, xlArgs...), "--checkpoint", "full")},
		{"estimate_zero_table1.txt", []string{"estimate", "--params", "7.5e9", "--precision", "fp16", "--ranks", "64", "--zero", "3"}},
		{"estimate_parallel.txt", []string{"estimate", "--preset", "gpt2-xl", "--batch", "8", "--precision", "bf16", "--tp", "5", "--pp", "4", "--ranks", "8", "--zero", "3", "--checkpoint", "selective", "--sequence-parallel"}},
		{"fit_gpt2-xl.txt", []string{"fit", "--preset", "gpt2-xl", "--seq", "1024", "--precision", "bf16", "--ranks", "8", "--memory", "80GiB"}},
		{"fit_gpt2-xl.json", []string{"fit", "--preset", "gpt2-xl", "--seq", "1024", "--precision", "bf16", "--ranks", "8", "--memory", "80GiB", "--format", "json"}},
		{"fit_ranks.txt", []string{"fit", "--preset", "gpt2-xl", "--seq", "1000", "--batch", "32", "--precision", "fp16", "--ranks", "8", "--memory", "32GB"}},
		{"fit_zero_table1.txt", []string{"fit", "--params", "7.5e9", "--precision", "fp16", "--ranks", "64", "--memory", "32GB"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _ := mustRun(t, tc.args...)
			golden(t, tc.name, out)
		})
	}
}

// The JSON that issue 2 promises, with the source articles' numbers:
// gpt2-xl has 1,557,611,200 parameters; mixed fp16 Adam model states are
// 16Φ (3.1 GB of fp16 weights, 24.9 GB in all); the ZeRO paper's
// activations are 12·h·b·s·L = 29.49e9 values, 58.98 GB in 16 bits.
func TestEstimateJSON(t *testing.T) {
	out, errOut, code := runArgs(t, append(append([]string{}, xlArgs...), "--format", "json")...)
	if code != 0 {
		t.Fatal(errOut)
	}
	var doc struct {
		Model struct {
			Params int64 `json:"params"`
		} `json:"model"`
		ModelStates map[string]int64 `json:"model_states"`
		Activations map[string]int64 `json:"activations"`
		Formula     string           `json:"formula"`
		TotalBytes  int64            `json:"total_bytes"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	const phi = 1557611200
	if doc.Model.Params != phi {
		t.Errorf("model.params = %d", doc.Model.Params)
	}
	want := map[string]int64{"params": 2 * phi, "grads": 2 * phi, "master": 4 * phi, "adam_m": 4 * phi, "adam_v": 4 * phi, "total": 16 * phi}
	for k, v := range want {
		if doc.ModelStates[k] != v {
			t.Errorf("model_states.%s = %d, want %d", k, doc.ModelStates[k], v)
		}
	}
	if doc.Activations["zero_paper"] != 58982400000 {
		t.Errorf("activations.zero_paper = %d, want 58,982,400,000", doc.Activations["zero_paper"])
	}
	if doc.Activations["korthikanti"] == 0 || doc.Formula != "korthikanti" {
		t.Errorf("activations.korthikanti = %d, formula %q", doc.Activations["korthikanti"], doc.Formula)
	}
	if doc.TotalBytes != 16*phi+doc.Activations["korthikanti"] {
		t.Errorf("total_bytes = %d, want model states + korthikanti", doc.TotalBytes)
	}
	// --formula zero_paper puts the ZeRO paper's activations in total_bytes.
	out, _, _ = runArgs(t, append(append([]string{}, xlArgs...), "--format", "json", "--formula", "zero_paper")...)
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.TotalBytes != 16*phi+58982400000 {
		t.Errorf("zero_paper total_bytes = %d (%v)", doc.TotalBytes, err)
	}
}

// The text table shows the articles' figures: about 3 GB of fp16 weights,
// 24.92 GB of model states, 58.98 GB of ZeRO-paper activations; the ZeRO
// paper's Table 1 figures come out of --params.
func TestTextShowsPublishedNumbers(t *testing.T) {
	out, _, _ := runArgs(t, xlArgs...)
	for _, want := range []string{"1,557,611,200 parameters", "3.12 GB", "24.92 GB", "58.98 GB", "Section 3.2", "Korthikanti"} {
		if !strings.Contains(out, want) {
			t.Errorf("estimate output lacks %q", want)
		}
	}
	for _, tc := range []struct {
		ranks, zero, want string
	}{
		{"64", "1", "31.41 GB"}, {"64", "2", "16.64 GB"}, {"64", "3", "1.88 GB"},
		{"4", "1", "52.50 GB"}, {"4", "2", "41.25 GB"}, {"4", "3", "30.00 GB"}, {"1", "0", "120.00 GB"},
	} {
		out, _, code := runArgs(t, "estimate", "--params", "7.5e9", "--precision", "fp16", "--ranks", tc.ranks, "--zero", tc.zero)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("ZeRO-%s on %s ranks: want %s in\n%s", tc.zero, tc.ranks, tc.want, out)
		}
	}
	// A 6B model's fp32 weights, about 22 GiB (the 6b preset: 22.57 GiB).
	out, _, _ = runArgs(t, "estimate", "--preset", "6b", "--seq", "1")
	if !strings.Contains(out, "22.57 GiB") {
		t.Errorf("6b fp32 weights: want 22.57 GiB in\n%s", out)
	}
}

// Bad input: one line that names the value and what is valid, exit 2.
func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"estimate", "--preset", "gpt2", "--heads", "7"}, []string{"heads 7", "valid"}},
		{[]string{"estimate", "--layers", "0", "--hidden", "64", "--heads", "4"}, []string{"--layers 0", "valid"}},
		{[]string{"estimate", "--layers", "-3", "--hidden", "64", "--heads", "4"}, []string{"--layers -3", "valid"}},
		{[]string{"estimate", "--preset", "tiny", "--batch", "0"}, []string{"--batch 0", "valid"}},
		{[]string{"estimate", "--preset", "tiny", "--ranks", "0"}, []string{"--ranks 0", "valid"}},
		{[]string{"estimate", "--preset", "gpt5"}, []string{`"gpt5"`, "valid", "gpt2-xl"}},
		{[]string{"estimate", "--preset", "tiny", "--precision", "fp8"}, []string{`"fp8"`, "fp32, fp16, bf16"}},
		{[]string{"estimate", "--preset", "tiny", "--optimizer", "lion"}, []string{`"lion"`, "adam, adamw, sgd, momentum"}},
		{[]string{"estimate", "--preset", "tiny", "--checkpoint", "half"}, []string{`"half"`, "every:K"}},
		{[]string{"estimate", "--preset", "tiny", "--checkpoint", "every:0"}, []string{"every:0", "valid"}},
		{[]string{"estimate", "--preset", "tiny", "--checkpoint", "every:3"}, []string{"every:3", "1 to the 2 layers"}},
		{[]string{"estimate", "--preset", "tiny", "--zero", "4"}, []string{"--zero 4", "0, 1, 2, 3"}},
		{[]string{"estimate", "--preset", "tiny", "--freeze", "wte"}, []string{`"wte"`, "embeddings, layers:N", "head"}},
		{[]string{"estimate", "--preset", "tiny", "--freeze", "layers:3"}, []string{"layers:3", "2 blocks", "layers:1 to layers:2"}},
		{[]string{"simulate", "--preset", "tiny", "--freeze", "layers:2,head"}, []string{"nothing to train"}},
		{[]string{"estimate", "--preset", "tiny", "--quantize", "nf4"}, []string{"quantize nf4", "tiny has none", "--lora-rank", "--freeze layers:N"}},
		{[]string{"simulate", "--preset", "tiny", "--quantize", "int4"}, []string{`"int4"`, "none, nf4"}},
		{[]string{"estimate", "--params", "7e9", "--freeze", "embeddings"}, []string{"--freeze", "--params"}},
		{[]string{"simulate", "--preset", "tiny", "--freeze", "head", "--ranks", "2", "--pp", "2"}, []string{"freezing head", "pipeline stages", "not yet"}},
		{[]string{"estimate", "--preset", "tiny", "--tp", "3"}, []string{"3", "do not divide the 4 heads", "valid"}},
		{[]string{"estimate", "--preset", "tiny", "--seq", "65"}, []string{"65", "valid"}},
		{[]string{"estimate", "--preset", "tiny", "--format", "xml"}, []string{`"xml"`, "text, json, csv"}},
		{[]string{"estimate", "--preset", "tiny", "--formula", "chen"}, []string{`"chen"`, "zero_paper, korthikanti"}},
		{[]string{"estimate"}, []string{"no model", "--preset", "or --params"}},
		{[]string{"estimate", "--hidden", "64"}, []string{"missing: --layers, --heads"}},
		{[]string{"estimate", "--params", "7.5"}, []string{`"7.5"`, "whole number"}},
		{[]string{"estimate", "--params", "7.5e9", "--preset", "gpt2"}, []string{"--params"}},
		{[]string{"estimate", "--preset", "tiny", "--bogus"}, []string{"bogus", "-h"}},
		{[]string{"estimate", "--preset", "tiny", "extra"}, []string{`"extra"`}},
		{[]string{"estimate", "--preset", "tiny", "--batch", "many"}, []string{`"many"`, "-batch"}},
		{[]string{"fit", "--preset", "tiny", "--memory", "80XB"}, []string{`"80XB"`, "GiB"}},
		{[]string{"fit", "--preset", "tiny"}, []string{"--memory is required"}},
		{[]string{"frobnicate"}, []string{`"frobnicate"`, "estimate, fit"}},
		{[]string{}, []string{"no subcommand", "estimate"}},
	} {
		wantUsage(t, tc.args, tc.want...)
	}
}

func TestHelp(t *testing.T) {
	out, _, code := runArgs(t, "help")
	if code != 0 || !strings.Contains(out, "estimate") || !strings.Contains(out, "fit") {
		t.Errorf("help: exit %d\n%s", code, out)
	}
	for _, c := range []string{"estimate", "fit"} {
		_, errOut, code := runArgs(t, c, "-h")
		if code != 0 || !strings.Contains(errOut, "-precision") || !strings.Contains(errOut, "usage: trainmem "+c) {
			t.Errorf("%s -h: exit %d\n%s", c, code, errOut)
		}
		out, _, code := runArgs(t, "help", c)
		if code != 0 || !strings.Contains(out, "-checkpoint") {
			t.Errorf("help %s: exit %d\n%s", c, code, out)
		}
	}
}

// The 0 case is an answer: when nothing fits, fit says so and what alone
// is too large, with exit status 0.
func TestFitNothingFits(t *testing.T) {
	out, _ := mustRun(t, "fit", "--preset", "gpt2-xl", "--precision", "fp16", "--memory", "20GB")
	if !strings.Contains(out, "model states alone need 24.92 GB") {
		t.Errorf("no explanation of the 0 in\n%s", out)
	}
}

// fit --gpus answers with the smallest layout by the simulation and by the
// formula (6b on 64 cards of 24 GiB: tp 2, the data-parallel ranks the
// rest, as both say; tp 1 runs out of memory), and refuses what would
// contradict its search by name, with exit status 2.
func TestFitLayouts(t *testing.T) {
	args := []string{"fit", "--preset", "6b", "--seq", "2048", "--precision", "bf16", "--checkpoint", "selective", "--zero", "1", "--gpus", "64", "--memory", "24GiB"}
	out, _ := mustRun(t, args...)
	for _, want := range []string{"simulated:   tp 2 × pp 1 (dp 32)", "the formula: tp 2 × pp 1 (dp 32)", "no: rank 0 out of memory", "32 pipeline stages for 28 layers"} {
		if !strings.Contains(out, want) {
			t.Errorf("fit --gpus: no %q in\n%s", want, out)
		}
	}
	js, _ := mustRun(t, append(args, "--format", "json")...)
	var doc struct {
		Smallest struct{ TP, PP, DP int } `json:"simulated_smallest"`
		Layouts  []json.RawMessage        `json:"layouts"`
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil || doc.Smallest.TP != 2 || doc.Smallest.DP != 32 || len(doc.Layouts) != 28 {
		t.Errorf("fit --gpus --format json: %+v (%v)", doc.Smallest, err)
	}
	for _, bad := range [][]string{{"--tp", "2"}, {"--ranks", "4"}, {"--pp", "2"}} {
		_, errOut, code := runArgs(t, append(args, bad...)...)
		if code != 2 || !strings.Contains(errOut, "--"+bad[0][2:]+" with --gpus") {
			t.Errorf("fit --gpus %v: exit %d: %s", bad, code, errOut)
		}
	}
	if _, errOut, code := runArgs(t, "fit", "--preset", "tiny", "--gpus", "0", "--memory", "1GB"); code != 2 || !strings.Contains(errOut, "--gpus 0: out of range (valid: 1 to") {
		t.Errorf("fit --gpus 0: exit %d: %s", code, errOut)
	}
}

// fit over a pipeline: its simulation runs the pipeline's micro-batches (as
// many as its stages, the formula's M ≥ P) and simulates every stage (the
// last holds the head), so each simulated answer is the edge simulate
// finds: micro-batch B fits every rank, B+1 runs one out of memory. ZeRO-2
// and 3 with a pipeline over several ranks, which trainmem does not run,
// are refused by name, not answered by the formula alone.
func TestFitPipeline(t *testing.T) {
	base := []string{"--preset", "gpt2", "--seq", "512", "--memory", "4GB", "--tp", "2", "--pp", "2"}
	js, _ := mustRun(t, append(append([]string{"fit"}, base...), "--ranks", "2", "--format", "json")...)
	var doc struct {
		Results []struct {
			Checkpoint string `json:"checkpoint"`
			ZeRO       int    `json:"zero"`
			Formula    int    `json:"max_micro_batch"`
			Simulated  int    `json:"simulated_max_micro_batch"`
			Refused    bool   `json:"refused"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil || len(doc.Results) != 16 {
		t.Fatalf("fit over a pipeline: %d rows (%v)", len(doc.Results), err)
	}
	for _, r := range doc.Results {
		if r.ZeRO >= 2 {
			if !r.Refused || r.Formula != 0 || r.Simulated != 0 {
				t.Errorf("%s ZeRO-%d over a pipeline of 2 ranks: %+v, want refused", r.Checkpoint, r.ZeRO, r)
			}
			continue
		}
		if r.Refused || r.Simulated < 1 {
			t.Errorf("%s ZeRO-%d: %+v", r.Checkpoint, r.ZeRO, r)
			continue
		}
		if r.Checkpoint != "none" && r.Checkpoint != "selective" {
			continue // the edge is checked on two policies: each is 16 ranks' simulations
		}
		for b, want := range map[int]int{r.Simulated: 0, r.Simulated + 1: 1} {
			args := append(append([]string{"simulate"}, base...), "--ranks", "2", "--zero", strconv.Itoa(r.ZeRO), "--checkpoint", r.Checkpoint,
				"--micro-batches", "2", "--batch", strconv.Itoa(b))
			if _, errOut, code := runArgs(t, args...); code != want {
				t.Errorf("fit says %s ZeRO-%d fits micro-batch %d; simulate at %d: exit %d, want %d: %s", r.Checkpoint, r.ZeRO, r.Simulated, b, code, want, errOut)
			}
		}
	}
	out, _ := mustRun(t, append(append([]string{"fit"}, base...), "--ranks", "2")...)
	if !strings.Contains(out, "refused: ZeRO-2 and 3 with a pipeline over several ranks") {
		t.Errorf("fit's text does not say why ZeRO-2 and 3 are refused:\n%s", out)
	}
	// One rank of each stage: every ZeRO stage runs (they are alike).
	js, _ = mustRun(t, append(append([]string{"fit"}, base...), "--format", "json")...)
	if strings.Contains(js, `"refused"`) {
		t.Errorf("fit over one pipeline refuses a stage:\n%s", js)
	}
}

// FuzzRun: trainmem never panics; whatever the arguments, it either
// succeeds with output or fails with a one-line error and exit 1 or 2.
func FuzzRun(f *testing.F) {
	for _, s := range []string{
		strings.Join(xlArgs, " "),
		"estimate --params 7.5e9 --ranks 64 --zero 3 --precision fp16 --format json",
		"estimate --preset 6b --tp 4 --pp 7 --sequence-parallel --checkpoint every:2 --format csv",
		"estimate --layers 3 --hidden 48 --heads 6 --vocab 100 --context 32 --untied --checkpoint sqrt",
		"fit --preset gpt2 --memory 24GB --ranks 4",
		"fit --preset gpt2 --memory 8GiB --batch 16 --ranks 2 --checkpoint every:3",
		"fit --params 1.5B --memory 1e10",
		"fit --preset tiny --memory 1MB --gpus 12 --checkpoint full",
		"estimate --preset tiny --batch 999999999999",
		"estimate --preset tiny --heads 0",
		"fit --preset tiny --memory -1GB",
		"help estimate",
		"validate --preset gpt2 --batch 2 --seq 128 --precision bf16 --no-measure --format json",
		"validate --batch 2 --seq 8 --steps 1 --checkpoint every:2",
		"simulate --preset gpt2-medium --batch 4 --seq 512 --precision fp16 --checkpoint selective --memory 8GiB",
		"train --steps 1 --batch 1 --seq 4 --precision fp16",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		if !utf8.ValidString(line) {
			return
		}
		args := strings.Fields(line)
		if measuresLargeModel(args) {
			return // valid, only slow: a real training run
		}
		out, errOut, code := runArgs(t, args...)
		switch code {
		case 0:
			if out == "" && !strings.Contains(errOut, "usage:") {
				t.Fatalf("%q: success with no output", line)
			}
		case 1, 2:
			msg := strings.TrimSpace(errOut)
			if i := strings.LastIndex(msg, "\n"); i >= 0 && len(args) == 0 {
				// trainmem alone prints its usage before the error line.
				msg = msg[i+1:]
			}
			if !strings.HasPrefix(msg, "trainmem: ") || strings.Contains(msg, "\n") {
				t.Fatalf("%q: error output %q is not one trainmem: line", line, errOut)
			}
		default:
			t.Fatalf("%q: exit %d", line, code)
		}
	})
}

func BenchmarkEstimateCommand(b *testing.B) {
	for b.Loop() {
		runArgs(b, xlArgs...)
	}
}

func BenchmarkFitCommand(b *testing.B) {
	for b.Loop() {
		runArgs(b, "fit", "--preset", "gpt2-xl", "--seq", "1024", "--precision", "bf16", "--ranks", "8", "--memory", "80GiB")
	}
}

// measuresLargeModel reports, while fuzzing, whether args would train for
// real (train, or validate without --no-measure): valid input that takes
// seconds, which the fuzzer would flag as a hang. The seed corpus, run by
// every `go test`, still trains.
func measuresLargeModel(args []string) bool {
	if f := flag.Lookup("test.fuzz"); f == nil || f.Value.String() == "" {
		return false
	}
	if len(args) == 0 || (args[0] != "train" && args[0] != "validate") {
		return false
	}
	for _, a := range args {
		if strings.TrimLeft(a, "-") == "no-measure" {
			return false
		}
	}
	return true
}

func TestSimulateRanks(t *testing.T) {
	cfg, err := model.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	phi := int(cfg.NumParams())
	const N = 3
	for _, tc := range []struct {
		args         []string
		master, sent int // bytes per rank: master's peak, all traffic sent in the step (flags aside)
	}{
		{[]string{"--zero", "1"}, 4 * zero.ShardLen(phi, N), 2 * 2 * (N - 1) * zero.ShardLen(phi, N)},
		{[]string{"--zero", "0"}, 4 * phi, -1},
		{[]string{"--zero", "2", "--bucket-mb", "1000000"}, 4 * zero.ShardLen(phi, N), 2 * 2 * (N - 1) * zero.ShardLen(phi, N)},
		{[]string{"--data-parallel", "ps"}, -1, -1},
	} {
		args := append([]string{"simulate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--precision", "bf16", "--ranks", "3", "--format", "json"}, tc.args...)
		out, _ := mustRun(t, args...)
		var doc struct {
			Ranks []struct {
				PeakRequested map[string]int64 `json:"peak_requested"`
				Traffic       []struct {
					Collective string `json:"collective"`
					SentBytes  int64  `json:"sent_bytes"`
				} `json:"traffic"`
			} `json:"ranks"`
			States *struct {
				Master int64 `json:"master"`
			} `json:"zero_paper_states"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if len(doc.Ranks) != N {
			t.Fatalf("%v: %d ranks, want %d", tc.args, len(doc.Ranks), N)
		}
		for r, rk := range doc.Ranks {
			m := rk.PeakRequested["master"]
			switch {
			case tc.master >= 0 && m != int64(tc.master):
				t.Errorf("%v rank %d: master %d bytes, want %d", tc.args, r, m, tc.master)
			case tc.master < 0 && (r == 0) != (m > 0): // the parameter server: rank 0 only
				t.Errorf("%v rank %d: master %d bytes", tc.args, r, m)
			}
			if doc.States != nil && m != doc.States.Master {
				t.Errorf("%v rank %d: master %d bytes, the ZeRO paper's %d", tc.args, r, m, doc.States.Master)
			}
			var sent int64
			for _, tr := range rk.Traffic {
				if tr.Collective == "reduce_scatter" || tr.Collective == "all_gather" {
					sent += tr.SentBytes
				}
			}
			if tc.sent >= 0 && sent != int64(tc.sent) {
				t.Errorf("%v rank %d: sent %d bytes in the step, want %d", tc.args, r, sent, tc.sent)
			}
		}
	}
	out, _ := mustRun(t, "simulate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--ranks", "4", "--zero", "1")
	for _, want := range []string{"setting ZeRO-1 over 4 ranks", "0-3 ", "ZeRO paper", "reduce_scatter", "all_gather"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}

// simulate --tp T --ranks N runs every rank of the layout: each holds its
// tensor-parallel part's weights (ZeRO-1 pads them over the data group),
// and its tensor group's all-reduces send what the ring sends.
func TestSimulateTensorParallel(t *testing.T) {
	cfg, _ := model.Preset("tiny")
	const tp, dp, B, T = 2, 2, 2, 16
	out, _ := mustRun(t, "simulate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--precision", "bf16", "--tp", "2", "--ranks", "2", "--zero", "1", "--format", "json")
	var doc struct {
		Ranks []struct {
			Rank          int              `json:"rank"`
			PeakRequested map[string]int64 `json:"peak_requested"`
			ByGroup       map[string][]struct {
				Collective string `json:"collective"`
				Calls      int64  `json:"calls"`
				SentBytes  int64  `json:"sent_bytes"`
			} `json:"traffic_by_group"`
		} `json:"ranks"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Ranks) != tp*dp {
		t.Fatalf("%d ranks, want %d", len(doc.Ranks), tp*dp)
	}
	part, _ := cfg.TensorRank(tp, 0)
	wantParams := int64(2 * zero.PaddedLen(int(part.NumParams()), dp))
	// The ring sends 2(t-1)/t of each all-reduced buffer: four a block and
	// two more (the embedding's lookups and the head's input gradient) of
	// N·C bf16 activations, and the cross entropy's N maxima and 2N sums
	// in fp32.
	n := int64(B * T * cfg.Hidden)
	calls := int64(4*cfg.Layers + 4)
	sent := (int64(4*cfg.Layers+2)*n*2 + 3*B*T*4) * 2 * (tp - 1) / tp
	for _, rk := range doc.Ranks {
		if got := rk.PeakRequested["params"]; got != wantParams {
			t.Errorf("rank %d: params %d bytes, want the part's padded over the data group, %d", rk.Rank, got, wantParams)
		}
		tensor := rk.ByGroup["tensor"]
		if len(tensor) != 1 || tensor[0].Collective != "all_reduce" || tensor[0].Calls != calls || tensor[0].SentBytes != sent {
			t.Errorf("rank %d: tensor group traffic %+v, want %d all-reduces sending %d bytes", rk.Rank, tensor, calls, sent)
		}
		if len(rk.ByGroup["data"]) == 0 {
			t.Errorf("rank %d: no data group traffic", rk.Rank)
		}
	}
	out, _ = mustRun(t, "simulate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--tp", "2", "--ranks", "2", "--zero", "1")
	for _, want := range []string{"over 4 ranks (dp 2 × tp 2 × pp 1)", "1/2 of every block's heads", "0-3 ", "tensor      all_reduce", "data  reduce_scatter"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	wantUsage(t, []string{"simulate", "--preset", "tiny", "--tp", "3"}, "3", "do not divide the 4 heads")
}

// simulate --ranks N --sweep zero sets every data-parallel setting side by
// side: each ZeRO stage holds less than the one before (with buckets small
// beside the model: a ZeRO-2 bucket of the whole model would hold it all
// in flight), ZeRO-3 sends half as much again as DDP (3Φ against 2Φ), and
// the paper's numbers sit beside.
func TestSimulateSweepZero(t *testing.T) {
	out, _ := mustRun(t, "simulate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--precision", "bf16", "--ranks", "4", "--sweep", "zero", "--bucket-mb", "0.05", "--format", "json")
	var doc struct {
		Rows []struct {
			Setting     string `json:"setting"`
			ModelStates int64  `json:"model_states_bytes"`
			Sent        int64  `json:"sent_bytes"`
			PaperStates *int64 `json:"zero_paper_model_states_bytes"`
		} `json:"settings"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Rows) != 5 || doc.Rows[0].Setting != "parameter server" || doc.Rows[0].PaperStates != nil {
		t.Fatalf("rows %+v, want the parameter server and ZeRO-0 to 3", doc.Rows)
	}
	for i := 2; i < 5; i++ {
		if doc.Rows[i].ModelStates >= doc.Rows[i-1].ModelStates || doc.Rows[i].PaperStates == nil {
			t.Errorf("%s holds %d bytes of model states, %s %d: want less", doc.Rows[i].Setting, doc.Rows[i].ModelStates, doc.Rows[i-1].Setting, doc.Rows[i-1].ModelStates)
		}
	}
	if ddp, z3 := doc.Rows[1].Sent, doc.Rows[4].Sent; z3 < ddp*14/10 || z3 > ddp*16/10 {
		t.Errorf("ZeRO-3 sends %d bytes a step, DDP %d: want about 1.5×", z3, ddp)
	}
	for _, tc := range []struct{ args, want []string }{
		{[]string{"--sweep", "zero"}, []string{"--sweep zero", "--ranks N"}},
		{[]string{"--ranks", "2", "--sweep", "zero", "--zero", "1"}, []string{"drop --zero"}},
		{[]string{"--ranks", "2", "--sweep", "stages"}, []string{`"stages"`, "valid: zero"}},
	} {
		wantUsage(t, append([]string{"simulate", "--preset", "tiny"}, tc.args...), tc.want...)
	}
}
