package train

import (
	"errors"
	"testing"
	"time"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
)

func setupOf(t testing.TB, preset string, B, T int, prec model.Precision, pol model.Checkpoint) model.Setup {
	t.Helper()
	c, err := model.Preset(preset)
	if err != nil {
		t.Fatal(err)
	}
	s := model.Setup{Model: c, Batch: B, Seq: T, Precision: prec, Optimizer: model.Adam, Checkpoint: pol, Ranks: 1, TP: 1, PP: 1}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	return s
}

// gpt2-xl at the source articles' size (b=32, s=1000) simulates in well
// under a second and needs far more than one 80 GiB card without
// checkpointing.
func TestSimulateGPT2XL(t *testing.T) {
	s := setupOf(t, "gpt2-xl", 32, 1000, model.FP16, model.Checkpoint{})
	start := time.Now()
	rec, _, err := Simulate(shape.New(0), checked(t, s), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gpt2-xl b=32 s=1000 fp16: peak %s (activations %s) in %v", model.GiB(rec.PeakAllocatedBytes), model.GiB(rec.Memory.Peak[cuda.Activations]), time.Since(start))
	if rec.Memory.Allocated[cuda.Params] != int64(roundUp(2*s.Model.NumParams(), 512)) {
		t.Errorf("params hold %d bytes, want 2Φ rounded to the allocator's 512-byte blocks", rec.Memory.Allocated[cuda.Params])
	}
}

// A card too small fails like a real one: an out-of-memory error naming
// the request.
func TestSimulateOutOfMemory(t *testing.T) {
	s := setupOf(t, "gpt2-xl", 32, 1000, model.FP16, model.Checkpoint{})
	_, _, err := Simulate(shape.New(24<<30), checked(t, s), 1, nil)
	var oom *cuda.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("got %v, want an out-of-memory error", err)
	}
	t.Log(err)
}

func roundUp(n, m int64) int64 { return (n + m - 1) / m * m }
