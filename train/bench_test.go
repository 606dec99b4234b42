package train

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/model/reference"
)

// BenchmarkStep times full host training steps (forward, backward, AdamW) in
// fp32. The gpt2 case is the reference point: 124M parameters at
// b=4, s=64 on every core (2 threads on the development machines).
func BenchmarkStep(b *testing.B) {
	for _, bc := range []struct {
		preset string
		B, T   int
	}{
		{"tiny", 8, 64},
		{"gpt2", 4, 64},
	} {
		b.Run(fmt.Sprintf("%s/b=%d/s=%d", bc.preset, bc.B, bc.T), func(b *testing.B) {
			cfg, _ := model.Preset(bc.preset)
			dev := reference.NewHost(b)
			tr := newTrainer(b, dev, oneRank(cfg, bc.B, bc.T), Options{})
			if err := tr.SetParams(model.InitParams(cfg, 1)); err != nil {
				b.Fatal(err)
			}
			tokens, targets := batch(b, cfg, bc.B, bc.T, 1)
			if _, err := tr.Step(tokens, targets); err != nil { // fill the allocator's cache
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if _, err := tr.Step(tokens, targets); err != nil {
					b.Fatal(err)
				}
			}
			per := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(per*1000, "ms/step")
			b.ReportMetric(float64(bc.B*bc.T)/per, "tokens/s")
			b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "threads")
			b.Logf("%s", dev.Name())
		})
	}
}

// BenchmarkVsTapeMachine runs, in each iteration, one forward and backward
// pass on trainmem's host executor and one on gorgonia's TapeMachine (the
// same GPT-2 from gorgonia's own ops, reference.Model) with the same weights
// and batch, and reports the ratio of their times: measured in one run,
// interleaved, so that the machine's noise falls on both.
func BenchmarkVsTapeMachine(b *testing.B) {
	for _, bc := range []struct {
		cfg  model.Config
		B, T int
	}{
		{tinyCfg, 8, 64},
		{model.Config{Name: "small", Layers: 4, Hidden: 256, Heads: 8, Vocab: 256, Context: 128}, 4, 128},
	} {
		b.Run(fmt.Sprintf("%s/b=%d/s=%d", bc.cfg.Name, bc.B, bc.T), func(b *testing.B) {
			params := model.InitParams(bc.cfg, 1)
			tokens, targets := batch(b, bc.cfg, bc.B, bc.T, 1)
			tr := newTrainer(b, reference.NewHost(b), oneRank(bc.cfg, bc.B, bc.T), Options{})
			if err := tr.SetParams(params); err != nil {
				b.Fatal(err)
			}
			ref := reference.MustNew(b, bc.cfg, bc.B, bc.T, tensor.Float32)
			if err := ref.SetParams32(params); err != nil {
				b.Fatal(err)
			}
			var ours, tape time.Duration
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				if _, err := tr.ForwardBackward(tokens, targets); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if _, err := ref.Run(tokens, targets); err != nil {
					b.Fatal(err)
				}
				ours += t1.Sub(t0)
				tape += time.Since(t1)
			}
			n := float64(b.N)
			b.ReportMetric(ours.Seconds()*1000/n, "trainmem-ms")
			b.ReportMetric(tape.Seconds()*1000/n, "tapemachine-ms")
			b.ReportMetric(tape.Seconds()/ours.Seconds(), "speedup")
		})
	}
}

// BenchmarkSimulate times the shape-only device on gpt2-xl at the source
// articles' size (b=32, s=1000, fp16): one step on a built trainer
// (sim-step-ms), and the whole of Simulate with the graph built and compiled
// (total-ms).
func BenchmarkSimulate(b *testing.B) {
	s := setupOf(b, "gpt2-xl", 32, 1000, model.FP16, model.Checkpoint{})
	for _, pol := range []string{"none", "full"} {
		b.Run(pol, func(b *testing.B) {
			var err error
			if s.Checkpoint, err = model.ParseCheckpoint(pol); err != nil {
				b.Fatal(err)
			}
			tr := newTrainer(b, shape.New(0), s, Options{})
			tokens := make([]int32, s.Batch*s.Seq)
			b.ResetTimer()
			for b.Loop() {
				if _, err := tr.Step(tokens, tokens); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()*1000/float64(b.N), "sim-step-ms")
			b.StopTimer()
			t0 := time.Now()
			if _, _, err := Simulate(shape.New(0), checked(b, s), 1, nil); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "total-ms")
		})
	}
}

// BenchmarkSimulateLayers times the whole of a simulation (graph build,
// schedule compile, one step on the shape-only device) of a narrow model
// (h=64, b=1, s=64) at 256, 2048 and 4096 layers, and reports the cost per
// layer, in time, allocations and bytes allocated: flat across the sizes
// when the whole is linear in the graph's size (gorgonia's node cache made
// it quadratic before; model/graph_index.go).
func BenchmarkSimulateLayers(b *testing.B) {
	for _, L := range []int{256, 2048, 4096} {
		b.Run(fmt.Sprintf("L=%d", L), func(b *testing.B) {
			s := model.Setup{Model: model.Config{Name: "narrow", Layers: L, Hidden: 64, Heads: 4, Vocab: 256, Context: 64},
				Batch: 1, Seq: 64, Ranks: 1, TP: 1, PP: 1}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for b.Loop() {
				if _, _, err := Simulate(shape.New(0), checked(b, s), 1, nil); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&after)
			per := b.Elapsed().Seconds() / float64(b.N)
			perLayer := func(v uint64) float64 { return float64(v) / float64(b.N) / float64(L) }
			b.ReportMetric(per*1000, "ms/op")
			b.ReportMetric(per*1e6/float64(L), "µs/layer")
			b.ReportMetric(perLayer(after.Mallocs-before.Mallocs), "allocs/layer")
			b.ReportMetric(perLayer(after.TotalAlloc-before.TotalAlloc), "B/layer")
		})
	}
}

// BenchmarkSimulateLinearity simulates the narrow model at 256, 2048 and
// 4096 layers in turn inside one loop, each from a collected heap as a fresh
// command starts, and reports the ratios of their times: 8 and 2 when the
// whole is linear in layers. Interleaving makes the ratios robust on a
// shared machine where absolute times drift. The first ratio also crosses
// the last-level cache: 256 layers' graph (about 30 MB) fits a 32 MiB L3,
// 2048 layers' (about 260 MB) does not, so a linear count of work (the
// allocations a layer are the same at every size) can still cost more a
// layer there; the second ratio, both sides out of cache, shows the work.
func BenchmarkSimulateLinearity(b *testing.B) {
	sizes := []int{256, 2048, 4096}
	took := make([]time.Duration, len(sizes))
	for b.Loop() {
		for i, L := range sizes {
			s := model.Setup{Model: model.Config{Name: "narrow", Layers: L, Hidden: 64, Heads: 4, Vocab: 256, Context: 64},
				Batch: 1, Seq: 64, Ranks: 1, TP: 1, PP: 1}
			c := checked(b, s)
			runtime.GC()
			start := time.Now()
			if _, _, err := Simulate(shape.New(0), c, 1, nil); err != nil {
				b.Fatal(err)
			}
			took[i] += time.Since(start)
		}
	}
	for i, L := range sizes {
		b.ReportMetric(float64(took[i].Microseconds())/1000/float64(b.N), fmt.Sprintf("ms@L=%d", L))
	}
	b.ReportMetric(float64(took[1])/float64(took[0]), "2048/256")
	b.ReportMetric(float64(took[2])/float64(took[1]), "4096/2048")
}

// BenchmarkProfileCost runs tiny's step with the profile off and on,
// interleaved in one run, and reports the ratio: off costs nothing (one nil
// check an instruction), on costs a mark and an elapsed time each.
func BenchmarkProfileCost(b *testing.B) {
	cfg, _ := model.Preset("tiny")
	dev := reference.NewHost(b)
	tr := newTrainer(b, dev, oneRank(cfg, 8, 64), Options{})
	if err := tr.SetParams(model.InitParams(cfg, 1)); err != nil {
		b.Fatal(err)
	}
	tokens, targets := batch(b, cfg, 8, 64, 1)
	if _, err := tr.Step(tokens, targets); err != nil {
		b.Fatal(err)
	}
	var off, on time.Duration
	for b.Loop() {
		for _, p := range []*Profile{nil, {}} {
			tr.Profile(p)
			start := time.Now()
			if _, err := tr.Step(tokens, targets); err != nil {
				b.Fatal(err)
			}
			if p == nil {
				off += time.Since(start)
			} else {
				on += time.Since(start)
			}
		}
	}
	tr.Profile(nil)
	b.ReportMetric(float64(off.Microseconds())/1000/float64(b.N), "ms/step-off")
	b.ReportMetric(float64(on.Microseconds())/1000/float64(b.N), "ms/step-on")
	b.ReportMetric(float64(on)/float64(off), "on/off")
}

// BenchmarkLoRAStep times, in each iteration, one host training step of
// gpt2 fully fine-tuned, one of a LoRA (r 16 on every linear layer) and
// one of the same LoRA over an NF4 base (QLoRA) on the same batch,
// interleaved so that the machine's noise falls on all, and reports each
// and their ratios to full fine-tuning: a LoRA step computes no weight
// gradient of a frozen layer and updates 0.6% of the parameters; QLoRA's
// dequantizes each linear weight where the forward, and the backward,
// pass reads it.
func BenchmarkLoRAStep(b *testing.B) {
	const B, T = 4, 64
	full, _ := model.Preset("gpt2")
	lora := full
	targets, err := lora.ParseLoRATargets("all-linear")
	if err != nil {
		b.Fatal(err)
	}
	lora.LoRA = model.LoRA{Rank: 16, Alpha: 32, Targets: targets}
	qlora := lora // the base's linear weights in NF4, dequantized for each use
	qlora.Quantize = model.QuantNF4
	cfgs := []model.Config{full, lora, qlora}
	trs := make([]*Trainer, len(cfgs))
	for i, cfg := range cfgs {
		trs[i] = newTrainer(b, reference.NewHost(b), oneRank(cfg, B, T), Options{})
		if err := trs[i].SetParams(model.InitParams(cfg, 1)); err != nil {
			b.Fatal(err)
		}
	}
	tokens, tgts := batch(b, full, B, T, 1)
	took := make([]time.Duration, len(cfgs))
	for i := range trs { // fill the allocators' caches
		if _, err := trs[i].Step(tokens, tgts); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		for i, tr := range trs {
			t0 := time.Now()
			if _, err := tr.Step(tokens, tgts); err != nil {
				b.Fatal(err)
			}
			took[i] += time.Since(t0)
		}
	}
	b.ReportMetric(took[0].Seconds()*1000/float64(b.N), "full-ms/step")
	b.ReportMetric(took[1].Seconds()*1000/float64(b.N), "lora-ms/step")
	b.ReportMetric(took[2].Seconds()*1000/float64(b.N), "qlora-ms/step")
	b.ReportMetric(took[1].Seconds()/took[0].Seconds(), "lora/full")
	b.ReportMetric(took[2].Seconds()/took[0].Seconds(), "qlora/full")
}
