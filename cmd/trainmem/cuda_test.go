//go:build trainmem_cuda

package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/gpu"
)

// trainRecords runs trainmem train with args and returns its records.
func trainRecords(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	out := filepath.Join(t.TempDir(), "run.jsonl")
	if _, errOut, code := runArgs(t, append(append([]string{"train"}, args...), "--out", out)...); code != 0 {
		t.Fatalf("train %v: exit %d: %s", args, code, lastLine(errOut))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return recs
}

// peaks is a record's memory.peak by category.
func peaks(r map[string]any) map[string]int64 {
	out := map[string]int64{}
	for k, v := range r["memory"].(map[string]any)["peak"].(map[string]any) {
		out[k] = int64(v.(float64))
	}
	return out
}

// libraryWorkspace is what the CUDA device hands cuBLAS from the allocator.
func libraryWorkspace(t *testing.T) int64 {
	d, err := gpu.New(gpu.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var m [3]*cuda.Buffer
	for i := range m {
		if m[i], err = d.Alloc(cuda.Temporaries, cuda.F32, 4); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.MatMul(cuda.MatMul{M: 2, N: 2, K: 2, A: m[0], B: m[1], C: m[2], Alpha: 1}); err != nil {
		t.Fatal(err)
	}
	return d.LibraryWorkspaceBytes()
}

// TestCUDAMatchesHost trains tiny on the CUDA device and on the host, in
// fp32, fp16 and bf16, with checkpoint none and full, and compares them
// step by step: the losses within a tolerance, every category's peak
// memory equal but workspace, which on the CUDA device holds exactly
// cuBLAS's workspace more; then validate's measured column against its
// simulated one. It runs wherever the CUDA device opens: a GPU, or the
// emulated GPU of make test-cuda-emu (fake libcuda.so.1 and cuBLAS), and
// prints its table.
//
// Tolerances, relative to the host's loss: the CUDA kernels follow the
// host's algorithms and expression order, and cuBLAS accumulates in fp32
// as the host does, in another order; measured on the emulated GPU, fp32
// agreed to the bit and fp16 and bf16 to 4e-6 after 4 steps. On a GPU,
// nvcc's fused multiply-adds change the last bits of every kernel too.
func TestCUDAMatchesHost(t *testing.T) {
	if err := gpu.Available(); err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	ws := libraryWorkspace(t)
	tol := map[string]float64{"fp32": 2e-5, "fp16": 2e-4, "bf16": 2e-4}
	t.Logf("CUDA against host, tiny, batch 4, sequence 32, 4 steps; cuBLAS workspace %d bytes", ws)
	t.Logf("%-5s %-10s %14s %14s %10s  %s", "prec", "checkpoint", "host loss", "cuda loss", "max rel Δ", "peak memory, cuda - host")
	type run struct {
		prec, ckpt string
		arch       []string
	}
	var runs []run
	for _, prec := range []string{"fp32", "fp16", "bf16"} {
		for _, ckpt := range []string{"none", "full"} {
			runs = append(runs, run{prec, ckpt, nil})
		}
	}
	// LLaMA's blocks: the RMSNorm, SwiGLU and rotary kernels in a step,
	// with grouped-query attention (2 key and value heads for tiny's 4).
	llama := []string{"--norm", "rmsnorm", "--no-bias", "--mlp", "swiglu", "--positions", "rope", "--untied", "--kv-heads", "2"}
	runs = append(runs, run{"fp32", "none", llama}, run{"bf16", "full", llama})
	// Flash attention's kernels in a step.
	flash := append([]string{"--attention", "flash"}, llama...)
	runs = append(runs, run{"fp32", "none", flash}, run{"bf16", "none", flash})
	for _, r := range runs {
		prec, ckpt := r.prec, r.ckpt
		{
			args := append([]string{"--steps", "4", "--batch", "4", "--seq", "32", "--precision", prec, "--checkpoint", ckpt}, r.arch...)
			switch {
			case len(r.arch) > 0 && r.arch[0] == "--attention":
				ckpt += "+llama+flash" // the log's and the errors' name of the run
			case r.arch != nil:
				ckpt += "+llama"
			}
			host := trainRecords(t, args...)
			dev := trainRecords(t, append(args, "--device", "cuda")...)
			if len(host) != 4 || len(dev) != 4 {
				t.Fatalf("%s %s: %d and %d records", prec, ckpt, len(host), len(dev))
			}
			worst := 0.0
			for i := range host {
				h, d := host[i]["loss"].(float64), dev[i]["loss"].(float64)
				rel := math.Abs(d-h) / math.Abs(h)
				worst = max(worst, rel)
				if !(rel <= tol[prec]) {
					t.Errorf("%s %s step %d: loss %.7f on CUDA, %.7f on the host (relative %.1e > %.0e)", prec, ckpt, i+1, d, h, rel, tol[prec])
				}
			}
			var diffs []string
			hp, dp := peaks(host[3]), peaks(dev[3])
			for cat, h := range hp {
				want := h
				if cat == "workspace" {
					want += ws
				}
				if dp[cat] != want {
					t.Errorf("%s %s: %s peaks at %d bytes on CUDA, want %d (host %d)", prec, ckpt, cat, dp[cat], want, h)
				}
				if dp[cat] != h {
					diffs = append(diffs, fmt.Sprintf("%s %+d", cat, dp[cat]-h))
				}
			}
			t.Logf("%-5s %-10s %14.7f %14.7f %10.1e  %s", prec, ckpt, host[3]["loss"], dev[3]["loss"], worst, strings.Join(diffs, ", "))
		}
	}

	// validate's measured run on the CUDA device: every row equals the
	// simulation but workspace (+ cuBLAS's) and the context's row.
	for _, setup := range [][2]string{{"fp32", "none"}, {"fp32", "full"}, {"fp16", "none"}, {"fp16", "full"}, {"bf16", "none"}, {"bf16", "full"}} {
		prec, ckpt := setup[0], setup[1]
		stdout, errOut, code := runArgs(t, "validate", "--device", "cuda", "--precision", prec, "--checkpoint", ckpt, "--batch", "4", "--seq", "32", "--steps", "2", "--format", "json")
		if code != 0 {
			t.Fatalf("validate %s %s: exit %d: %s", prec, ckpt, code, lastLine(errOut))
		}
		var doc struct {
			Rows []struct {
				Category  string `json:"category"`
				Simulated *int64 `json:"simulated"`
				Measured  *int64 `json:"measured"`
			} `json:"rows"`
		}
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatal(err)
		}
		for _, r := range doc.Rows {
			if r.Simulated == nil || r.Measured == nil {
				continue
			}
			want := *r.Simulated
			switch r.Category {
			case "workspace":
				want += ws
			case "total_peak", "peak_reserved", "reserved_minus_allocated":
				continue // hold the workspace too, and its segment's rounding
			}
			if *r.Measured != want {
				t.Errorf("validate %s %s: %s measured %d, simulated %d (want %d)", prec, ckpt, r.Category, *r.Measured, *r.Simulated, want)
			}
		}
		t.Logf("validate --device cuda --precision %s --checkpoint %s: %d rows, measured = simulated (+ cuBLAS's workspace)", prec, ckpt, len(doc.Rows))
	}
}

// Ranks on GPUs over NCCL, one process driving two GPUs (ncclCommInitAll),
// every setting, and tensor-parallel and pipeline layouts on two GPUs (on
// four, their products with data-parallel ranks): each rank's memory equals the simulation's (of NCCL,
// which stages partial sums in its own buffers, reported as the engine's
// bytes) in every category but workspace (cuBLAS's, as for one GPU), its
// traffic the simulated ring's, and its loss the host ranks' within the
// tolerance of TestCUDAMatchesHost. It runs wherever two CUDA devices and
// NCCL open: a machine with GPUs, or the emulated GPUs of make
// test-cuda-emu (TRAINMEM_EMU_DEVICES=4, TRAINMEM_NCCL=bin/emu/libnccl.so.2).
func TestNCCLRanks(t *testing.T) {
	if err := gpu.Available(); err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	if d, err := gpu.New(gpu.Options{Ordinal: 1}); err != nil {
		t.Skipf("NCCL's ranks need 2 GPUs: %v", err)
	} else {
		d.Close()
	}
	version, err := gpu.NCCLVersion()
	if err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	ws := libraryWorkspace(t)
	t.Logf("2 ranks over %s, tiny, bf16", version)
	check := func(name string, args []string) {
		t.Helper()
		out, _ := mustRun(t, args...)
		host := parseRankReport(t, name+" on the host", out)
		out, errOut, code := runArgs(t, append(args, "--device", "cuda")...)
		if code != 0 {
			t.Fatalf("%s --device cuda: exit %d: %s", name, code, errOut)
		}
		nccl := parseRankReport(t, name+" over NCCL", out)
		if len(nccl.Ranks) != len(host.Ranks) {
			t.Fatalf("%s: %d ranks over NCCL, %d on the host", name, len(nccl.Ranks), len(host.Ranks))
		}
		for r, got := range nccl.Ranks {
			if got.MeasSent == nil || got.MeasLoss == nil {
				t.Fatalf("%s rank %d: nothing measured", name, r)
			}
			for c, sim := range got.Simulated {
				want := sim
				if c == "workspace" {
					want += ws
				}
				if got.Measured[c] != want {
					t.Errorf("%s rank %d %s: measured %d over NCCL, want %d (simulated %d)", name, r, c, got.Measured[c], want, sim)
				}
			}
			if *got.MeasSent != got.SimSent {
				t.Errorf("%s rank %d: sent %d over NCCL, the ring %d", name, r, *got.MeasSent, got.SimSent)
			}
			if got.MeasEngineBytes <= 0 {
				t.Errorf("%s rank %d: NCCL's own memory not measured (%d)", name, r, got.MeasEngineBytes)
			}
			h := *host.Ranks[r].MeasLoss
			if rel := math.Abs(*got.MeasLoss-h) / math.Abs(h); !(rel <= 2e-4) {
				t.Errorf("%s rank %d: loss %v over NCCL, %v on the host ranks (relative %.1e > 2e-4)", name, r, *got.MeasLoss, h, rel)
			}
		}
		t.Logf("%-32s rank 0: loss %.7f (host %.7f), NCCL's own memory %d bytes", name, *nccl.Ranks[0].MeasLoss, *host.Ranks[0].MeasLoss, nccl.Ranks[0].MeasEngineBytes)
	}
	for _, set := range settings {
		check(strings.Join(set, " "), append(ranksArgs(set), "--ranks", "2"))
	}
	// Layouts: each tensor group, pipeline and data group a communicator
	// of its own (ncclCommInitAll over its GPUs), pipelines over ncclSend
	// and ncclRecv. NCCL's own memory is then a communicator's a group.
	layouts := [][]string{{"--tp", "2"}, {"--pp", "2", "--micro-batches", "3"}}
	if d, err := gpu.New(gpu.Options{Ordinal: 3}); err != nil {
		t.Logf("the layouts of 4 ranks need 4 GPUs: %v", err)
	} else {
		d.Close()
		layouts = append(layouts, []string{"--tp", "2", "--ranks", "2", "--zero", "1"}, []string{"--tp", "2", "--pp", "2", "--micro-batches", "2"}, []string{"--pp", "2", "--ranks", "2", "--micro-batches", "2", "--schedule", "gpipe"})
	}
	for _, lay := range layouts {
		check(strings.Join(lay, " "), append(ranksArgs(nil), lay...))
	}
}
