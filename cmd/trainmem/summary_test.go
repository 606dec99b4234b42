package main

import (
	"strings"
	"testing"
)

// --format summary prints the memory summary box for simulate and train,
// and is refused, naming why, where there is no one device.
func TestFormatSummary(t *testing.T) {
	for _, args := range [][]string{
		{"simulate", "--preset", "tiny", "--batch", "2", "--seq", "32", "--format", "summary"},
		{"train", "--batch", "2", "--seq", "32", "--steps", "2", "--format", "summary"},
	} {
		out, _ := mustRun(t, args...)
		for _, want := range []string{"trainmem memory summary, ", "| Allocated memory      |", "|       from small pool |", "| Oversize segments     |"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s --format summary lacks %q:\n%s", args[0], want, out)
			}
		}
	}
	for _, args := range [][]string{
		{"simulate", "--preset", "tiny", "--ranks", "2", "--format", "summary"},
		{"train", "--ranks", "2", "--format", "summary"},
	} {
		if _, errOut, code := runArgs(t, args...); code != 2 || !strings.Contains(errOut, "--format summary is one device's memory summary") {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
}
