package main

// Hostile input, as users found it: each test reproduces what a run did
// before its fix (an input destroyed, a wrong exit status, a hang) and
// checks what it does now.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	for _, env := range []string{"TRAINMEM_BLAS=fortran", "TRAINMEM_PEAK_GFLOPS=fast", "TRAINMEM_PEAK_GFLOPS=-5"} {
		k, v, _ := strings.Cut(env, "=")
		t.Run(env, func(t *testing.T) {
			t.Setenv(k, v)
			wantUsage(t, []string{"train", "--steps", "1", "--batch", "1", "--seq", "8"}, k, v, "valid")
			wantUsage(t, []string{"validate", "--steps", "1", "--batch", "1", "--seq", "8"}, k, v)
		})
	}
}
