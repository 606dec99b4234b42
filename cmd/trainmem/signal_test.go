package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"trainmem/model"
	"trainmem/model/files"
)

// TestMain runs trainmem's main instead of the tests when the test binary
// is started as trainmem (TRAINMEM_TEST_MAIN=1), so that tests can send a
// real process real signals.
func TestMain(m *testing.M) {
	if os.Getenv("TRAINMEM_TEST_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// startTrainmem starts the test binary as trainmem with args.
func startTrainmem(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "TRAINMEM_TEST_MAIN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return cmd, &stderr
}

// waitLines waits until path holds at least n lines.
func waitLines(t *testing.T, path string, n int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && bytes.Count(b, []byte("\n")) >= n {
			return
		}
	}
	t.Fatalf("%s never reached %d lines", path, n)
}

// exitOf waits for cmd and returns its exit status.
func exitOf(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(60 * time.Second):
		t.Fatal("trainmem did not stop within a minute of the signal")
	}
	return -1
}

// SIGTERM (a batch scheduler's), SIGHUP and SIGINT stop a run the same way:
// the step in flight finishes, the records streamed so far are whole JSON
// Lines, the checkpoint is written, no temporary file is left, and the exit
// status is 128 + the signal's number. A second signal stops at once, still
// leaving no temporary file (TestSecondSignalDuringSave).
func TestSignalsStopCleanly(t *testing.T) {
	c, _ := model.Preset("tiny")
	for _, tc := range []struct {
		sig  syscall.Signal
		name string
	}{
		{syscall.SIGTERM, "SIGTERM"},
		{syscall.SIGHUP, "SIGHUP"},
		{syscall.SIGINT, "SIGINT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out, save := filepath.Join(dir, "run.jsonl"), filepath.Join(dir, "w.bin")
			cmd, stderr := startTrainmem(t, "train", "--steps", "100000", "--batch", "2", "--seq", "16", "--out", out, "--save", save)
			waitLines(t, out, 2)
			cmd.Process.Signal(tc.sig)
			code := exitOf(t, cmd)
			if want := 128 + int(tc.sig); code != want {
				t.Errorf("exit %d, want %d\n%s", code, want, stderr)
			}
			n := countLines(t, out)
			if n < 2 || n >= 100000 {
				t.Errorf("%d records", n)
			}
			if _, err := model.LoadCheckpoint(save, c); err != nil {
				t.Errorf("the checkpoint: %v", err)
			}
			if !strings.Contains(stderr.String(), "stopped by "+tc.name) {
				t.Errorf("stderr does not say why it stopped:\n%s", stderr)
			}
			if left := files.TempsIn(dir); len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

// A second signal while the checkpoint is being saved stops at once: the
// temporary file of the save is removed and the checkpoint the user had
// stays as it was. The model is one block with GPT-2's vocabulary, so that
// its checkpoint (183 MB) takes a while to write.
func TestSecondSignalDuringSave(t *testing.T) {
	dir := t.TempDir()
	out, save := filepath.Join(dir, "run.jsonl"), filepath.Join(dir, "w.bin")
	if err := os.WriteFile(save, []byte("the user's old checkpoint"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, stderr := startTrainmem(t, "train", "--steps", "100000", "--layers", "1", "--hidden", "768", "--heads", "12",
		"--vocab", "50257", "--context", "64", "--batch", "1", "--seq", "8", "--out", out, "--save", save)
	waitLines(t, out, 1)
	cmd.Process.Signal(syscall.SIGTERM)
	// Wait for the save's temporary file, then signal again.
	seen := false
	for deadline := time.Now().Add(60 * time.Second); !seen && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			seen = seen || strings.HasPrefix(e.Name(), ".w.bin.tmp-")
		}
	}
	if !seen {
		t.Fatal("the save's temporary file never appeared")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	if code := exitOf(t, cmd); code != 143 {
		t.Errorf("exit %d, want 143\n%s", code, stderr)
	}
	if !strings.Contains(stderr.String(), "SIGTERM again: stopped at once") {
		t.Errorf("stderr does not say it stopped at once:\n%s", stderr)
	}
	if left := files.TempsIn(dir); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if b, _ := os.ReadFile(save); string(b) != "the user's old checkpoint" {
		t.Errorf("the old checkpoint was replaced by %d bytes", len(b))
	}
	if n := countLines(t, out); n < 1 {
		t.Errorf("%d records", n)
	}
}

// A signal that comes when nothing is left to cut short (a report's last
// section: the report interrupted by SIGINT exited 0) still sets the exit
// status, 128 + its number, and the message says the outputs are whole:
// here a command that never looks at its context finishes under one.
func TestSignalAfterTheWork(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(&signalError{sig: syscall.SIGINT})
	var out, errb bytes.Buffer
	err := run(ctx, []string{"estimate", "--preset", "tiny"}, &out, &errb)
	if code := exitCode(err); code != 130 || !strings.Contains(fmt.Sprint(err), "finished and wrote its outputs whole, but stopped by SIGINT") {
		t.Errorf("exit %d, %v", code, err)
	}
	if !strings.Contains(out.String(), "model states") {
		t.Errorf("the answer was not written:\n%s", out.String())
	}
}
