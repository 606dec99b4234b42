package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainmem/bench"
	"trainmem/cuda/host"
	"trainmem/model"
)

// lastLine is the last line of a command's stderr.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, "\n"); i >= 0 {
		s = s[i+1:]
	}
	return s
}

// wantUsage checks a refusal: exit 2 and one trainmem: line holding every
// want.
func wantUsage(t *testing.T, args []string, want ...string) {
	t.Helper()
	_, errOut, code := runArgs(t, args...)
	last := lastLine(errOut)
	if code != 2 {
		t.Errorf("%v: exit %d, want 2 (%s)", args, code, last)
		return
	}
	if !strings.HasPrefix(last, "trainmem: ") {
		t.Errorf("%v: %q is not a trainmem: line", args, last)
	}
	for _, w := range want {
		if !strings.Contains(last, w) {
			t.Errorf("%v: %q lacks %q", args, last, w)
		}
	}
}

// Without a model, a subcommand names the ways to give one that it takes:
// --params only where a bare parameter count is accepted (train and validate
// have a default preset).
func TestNoModelNamesItsWays(t *testing.T) {
	for _, tc := range []struct {
		cmd    string
		params bool
	}{{"estimate", true}, {"fit", true}, {"simulate", false}} {
		args := []string{tc.cmd}
		if tc.cmd == "fit" {
			args = append(args, "--memory", "80GiB")
		}
		wantUsage(t, args, "no model", "--preset", "(--layers, --hidden, --heads)")
		_, errOut, _ := runArgs(t, args...)
		if got := strings.Contains(lastLine(errOut), "--params"); got != tc.params {
			t.Errorf("%s: %q names --params: %v, want %v", tc.cmd, lastLine(errOut), got, tc.params)
		}
	}
}

// --bias defaults to the preset's choice: its help says so and no flag
// default of its own, and given alone it means true.
func TestBiasDefaultIsThePresets(t *testing.T) {
	out, errOut, _ := runArgs(t, "estimate", "-h")
	help := out + errOut
	i := strings.Index(help, "  -bias\n")
	if i < 0 {
		t.Fatalf("estimate -h has no -bias:\n%s", help)
	}
	entry, _, _ := strings.Cut(help[i+len("  -bias\n"):], "\n  -")
	if !strings.Contains(entry, "the preset's") || strings.Contains(entry, "(default true)") {
		t.Errorf("-bias help %q: want the preset's default named, no (default true)", entry)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--preset", "llama2-7b"}, "6,738,415,616 parameters"},
		{[]string{"--preset", "llama2-7b", "--bias"}, "6,739,775,488 parameters"},
		{[]string{"--preset", "gpt2"}, "124,439,808 parameters"},
		{[]string{"--preset", "gpt2", "--bias=false"}, "no linear biases"},
	} {
		out, _, code := runArgs(t, append([]string{"estimate"}, tc.args...)...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("estimate %v: exit %d, %q lacks %q", tc.args, code, strings.SplitN(out, "\n", 2)[0], tc.want)
		}
	}
}

// A shape whose sizes pass int64 (or a tensor's limit) is refused by every
// subcommand with the flag values that cause it, never answered with
// wrapped-around numbers (the simulate reported a 100 TiB peak; fit
// printed zeros; estimate named no value).
func TestShapeTooLarge(t *testing.T) {
	scores := []string{"--hidden", "65536", "--heads", "65536", "--layers", "1", "--context", "16777216", "--vocab", "256"}
	deep := []string{"--hidden", "1024", "--heads", "1", "--layers", "16384", "--context", "16777216", "--vocab", "16777216", "--seq", "16777216", "--batch", "16"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{append([]string{"simulate"}, scores...), []string{"--heads 65536 --batch 1 --seq 16777216", "attention scores", "heads·batch·seq²"}},
		{append([]string{"estimate"}, scores...), []string{"--heads 65536 --batch 1 --seq 16777216", "attention scores"}},
		{append([]string{"fit", "--memory", "80GB"}, scores...), []string{"--heads 65536 --batch 1 --seq 16777216", "attention scores"}},
		{append([]string{"validate", "--no-measure", "--seq", "16777216"}, scores...), []string{"--heads 65536", "attention scores"}},
		{append([]string{"train", "--steps", "1", "--seq", "16777216", "--batch", "1"}, scores...), []string{"--heads 65536", "attention scores"}},
		{append([]string{"estimate"}, deep...), []string{"--layers 16384", "--seq 16777216", "--batch 16", "2^63-1 bytes"}},
		{append([]string{"fit", "--memory", "80GB"}, deep...), []string{"--layers 16384", "2^63-1 bytes"}},
		{[]string{"estimate", "--preset", "gpt2", "--batch", "16777216", "--seq", "256"}, []string{"--batch 16777216 --seq 256", "rows"}},
		{[]string{"estimate", "--layers", "65536", "--hidden", "64", "--heads", "4"}, []string{"--layers 65536", "1 to 16384"}},
	} {
		wantUsage(t, tc.args, tc.want...)
	}
}

// writeFile writes b to the file name in dir and returns its path.
func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkpointHeader is an llm.c model-file header with the given fields
// (magic, version 3, ctx, V, L, heads, C, Vp).
func checkpointHeader(ctx, V, L, heads, C, Vp int32) []byte {
	b := make([]byte, 1024)
	for i, v := range []int32{model.CheckpointMagic, 3, ctx, V, L, heads, C, Vp} {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

// Files that are read: a checkpoint's header is checked against the
// file's size before anything is allocated; a FIFO, a device or a
// directory is refused before it is opened (nothing hangs, /dev/zero is
// not read); bad content names the file, not a flag.
func TestInputFiles(t *testing.T) {
	dir := t.TempDir()
	put := func(name string, b []byte) string { return writeFile(t, dir, name, b) }
	huge := put("huge.bin", checkpointHeader(1<<24, 1<<24, 16384, 1, 1<<20, 1<<24))
	gpt2 := put("gpt2-claim.bin", checkpointHeader(1024, 50257, 12, 12, 768, 50304))
	vocab := put("vocab.bin", checkpointHeader(64, 1<<31-1, 2, 4, 64, 1<<31-1))
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"huge header", []string{"--load", huge}, []string{"truncated: 1024 bytes, expected", "huge.bin"}},
		{"gpt2 header, 1 KiB file", []string{"--preset", "gpt2", "--load", gpt2}, []string{"truncated: 1024 bytes, expected 497904640", "gpt2-claim.bin"}},
		{"vocab beyond the limits", []string{"--load", vocab}, []string{"vocab 2147483647: out of range", "vocab.bin"}},
		{"data /dev/zero", []string{"--data", "/dev/zero"}, []string{"--data /dev/zero", "a device"}},
		{"data FIFO", []string{"--data", fifo}, []string{"--data " + fifo, "FIFO"}},
		{"data directory", []string{"--data", dir}, []string{"a directory"}},
		{"load FIFO", []string{"--load", fifo}, []string{"--load " + fifo, "FIFO"}},
		{"load directory", []string{"--load", dir}, []string{"--load " + dir, "a directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make(chan struct{})
			go func() {
				defer close(done)
				wantUsage(t, append([]string{"train", "--steps", "1"}, tc.args...), tc.want...)
			}()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("hangs")
			}
		})
	}
	// The flag the user never passed is not named.
	_, errOut, _ := runArgs(t, "train", "--steps", "1", "--load", vocab)
	if strings.Contains(errOut, "--vocab") {
		t.Errorf("a file's bad vocabulary reads as a flag: %s", errOut)
	}
}

// Every output path is checked before the work starts (no step runs, the
// device is not opened), and a path that would destroy data is refused:
// the same file as an input or another output, by identity.
func TestOutputPaths(t *testing.T) {
	dir := t.TempDir()
	corpus := filepath.Join(dir, "d.txt")
	if err := os.WriteFile(corpus, []byte(strings.Repeat("the corpus a user keeps. ", 200)), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.txt")
	os.Symlink("d.txt", link)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"out in a missing directory", []string{"--out", filepath.Join(dir, "no", "run.jsonl")}, []string{"--out", "does not exist"}},
		{"out is a directory", []string{"--out", dir}, []string{"--out " + dir, "a directory"}},
		{"save in a missing directory", []string{"--save", "/missing/m.bin"}, []string{"--save /missing/m.bin", "does not exist"}},
		{"save of an untied model", []string{"--untied", "--save", filepath.Join(dir, "m.bin")}, []string{"--save", "untied head", "cannot hold"}},
		{"out is the data", []string{"--data", corpus, "--out", corpus}, []string{"--out " + corpus, "the same file as --data"}},
		{"out is a link to the data", []string{"--data", corpus, "--out", link}, []string{"the same file as --data"}},
		{"save is the data", []string{"--data", corpus, "--save", filepath.Join(dir, ".", "d.txt")}, []string{"the same file as --data"}},
		{"out is save", []string{"--out", filepath.Join(dir, "z"), "--save", filepath.Join(dir, "z")}, []string{"--save", "the same file as --out"}},
		{"save is the load", []string{"--load", filepath.Join(dir, "w.bin"), "--save", filepath.Join(dir, "w.bin")}, []string{"the same file as --load"}},
	} {
		if tc.name == "save is the load" {
			c, _ := model.Preset("tiny")
			if err := model.SaveCheckpoint(filepath.Join(dir, "w.bin"), c, model.InitParams(c, 1)); err != nil {
				t.Fatal(err)
			}
		}
		_, errOut, code := runArgs(t, append([]string{"train", "--steps", "5"}, tc.args...)...)
		if code != 2 || strings.Contains(errOut, "step 1/") {
			t.Errorf("%s: exit %d, want 2 before any step:\n%s", tc.name, code, errOut)
		}
		for _, w := range tc.want {
			if !strings.Contains(lastLine(errOut), w) {
				t.Errorf("%s: %q lacks %q", tc.name, lastLine(errOut), w)
			}
		}
	}
	if b, _ := os.ReadFile(corpus); !strings.HasPrefix(string(b), "the corpus") {
		t.Errorf("the corpus was overwritten: %q", b[:min(len(b), 40)])
	}
	// validate checks its plot and data before the sweep.
	wantUsage(t, []string{"validate", "--sweep", "checkpoint", "--no-measure", "--plot", "/missing/x.svg"}, "--plot /missing/x.svg", "does not exist")
	wantUsage(t, []string{"validate", "--no-measure", "--data", "/dev/zero"}, "a device")
	// Records go through a link to its target and into a device.
	target := filepath.Join(dir, "target.jsonl")
	outLink := filepath.Join(dir, "out-link.jsonl")
	os.Symlink("target.jsonl", outLink)
	for _, out := range []string{outLink, "/dev/null"} {
		if _, errOut, code := runArgs(t, "train", "--steps", "2", "--batch", "2", "--seq", "8", "--out", out); code != 0 {
			t.Fatalf("--out %s: exit %d: %s", out, code, errOut)
		}
	}
	if fi, err := os.Lstat(outLink); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("--out through a link replaced the link")
	}
	if n := countLines(t, target); n != 2 {
		t.Errorf("the link's target holds %d records, want 2", n)
	}
	if fi, _ := os.Stat("/dev/null"); fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatal("/dev/null is no longer a device")
	}
}

// simulate's traces and timeline never replace its --hf-config: a path
// that names the config (rank 1's trace name included) is refused before
// the simulation, and the config is as it was.
func TestSimulateKeepsItsConfig(t *testing.T) {
	dir := t.TempDir()
	const cfg = `{"model_type":"gpt2","n_embd":64,"n_layer":2,"n_head":4,"vocab_size":256,"n_positions":64,"layer_norm_epsilon":1e-5}`
	for _, tc := range []struct {
		file string
		args []string
	}{
		{"c.json", []string{"--memory-trace", "c"}},
		{"c.svg", []string{"--plot-timeline", "c.svg"}},
		{"c.rank1.json", []string{"--ranks", "2", "--memory-trace", "c"}},
	} {
		path := filepath.Join(dir, tc.file)
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append([]string{"simulate", "--hf-config", path}, tc.args...)
		for i, a := range args {
			if a == "c" || a == "c.svg" {
				args[i] = filepath.Join(dir, a)
			}
		}
		wantUsage(t, args, "the same file as --hf-config")
		if b, _ := os.ReadFile(path); string(b) != cfg {
			t.Errorf("%v replaced the config with %q", args, b[:min(len(b), 40)])
		}
	}
}

// A failed plot never costs the sweep's report: the report is written
// first and the plot's error comes after it.
func TestSweepReportBeforePlot(t *testing.T) {
	c, _ := model.Preset("tiny")
	s := model.Setup{Model: c, Batch: 8, Seq: 64, Ranks: 1, TP: 1, PP: 1}
	checked, err := s.Check()
	if err != nil {
		t.Fatal(err)
	}
	var o bench.Options
	o.Setup = checked
	rep, err := bench.Sweep(context.Background(), nil, o)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	err = writeSweep(&out, s, rep, "text", filepath.Join(t.TempDir(), "gone", "x.svg"))
	if err == nil || !strings.Contains(err.Error(), "the report is above") {
		t.Errorf("plot error %v", err)
	}
	if !strings.Contains(out.String(), "full") || !strings.Contains(out.String(), "selective") {
		t.Errorf("no report before the plot's error:\n%s", out.String())
	}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); n++ {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("%s line %d: %v", path, n+1, err)
		}
	}
	return n
}

// A run that diverges keeps its records (a non-finite loss is written as
// null, "diverged" says what it was), saves its weights, and ends with an
// error naming the step: fp32 at a learning rate of 1e30, whose loss was
// NaN with exit 0 before; fp16 whose gradients overflow at loss scale 1,
// whose records were lost to "json: unsupported value: NaN".
func TestDivergedRunKeepsRecords(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"fp32", []string{"--lr", "1e30"}, "the run diverged"},
		{"fp16", []string{"--lr", "1e30", "--precision", "fp16"}, "overflow even at loss scale"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out, save := filepath.Join(dir, "run.jsonl"), filepath.Join(dir, "w.bin")
			args := append([]string{"train", "--steps", "60", "--batch", "2", "--seq", "16", "--out", out, "--save", save}, tc.args...)
			_, errOut, code := runArgs(t, args...)
			last := lastLine(errOut)
			if code != 1 || !strings.Contains(last, tc.want) || !strings.Contains(last, "step ") {
				t.Fatalf("exit %d: %s", code, last)
			}
			n := countLines(t, out)
			if n == 0 || n == 60 {
				t.Fatalf("%d records", n)
			}
			b, _ := os.ReadFile(out)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			var rec map[string]any
			json.Unmarshal([]byte(lines[len(lines)-1]), &rec)
			if rec["diverged"] == nil || rec["diverged"] == "" {
				t.Errorf("the last record does not say it diverged: %s", lines[len(lines)-1])
			}
			if !strings.Contains(last, fmt.Sprintf("step %v", rec["step"])) {
				t.Errorf("the error %q does not name step %v", last, rec["step"])
			}
			c, _ := model.Preset("tiny")
			if _, err := model.LoadCheckpoint(save, c); err != nil {
				t.Errorf("--save of the diverged run: %v", err)
			}
		})
	}
}

// Numbers that mean the same are refused the same: --lr Inf like --lr NaN;
// --threads within a sane range.
func TestNumberFlags(t *testing.T) {
	for _, v := range []string{"Inf", "NaN", "-1", "0", "+Inf"} {
		wantUsage(t, []string{"train", "--lr", v}, "--lr", "positive finite number")
	}
	wantUsage(t, []string{"train", "--threads", "100000"}, "--threads 100000", fmt.Sprintf("1 to %d, the CPUs this process may use", runtime.GOMAXPROCS(0)))
	// One past the CPUs: no speed, and OpenBLAS's buffers (a 6 GiB
	// address-space limit ran out at 33 threads and hung at 40).
	wantUsage(t, []string{"train", "--threads", fmt.Sprint(runtime.GOMAXPROCS(0) + 1)}, "32 MiB buffer")
	wantUsage(t, []string{"train", "--threads", "-1"}, "--threads -1")
}

// Help tells the truth: the defaults a subcommand uses, no flag it always
// refuses, only the formats it writes; integer flags say so; --params says
// what it ignores; fit --memory 0 is refused like simulate's.
// helpOf is a subcommand's -h text.
func helpOf(t *testing.T, cmd string) string {
	t.Helper()
	_, errOut, code := runArgs(t, cmd, "-h")
	if code != 0 {
		t.Fatalf("%s -h: exit %d", cmd, code)
	}
	return errOut
}

// flagLine is one flag's entry in a -h text, "" when it has none.
func flagLine(h, name string) string {
	i := strings.Index(h, "\n  -"+name+" ")
	if i < 0 {
		return ""
	}
	rest := h[i+1:]
	if j := strings.Index(rest[1:], "\n  -"); j >= 0 {
		rest = rest[:j+1]
	}
	return rest
}

func TestHelpTellsTheTruth(t *testing.T) {
	help := func(cmd string) string { return helpOf(t, cmd) }
	for _, cmd := range []string{"train", "validate"} {
		h := help(cmd)
		if l := flagLine(h, "batch"); !strings.Contains(l, "(default 8)") {
			t.Errorf("%s -h: --batch %q does not say the default 8", cmd, l)
		}
		if l := flagLine(h, "seq"); !strings.Contains(l, "(default 64)") {
			t.Errorf("%s -h: --seq %q does not say the default 64", cmd, l)
		}
		if l := flagLine(h, "preset"); !strings.Contains(l, "default tiny") {
			t.Errorf("%s -h: --preset %q does not say the default", cmd, l)
		}
	}
	for _, cmd := range []string{"train", "validate", "simulate"} {
		h := help(cmd)
		formats := flagLine(h, "format")
		refusals := []string{"params"}
		for _, runs := range []string{"tp", "pp", "micro-batches", "schedule"} {
			if flagLine(h, runs) == "" {
				t.Errorf("%s -h does not list --%s: it runs the layout's ranks", cmd, runs)
			}
		}
		for _, refused := range refusals {
			if flagLine(h, refused) != "" {
				t.Errorf("%s -h lists --%s, which it refuses", cmd, refused)
			}
			wantUsage(t, []string{cmd, "--" + refused, "2"}, "--"+refused, "trainmem estimate")
		}
		if cmd != "train" && (!strings.Contains(formats, "text, json") || strings.Contains(formats, "csv")) {
			t.Errorf("%s -h: --format %q", cmd, formats)
		}
	}
	for _, cmd := range []string{"estimate", "fit"} {
		h := help(cmd)
		if l := flagLine(h, "format"); !strings.Contains(l, "text, json, csv") {
			t.Errorf("%s -h: --format %q", cmd, l)
		}
		if l := flagLine(h, "params"); !strings.Contains(l, "--batch") || !strings.Contains(l, "ignored") {
			t.Errorf("%s -h: --params %q does not say what it ignores", cmd, l)
		}
	}
	_, errOut, code := runArgs(t, "estimate", "--params", "7.5e9", "--batch", "4", "--checkpoint", "full")
	if code != 0 || !strings.Contains(errOut, "--batch, --checkpoint ignored") {
		t.Errorf("estimate --params --batch: exit %d, %q", code, errOut)
	}
	wantUsage(t, []string{"fit", "--preset", "tiny", "--memory", "0"}, "-memory", "must be positive")
	wantUsage(t, []string{"simulate", "--preset", "tiny", "--memory", "0"}, "-memory", "must be positive")
	wantUsage(t, []string{"estimate", "--preset", "tiny", "--batch", "1e3"}, "-batch", "not an integer: write 1000")
	wantUsage(t, []string{"train", "--steps", "2.5"}, "-steps", "not an integer")
	wantUsage(t, []string{"train", "--seed", "-1"}, "-seed", "non-negative integer")
}

// One exit code per kind: bad input of every kind is 2, a failure while
// running 1.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.txt")
	os.WriteFile(short, []byte("hello"), 0o644)
	for _, tc := range []struct {
		args []string
		code int
	}{
		{[]string{"train", "--data", short, "--batch", "2", "--seq", "16"}, 2},                // a batch larger than the corpus
		{[]string{"train", "--data", filepath.Join(dir, "none.txt")}, 2},                      // a missing input
		{[]string{"train", "--seq", "65"}, 2},                                                 // beyond the context
		{[]string{"simulate", "--preset", "gpt2-xl", "--batch", "32", "--memory", "8GiB"}, 1}, // out of memory on the card
		{[]string{"train", "--lr", "1e30", "--steps", "20", "--batch", "2", "--seq", "8"}, 1}, // diverged
	} {
		if _, errOut, code := runArgs(t, tc.args...); code != tc.code {
			t.Errorf("%v: exit %d, want %d (%s)", tc.args, code, tc.code, lastLine(errOut))
		}
	}
}

// A sparse checkpoint of the size its huge header declares passes the size
// check, and is refused before its parameters are allocated: the machine
// could not hold them.
func TestSparseCheckpointRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparse.bin")
	h := model.CheckpointHeader{Version: 3, MaxSeqLen: 1024, Vocab: 50304, Layers: 64, Heads: 32, Channels: 4096, PaddedVocab: 50304}
	size, err := h.FileBytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, checkpointHeader(1024, 50304, 64, 32, 4096, 50304), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	if avail, _, err := host.Memory(); err != nil || avail > size {
		t.Skipf("this machine could hold the %d-byte checkpoint (%d available, %v)", size, avail, err)
	}
	wantUsage(t, []string{"train", "--steps", "1", "--load", path}, "host memory", "sparse.bin")
}

func TestRanksFlagsRefused(t *testing.T) {
	base := []string{"simulate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--ranks", "2"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--zero", "3", "--bucket-mb", "4"}, []string{"ZeRO-3 gathers and reduces a unit", "no bucket size"}},
		{[]string{"--zero", "4"}, []string{"--zero 4", "valid: 0, 1, 2, 3"}},
		{[]string{"--data-parallel", "ps", "--zero", "1"}, []string{"--data-parallel ps and --zero 1", "drop --zero"}},
		{[]string{"--data-parallel", "ddp"}, []string{`"ddp"`, "valid: ps"}},
		{[]string{"--zero", "1", "--bucket-mb", "4"}, []string{"--bucket-mb", "ZeRO-1"}},
		{[]string{"--data-parallel", "ps", "--bucket-mb", "4"}, []string{"--bucket-mb", "parameter server"}},
		{[]string{"--bucket-mb", "-1"}, []string{"positive number of MiB"}},
		{[]string{"--zero", "1", "--prefetch"}, []string{"prefetch gathers ZeRO-3's units", "ZeRO-1"}},
	} {
		wantUsage(t, append(append([]string(nil), base...), tc.args...), tc.want...)
	}
	wantUsage(t, []string{"train", "--ranks", "9"}, "--ranks 9", "at most 8")
	// Found by trying it: 16,777,216 micro-batches ran the process out of
	// memory listing the schedule; a product of ranks past int64 exited 1
	// "over 0 ranks".
	wantUsage(t, []string{"simulate", "--preset", "tiny", "--micro-batches", "16777216"}, "--micro-batches 16777216", "valid: 1 to 65536")
	wantUsage(t, []string{"simulate", "--layers", "16384", "--hidden", "1048576", "--heads", "1048576", "--vocab", "1048576",
		"--ranks", "1073741824", "--tp", "1048576", "--pp", "16384"}, "ranks·tp·pp", "1.845e+19 ranks", "the limit is 1,073,741,824")
}
