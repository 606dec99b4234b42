package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gp "github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"
)

// --memory-trace on simulate, validate and train writes the snapshot and
// the Chrome trace, says where, and is refused where it does not apply or
// cannot be written, before any work.
func TestMemoryTraceFlag(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"simulate", "--preset", "tiny", "--batch", "2", "--seq", "32"},
		{"validate", "--batch", "2", "--seq", "32", "--steps", "2"},
		{"train", "--batch", "2", "--seq", "32", "--steps", "2"},
	} {
		base := filepath.Join(dir, args[0])
		out, _ := mustRun(t, append(args, "--memory-trace", base)...)
		if !strings.Contains(out, "memory trace of step 2 written to "+base+".pickle") {
			t.Errorf("%s: the output does not say where the trace went:\n%s", args[0], out)
		}
		b, err := os.ReadFile(base + ".pickle")
		if err != nil {
			t.Fatal(err)
		}
		v, err := gp.Loads(string(b))
		if err != nil {
			t.Fatalf("%s: the snapshot does not unpickle: %v", args[0], err)
		}
		d := v.(*types.Dict)
		for _, k := range []string{"segments", "device_traces"} {
			if _, ok := d.Get(k); !ok {
				t.Errorf("%s: the snapshot has no %s", args[0], k)
			}
		}
		var ct map[string]any
		if b, err = os.ReadFile(base + ".json"); err == nil {
			err = json.Unmarshal(b, &ct)
		}
		if err != nil || ct["traceEvents"] == nil {
			t.Errorf("%s: the Chrome trace: %v", args[0], err)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"simulate", "--preset", "tiny", "--ranks", "2", "--sweep", "zero", "--memory-trace", filepath.Join(dir, "r")}, "--memory-trace and --plot-timeline record one setting's step"},
		{[]string{"validate", "--sweep", "checkpoint", "--memory-trace", filepath.Join(dir, "s")}, "--memory-trace records one step: give it without --sweep"},
		{[]string{"validate", "--ranks", "2", "--no-measure", "--plot-timeline", filepath.Join(dir, "t.svg")}, "'trainmem simulate --ranks N --memory-trace FILE' records the simulated ones"},
		{[]string{"simulate", "--preset", "tiny", "--plot-timeline", filepath.Join(dir, "t.gif")}, "--plot-timeline: bench: plot file"},
		{[]string{"simulate", "--preset", "tiny", "--memory-trace", filepath.Join(dir, "missing", "x")}, "--memory-trace " + filepath.Join(dir, "missing", "x") + ".pickle"},
	} {
		_, errOut, code := runArgs(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q:\n%s", c.args, code, c.want, errOut)
		}
	}
	// Out of memory: the trace up to the failed request, and exit 1.
	_, errOut, code := runArgs(t, "simulate", "--preset", "gpt2", "--batch", "4", "--seq", "256", "--memory", "2GB", "--memory-trace", filepath.Join(dir, "oom"))
	if code != 1 || !strings.Contains(errOut, "what filled the device, up to the failed request") {
		t.Errorf("out of memory: exit %d:\n%s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "oom.pickle")); err != nil {
		t.Error(err)
	}
}

// --plot-timeline draws the step on its own, and every policy's with the
// checkpoint sweep.
func TestPlotTimelineFlag(t *testing.T) {
	dir := t.TempDir()
	one := filepath.Join(dir, "one.svg")
	out, _ := mustRun(t, "simulate", "--preset", "tiny", "--batch", "2", "--seq", "32", "--plot-timeline", one)
	if !strings.Contains(out, "timeline plot written to "+one) {
		t.Errorf("simulate --plot-timeline: %s", out)
	}
	sweep := filepath.Join(dir, "sweep.svg")
	out, _ = mustRun(t, "validate", "--sweep", "checkpoint", "--batch", "2", "--seq", "32", "--no-measure", "--plot-timeline", sweep)
	if !strings.Contains(out, "timeline plot (one panel a policy, simulated) written to "+sweep) {
		t.Errorf("validate --sweep checkpoint --plot-timeline: %s", out)
	}
	b, err := os.ReadFile(sweep)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"checkpoint none", "checkpoint full", "recompute"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the sweep's timeline lacks %q", want)
		}
	}
}

// With ranks, each rank's trace goes to FILE.rank<r>, and the timeline has
// a panel a rank: the simulated ranks of simulate, the measured ranks of
// validate and train.
func TestMemoryTraceRanks(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args  []string
		ranks int
	}{
		{[]string{"simulate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--ranks", "3", "--zero", "3"}, 3},
		{[]string{"validate", "--batch", "2", "--seq", "16", "--ranks", "2", "--zero", "2", "--steps", "2"}, 2},
		{[]string{"train", "--batch", "2", "--seq", "16", "--ranks", "2", "--zero", "1", "--steps", "2"}, 2},
	} {
		base, plot := filepath.Join(dir, c.args[0]), filepath.Join(dir, c.args[0]+".svg")
		out, _ := mustRun(t, append(c.args, "--memory-trace", base, "--plot-timeline", plot)...)
		if !strings.Contains(out, "memory traces of "+fmt.Sprint(c.ranks)+" ranks written to "+base+".rank0.pickle") {
			t.Errorf("%s: %s", c.args[0], out)
		}
		// The ranks' table gives the requested total the viewer peaks at
		// beside the allocator's blocks, each column saying which.
		if !strings.Contains(out, "total peak (requested)") && !strings.Contains(out, "peak requested  ") {
			t.Errorf("%s: the ranks' table has no requested total:\n%s", c.args[0], out)
		}
		if !strings.Contains(out, "the viewer's Active Memory Timeline peaks at") || !strings.Contains(out, "rank 0") && !strings.Contains(out, "ranks 0-") {
			t.Errorf("%s: no viewer peak for rank 0: %s", c.args[0], out)
		}
		pids := map[float64]string{}
		for r := range c.ranks {
			for _, ext := range []string{".pickle", ".json"} {
				if _, err := os.Stat(fmt.Sprintf("%s.rank%d%s", base, r, ext)); err != nil {
					t.Error(err)
				}
			}
			// Each rank's Chrome trace is its own process: merged, the
			// ranks' tracks do not collide.
			var ct struct {
				TraceEvents []struct {
					Name string         `json:"name"`
					Pid  float64        `json:"pid"`
					Args map[string]any `json:"args"`
				} `json:"traceEvents"`
			}
			b, err := os.ReadFile(fmt.Sprintf("%s.rank%d.json", base, r))
			if err != nil || json.Unmarshal(b, &ct) != nil || len(ct.TraceEvents) == 0 {
				t.Fatalf("%s: rank %d's Chrome trace: %v", c.args[0], r, err)
			}
			for _, e := range ct.TraceEvents {
				if e.Pid != float64(r) {
					t.Fatalf("%s: rank %d's Chrome event %s has pid %v", c.args[0], r, e.Name, e.Pid)
				}
				if e.Name == "process_name" {
					name, _ := e.Args["name"].(string)
					if other, dup := pids[e.Pid]; dup || !strings.Contains(name, fmt.Sprintf("rank %d", r)) {
						t.Errorf("%s: rank %d's process is %q (pid taken by %q)", c.args[0], r, name, other)
					}
					pids[e.Pid] = name
				}
			}
		}
		b, err := os.ReadFile(plot)
		if err != nil || !strings.Contains(string(b), fmt.Sprintf("rank %d, step", c.ranks-1)) {
			t.Errorf("%s: the plot has no panel of rank %d: %v", c.args[0], c.ranks-1, err)
		}
	}
}
