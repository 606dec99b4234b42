package main

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nlpodyssey/safetensors"

	"trainmem/model"
	"trainmem/train/data"
)

// trainmem train writes one JSON record per step with every field the
// issue names, and a checkpoint that --load takes back.
func TestTrainOutputs(t *testing.T) {
	dir := t.TempDir()
	out, save := filepath.Join(dir, "run.jsonl"), filepath.Join(dir, "tiny.bin")
	stdout, stderr := mustRun(t, "train", "--steps", "3", "--batch", "2", "--seq", "16", "--out", out, "--save", save)
	for _, w := range []string{"where the memory went", "activations", "adam_v", "reserved"} {
		if !strings.Contains(stdout, w) {
			t.Errorf("summary lacks %q:\n%s", w, stdout)
		}
	}
	if !strings.Contains(stderr, "step 3/3") {
		t.Errorf("no progress on stderr: %q", stderr)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"step", "loss", "step_ms", "forward_ms", "backward_ms", "optimizer_ms", "tokens_per_s",
			"memory", "allocated_bytes", "peak_allocated_bytes", "reserved_bytes", "active_bytes", "inactive_split_bytes", "num_allocs", "num_frees"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("record %d lacks %q", n, k)
			}
		}
		mem := rec["memory"].(map[string]any)
		for _, k := range []string{"allocated", "peak"} {
			cats, ok := mem[k].(map[string]any)
			if !ok || cats["params"] == nil || cats["activations"] == nil {
				t.Errorf("record %d: memory.%s is not keyed by category: %v", n, k, mem[k])
			}
		}
	}
	if n != 3 {
		t.Errorf("%d records, want 3", n)
	}
	// The saved weights load back, and the shape comes from the file.
	if _, stderr, code := runArgs(t, "train", "--steps", "1", "--batch", "2", "--seq", "16", "--load", save); code != 0 {
		t.Fatalf("--load: exit %d: %s", code, stderr)
	}
}

// Bad data and checkpoint files get one clear line, and a failed run
// leaves no half-written output behind.
func TestTrainBadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string { return writeFile(t, dir, name, b) }
	var big strings.Builder
	if err := data.WriteTokenFile(&big, []int32{1, 2, 3, 300, 5}); err != nil {
		t.Fatal(err)
	}
	wrongMagic := make([]byte, 1024)
	binary.LittleEndian.PutUint32(wrongMagic, 12345)
	c, _ := model.Preset("tiny")
	var ckpt strings.Builder
	if err := model.WriteCheckpoint(&ckpt, c, model.InitParams(c, 1)); err != nil {
		t.Fatal(err)
	}
	truncated := []byte(ckpt.String())[:5000]

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"missing data", []string{"--data", filepath.Join(dir, "nope.txt")}, []string{"nope.txt"}},
		{"empty data", []string{"--data", write("empty.txt", nil)}, []string{"empty"}},
		{"short data", []string{"--data", write("short.txt", []byte("hello")), "--batch", "2", "--seq", "16"}, []string{"shorter than one batch"}},
		{"token beyond vocab", []string{"--data", write("big.bin", []byte(big.String()))}, []string{"300", "256"}},
		{"wrong magic", []string{"--load", write("bad.bin", wrongMagic)}, []string{"12345", "20240326"}},
		{"truncated checkpoint", []string{"--preset", "tiny", "--load", write("trunc.bin", truncated)}, []string{"truncated"}},
		{"other shape", []string{"--preset", "tiny", "--layers", "3", "--load", write("tiny.bin", []byte(ckpt.String()))}, []string{"layers"}},
		{"seq beyond context", []string{"--seq", "65"}, []string{"65", "64"}},
		{"device", []string{"--device", "tpu"}, []string{`"tpu"`, "host, cuda"}},
		{"ranks", []string{"--ranks", "9"}, []string{"--ranks 9", "at most 8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, tc.name+".jsonl")
			args := append([]string{"train", "--steps", "2", "--out", out}, tc.args...)
			_, stderr, code := runArgs(t, args...)
			if code == 0 {
				t.Fatalf("exit 0, want an error")
			}
			last := lastLine(stderr)
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Errorf("error %q lacks %q", last, w)
				}
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a failed run left %s", out)
			}
		})
	}
}

// --device cuda in a build without the cuda tag says how to get one.
func TestTrainCUDAWithoutBuild(t *testing.T) {
	_, stderr, code := runArgs(t, "train", "--device", "cuda", "--steps", "1")
	if code != 2 || !strings.Contains(stderr, "make build-cuda") || !strings.Contains(stderr, "-tags trainmem_cuda") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

// simulate gives the same memory object as train's records, and a card
// too small gets an out-of-memory report.
func TestSimulate(t *testing.T) {
	stdout, _ := mustRun(t, "simulate", "--preset", "gpt2-xl", "--batch", "32", "--seq", "1000", "--precision", "fp16", "--format", "json")
	var doc struct {
		Memory struct {
			Peak map[string]int64 `json:"peak"`
		} `json:"memory"`
		Peak      int64 `json:"peak_allocated_bytes"`
		Requested int64 `json:"peak_requested_bytes"`
	}
	if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
		t.Fatal(err)
	}
	// The requested peak, which train's records carry: below the allocated
	// one, and for tiny equal to a measured step's to the byte.
	if doc.Requested <= 0 || doc.Requested > doc.Peak {
		t.Errorf("peak requested %d beside peak allocated %d", doc.Requested, doc.Peak)
	}
	sim, _ := mustRun(t, "simulate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--format", "json")
	out := filepath.Join(t.TempDir(), "r.jsonl")
	mustRun(t, "train", "--batch", "2", "--seq", "16", "--steps", "2", "--out", out)
	var simDoc, last struct {
		Requested int64 `json:"peak_requested_bytes"`
	}
	recs, err := os.ReadFile(out)
	lines := strings.Split(strings.TrimSpace(string(recs)), "\n")
	if err != nil || json.Unmarshal([]byte(sim), &simDoc) != nil || json.Unmarshal([]byte(lines[len(lines)-1]), &last) != nil {
		t.Fatalf("%v: %s", err, sim)
	}
	if simDoc.Requested != last.Requested || last.Requested == 0 {
		t.Errorf("simulate's peak_requested_bytes %d, train's last record %d", simDoc.Requested, last.Requested)
	}
	// 2Φ of fp16 weights in one allocation, rounded to 512 bytes.
	if got, want := doc.Memory.Peak["params"], (2*int64(1557611200)+511)/512*512; got != want {
		t.Errorf("params peak %d, want %d", got, want)
	}
	if doc.Peak <= doc.Memory.Peak["activations"] {
		t.Errorf("peak %d not above the activations' %d", doc.Peak, doc.Memory.Peak["activations"])
	}
	_, stderr, code := runArgs(t, "simulate", "--preset", "gpt2-xl", "--batch", "32", "--seq", "1000", "--precision", "fp16", "--memory", "80GiB")
	if code != 1 || !strings.Contains(stderr, "out of memory") || !strings.Contains(stderr, "largest free block") {
		t.Errorf("exit %d: %s", code, stderr)
	}
	_, stderr, code = runArgs(t, "simulate", "--preset", "tiny", "--memory", "80XB")
	if code != 2 || !strings.Contains(stderr, "80XB") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}

func TestTrainRanks(t *testing.T) {
	dir := t.TempDir()
	out, save := filepath.Join(dir, "r.jsonl"), filepath.Join(dir, "w.bin")
	text, _ := mustRun(t, "train", "--ranks", "3", "--zero", "3", "--batch", "2", "--seq", "16", "--steps", "2", "--out", out, "--save", save)
	one, _ := mustRun(t, "train", "--batch", "6", "--seq", "16", "--steps", "1")
	first := func(s string) string {
		i := strings.Index(s, "loss    ")
		if i < 0 {
			t.Fatalf("no loss line:\n%s", s)
		}
		return strings.Fields(s[i:])[1]
	}
	if a, b := first(text), first(one); a != b {
		t.Errorf("the ranks' first loss %s, one rank of batch 6: %s", a, b)
	}
	lines := recordLines(t, out, 3, 2)
	for i, l := range lines {
		var rec struct {
			Rank *int `json:"rank"`
			Step int  `json:"step"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Rank == nil || *rec.Rank != i%3 || rec.Step != i/3+1 {
			t.Errorf("record %d: %s (%v), want rank %d of step %d", i, l[:min(len(l), 40)], err, i%3, i/3+1)
		}
	}
	mustRun(t, "train", "--load", save, "--steps", "1", "--batch", "2", "--seq", "16")
}

// simulate predicts the step's time with a card's kernel model (--gpu,
// H100 by default) or a bare roofline (--peak-tflops with --bandwidth) and
// says it is a model; over ranks it replays the step with the collectives
// over --network; bad values are refused by name.
func TestSimulateRoofline(t *testing.T) {
	base := []string{"simulate", "--preset", "tiny", "--batch", "2", "--seq", "16"}
	for _, tc := range []struct {
		args       []string
		want, kind string
	}{
		{nil, "predicted step on H100 SXM", "a model, not a measurement: each op one kernel after another, its products in 256×128 tiles over 132 SMs"},
		{[]string{"--gpu", "h200"}, "predicted step on H200 SXM", "a model, not a measurement"},
		{[]string{"--peak-tflops", "100", "--bandwidth", "1000"}, "predicted step on 100 TFLOP/s, 1000 GB/s", "a roofline estimate, not a measurement"},
		{[]string{"--ranks", "2", "--gpu", "a100"}, "predicted step on A100 SXM 80GB over dgx-a100", "each rank's step replayed in time"},
		{[]string{"--tp", "2", "--pp", "2", "--micro-batches", "4", "--network", "p5"}, "predicted step on H100 SXM over p5", "waited"},
		{[]string{"--gpu", "host", "--profile"}, "predicted step on host", "timed on this host"},
	} {
		out, _ := mustRun(t, append(append([]string(nil), base...), tc.args...)...)
		if !strings.Contains(out, tc.want) || !strings.Contains(out, tc.kind) {
			t.Errorf("%v: no %q and %q in:\n%s", tc.args, tc.want, tc.kind, out)
		}
	}
	if out, _ := mustRun(t, append(append([]string(nil), base...), "--gpu", "none")...); strings.Contains(out, "predicted") {
		t.Errorf("--gpu none predicts:\n%s", out)
	}
	wantUsage(t, append(append([]string(nil), base...), "--gpu", "v100"), `--gpu "v100"`, "valid: h100-pcie")
	wantUsage(t, append(append([]string(nil), base...), "--peak-tflops", "100"), "--peak-tflops 100 --bandwidth 0", "give both")
	wantUsage(t, append(append([]string(nil), base...), "--gpu", "a100", "--bandwidth", "5"), "give one roofline")
	// A peak of 1e-308 TFLOP/s made a step of -9.22e15 µs and an MFU of +Inf.
	wantUsage(t, append(append([]string(nil), base...), "--peak-tflops", "1e-308", "--bandwidth", "3350"), "--peak-tflops 1e-308", "out of range", "valid: --peak-tflops 0.001 to 1e+06")
	wantUsage(t, append(append([]string(nil), base...), "--peak-tflops", "989", "--bandwidth", "1e300"), "bandwidth", "out of range")
	wantUsage(t, append(append([]string(nil), base...), "--network", "p5"), "--network", "with --ranks")
	wantUsage(t, append(append([]string(nil), base...), "--ranks", "2", "--profile"), "--profile", "one rank")
	// The model's profile: the same table train --profile measures, the
	// products first.
	if out, _ := mustRun(t, append(append([]string(nil), base...), "--gpu", "a100", "--profile")...); !strings.Contains(out, "profile of shape") || !strings.Contains(out, "LinearBackwardW") {
		t.Errorf("simulate --profile:\n%s", out)
	}
	wantUsage(t, append(append([]string(nil), base...), "--ranks", "2", "--network", "ib"), `"ib"`, "dgx-a100")
}

// train --tp 2 --ranks 2 runs the four ranks of a dp 2 × tp 2 layout in one
// process and trains as one rank of the global batch: the same first loss
// to the printed digits, a record a rank a step (the tensor group's ranks
// alike), and saved weights of the whole model (the parts put together)
// that a one-device run loads and that are one rank's within AdamW's
// 2·lr·steps (an update near a zero gradient may turn either way).
func TestTrainTensorParallel(t *testing.T) {
	dir := t.TempDir()
	out, save, ref := filepath.Join(dir, "r.jsonl"), filepath.Join(dir, "w.bin"), filepath.Join(dir, "one.bin")
	const steps, lr = 2, 1e-3
	text, _ := mustRun(t, "train", "--tp", "2", "--ranks", "2", "--zero", "1", "--batch", "2", "--seq", "16", "--steps", "2", "--out", out, "--save", save)
	one, _ := mustRun(t, "train", "--batch", "4", "--seq", "16", "--steps", "2", "--save", ref)
	loss := func(s string) string { return lossLine(t, s) }
	if a, b := loss(text), loss(one); a != b {
		t.Errorf("the layout's losses %q, one rank of batch 4: %q", a, b)
	}
	if !strings.Contains(text, "over 4 ranks (dp 2 × tp 2 × pp 1)") || !strings.Contains(text, "tensor") {
		t.Errorf("the report does not give the layout and the tensor group:\n%s", text)
	}
	recordLines(t, out, 4, steps)
	sameSavedWeights(t, save, ref, 2*lr*steps)
	mustRun(t, "train", "--load", save, "--steps", "1", "--batch", "2", "--seq", "16")
	// With sequence parallelism too.
	sp, _ := mustRun(t, "train", "--tp", "2", "--sequence-parallel", "--ranks", "2", "--zero", "1", "--batch", "2", "--seq", "16", "--steps", "2")
	if a, b := loss(sp), loss(one); a != b {
		t.Errorf("the sequence-parallel layout's losses %q, one rank of batch 4: %q", a, b)
	}
	wantUsage(t, []string{"train", "--tp", "3"}, "tensor-parallel ranks 3", "do not divide the 4 heads", "valid: 1, 2, 4")
	wantUsage(t, []string{"train", "--tp", "4", "--sequence-parallel", "--batch", "1", "--seq", "5"}, "--sequence-parallel with --tp 4", "5 rows", "product 4 divides")
}

// train --pp 2 --micro-batches 4 over 2 data-parallel replicas trains as
// one rank of batch 2·4·b: the same losses (to the report's four places),
// the saved weights (the stages put together) within the fp32 bound, and
// a record a rank a step carrying its micro-batches in flight; GPipe and
// 1F1B give the same losses; gradient accumulation on one stage too.
func TestTrainPipeline(t *testing.T) {
	dir := t.TempDir()
	out, save, ref := filepath.Join(dir, "r.jsonl"), filepath.Join(dir, "w.bin"), filepath.Join(dir, "one.bin")
	const steps, lr = 2, 1e-3
	text, _ := mustRun(t, "train", "--pp", "2", "--micro-batches", "4", "--ranks", "2", "--zero", "1", "--batch", "1", "--seq", "16", "--steps", "2", "--out", out, "--save", save)
	one, _ := mustRun(t, "train", "--batch", "8", "--seq", "16", "--steps", "2", "--save", ref)
	loss := func(s string) string { return lossLine(t, s) }
	if a, b := loss(text), loss(one); a != b {
		t.Errorf("the layout's losses %q, one rank of batch 8: %q", a, b)
	}
	for _, want := range []string{"over 4 ranks (dp 2 × tp 1 × pp 2)", "per pipeline stage", "pipeline       send_recv"} {
		if !strings.Contains(text, want) {
			t.Errorf("the report does not say %q:\n%s", want, text)
		}
	}
	lines := recordLines(t, out, 4, steps)
	for _, l := range lines {
		var r struct {
			Rank     int `json:"rank"`
			Micro    int `json:"micro_batches"`
			InFlight int `json:"in_flight"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatal(err)
		}
		if want := 2 - r.Rank/2; r.Micro != 4 || r.InFlight != want { // ranks 0, 1: stage 0
			t.Errorf("rank %d: %d micro-batches, %d in flight, want 4 and %d: %s", r.Rank, r.Micro, r.InFlight, want, l)
		}
	}
	sameSavedWeights(t, save, ref, 2*lr*steps)
	gpipe, _ := mustRun(t, "train", "--pp", "2", "--micro-batches", "4", "--schedule", "gpipe", "--ranks", "2", "--zero", "1", "--batch", "1", "--seq", "16", "--steps", "2")
	accum, _ := mustRun(t, "train", "--micro-batches", "8", "--batch", "1", "--seq", "16", "--steps", "2")
	if a, b, c := loss(gpipe), loss(accum), loss(one); a != c || b != c {
		t.Errorf("GPipe's losses %q and gradient accumulation's %q, one rank of batch 8: %q", a, b, c)
	}
	wantUsage(t, []string{"train", "--pp", "3"}, "3 pipeline stages for 2 layers", "valid: 1 to 2")
	wantUsage(t, []string{"train", "--pp", "2", "--schedule", "zb"}, `"zb"`, "valid: 1f1b, gpipe")
	wantUsage(t, []string{"train", "--micro-batches", "0"}, "--micro-batches 0", "valid: 1 to")
	wantUsage(t, []string{"train", "--pp", "2", "--ranks", "2", "--zero", "2"}, "--zero 2 with --pp 2", "ZeRO-2 and 3 keep shards")
}

// lossLine is a train report's loss line's figures ("5.5182 at step 1,
// 5.0837 at step 3").
func lossLine(t *testing.T, report string) string {
	t.Helper()
	i := strings.Index(report, "loss    ")
	if i < 0 {
		t.Fatalf("no loss line:\n%s", report)
	}
	return strings.Join(strings.Fields(report[i:])[1:6], " ")
}

// sameSavedWeights holds tiny's weights saved at save to those at ref
// within bound.
func sameSavedWeights(t *testing.T, save, ref string, bound float64) {
	t.Helper()
	cfg, _ := model.Preset("tiny")
	got, err := model.LoadCheckpoint(save, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want, err := model.LoadCheckpoint(ref, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var worst float64
	for i := range want {
		worst = max(worst, math.Abs(float64(got[i]-want[i])))
	}
	if worst > bound {
		t.Errorf("the layout's weights differ from one rank's by up to %g, want at most %g", worst, bound)
	}
}

// recordLines is the records train wrote to out, a line each, which must
// be one a rank a step: ranks × steps of them.
func recordLines(t *testing.T, out string, ranks, steps int) []string {
	t.Helper()
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != ranks*steps {
		t.Fatalf("%d records, want %d ranks × %d steps", len(lines), ranks, steps)
	}
	return lines
}

// --norm, --bias and --mlp set the architecture in every subcommand: a
// tiny with LLaMA's blocks (RMSNorm, no linear biases, SwiGLU at LLaMA's
// width) trains over a tensor-parallel layout
// with sequence parallelism to the losses of one rank of the global batch
// (zero's TestLayoutTrainsAsOneRank holds the layout's weights to one
// rank's, each RMSNorm's gain gradient summed over the tensor group), its
// losses are not GPT-2's, its estimate and
// simulation count its own parameters, and what cannot be honoured is
// refused by name before any work: both bias flags at once, an unknown
// norm, and llm.c's file format for a model it cannot hold.
func TestTrainArchitecture(t *testing.T) {
	arch := []string{"--norm", "rmsnorm", "--no-bias", "--mlp", "swiglu", "--positions", "rope", "--kv-heads", "2"}
	with := func(args ...string) []string { return append(append([]string(nil), args...), arch...) }
	sp, _ := mustRun(t, with("train", "--tp", "2", "--sequence-parallel", "--ranks", "2", "--batch", "2", "--seq", "16", "--steps", "2")...)
	one, _ := mustRun(t, with("train", "--batch", "4", "--seq", "16", "--steps", "2")...)
	gpt2, _ := mustRun(t, "train", "--batch", "4", "--seq", "16", "--steps", "2")
	if a, b := lossLine(t, sp), lossLine(t, one); a != b {
		t.Errorf("the sequence-parallel layout's losses %q, one rank of batch 4: %q", a, b)
	}
	if lossLine(t, one) == lossLine(t, gpt2) {
		t.Errorf("RMSNorm without biases trains to GPT-2's losses %q: the flags changed nothing", lossLine(t, one))
	}
	// tiny (V 256, h 64, L 2) with SwiGLU's F = 256 (8h/3 rounded up to
	// 256), no position table and 2 key and value heads of 16 channels:
	// V·h + L·(2h² + 2·h·32 + 3·h·F + 2h) + h = 16,384 + 2·61,568 + 64 =
	// 139,584 parameters; the tiny-llama preset is the same model, its head
	// untied (V·h more: 155,968).
	for _, cmd := range []string{"estimate", "simulate"} {
		text, _ := mustRun(t, with(cmd, "--preset", "tiny", "--batch", "2", "--seq", "16")...)
		if !strings.Contains(text, "rmsnorm, 2 key and value heads, no linear biases, swiglu MLP of 256, rotary positions (θ 10000), 139,584 parameters") {
			t.Errorf("%s does not give the architecture and its 139,584 parameters:\n%s", cmd, text)
		}
		text, _ = mustRun(t, cmd, "--preset", "tiny-llama", "--batch", "2", "--seq", "16")
		if !strings.Contains(text, "tiny-llama: L=2 h=64 a=4 V=256 ctx=64, untied head, rmsnorm, 2 key and value heads, no linear biases, swiglu MLP of 256, rotary positions (θ 10000), 155,968 parameters") {
			t.Errorf("%s --preset tiny-llama:\n%s", cmd, text)
		}
	}
	wantUsage(t, []string{"estimate", "--preset", "gpt2", "--rope-theta", "500000"}, "--rope-theta 500000", "positions are learned", "--positions rope")
	// validate's explanations name LLaMA's tensors as they are.
	why, _ := mustRun(t, "validate", "--preset", "tiny-llama", "--batch", "2", "--seq", "16", "--steps", "2")
	for _, want := range []string{"RMSNorm statistics", "the final RMSNorm's output", "both RMSNorm outputs", "the MLP's gate and up projections (256 wide each) and SwiGLU's output", "this model's ops"} {
		if !strings.Contains(why, want) {
			t.Errorf("validate --preset tiny-llama does not say %q:\n%s", want, why)
		}
	}
	if strings.Contains(why, "GPT-2") || strings.Contains(why, "layer-norm statistics") {
		t.Errorf("validate --preset tiny-llama speaks of GPT-2 or of layer norms:\n%s", why)
	}
	wantUsage(t, []string{"estimate", "--mlp", "relu"}, `"relu"`, "valid: gelu, swiglu")
	wantUsage(t, []string{"simulate", "--mlp", "swiglu", "--ffn", "100", "--tp", "3", "--preset", "tiny", "--heads", "6", "--hidden", "96"}, "tensor-parallel ranks 3 do not divide the MLP's 100 channels", "valid: 1, 2")
	wantUsage(t, []string{"train", "--bias", "--no-bias"}, "--bias=true and --no-bias=true", "give one of them")
	wantUsage(t, []string{"estimate", "--preset", "tiny", "--kv-heads", "3"}, "kv heads 3 does not divide heads 4", "valid: 1, 2, 4")
	wantUsage(t, []string{"simulate", "--preset", "tiny-llama", "--tp", "4"}, "tensor-parallel ranks 4 do not divide the 2 key and value heads", "valid: 1, 2")
	wantUsage(t, []string{"estimate", "--preset", "tiny", "--kv-heads", "0"}, "--kv-heads")
	wantUsage(t, []string{"estimate", "--attention", "fast"}, `"fast"`, "valid: naive, flash")
	wantUsage(t, []string{"simulate", "--preset", "tiny", "--hidden", "1024", "--heads", "2", "--attention", "flash"}, "flash attention with heads of 512 channels", "valid: heads of at most 256 channels")
	if text, _ := mustRun(t, "estimate", "--preset", "tiny-llama", "--attention", "flash", "--batch", "2", "--seq", "16"); !strings.Contains(text, "tiny-llama: ") || !strings.Contains(text, "flash attention") || strings.Contains(text, "attention_scores") {
		t.Errorf("estimate --attention flash keeps the preset's name, says flash and counts no attention scores:\n%s", text)
	}
	wantUsage(t, []string{"estimate", "--norm", "batchnorm"}, `"batchnorm"`, "valid: layernorm, rmsnorm")
	save := filepath.Join(t.TempDir(), "m.bin")
	wantUsage(t, with("train", "--steps", "1", "--save", save), "--save", "rmsnorm norms", "cannot hold")
	if _, err := os.Stat(save); !os.IsNotExist(err) {
		t.Errorf("a refused --save left %s (%v)", save, err)
	}
}

// --hf-config reads a Hugging Face config.json in every subcommand: a
// LLaMA-family file estimates and simulates as the preset of the same
// model (but for its name), a small one trains, the shape flags override
// it, and what cannot be honoured is refused with exit status 2 naming the
// field (model/hf_test.go holds each refusal), as are a missing file, the
// file with --preset, and an output onto the file.
func TestHFConfigFlag(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	llama := write("llama2.json", `{"_name_or_path": "llama2-7b", "model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008,
		"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
		"max_position_embeddings": 4096, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": false}`)
	for _, cmd := range []string{"estimate", "simulate"} {
		args := []string{cmd, "--batch", "1", "--seq", "512", "--precision", "bf16"}
		if cmd == "estimate" {
			args = append(args, "--ranks", "8", "--zero", "3")
		}
		took := regexp.MustCompile(`steps in [0-9.]+µ?m?s`) // the one line that differs: the time a simulation took
		fromFile, _ := mustRun(t, append(args, "--hf-config", llama)...)
		preset, _ := mustRun(t, append(args, "--preset", "llama2-7b")...)
		fromFile, preset = took.ReplaceAllString(fromFile, "steps"), took.ReplaceAllString(preset, "steps")
		if fromFile != preset {
			t.Errorf("%s of Llama 2 7B's config.json differs from the llama2-7b preset's:\n%s\nvs\n%s", cmd, fromFile, preset)
		}
	}
	tiny := write("tiny.json", `{"model_type": "llama", "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
		"num_attention_heads": 4, "vocab_size": 256, "max_position_embeddings": 64, "rms_norm_eps": 1e-6}`)
	text, _ := mustRun(t, "train", "--hf-config", tiny, "--steps", "2", "--batch", "2", "--seq", "16", "--layers", "3")
	if !strings.Contains(text, "llama+custom: L=3 h=64 a=4 V=256 ctx=64, untied head, rmsnorm, no linear biases, swiglu MLP of 192, rotary positions (θ 10000), norm ε 1e-06") {
		t.Errorf("train --hf-config --layers 3 does not give the file's model with three layers:\n%s", text)
	}
	gqa := write("gqa.json", `{"model_type": "llama", "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 64}`)
	if text, _ := mustRun(t, "simulate", "--hf-config", gqa, "--batch", "2", "--seq", "16"); !strings.Contains(text, "2 key and value heads") {
		t.Errorf("simulate --hf-config of num_key_value_heads 2 does not give grouped-query attention:\n%s", text)
	}
	bad := write("kv3.json", `{"model_type": "llama", "hidden_size": 64, "intermediate_size": 192, "num_hidden_layers": 2,
		"num_attention_heads": 4, "num_key_value_heads": 3, "vocab_size": 256, "max_position_embeddings": 64}`)
	wantUsage(t, []string{"simulate", "--hf-config", bad}, bad, "num_key_value_heads 3", "valid: a divisor of num_attention_heads, 1, 2, 4")
	wantUsage(t, []string{"estimate", "--hf-config", filepath.Join(dir, "none.json")}, "none.json", "no such file")
	wantUsage(t, []string{"estimate", "--hf-config", tiny, "--preset", "gpt2"}, "give one model")
	wantUsage(t, []string{"train", "--hf-config", tiny, "--steps", "1", "--out", tiny}, "--out", "the same file as --hf-config")
}

// train --load FILE.safetensors --hf-config config.json starts from the
// file's weights: a model saved by trainmem's llm.c writer and converted
// to Hugging Face's GPT-2 names trains to the llm.c file's losses, to the
// printed digits; without its config the file is refused by name.
func TestTrainFromSafetensors(t *testing.T) {
	dir := t.TempDir()
	llmc, safe := filepath.Join(dir, "m.bin"), filepath.Join(dir, "model.safetensors")
	mustRun(t, "train", "--steps", "1", "--batch", "2", "--seq", "16", "--save", llmc)
	cfg, _ := model.Preset("tiny")
	params, err := model.LoadCheckpoint(llmc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeGPT2Safetensors(safe, cfg, params); err != nil {
		t.Fatal(err)
	}
	hf := filepath.Join(dir, "config.json")
	if err := os.WriteFile(hf, []byte(`{"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "n_positions": 64, "vocab_size": 256}`), 0o644); err != nil {
		t.Fatal(err)
	}
	a, _ := mustRun(t, "train", "--load", llmc, "--steps", "2", "--batch", "2", "--seq", "16")
	b, _ := mustRun(t, "train", "--load", safe, "--hf-config", hf, "--steps", "2", "--batch", "2", "--seq", "16")
	if lossLine(t, a) != lossLine(t, b) {
		t.Errorf("from the safetensors file the losses are %q, from the llm.c file %q", lossLine(t, b), lossLine(t, a))
	}
	wantUsage(t, []string{"train", "--load", safe, "--steps", "1"}, "--load", "safetensors", "--hf-config")
	// Loaded through a sharded model's index, the shard is an input too: no
	// output replaces it.
	raw, err := os.ReadFile(safe)
	if err != nil {
		t.Fatal(err)
	}
	st, err := safetensors.Deserialize(raw)
	if err != nil {
		t.Fatal(err)
	}
	weightMap := map[string]string{}
	for _, n := range st.Names() {
		weightMap[n] = filepath.Base(safe)
	}
	idx := filepath.Join(dir, "model.safetensors.index.json")
	doc, err := json.Marshal(map[string]any{"weight_map": weightMap})
	if err == nil {
		err = os.WriteFile(idx, doc, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	c, _ := mustRun(t, "train", "--load", idx, "--hf-config", hf, "--steps", "2", "--batch", "2", "--seq", "16")
	if lossLine(t, c) != lossLine(t, a) {
		t.Errorf("through the index the losses are %q, want %q", lossLine(t, c), lossLine(t, a))
	}
	for _, out := range []string{"--save", "--out"} {
		wantUsage(t, []string{"train", "--load", idx, "--hf-config", hf, "--steps", "1", out, safe}, out+" "+safe, "the same file as --load")
	}
	if after, _ := os.ReadFile(safe); !bytes.Equal(after, raw) {
		t.Error("an output replaced the shard")
	}
}

// writeGPT2Safetensors writes tiny's params under Hugging Face's GPT-2
// names (Conv1D weights transposed) with the safetensors library.
func writeGPT2Safetensors(path string, cfg model.Config, params []float32) error {
	views := map[string]safetensors.TensorView{}
	hfName := map[string]string{"ln1.w": "ln_1.weight", "ln1.b": "ln_1.bias", "attn.qkv.w": "attn.c_attn.weight", "attn.qkv.b": "attn.c_attn.bias",
		"attn.proj.w": "attn.c_proj.weight", "attn.proj.b": "attn.c_proj.bias", "ln2.w": "ln_2.weight", "ln2.b": "ln_2.bias",
		"mlp.fc.w": "mlp.c_fc.weight", "mlp.fc.b": "mlp.c_fc.bias", "mlp.proj.w": "mlp.c_proj.weight", "mlp.proj.b": "mlp.c_proj.bias"}
	for _, p := range cfg.Params() {
		vals, shape := params[p.Offset:p.Offset+p.Count], []uint64{}
		for _, d := range p.Shape {
			shape = append(shape, uint64(d))
		}
		name := map[string]string{"wte": "wte.weight", "wpe": "wpe.weight", "lnf.w": "ln_f.weight", "lnf.b": "ln_f.bias"}[p.Name]
		if name == "" {
			l, rest, _ := strings.Cut(strings.TrimPrefix(p.Name, "h"), ".")
			name = "h." + l + "." + hfName[rest]
			if strings.HasSuffix(rest, ".w") && len(shape) == 2 { // Conv1D: (in, out)
				r, c := p.Shape[0], p.Shape[1]
				t := make([]float32, len(vals))
				for i := range r {
					for j := range c {
						t[j*r+i] = vals[i*c+j]
					}
				}
				vals, shape = t, []uint64{shape[1], shape[0]}
			}
		}
		var b bytes.Buffer
		if err := binary.Write(&b, binary.LittleEndian, vals); err != nil {
			return err
		}
		v, err := safetensors.NewTensorView(safetensors.F32, shape, b.Bytes())
		if err != nil {
			return err
		}
		views["transformer."+name] = v
	}
	out, err := safetensors.Serialize(views, nil)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// Gradient accumulation (--micro-batches 4 of batch 1 on one rank) trains
// as one rank of batch 4, with 16-bit gradients and with fp32 main
// gradients (--main-grads fp32): bf16 losses step by step within 1e-3 of
// batch 4's (bf16 keeps 8 significant bits, each micro-batch's gradients
// rounded before they are summed; 6 steps at lr 1e-3 move the loss by
// about 0.7), and the fp32 buffer's 2 bytes a parameter in the report.
func TestGradientAccumulationMainGrads(t *testing.T) {
	dir := t.TempDir()
	losses := func(name string, args ...string) []float64 {
		out := filepath.Join(dir, name+".jsonl")
		text, _ := mustRun(t, append([]string{"train", "--precision", "bf16", "--seq", "32", "--steps", "6", "--out", out}, args...)...)
		if name == "fp32" && !strings.Contains(text, "fp32 main gradients") {
			t.Errorf("the report does not name the fp32 main gradients:\n%s", text)
		}
		var ls []float64
		for _, l := range recordLines(t, out, 1, 6) {
			var r struct {
				Loss float64 `json:"loss"`
			}
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatal(err)
			}
			ls = append(ls, r.Loss)
		}
		return ls
	}
	batch := losses("batch", "--batch", "4")
	for _, g := range []string{"weights", "fp32"} {
		accum := losses(g, "--batch", "1", "--micro-batches", "4", "--main-grads", g)
		for i := range batch {
			if d := math.Abs(accum[i] - batch[i]); !(d <= 1e-3) {
				t.Errorf("--main-grads %s: step %d loss %.6f accumulated over 4 micro-batches, %.6f at batch 4 (|Δ| %.2g > 1e-3)", g, i+1, accum[i], batch[i], d)
			}
		}
		if batch[5] >= batch[0]-0.1 {
			t.Errorf("the losses did not fall: %v", batch)
		}
	}
	wantUsage(t, []string{"train", "--main-grads", "fp16"}, `"fp16"`, "valid: weights, fp32")
}

// train --offload optimizer on the host: the same losses as without (the
// update runs on a host device of its own), the report's offload table
// with the copies a step, the record's offload object; fp32 and an
// unknown offload refused by name.
func TestTrainOffloadOptimizer(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "r.jsonl")
	text, _ := mustRun(t, "train", "--precision", "bf16", "--offload", "optimizer", "--batch", "2", "--seq", "16", "--steps", "2", "--out", out)
	plain, _ := mustRun(t, "train", "--precision", "bf16", "--batch", "2", "--seq", "16", "--steps", "2")
	if a, b := lossLine(t, text), lossLine(t, plain); a != b {
		t.Errorf("offloaded losses %q, on the device %q", a, b)
	}
	for _, want := range []string{"offload device, host memory", "PCIe a step, to host (the gradients)", "the optimizer offloaded to host memory"} {
		if !strings.Contains(text, want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
	var r struct {
		Offload struct {
			ToHost   int64 `json:"to_host_bytes"`
			ToDevice int64 `json:"to_device_bytes"`
		} `json:"offload"`
	}
	if err := json.Unmarshal([]byte(recordLines(t, out, 1, 2)[1]), &r); err != nil {
		t.Fatal(err)
	}
	cfg, _ := model.Preset("tiny")
	if phi := cfg.NumParams(); r.Offload.ToHost != 2*phi || r.Offload.ToDevice != 2*phi {
		t.Errorf("PCIe %+v, want 2·Φ = %d each way", r.Offload, 2*phi)
	}
	wantUsage(t, []string{"train", "--offload", "optimizer"}, "fp32", "valid: fp16 or bf16")
	wantUsage(t, []string{"train", "--offload", "gpu"}, `"gpu"`, "valid: none, optimizer, params")
	wantUsage(t, []string{"train", "--precision", "bf16", "--offload", "params", "--ranks", "2", "--zero", "2"}, "ZeRO stage 2", "valid: ZeRO stage 3")
	wantUsage(t, []string{"report", "--precision", "bf16", "--offload", "optimizer", filepath.Join(dir, "site")}, "--offload optimizer", "'trainmem validate'")
	wantUsage(t, []string{"validate", "--sweep", "checkpoint", "--precision", "bf16", "--offload", "optimizer"}, "--sweep checkpoint with --offload optimizer", "without --sweep")
}
