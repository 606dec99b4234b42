package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"trainmem/cuda/host"
	"trainmem/zero"
)

// rankReport is what a test reads of validate --ranks's JSON.
type rankReport struct {
	Engine string `json:"engine"`
	Ranks  []struct {
		Rank            int                        `json:"rank"`
		Simulated       map[string]int64           `json:"simulated_peak_requested"`
		Measured        map[string]int64           `json:"measured_peak_requested"`
		SimSent         int64                      `json:"simulated_sent_bytes"`
		MeasSent        *int64                     `json:"measured_sent_bytes"`
		MeasLoss        *float64                   `json:"measured_loss"`
		MeasAllocated   *int64                     `json:"measured_peak_allocated_bytes"`
		MeasReserved    *int64                     `json:"measured_peak_reserved_bytes"`
		MeasTraffic     map[string]json.RawMessage `json:"measured_traffic"`
		MeasEngineBytes int64                      `json:"measured_engine_bytes"`
	} `json:"ranks"`
	// Time: each measured host rank's step beside its replayed one.
	Time *struct {
		Network string `json:"network"`
		Ranks   []struct {
			Rank        int     `json:"rank"`
			MeasuredMs  float64 `json:"measured_ms"`
			PredictedMs float64 `json:"predicted_ms"`
		} `json:"ranks"`
	} `json:"time"`
}

func parseRankReport(t *testing.T, what, out string) rankReport {
	t.Helper()
	var r rankReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%s: %v:\n%s", what, err, out)
	}
	return r
}

// lossTol is the relative difference allowed between a rank's loss in one
// process and over processes: the ring adds in the same order on every
// transport, so they are equal unless a kernel's threads reorder a sum;
// the tolerance is the reduction-order one of the in-process ranks' tests.
const lossTol = 1e-5

// sameRanks checks that a run over processes measured what the in-process
// run did, rank by rank: every category's peak, the peak allocated and
// reserved bytes and every collective's calls and bytes exactly, the loss
// within lossTol; and that each equals the simulation.
func sameRanks(t *testing.T, what string, inproc, procs rankReport, n int) {
	t.Helper()
	if len(procs.Ranks) != n || len(inproc.Ranks) != n {
		t.Fatalf("%s: %d ranks over processes, %d in one, want %d", what, len(procs.Ranks), len(inproc.Ranks), n)
	}
	worst := 0.0
	defer func() {
		t.Logf("%s: %d ranks equal in memory and traffic; losses within %.1e relative", what, n, worst)
	}()
	for r := range n {
		a, b := inproc.Ranks[r], procs.Ranks[r]
		if b.MeasSent == nil || b.MeasLoss == nil || b.MeasAllocated == nil || a.MeasLoss == nil {
			t.Fatalf("%s rank %d: nothing measured", what, r)
		}
		for c, v := range b.Simulated {
			if b.Measured[c] != v || a.Measured[c] != v {
				t.Errorf("%s rank %d %s: simulated %d, measured over processes %d, in one process %d", what, r, c, v, b.Measured[c], a.Measured[c])
			}
		}
		if *b.MeasAllocated != *a.MeasAllocated || *b.MeasReserved != *a.MeasReserved {
			t.Errorf("%s rank %d: peak allocated/reserved %d/%d over processes, %d/%d in one", what, r, *b.MeasAllocated, *b.MeasReserved, *a.MeasAllocated, *a.MeasReserved)
		}
		if *b.MeasSent != b.SimSent || len(b.MeasTraffic) == 0 {
			t.Errorf("%s rank %d: sent %d, simulated %d", what, r, *b.MeasSent, b.SimSent)
		}
		for k, v := range a.MeasTraffic {
			if !bytes.Equal(v, b.MeasTraffic[k]) {
				t.Errorf("%s rank %d %s: traffic %s over processes, %s in one", what, r, k, b.MeasTraffic[k], v)
			}
		}
		d := math.Abs(*a.MeasLoss-*b.MeasLoss) / math.Abs(*a.MeasLoss)
		worst = max(worst, d)
		if !(d <= lossTol) {
			t.Errorf("%s rank %d: loss %v over processes, %v in one (relative %.2g, want ≤ %g)", what, r, *b.MeasLoss, *a.MeasLoss, d, lossTol)
		}
	}
}

// settings are the data-parallel settings the ranks tests run.
var settings = [][]string{
	{"--zero", "0", "--bucket-mb", "0.1"}, {"--zero", "1"}, {"--zero", "2", "--bucket-mb", "0.1"},
	{"--zero", "3"}, {"--zero", "3", "--prefetch"}, {"--data-parallel", "ps"},
	// The executor's policies: fp32 main gradients, reduced in fp32; the
	// optimizer, and ZeRO-3's weights, in each rank's host memory.
	{"--zero", "2", "--bucket-mb", "0.1", "--main-grads", "fp32"}, {"--zero", "1", "--offload", "optimizer"}, {"--zero", "3", "--offload", "params"},
}

// ranksArgs is a small validate of 4 ranks' memory and traffic.
func ranksArgs(set []string) []string {
	return append([]string{"validate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--precision", "bf16", "--steps", "2", "--threads", "1", "--format", "json"}, set...)
}

// freePort is a loopback port nobody listens on.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	return port
}

// rankProc is one rank's process.
type rankProc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

// startRanks starts n processes of the test binary as trainmem, rank r
// with args and --rank r --world n --init at a free loopback port, plus
// extra(r) when set.
func startRanks(t *testing.T, n int, args []string, extra func(r int) []string) []*rankProc {
	t.Helper()
	init := "tcp://127.0.0.1:" + freePort(t)
	ps := make([]*rankProc, n)
	for r := range ps {
		a := append(append([]string(nil), args...), "--rank", strconv.Itoa(r), "--world", strconv.Itoa(n), "--init", init, "--timeout", "60s")
		if extra != nil {
			a = append(a, extra(r)...)
		}
		p := &rankProc{cmd: exec.Command(os.Args[0], a...)}
		p.cmd.Env = append(os.Environ(), "TRAINMEM_TEST_MAIN=1")
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.cmd.Process.Kill() })
		ps[r] = p
	}
	return ps
}

// waitRanks waits for every rank's process (at most limit) and returns
// their exit statuses.
func waitRanks(t *testing.T, ps []*rankProc, limit time.Duration) []int {
	t.Helper()
	codes := make([]int, len(ps))
	var wg sync.WaitGroup
	for r, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			done := make(chan error, 1)
			go func() { done <- p.cmd.Wait() }()
			select {
			case err := <-done:
				codes[r] = 0
				if ee, ok := err.(*exec.ExitError); ok {
					codes[r] = ee.ExitCode()
				} else if err != nil {
					codes[r] = -2
				}
			case <-time.After(limit):
				p.cmd.Process.Kill()
				<-done
				codes[r] = -1 // still running at the limit
			}
		}()
	}
	wg.Wait()
	return codes
}

// Four ranks in processes of their own over TCP, every setting: each
// rank's memory equal byte for byte to the in-process run and to the
// simulation, its traffic to the in-process counters, its loss within the
// reduction-order tolerance; rank 0 alone prints.
func TestRanksOverTCP(t *testing.T) {
	for _, set := range settings {
		name := strings.Join(set, " ")
		out, _ := mustRun(t, append(ranksArgs(set), "--ranks", "4")...)
		inproc := parseRankReport(t, name+" in one process", out)
		ps := startRanks(t, 4, ranksArgs(set), nil)
		for r, code := range waitRanks(t, ps, 2*time.Minute) {
			if code != 0 {
				t.Fatalf("%s: rank %d exited %d:\n%s", name, r, code, ps[r].stderr.String())
			}
			if r > 0 && ps[r].stdout.Len() > 0 {
				t.Errorf("%s: rank %d printed %q; rank 0 alone reports", name, r, ps[r].stdout.String())
			}
		}
		procs := parseRankReport(t, name+" over tcp", ps[0].stdout.String())
		if procs.Engine != "tcp" {
			t.Errorf("%s: engine %q, want tcp", name, procs.Engine)
		}
		sameRanks(t, name, inproc, procs, 4)
	}
}

// A rank whose setup differs is refused at the start on every rank, with
// the difference named and exit status 2.
func TestRanksSetupsDiffer(t *testing.T) {
	ps := startRanks(t, 4, ranksArgs([]string{"--zero", "1"}), func(r int) []string {
		if r == 3 {
			return []string{"--batch", "3"}
		}
		return nil
	})
	for r, code := range waitRanks(t, ps, time.Minute) {
		msg := ps[r].stderr.String()
		if code != 2 || !strings.Contains(msg, "rank 3's setup differs from rank 0's: --batch 3 (rank 0: 2)") {
			t.Errorf("rank %d: exit %d, want 2 naming rank 3's batch:\n%s", r, code, msg)
		}
	}
	// Outputs are the ranks' to agree on too: with --out and --save on
	// rank 0 alone, rank 0 exited 1 after the last step ("gob: type
	// mismatch ... held"), writing no checkpoint, and rank 1 exited 0.
	dir := t.TempDir()
	save, out := filepath.Join(dir, "w.bin"), filepath.Join(dir, "r.jsonl")
	ps = startRanks(t, 2, []string{"train", "--preset", "tiny", "--batch", "2", "--seq", "16", "--steps", "2", "--threads", "1"}, func(r int) []string {
		if r == 0 {
			return []string{"--out", out, "--save", save}
		}
		return nil
	})
	for r, code := range waitRanks(t, ps, time.Minute) {
		msg := ps[r].stderr.String()
		if code != 2 || !strings.Contains(msg, "rank 1's setup differs from rank 0's") || !strings.Contains(msg, "--save none (rank 0: "+save+")") {
			t.Errorf("rank %d: exit %d, want 2 naming rank 1's --save:\n%s", r, code, msg)
		}
	}
	if _, err := os.Stat(save); err == nil {
		t.Errorf("a refused run wrote %s", save)
	}
}

// A rank killed mid-run ends every other rank with an error naming it,
// well within the timeout, and no rank hangs.
func TestRankKilled(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run.jsonl")
	args := []string{"train", "--preset", "tiny", "--batch", "1", "--seq", "16", "--zero", "2", "--steps", "100000", "--threads", "1", "--out", out}
	ps := startRanks(t, 4, args, nil)
	waitLines(t, out, 8) // two steps of 4 ranks' records
	start := time.Now()
	if err := ps[2].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	codes := waitRanks(t, ps, 50*time.Second)
	for r, code := range codes {
		if r == 2 {
			continue
		}
		msg := ps[r].stderr.String()
		if code <= 0 || !strings.Contains(msg, "rank 2 is gone") {
			t.Errorf("rank %d: exit %d, want non-zero naming rank 2:\n%s", r, code, msg)
		}
	}
	t.Logf("the other ranks stopped %v after rank 2 was killed (timeout 60s)", time.Since(start).Round(time.Millisecond))
}

// train over processes writes one file of every rank's records, rank 0's,
// as the in-process run does, and the same weights, to the bit.
func TestTrainOverTCP(t *testing.T) {
	dir := t.TempDir()
	args := func(out, save string) []string {
		return []string{"train", "--preset", "tiny", "--batch", "2", "--seq", "16", "--zero", "3", "--steps", "3", "--threads", "1", "--out", filepath.Join(dir, out), "--save", filepath.Join(dir, save)}
	}
	mustRun(t, append(args("in.jsonl", "in.bin"), "--ranks", "3")...)
	ps := startRanks(t, 3, args("procs.jsonl", "procs.bin"), nil)
	for r, code := range waitRanks(t, ps, 2*time.Minute) {
		if code != 0 {
			t.Fatalf("rank %d exited %d:\n%s", r, code, ps[r].stderr.String())
		}
	}
	sameTrainRuns(t, dir, "in", "procs", 3, 3)
}

// TestTrainTensorParallelOverTCP: two processes of a tp 2 layout (its
// tensor group the whole TCP ring) train as the same layout in one
// process: the same records and the same weights to the bit.
func TestTrainTensorParallelOverTCP(t *testing.T) {
	dir := t.TempDir()
	args := func(out, save string) []string {
		return []string{"train", "--preset", "tiny", "--batch", "2", "--seq", "16", "--tp", "2", "--steps", "3", "--threads", "1", "--out", filepath.Join(dir, out), "--save", filepath.Join(dir, save)}
	}
	sameOverTCP(t, dir, 2, args)
}

// sameTrainRuns compares the records (in.jsonl, procs.jsonl under dir) and
// the saved weights (.bin) of a run in one process and over processes, n
// ranks of steps steps each: the same ranks, steps and peaks, the losses
// within lossTol, and, with one thread a rank and the same order of every
// sum, the weights to the bit.
func sameTrainRuns(t *testing.T, dir, in, procs string, n, steps int) {
	t.Helper()
	type rec struct {
		Rank int      `json:"rank"`
		Step int      `json:"step"`
		Loss *float64 `json:"loss"`
		Peak int64    `json:"peak_allocated_bytes"`
	}
	read := func(name string) []rec {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		var rs []rec
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var r rec
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			rs = append(rs, r)
		}
		return rs
	}
	a, b := read(in+".jsonl"), read(procs+".jsonl")
	if len(a) != n*steps || len(b) != n*steps {
		t.Fatalf("%d and %d records, want %d steps of %d ranks", len(a), len(b), steps, n)
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Rank != y.Rank || x.Step != y.Step || x.Peak != y.Peak || math.Abs(*x.Loss-*y.Loss) > lossTol*math.Abs(*x.Loss) {
			t.Errorf("record %d: %+v over processes, %+v in one", i, y, x)
		}
	}
	wi, err1 := os.ReadFile(filepath.Join(dir, in+".bin"))
	wp, err2 := os.ReadFile(filepath.Join(dir, procs+".bin"))
	if err1 != nil || err2 != nil || len(wi) != len(wp) {
		t.Fatalf("weights: %v %v, %d and %d bytes", err1, err2, len(wi), len(wp))
	}
	if !bytes.Equal(wi, wp) {
		t.Errorf("the weights saved over processes differ from the in-process run's")
	}
}

// Bad launch flags are usage errors naming the flag.
func TestLaunchFlagErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"validate", "--rank", "1"}, "--rank and --world go together"},
		{[]string{"validate", "--rank", "4", "--world", "4", "--init", "tcp://127.0.0.1:1"}, "--rank 4: out of range (valid: 0 to 3 for --world 4)"},
		{[]string{"validate", "--rank", "0", "--world", "2"}, "--backend tcp: no rendezvous"},
		{[]string{"validate", "--rank", "0", "--world", "2", "--init", "http://x:1"}, `--init "http://x:1": want tcp://host:port`},
		{[]string{"train", "--rank", "0", "--world", "2", "--init", "tcp://127.0.0.1:1", "--backend", "inproc"}, "--backend inproc runs every rank in one process, and this process is rank 0 of 2"},
		{[]string{"validate", "--rank", "0", "--world", "2", "--init", "tcp://127.0.0.1:1", "--ranks", "3"}, "--ranks 3: this process is rank 0 of 2"},
		{[]string{"validate", "--backend", "tcp"}, "--backend tcp runs one process a rank"},
		{[]string{"validate", "--backend", "gloo"}, `--backend "gloo": unknown engine (valid: inproc, tcp, mpi, nccl)`},
		{[]string{"validate", "--timeout", "0s"}, "--timeout 0s: want a positive duration"},
	} {
		_, errOut, code := runArgs(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q in:\n%s", c.args, code, c.want, errOut)
		}
	}
	if !haveNCCL {
		if _, errOut, code := runArgs(t, "validate", "--backend", "nccl"); code != 2 || !strings.Contains(errOut, "built without CUDA") {
			t.Errorf("--backend nccl without the CUDA build: exit %d: %s", code, errOut)
		}
	}
	if !zero.HaveMPI {
		if _, errOut, code := runArgs(t, "validate", "--backend", "mpi"); code != 2 || !strings.Contains(errOut, "make build-mpi") {
			t.Errorf("--backend mpi without the MPI build: exit %d: %s", code, errOut)
		}
	}
}

// A real torchrun starts the ranks, as README says, both ways: with its
// agent's TCPStore on MASTER_PORT (the default static rendezvous: rank 0
// cannot listen there, and meets the others through the store instead)
// and with --standalone (MASTER_PORT free: rank 0 listens there). Each
// rank measures what the in-process ranks do. Debian's torchrun (torch
// 1.13) on Python 3.11 needs --redirects 1 --tee 1 (its default of 0
// fails before any worker starts); rank 0's stdout comes prefixed with
// [default0]:.
func TestTorchrun(t *testing.T) {
	torchrun, err := exec.LookPath("torchrun")
	if err != nil {
		t.Skip("no torchrun here (Debian: apt-get install python3-torch); .ci/run installs it")
	}
	run := func(how []string, nproc int, rankArgs []string) rankReport {
		t.Helper()
		args := append(append([]string{"--nproc_per_node", strconv.Itoa(nproc)}, how...), "--redirects", "1", "--tee", "1", "--no_python", os.Args[0])
		cmd := exec.Command(torchrun, append(args, rankArgs...)...)
		cmd.Env = append(os.Environ(), "TRAINMEM_TEST_MAIN=1")
		cmd.Dir = t.TempDir() // torchrun's logs
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(2 * time.Minute):
			cmd.Process.Kill()
			t.Fatalf("torchrun %v: still running after 2 minutes:\n%s", how, stderr.String())
		}
		if err != nil {
			t.Fatalf("torchrun %v: %v:\n%s\n%s", how, err, stdout.String(), stderr.String())
		}
		var json strings.Builder
		for _, line := range strings.SplitAfter(stdout.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, "[default0]:"); ok {
				// torchrun prefixes each piece it reads of a rank's output,
				// which may end inside a line: a prefix can fall mid-line.
				json.WriteString(strings.ReplaceAll(rest, "[default0]:", ""))
			} else if strings.HasPrefix(line, "[default") {
				t.Errorf("torchrun %v: a rank other than 0 printed %q", how, line)
			}
		}
		procs := parseRankReport(t, fmt.Sprintf("torchrun %v", how), json.String())
		if procs.Engine != "tcp" {
			t.Errorf("torchrun %v: engine %q, want tcp", how, procs.Engine)
		}
		// The ranks' steps in time, their collectives costed on the TCP
		// link they timed.
		if tm := procs.Time; tm == nil || !strings.HasPrefix(tm.Network, "tcp (") || len(tm.Ranks) != nproc {
			t.Errorf("torchrun %v: time %+v", how, tm)
		} else {
			for _, r := range tm.Ranks {
				if !(r.MeasuredMs > 0 && r.PredictedMs > 0) {
					t.Errorf("torchrun %v: rank %d's time %+v", how, r.Rank, r)
				}
			}
		}
		return procs
	}
	set := append(ranksArgs([]string{"--zero", "2", "--bucket-mb", "0.1"}), "--ranks", "2")
	out, _ := mustRun(t, set...)
	inproc := parseRankReport(t, "in one process", out)
	for _, how := range [][]string{{"--master_port", freePort(t)}, {"--standalone"}} {
		sameRanks(t, fmt.Sprintf("torchrun %v", how), inproc, run(how, 2, set), 2)
	}
	// A layout: tp 2 × pp 2 over four processes, its pipelines (ranks 0
	// and 2, 1 and 3) on the TCP mesh.
	lay := append(ranksArgs(nil), "--tp", "2", "--pp", "2", "--micro-batches", "2")
	out, _ = mustRun(t, lay...)
	inproc = parseRankReport(t, "the layout in one process", out)
	sameRanks(t, "torchrun tp 2 × pp 2", inproc, run([]string{"--standalone"}, 4, lay), len(inproc.Ranks))
}

// SIGTERM to one rank that is not rank 0 stops every rank at the same
// step, and every rank follows one rule: a run stopped by a signal on any
// rank exits 128 + the signal's number (143) on every rank. The signalled
// rank says the signal; the others name the rank and the signal. Before,
// the signalled rank exited 0 and rank 0 exited 1 with "%!w(<nil>)".
func TestRankSignalled(t *testing.T) {
	// SIGTERM to rank 2; and SIGINT to rank 0 with a checkpoint to write on
	// every rank (that gave exits [1, 130] when rank 0 alone had --save).
	for _, tc := range []struct {
		rank int
		sig  syscall.Signal
		name string
		code int
		save bool
	}{{2, syscall.SIGTERM, "SIGTERM", 143, false}, {0, syscall.SIGINT, "SIGINT", 130, true}} {
		dir := t.TempDir()
		out, save := filepath.Join(dir, "run.jsonl"), filepath.Join(dir, "w.bin")
		args := []string{"train", "--preset", "tiny", "--batch", "1", "--seq", "16", "--zero", "1", "--steps", "100000", "--threads", "1", "--out", out}
		if tc.save {
			args = append(args, "--save", save)
		}
		ps := startRanks(t, 3, args, nil)
		waitLines(t, out, 6) // two steps of 3 ranks' records
		if err := ps[tc.rank].cmd.Process.Signal(tc.sig); err != nil {
			t.Fatal(err)
		}
		codes := waitRanks(t, ps, time.Minute)
		for r, code := range codes {
			msg := lastLine(ps[r].stderr.String())
			want := fmt.Sprintf("rank %d: stopped by %s", tc.rank, tc.name)
			if r == tc.rank {
				want = "stopped by " + tc.name
			}
			if code != tc.code || !strings.Contains(msg, want) || strings.Contains(msg, "%!") {
				t.Errorf("%s to rank %d: rank %d: exit %d, want %d and %q in %q", tc.name, tc.rank, r, code, tc.code, want, msg)
			}
		}
		if n := countLines(t, out); n%3 != 0 {
			t.Errorf("%d records: the ranks did not stop at the same step", n)
		}
		if !strings.Contains(ps[0].stdout.String(), "engine  tcp") {
			t.Errorf("rank 0's report does not name the engine:\n%s", ps[0].stdout.String())
		}
		if _, err := os.Stat(save); tc.save && err != nil {
			t.Errorf("%s to rank %d: no checkpoint of the finished steps: %v", tc.name, tc.rank, err)
		}
	}
}

// A rank lost mid-run: rank 0 prints no empty memory table before the
// error (the ranks never gathered their results).
func TestRankLostNoEmptyTable(t *testing.T) {
	out := filepath.Join(t.TempDir(), "run.jsonl")
	args := []string{"train", "--preset", "tiny", "--batch", "1", "--seq", "16", "--zero", "1", "--steps", "100000", "--threads", "1", "--out", out}
	ps := startRanks(t, 2, args, nil)
	waitLines(t, out, 4)
	ps[1].cmd.Process.Signal(syscall.SIGKILL)
	codes := waitRanks(t, ps, time.Minute)
	if codes[0] != 1 || !strings.Contains(ps[0].stderr.String(), "rank 1 is gone") {
		t.Errorf("rank 0: exit %d: %s", codes[0], lastLine(ps[0].stderr.String()))
	}
	if o := ps[0].stdout.String(); strings.Contains(o, "each rank's peak per category") {
		t.Errorf("rank 0 printed a memory table of no rank:\n%s", o)
	}
}

// Ranks whose processes multiply with different libraries (OpenBLAS on
// one machine, pure Go on another) would train to different losses: the
// ranks' setup comparison names the difference and every rank refuses,
// exit 2. Before, the run went on and the losses differed.
func TestRanksBLASDiffer(t *testing.T) {
	if err := host.OpenBLASAvailable(); err != nil {
		t.Skipf("one BLAS here (%v): no difference to make", err)
	}
	init := "tcp://127.0.0.1:" + freePort(t)
	ps := make([]*rankProc, 2)
	for r := range ps {
		p := &rankProc{cmd: exec.Command(os.Args[0], append(ranksArgs([]string{"--zero", "1"}), "--rank", strconv.Itoa(r), "--world", "2", "--init", init, "--timeout", "60s")...)}
		p.cmd.Env = append(os.Environ(), "TRAINMEM_TEST_MAIN=1")
		if r == 1 {
			p.cmd.Env = append(p.cmd.Env, "TRAINMEM_BLAS=go")
		}
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.cmd.Process.Kill() })
		ps[r] = p
	}
	for r, code := range waitRanks(t, ps, time.Minute) {
		msg := ps[r].stderr.String()
		if code != 2 || !strings.Contains(msg, "the host's BLAS") || !strings.Contains(msg, "gonum") {
			t.Errorf("rank %d: exit %d, want 2 naming the BLAS:\n%s", r, code, msg)
		}
	}
}

// TestTrainLayoutOverTCP: train --tp 2 --pp 2 --ranks 2 over eight
// processes (TCP) gives every record and the saved weights of the same
// layout in one process. Its data groups (ranks 0 and 2, ...) and
// pipelines (ranks 0 and 4, ...) are not ring neighbours: they run on the
// link's mesh.
func TestTrainLayoutOverTCP(t *testing.T) {
	dir := t.TempDir()
	args := func(out, save string) []string {
		return []string{"train", "--preset", "tiny", "--batch", "2", "--seq", "16", "--tp", "2", "--pp", "2", "--ranks", "2", "--micro-batches", "3", "--steps", "3", "--threads", "1", "--out", filepath.Join(dir, out), "--save", filepath.Join(dir, save)}
	}
	sameOverTCP(t, dir, 8, args)
}

// sameOverTCP trains args (its records and weights named by the two
// arguments) in one process and over n processes (TCP), and holds the two
// runs' records and weights equal (sameTrainRuns, n ranks, 3 steps).
func sameOverTCP(t *testing.T, dir string, n int, args func(out, save string) []string) {
	t.Helper()
	mustRun(t, args("in.jsonl", "in.bin")...)
	ps := startRanks(t, n, args("procs.jsonl", "procs.bin"), nil)
	for r, code := range waitRanks(t, ps, 3*time.Minute) {
		if code != 0 {
			t.Fatalf("rank %d exited %d:\n%s", r, code, ps[r].stderr.String())
		}
	}
	sameTrainRuns(t, dir, "in", "procs", n, 3)
}

// Offloading over processes: two ranks a process each over TCP, each with
// its own host memory as the offload device, train as the same ranks in
// one process (records, offload objects with their PCIe bytes, weights to
// the bit), with the optimizer offloaded at ZeRO-2 and the weights too at
// ZeRO-3; every process agrees on --offload first.
func TestOffloadOverTCP(t *testing.T) {
	for _, tc := range [][]string{{"--zero", "2", "--offload", "optimizer"}, {"--zero", "3", "--offload", "params"}} {
		dir := t.TempDir()
		args := func(out, save string) []string {
			return append([]string{"train", "--preset", "tiny", "--precision", "bf16", "--batch", "2", "--seq", "16", "--steps", "2", "--threads", "1",
				"--out", filepath.Join(dir, out), "--save", filepath.Join(dir, save)}, tc...)
		}
		mustRun(t, append(args("in.jsonl", "in.bin"), "--ranks", "2")...)
		ps := startRanks(t, 2, args("procs.jsonl", "procs.bin"), nil)
		for r, code := range waitRanks(t, ps, 2*time.Minute) {
			if code != 0 {
				t.Fatalf("%v: rank %d exited %d:\n%s", tc, r, code, ps[r].stderr.String())
			}
		}
		sameTrainRuns(t, dir, "in", "procs", 2, 2)
		b, err := os.ReadFile(filepath.Join(dir, "procs.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"to_device_bytes"`) {
			t.Errorf("%v: the records carry no offload object:\n%s", tc, b)
		}
	}
	ps := startRanks(t, 2, []string{"train", "--preset", "tiny", "--precision", "bf16", "--zero", "2", "--steps", "1"}, func(r int) []string {
		if r == 1 {
			return []string{"--offload", "optimizer"}
		}
		return nil
	})
	for r, code := range waitRanks(t, ps, time.Minute) {
		if msg := ps[r].stderr.String(); code != 2 || !strings.Contains(msg, "--offload optimizer (rank 0: none)") {
			t.Errorf("rank %d: exit %d, want 2 naming rank 1's --offload:\n%s", r, code, msg)
		}
	}
}
