package main

import (
	"strings"
	"testing"
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
		{append([]string{"validate", "--no-measure"}, scores...), []string{"--heads 65536", "attention scores"}},
		{append([]string{"train", "--steps", "1", "--seq", "16777216", "--batch", "1"}, scores...), []string{"--heads 65536", "attention scores"}},
		{append([]string{"estimate"}, deep...), []string{"--layers 16384", "--seq 16777216", "--batch 16", "2^63-1 bytes"}},
		{append([]string{"fit", "--memory", "80GB"}, deep...), []string{"--layers 16384", "2^63-1 bytes"}},
		{[]string{"estimate", "--preset", "gpt2", "--batch", "16777216", "--seq", "256"}, []string{"--batch 16777216 --seq 256", "rows"}},
		{[]string{"estimate", "--layers", "65536", "--hidden", "64", "--heads", "4"}, []string{"--layers 65536", "1 to 16384"}},
	} {
		wantUsage(t, tc.args, tc.want...)
	}
}
