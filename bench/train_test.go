package bench

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/model/reference"
	"trainmem/train"
	"trainmem/zero"
)

// cancelAfter is a progress writer that ends the run's context once it has
// seen n step lines: an interrupt in the middle of a run.
type cancelAfter struct {
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "step ") {
		c.n--
		if c.n == 0 {
			c.cancel()
		}
	}
	return len(p), nil
}

// An interrupted run stops after the step in flight, and its outputs hold
// exactly the finished steps: whole files, never half-written ones.
func TestTrainInterrupted(t *testing.T) {
	dir := t.TempDir()
	out, save := filepath.Join(dir, "run.jsonl"), filepath.Join(dir, "w.bin")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := setup(t, "tiny", 2, 16, model.FP32, model.AdamW, "none")
	o := runOf(checked(t, s), 10, nil, zero.Setting{})
	o.Seed, o.Out, o.Save, o.Progress = 1, out, save, &cancelAfter{n: 3, cancel: cancel}
	rep, err := Train(ctx, *on(reference.NewHost(t)), o)
	if err != nil {
		t.Fatal(err)
	}
	if res := rep.Result; !res.Interrupted || res.Steps != 3 {
		t.Fatalf("interrupted %v after %d steps, want after 3", res.Interrupted, res.Steps)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if strings.HasPrefix(sc.Text(), `{"rank"`) {
			t.Errorf("one rank's record has a rank field: %s", sc.Text())
		}
		lines++
	}
	if lines != 3 {
		t.Errorf("%s holds %d records, want 3", out, lines)
	}
	if _, err := model.LoadCheckpoint(save, s.Model); err != nil {
		t.Errorf("the weights of the interrupted run: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("the run left %d files, want 2 (no temporaries)", len(entries))
	}
}

// A run of any length holds no more than one record: the process's memory
// stays flat over 100,000 steps (each record streamed to Out, here a
// device, and none kept). On the shape-only device a step of a minimal
// model takes about 0.1 ms.
func TestTrainMemoryFlat(t *testing.T) {
	c := model.Config{Name: "minimal", Layers: 1, Hidden: 8, Heads: 1, Vocab: 256, Context: 8}
	s := model.Setup{Model: c, Batch: 1, Seq: 4, Ranks: 1, TP: 1, PP: 1}
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	const steps = 100000
	var at1k, atEnd uint64
	o := runOf(checked(t, s), steps, nil, zero.Setting{})
	o.Seed, o.Out = 1, os.DevNull
	o.OnRecord = func(r train.Record) {
		switch r.Step {
		case 1000:
			at1k = heap()
		case steps:
			atEnd = heap()
		}
	}
	rep, err := Train(context.Background(), *on(shape.New(0)), o)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Result.Steps != steps {
		t.Fatalf("%d steps", rep.Result.Steps)
	}
	// Holding the records would take about 2 KiB each, some 200 MB.
	if growth := int64(atEnd) - int64(at1k); growth > 256<<10 {
		t.Errorf("the heap grew by %d bytes from step 1,000 to %d (%d to %d)", growth, steps, at1k, atEnd)
	}
	t.Logf("heap at step 1,000: %d bytes; at step %d: %d", at1k, steps, atEnd)
}

// Each run takes its traces and profile one way, and refuses the others
// by name: Simulate and Train record traces per rank (RankTraces,
// Where.Traces), Validate's Options.Trace is one rank's simulated step
// when nothing is measured, and a profile is one device's.
func TestRunRequestRefusals(t *testing.T) {
	one := setup(t, "tiny", 1, 16, model.FP32, model.Adam, "none")
	two := one
	two.Ranks = 2
	ctx := context.Background()
	traced := func(s model.Setup) Options { return runOf(checked(t, s), 1, &MemoryTrace{}, zero.Setting{}) }
	profiled := func(s model.Setup) Options {
		o := runOf(checked(t, s), 1, nil, zero.Setting{})
		o.Profile = &Profile{}
		return o
	}
	shapeOnly := func() cuda.Device { return shape.New(0) }
	check := func(what string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", what, err, want)
		}
	}
	_, err := Simulate(shapeOnly, 0, traced(one), nil)
	check("Simulate with Options.Trace", err, "records each simulated rank's trace in its traces")
	_, err = Validate(ctx, on(shape.New(0)), traced(one))
	check("Validate measured with Options.Trace", err, "the measured ranks' traces are Where.Traces")
	_, err = Validate(ctx, nil, traced(two))
	check("Validate of two ranks with Options.Trace", err, "the measured ranks' traces are Where.Traces")
	_, err = Validate(ctx, nil, profiled(two))
	check("Validate of two ranks with a profile", err, "a profile is one device's")
	_, err = Train(ctx, *on(shape.New(0)), traced(one))
	check("Train with Options.Trace", err, "records its ranks' traces in Where.Traces")
	_, err = Train(ctx, *on(shape.New(0)), profiled(two))
	check("Train of two ranks with a profile", err, "a profile is one device's")
}
