package main

// Hostile input, as users found it: each test reproduces what a run did
// before its fix (an input destroyed, a wrong exit status, a hang) and
// checks what it does now.

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainmem/model"
)

// Every path a command writes, each derived name included (FILE.pickle
// and FILE.json of --memory-trace, the per-rank names, --plot-timeline),
// is checked with the inputs and the other outputs before any work: no
// output replaces an input or another output. Before, the trace and the
// timeline were checked against nothing, and `train --data corpus.json
// --memory-trace corpus` turned the corpus into the trace, exit 0.
func TestDerivedOutputsChecked(t *testing.T) {
	dir := t.TempDir()
	keep := func(name string, b []byte) string { return writeFile(t, dir, name, b) }
	corpusText := []byte(strings.Repeat("the corpus a user keeps. ", 200))
	corpus := keep("corpus.json", corpusText)
	svgCorpus := keep("corpus.svg", corpusText)
	c, _ := model.Preset("tiny")
	ckpt := filepath.Join(dir, "model.json")
	if err := model.SaveCheckpoint(ckpt, c, model.InitParams(c, 1)); err != nil {
		t.Fatal(err)
	}
	ckptBytes, _ := os.ReadFile(ckpt)
	records := keep("tt.pickle", []byte("{\"step\":1}\n"))
	weights := keep("m.pickle", []byte("weights a user keeps"))
	ranked := keep("r.rank1.json", []byte("rank 1's records"))
	base := func(args ...string) []string {
		return append([]string{"train", "--steps", "1", "--batch", "2", "--seq", "8"}, args...)
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{base("--data", corpus, "--memory-trace", filepath.Join(dir, "corpus")), []string{"--memory-trace", "corpus.json", "the same file as --data"}},
		{base("--load", ckpt, "--memory-trace", filepath.Join(dir, "model")), []string{"--memory-trace", "model.json", "the same file as --load"}},
		{base("--out", records, "--memory-trace", filepath.Join(dir, "tt")), []string{"--memory-trace", "tt.pickle", "the same file as --out"}},
		{base("--save", weights, "--memory-trace", filepath.Join(dir, "m")), []string{"--memory-trace", "m.pickle", "the same file as --save"}},
		{base("--out", ranked, "--ranks", "2", "--memory-trace", filepath.Join(dir, "r")), []string{"--memory-trace", "r.rank1.json", "the same file as --out"}},
		{base("--data", svgCorpus, "--plot-timeline", svgCorpus), []string{"--plot-timeline", "the same file as --data"}},
		{[]string{"validate", "--no-measure", "--sweep", "checkpoint", "--plot", filepath.Join(dir, "same.svg"), "--plot-timeline", filepath.Join(dir, "same.svg")}, []string{"--plot-timeline", "the same file as --plot"}},
		{[]string{"validate", "--no-measure", "--data", corpus, "--memory-trace", filepath.Join(dir, "corpus")}, []string{"--memory-trace", "the same file as --data"}},
	} {
		wantUsage(t, tc.args, tc.want...)
	}
	for path, want := range map[string][]byte{corpus: corpusText, svgCorpus: corpusText, ckpt: ckptBytes, records: []byte("{\"step\":1}\n"), weights: []byte("weights a user keeps"), ranked: []byte("rank 1's records")} {
		if got, err := os.ReadFile(path); err != nil || string(got) != string(want) {
			t.Errorf("%s was changed (%v)", path, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "same.svg")); err == nil {
		t.Errorf("validate wrote same.svg after refusing it")
	}
}

// Bad input of every kind is exit status 2 with one line naming the value
// and what is valid, as README promises. Before: a vocabulary under 256
// with the built-in corpus was exit 1 (its message said "train: train:"),
// an unwritable report directory was found after the whole report was
// computed, TRAINMEM_BLAS=fortran was exit 1, --memory 1.5 silently meant
// 1 byte, --memory 1e30's error offered "8 EiB", a unit it refused,
// validate --steps 0 silently ran 3 steps and a bad TRAINMEM_PEAK_GFLOPS
// was ignored.
func TestBadInputIsExit2(t *testing.T) {
	wantUsage(t, []string{"train", "--vocab", "100", "--steps", "1"}, "built-in corpus", "vocabulary of 100", "--data")
	if _, errOut, _ := runArgs(t, "train", "--vocab", "100", "--steps", "1"); strings.Contains(errOut, "train: train:") {
		t.Errorf("the message stutters: %q", lastLine(errOut))
	}
	wantUsage(t, []string{"report", "--no-measure", "/proc/trainmem-report"}, "/proc/trainmem-report", "cannot be made")
	wantUsage(t, []string{"report", "--no-measure", "--steps", "0", t.TempDir()}, "--steps 0", "positive integer")
	wantUsage(t, []string{"validate", "--no-measure", "--steps", "0"}, "--steps 0", "positive integer")
	wantUsage(t, []string{"simulate", "--preset", "tiny", "--memory", "1.5"}, `"1.5"`, "not a whole number of bytes", "1.5GiB")
	wantUsage(t, []string{"simulate", "--preset", "tiny", "--memory", "1e30"}, `"1e30"`, "2^63-1 bytes")
	if _, errOut, code := runArgs(t, "simulate", "--preset", "tiny", "--memory", "1EiB"); code != 0 { // the unit its limit names
		t.Errorf("simulate --memory 1EiB: exit %d (%s)", code, lastLine(errOut))
	}
	// 5e-324 GFLOP/s made the MFU +Inf, which JSON cannot hold: train failed
	// at step 1.
	for _, env := range []string{"TRAINMEM_BLAS=fortran", "TRAINMEM_PEAK_GFLOPS=fast", "TRAINMEM_PEAK_GFLOPS=-5", "TRAINMEM_PEAK_GFLOPS=5e-324"} {
		k, v, _ := strings.Cut(env, "=")
		t.Run(env, func(t *testing.T) {
			t.Setenv(k, v)
			wantUsage(t, []string{"train", "--steps", "1", "--batch", "1", "--seq", "8"}, k, v, "valid")
			wantUsage(t, []string{"validate", "--steps", "1", "--batch", "1", "--seq", "8"}, k, v)
		})
	}
}

// train refuses, before it allocates anything and with the sizes, a run
// the machine cannot hold, whatever its model's source: a preset, a shape,
// a checkpoint (TestSparseCheckpointRefused). Before, --preset 6b and
// --preset gpt2 --layers 4000 ended in Go's "fatal error: runtime: out of
// memory" and a 2^16-wide shape panicked in model.InitParams (makeslice).
func TestTrainTooLargeForTheMachine(t *testing.T) {
	for _, args := range [][]string{
		{"train", "--steps", "1", "--preset", "6b"},
		{"train", "--steps", "1", "--preset", "gpt2-xl", "--batch", "32", "--seq", "1000"},
		{"train", "--steps", "1", "--hidden", "65536", "--heads", "64", "--layers", "64", "--vocab", "256"},
		{"train", "--steps", "1", "--preset", "gpt2-xl", "--ranks", "2"},
		{"validate", "--steps", "1", "--hidden", "65536", "--heads", "64", "--layers", "64", "--vocab", "256"},
	} {
		wantUsage(t, args, "the run needs", "reserved by the allocator, simulated", "float32 parameters", "free")
	}
}

// A shape-only run allocates nothing that grows with the batch: fit's
// search on a memory beyond any setup (8000 PiB) reaches the largest
// micro-batch this setup can have (1,048,575 sequences of 2,048 tokens:
// at most 2^31-1 rows) and answers "at least" instead of printing its
// search limit as the answer (tiny at 1 PiB: ≥ 16,777,216, the largest
// batch); the formula searches as far
// (at 1 TB tiny fits 1,066,114 by the formula, not its old cap of
// 1,048,576). Before, the simulation allocated real token buffers of
// batch × seq and the kernel killed fit.
func TestFitAllocatesNothingThatGrows(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	out, errOut, code := runArgs(t, "fit", "--preset", "6b", "--memory", "8000PiB")
	runtime.ReadMemStats(&after)
	if code != 0 {
		t.Fatalf("fit: exit %d: %s", code, lastLine(errOut))
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<30 {
		t.Errorf("fit allocated %d bytes on the host", grew)
	}
	if !strings.Contains(out, "≥ 1,048,575 / ≥ 1,048,575") || !strings.Contains(out, "at least that many fit") {
		t.Errorf("fit at 8000 PiB does not say its answers are bounds:\n%s", out)
	}
	if out, _ := mustRun(t, "fit", "--preset", "tiny", "--memory", "1PiB"); !strings.Contains(out, "≥ 16,777,216 / ≥ 16,777,216") {
		t.Errorf("fit at 1 PiB does not say its answers are bounds:\n%s", out)
	}
	out, _ = mustRun(t, "fit", "--preset", "tiny", "--memory", "1TB")
	if !strings.Contains(out, "1,066,114") || strings.Contains(out, "1,048,576") {
		t.Errorf("fit at 1 TB:\n%s", out)
	}
}

// More ranks than parameters, and the report's largest --ranks: every
// rank past the parameters holds a shard of padding and updates nothing
// (before, ZeRO-1 failed an internal invariant: "the policy's piece ... is
// outside the layout").
func TestMoreRanksThanParameters(t *testing.T) {
	for _, set := range [][]string{{"--zero", "0"}, {"--zero", "1"}, {"--zero", "2"}, {"--zero", "3"}, {"--data-parallel", "ps"}} {
		mustRun(t, append([]string{"simulate", "--preset", "tiny", "--ranks", "200000"}, set...)...)
	}
	// The report's stage table at its largest --ranks (it failed after
	// 18 s; the rings' closed form makes it a fraction of a second).
	mustRun(t, "report", "--no-measure", "--ranks", "1048576", filepath.Join(t.TempDir(), "out"))
}

// A setup whose bytes pass int64 is refused at once by every subcommand,
// as estimate refuses it: before, simulate built its 16384-layer graph for
// 13 s and more before running out of the shape device's address space.
func TestEstimateRefusalIsEveryones(t *testing.T) {
	deep := []string{"--hidden", "1024", "--heads", "1", "--layers", "16384", "--context", "16777216", "--vocab", "16777216", "--seq", "16777216", "--batch", "16"}
	for _, cmd := range []string{"simulate", "train", "validate"} {
		wantUsage(t, append([]string{cmd}, deep...), "--layers 16384", "2^63-1 bytes")
	}
}

// An output that is a FIFO waits for its reader as a plain open would, but
// a signal ends the wait: the run stops within moments, naming the FIFO
// and exiting with the signal's status, 143 (before, --out FIFO or --save
// FIFO with no reader blocked forever and ignored the first SIGTERM; then
// it exited 1). With a reader, the records go through it.
func TestFIFOOutputs(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("no FIFO here: %v", err)
	}
	for _, flag := range []string{"--out", "--save"} {
		cmd, stderr := startTrainmem(t, "train", "--steps", "3", "--batch", "2", "--seq", "8", flag, fifo)
		time.Sleep(1500 * time.Millisecond) // the run waits at the FIFO's open
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		code := exitOf(t, cmd)
		if code != 143 || time.Since(start) > 10*time.Second || !strings.Contains(stderr.String(), "a FIFO that no process read") {
			t.Errorf("%s FIFO without a reader: exit %d after %v:\n%s", flag, code, time.Since(start), stderr.String())
		}
	}
	got := make(chan int, 1)
	go func() {
		b, _ := os.ReadFile(fifo) // a reader: the open blocks until the run opens it
		got <- strings.Count(string(b), "\n")
	}()
	if _, errOut, code := runArgs(t, "train", "--steps", "3", "--batch", "2", "--seq", "8", "--out", fifo); code != 0 {
		t.Fatalf("--out FIFO with a reader: exit %d: %s", code, lastLine(errOut))
	}
	select {
	case n := <-got:
		if n != 3 {
			t.Errorf("the FIFO's reader got %d records, want 3", n)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the FIFO's reader got nothing")
	}
}

// Help and reports as a newcomer reads them: --formula names trainmem's
// formula; report -h offers no --load it does not have; --rank's help says
// its default once; --threads says it takes 0; fit's --batch says that
// without it fit searches the batch; one step's speed is not a "mean over
// steps 2..1"; the ZeRO-1 estimate's total says what a rank holds a
// parameter (4.19 for gpt2-xl over 64 ranks), not 16.
func TestHelpAsANewcomerReadsIt(t *testing.T) {
	help := func(cmd string) string { return helpOf(t, cmd) }
	flagHelp := flagLine
	for _, cmd := range []string{"estimate", "fit"} {
		if l := flagHelp(help(cmd), "formula"); !strings.Contains(l, "trainmem") {
			t.Errorf("%s -h --formula: %q", cmd, l)
		}
	}
	if h := help("report"); strings.Contains(h, "--load") {
		t.Errorf("report -h mentions --load")
	}
	train := help("train")
	if l := flagHelp(train, "rank"); strings.Count(l, "(default") != 1 {
		t.Errorf("train -h --rank: %q", l)
	}
	if l := flagHelp(train, "threads"); !strings.Contains(l, "0 for every core") {
		t.Errorf("train -h --threads: %q", l)
	}
	if l := flagHelp(help("fit"), "batch"); strings.Contains(l, "(default 1)") || !strings.Contains(l, "searches") {
		t.Errorf("fit -h --batch: %q", l)
	}
	if out, _ := mustRun(t, "train", "--steps", "1", "--batch", "2", "--seq", "8"); strings.Contains(out, "2..1") {
		t.Errorf("one step's speed:\n%s", out)
	}
	out, _ := mustRun(t, "estimate", "--preset", "gpt2-xl", "--ranks", "64", "--zero", "1", "--precision", "fp16")
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "  total ") && !strings.HasSuffix(strings.TrimSpace(line), "4.19") {
			t.Errorf("ZeRO-1 total: %q, want 4.19 bytes a parameter", line)
		}
	}
}

// Two runs writing one file at once: the second is refused before it
// starts, naming the first's pid (before, both exited 0 and one run's
// records were lost).
func TestOneWriterAnOutput(t *testing.T) {
	out := filepath.Join(t.TempDir(), "same.jsonl")
	first, _ := startTrainmem(t, "train", "--steps", "100000", "--batch", "1", "--seq", "8", "--threads", "1", "--out", out)
	waitLines(t, out, 2)
	_, errOut, code := runArgs(t, "train", "--steps", "2", "--batch", "1", "--seq", "8", "--out", out)
	first.Process.Signal(syscall.SIGTERM)
	exitOf(t, first)
	if code != 2 || !strings.Contains(lastLine(errOut), "another trainmem run (pid "+strconv.Itoa(first.Process.Pid)+")") {
		t.Errorf("a second writer of %s: exit %d: %s", out, code, lastLine(errOut))
	}
}

// validate --sweep checkpoint acts on SIGINT during its simulations (each
// policy's in turn), not only once every policy is simulated: tiny with
// 1024 layers simulates its eight policies in about 12 s here; the run
// stops within moments of the signal, exit 130.
func TestSweepStopsOnSignal(t *testing.T) {
	cmd, stderr := startTrainmem(t, "validate", "--sweep", "checkpoint", "--no-measure", "--preset", "tiny", "--layers", "1024")
	time.Sleep(1500 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code := exitOf(t, cmd)
	if code != 130 || time.Since(start) > 6*time.Second {
		t.Errorf("exit %d %v after SIGINT:\n%s", code, time.Since(start), stderr.String())
	}
}

// fullWriter fails every write as a full disk does after n bytes.
type fullWriter struct{ n int }

func (f *fullWriter) Write(p []byte) (int, error) {
	if len(p) <= f.n {
		f.n -= len(p)
		return len(p), nil
	}
	k := f.n
	f.n = 0
	return k, syscall.ENOSPC
}

// Output that was not written is not reported as written: `estimate >
// /dev/full` and `fit > /dev/full` exited 0. Every subcommand's answer on a
// full stdout (at once, or after its first 100 bytes) fails with exit 1
// and the write's error.
func TestOutputNotWritten(t *testing.T) {
	for _, args := range [][]string{
		{"estimate", "--preset", "gpt2"},
		{"estimate", "--preset", "gpt2", "--format", "json"},
		{"fit", "--preset", "tiny", "--memory", "1GiB"},
		{"simulate", "--preset", "tiny"},
		{"help"},
	} {
		for _, room := range []int{0, 100} {
			var errb bytes.Buffer
			err := run(context.Background(), args, &fullWriter{n: room}, &errb)
			if code := exitCode(err); code != 1 || err == nil || !strings.Contains(err.Error(), "no space left") {
				t.Errorf("%v onto a full stdout (%d bytes of room): exit %d, %v", args, room, code, err)
			}
		}
	}
}
