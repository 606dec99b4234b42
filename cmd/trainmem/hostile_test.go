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
