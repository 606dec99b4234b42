package zero

import (
	"fmt"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/train"
)

// BenchmarkRanksStep is the cost of the collectives here: one training
// step of 4 in-process host ranks of micro-batch 2 against one rank of
// batch 8 (the same global batch), under each setting, on a ~14M model.
// The ranks share the machine's cores, so the ratio is the collectives'
// and the ranks' scheduling overhead, not a speed-up.
func BenchmarkRanksStep(b *testing.B) {
	cfg := model.Config{Name: "14m", Layers: 6, Hidden: 384, Heads: 6, Vocab: 8192, Context: 256}
	const T = 64
	tokens := func(n int) []int32 {
		t := make([]int32, n)
		for i := range t {
			t[i] = int32(i * 7919 % cfg.Vocab)
		}
		return t
	}
	b.Run("1rank/b=8", func(b *testing.B) {
		h, _ := host.New(host.Options{})
		defer h.Close()
		tr, err := train.New(h, setupOf(cfg, 8, T, 1, 0, model.FP32, model.AdamW), train.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		tr.SetParams(model.InitParams(cfg, 1))
		tok := tokens(8 * T)
		for b.Loop() {
			if _, err := tr.Step(tok, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, set := range []Setting{{Stage: 0}, {Stage: 1}, {Stage: 2}, {Stage: 3}, {PS: true}} {
		b.Run(fmt.Sprintf("4ranks/b=2/%s", set), func(b *testing.B) {
			devs := make([]cuda.Device, 4)
			for i := range devs {
				h, _ := host.New(host.Options{Threads: 1})
				defer h.Close()
				devs[i] = h
			}
			g, _ := NewGroup(devs)
			rk, err := NewRanks(g, setupOf(cfg, 2, T, 4, set.Stage, model.FP32, model.AdamW), set, train.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer rk.Close()
			rk.SetParams(model.InitParams(cfg, 1))
			tok := tokens(2 * T)
			for b.Loop() {
				if _, err := rk.Step(func(int) ([]int32, []int32) { return tok, tok }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSimulateScale is the scale cases: gpt2-xl at b=32, s=1000 under
// ZeRO-3 with full checkpointing over N = 4, 64 and 1024 ranks, and 6b over
// 1024 (each a few simulated ranks of a sparse group).
func BenchmarkSimulateScale(b *testing.B) {
	for _, tc := range []struct {
		preset string
		B, T   int
		N      int
	}{{"gpt2-xl", 32, 1000, 4}, {"gpt2-xl", 32, 1000, 64}, {"gpt2-xl", 32, 1000, 1024}, {"6b", 1, 2048, 1024}} {
		b.Run(fmt.Sprintf("%s/N=%d", tc.preset, tc.N), func(b *testing.B) {
			cfg, _ := model.Preset(tc.preset)
			s := setupOf(cfg, tc.B, tc.T, tc.N, 3, model.FP16, model.Adam)
			s.Checkpoint = model.Checkpoint{Kind: model.CheckpointFull}
			for b.Loop() {
				if _, err := Simulate(func() cuda.Device { return shape.New(0) }, s, Setting{Stage: 3}, 2); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
