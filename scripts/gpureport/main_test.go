package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReport runs the table on the files of a host run of the same
// commands gpu-check.sh runs (the host stands in for the GPU).
func TestReport(t *testing.T) {
	if testing.Short() {
		t.Skip("runs trainmem")
	}
	dir := t.TempDir()
	run := func(out string, args ...string) {
		cmd := exec.Command("go", append([]string{"run", "../../cmd/trainmem"}, args...)...)
		b, err := cmd.Output()
		if err != nil {
			t.Fatalf("trainmem %v: %v", args, err)
		}
		if out != "" {
			if err := os.WriteFile(filepath.Join(dir, out), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	setup := []string{"--preset", "tiny", "--precision", "bf16", "--checkpoint", "full", "--batch", "4", "--seq", "32"}
	run("validate-tiny_bf16_full_b4.json", append([]string{"validate", "--steps", "2", "--format", "json"}, setup...)...)
	run("", append([]string{"train", "--steps", "3", "--out", filepath.Join(dir, "train-tiny_bf16_full_b4.jsonl")}, setup...)...)
	if err := os.WriteFile(filepath.Join(dir, "validate-broken.json"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := report(&b, dir); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	t.Log("\n" + out)
	for _, want := range []string{"tiny_bf16_full_b4", "activations sim/meas", "MFU", "predicted ms", "broken", "validate failed"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q", want)
		}
	}
	// The host has no context row; every other cell of a measured run is filled.
	row := strings.Fields(strings.Split(out, "\n")[2])
	if row[0] != "tiny_bf16_full_b4" || strings.Count(strings.Join(row, " "), "-") != 1 {
		t.Errorf("a measured host run left a cell empty: %q", row)
	}
}
