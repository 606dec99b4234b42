package model_test

import (
	"fmt"
	"testing"

	"gorgonia.org/tensor"

	"trainmem/model"
	"trainmem/model/reference"
)

// BenchmarkReferenceStep times one forward and backward pass of the
// reference on gorgonia's TapeMachine, in fp32, parameters bound once: the
// baseline of the executor's speed (BenchmarkVsTapeMachine, in
// train/bench_test.go, sets a host training step beside it). Run the gpt2
// case with -bench ReferenceStep/gpt2 (about 1.5 GB).
func BenchmarkReferenceStep(b *testing.B) {
	for _, bc := range []struct {
		preset string
		B, T   int
	}{
		{"tiny", 4, 64},
		{"gpt2", 4, 64},
	} {
		b.Run(fmt.Sprintf("%s/b=%d/s=%d", bc.preset, bc.B, bc.T), func(b *testing.B) {
			cfg := model.MustPreset(b, bc.preset)
			ref := reference.MustNew(b, cfg, bc.B, bc.T, tensor.Float32)
			if err := ref.SetParams32(model.InitParams(cfg, 1)); err != nil {
				b.Fatal(err)
			}
			tokens, targets := model.TestBatch(cfg, bc.B, bc.T, 1)
			b.ResetTimer()
			for b.Loop() {
				if _, err := ref.Run(tokens, targets); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(bc.B*bc.T)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}
