package main

import (
	"errors"
	"strings"
	"testing"

	"trainmem/model"
)

// The pure-Go note comes when the host fell back from OpenBLAS and the
// model's step would take seconds, naming the package; not for a quick
// step, and not when OpenBLAS is there or pure Go was asked for.
func TestSlowHostNote(t *testing.T) {
	setup := func(preset string, b, seq int) model.Setup {
		c, err := model.Preset(preset)
		if err != nil {
			t.Fatal(err)
		}
		return model.Setup{Model: c, Batch: b, Seq: seq, Ranks: 1, TP: 1, PP: 1}
	}
	missing := errors.New("cuda: OpenBLAS not found: libopenblas.so.0: cannot open shared object file")
	note := slowHostNote(missing, setup("gpt2", 4, 64), 2)
	for _, want := range []string{"pure Go", "libopenblas0-pthread", "about 8x faster", "a step of gpt2 will take about", "libopenblas.so.0: cannot open"} {
		if !strings.Contains(note, want) {
			t.Errorf("the note lacks %q: %s", want, note)
		}
	}
	for _, c := range []struct {
		why error
		s   model.Setup
	}{{missing, setup("tiny", 8, 64)}, {nil, setup("gpt2", 4, 64)}} {
		if n := slowHostNote(c.why, c.s, 2); n != "" {
			t.Errorf("%s with fallback %v: a note: %s", c.s.Model.Name, c.why, n)
		}
	}
}
