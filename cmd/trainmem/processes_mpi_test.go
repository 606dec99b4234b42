//go:build trainmem_mpi

package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// mpirun starts 4 ranks of bin/trainmem-mpi (make test-mpi sets
// TRAINMEM_MPI_BIN) on this machine; the test skips, saying why, without
// mpirun or the binary.
func mpirun(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	bin := os.Getenv("TRAINMEM_MPI_BIN")
	mr, err := exec.LookPath("mpirun")
	switch {
	case bin == "":
		t.Skip("TRAINMEM_MPI_BIN is not set: run make test-mpi")
	case err != nil:
		t.Skip("no mpirun (Debian: apt-get install openmpi-bin libopenmpi-dev)")
	}
	cmd := exec.Command(mr, append([]string{"--allow-run-as-root", "--oversubscribe", "--bind-to", "none"}, args...)...)
	for i, a := range cmd.Args {
		if a == "BIN" {
			cmd.Args[i] = bin
		}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// Four ranks started by mpirun over MPI, every setting: each rank's memory
// equal byte for byte to the in-process run and to the simulation, its
// traffic to the in-process counters, its loss within the reduction-order
// tolerance.
func TestMPIRanks(t *testing.T) {
	for _, set := range settings {
		name := strings.Join(set, " ")
		out, _ := mustRun(t, append(ranksArgs(set), "--ranks", "4")...)
		inproc := parseRankReport(t, name+" in one process", out)
		mout, merr, err := mpirun(t, append([]string{"-np", "4", "BIN"}, append(ranksArgs(set), "--backend", "mpi", "--ranks", "4")...)...)
		if err != nil {
			t.Fatalf("%s: mpirun: %v\n%s", name, err, merr)
		}
		procs := parseRankReport(t, name+" over mpi", mout)
		if procs.Engine != "mpi" {
			t.Errorf("%s: engine %q, want mpi", name, procs.Engine)
		}
		sameRanks(t, name, inproc, procs, 4)
	}
}

// Under mpirun too, a rank whose setup differs is refused at the start on
// every rank, naming the difference.
func TestMPISetupsDiffer(t *testing.T) {
	args := ranksArgs([]string{"--zero", "2"})
	_, merr, err := mpirun(t, append(append(append([]string{"-np", "3", "BIN"}, args...), ":", "-np", "1", "BIN"), append(args, "--batch", "3")...)...)
	if err == nil || strings.Count(merr, "rank 3's setup differs from rank 0's: --batch 3 (rank 0: 2)") != 4 {
		t.Errorf("mpirun: %v, want every rank to name rank 3's batch:\n%s", err, merr)
	}
}

// Four ranks of a dp 2 × tp 2 layout started by mpirun (MPI reaches every
// pair, so the data groups, two ranks apart, run too): the same records and
// weights as the layout in one process.
func TestMPITensorParallel(t *testing.T) {
	dir := t.TempDir()
	args := func(out, save string) []string {
		return []string{"train", "--preset", "tiny", "--batch", "2", "--seq", "16", "--tp", "2", "--zero", "1", "--steps", "3", "--threads", "1", "--out", filepath.Join(dir, out), "--save", filepath.Join(dir, save)}
	}
	mustRun(t, append(args("in.jsonl", "in.bin"), "--ranks", "2")...)
	if _, merr, err := mpirun(t, append([]string{"-np", "4", "BIN"}, append(args("procs.jsonl", "procs.bin"), "--backend", "mpi")...)...); err != nil {
		t.Fatalf("mpirun: %v\n%s", err, merr)
	}
	sameTrainRuns(t, dir, "in", "procs", 4, 3)
}

// train of a dp 2 × pp 2 layout under mpirun: the records and saved
// weights of the same layout in one process.
func TestMPIPipeline(t *testing.T) {
	dir := t.TempDir()
	args := func(out, save string) []string {
		return []string{"train", "--preset", "tiny", "--batch", "2", "--seq", "16", "--pp", "2", "--micro-batches", "2", "--zero", "1", "--steps", "3", "--threads", "1", "--out", filepath.Join(dir, out), "--save", filepath.Join(dir, save)}
	}
	mustRun(t, append(args("in.jsonl", "in.bin"), "--ranks", "2")...)
	if _, merr, err := mpirun(t, append([]string{"-np", "4", "BIN"}, append(args("procs.jsonl", "procs.bin"), "--backend", "mpi")...)...); err != nil {
		t.Fatalf("mpirun: %v\n%s", err, merr)
	}
	sameTrainRuns(t, dir, "in", "procs", 4, 3)
}

// validate of a dp 2 × tp 2 × pp 2 layout under mpirun: every rank's
// memory and traffic equal to the same layout in one process, and to the
// simulation.
func TestMPIValidatePipeline(t *testing.T) {
	args := ranksArgs([]string{"--zero", "1", "--tp", "2", "--pp", "2", "--micro-batches", "2"})
	out, _ := mustRun(t, append(args, "--ranks", "2")...)
	inproc := parseRankReport(t, "pp 2 in one process", out)
	mout, merr, err := mpirun(t, append([]string{"-np", "8", "--oversubscribe", "BIN"}, append(args, "--backend", "mpi")...)...)
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, merr)
	}
	sameRanks(t, "dp 2 × tp 2 × pp 2", inproc, parseRankReport(t, "pp 2 over mpi", mout), 8)
}

// validate of a dp 2 × tp 2 layout under mpirun: every rank's memory and
// traffic equal to the same layout in one process, and to the simulation.
func TestMPIValidateTensorParallel(t *testing.T) {
	args := ranksArgs([]string{"--zero", "1", "--tp", "2"})
	out, _ := mustRun(t, append(args, "--ranks", "2")...)
	inproc := parseRankReport(t, "tp 2 in one process", out)
	mout, merr, err := mpirun(t, append([]string{"-np", "4", "BIN"}, append(args, "--backend", "mpi")...)...)
	if err != nil {
		t.Fatalf("mpirun: %v\n%s", err, merr)
	}
	sameRanks(t, "dp 2 × tp 2", inproc, parseRankReport(t, "tp 2 over mpi", mout), 4)
}
