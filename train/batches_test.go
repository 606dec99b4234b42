package train

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/model/reference"
)

// Train and validate's measured runs take their batches from one path:
// the shape device reads no data, a computing one the file or the built-in
// corpus, and data that cannot serve the setup is an error saying why.
func TestOpenBatches(t *testing.T) {
	s := oneRank(tinyCfg, 2, 16)
	b, err := OpenBatches(shape.New(0), "", s, 1)
	if err != nil {
		t.Fatal(err)
	}
	tok, tgt, err := b.Next()
	// Nothing that grows with the batch on a device that stores nothing.
	if err != nil || b.Source != "zero tokens" || b.Tokens != 0 || tok != nil || tgt != nil {
		t.Errorf("shape device: %q, %d tokens, batch %d/%d, %v; want zero tokens, none held", b.Source, b.Tokens, len(tok), len(tgt), err)
	}
	b.Close()

	h := reference.NewHost(t)
	b, err = OpenBatches(h, "", s, 1)
	if err != nil {
		t.Fatal(err)
	}
	tok, tgt, err = b.Next()
	if err != nil || b.Source != "default corpus" || b.Tokens < 10000 {
		t.Fatalf("built-in corpus: %q, %d tokens, %v", b.Source, b.Tokens, err)
	}
	nonzero := false
	for i := range tok {
		nonzero = nonzero || tok[i] != 0
		if i+1 < len(tok) && i%16 != 15 && tgt[i] != tok[i+1] {
			t.Fatalf("target %d is %d, want the next token %d", i, tgt[i], tok[i+1])
		}
	}
	if !nonzero {
		t.Error("the built-in corpus gave a batch of zeros")
	}
	b.Close()

	small := s
	small.Model.Vocab = 100
	if _, err := OpenBatches(h, "", small, 1); err == nil || !strings.Contains(err.Error(), "vocabulary of 100") || !strings.Contains(err.Error(), "--data") {
		t.Errorf("vocabulary 100 on the built-in corpus: %v, want an error naming the vocabulary and --data", err)
	}
	short := filepath.Join(t.TempDir(), "short.txt")
	if err := os.WriteFile(short, []byte("too short"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenBatches(h, short, s, 1); err == nil || !strings.Contains(err.Error(), "shorter than one batch") {
		t.Errorf("a 9-byte file: %v, want shorter than one batch", err)
	}
}

// The trainer is built from the Setup estimate and simulate take, checked
// once (Setup.Check), and refuses what it cannot run with the value named;
// a setup that was not checked is refused too.
func TestNewChecksTheSetup(t *testing.T) {
	dev := shape.New(0)
	for _, tc := range []struct {
		edit func(*model.Setup, *Options)
		want string
	}{
		{func(s *model.Setup, _ *Options) { s.Seq = 65 }, "sequence length 65"},
		{func(s *model.Setup, _ *Options) { s.Batch = 0 }, "batch 0"},
		{func(s *model.Setup, _ *Options) { s.Ranks = 2 }, "2 data-parallel ranks"},
		{func(s *model.Setup, _ *Options) { s.Model, s.Params = model.Config{}, 1000 }, "parameter count only"},
		{func(s *model.Setup, o *Options) { o.Optimizer = DefaultOptimizer(model.SGD) }, "hyperparameters are for"},
		{func(s *model.Setup, o *Options) {
			o.Optimizer = DefaultOptimizer(model.AdamW).WithLR(-1)
			o.Optimizer.LR = -1
		}, "learning rate -1"},
	} {
		s, o := oneRank(tinyCfg, 2, 16), Options{}
		tc.edit(&s, &o)
		c, err := s.Check()
		if err == nil {
			var tr *Trainer
			if tr, err = New(dev, c, o); tr != nil {
				tr.Close()
			}
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error containing %q", s, err, tc.want)
		}
	}
	if _, err := New(dev, model.Checked{}, Options{}); err == nil || !strings.Contains(err.Error(), "not checked") {
		t.Errorf("a setup that was not checked: %v, want it refused", err)
	}
	tr, err := New(dev, checked(t, oneRank(tinyCfg, 2, 16)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
}
