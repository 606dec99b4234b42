package zero

import (
	"fmt"
	"math"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/train"
)

// Fine-tunes with frozen parts over ranks: the policies shard, bucket and
// reduce the trained rows only (the frozen weights whole on every rank,
// never reduced), so N ranks of micro-batch b train as one rank of batch
// N·b of the same fine-tune (the tolerances of TestRanksTrainAsOneRank:
// fp32 AdamW, 3 steps at lr 1e-2), every rank's frozen weights are the
// bits they started as, and shape-only ranks allocate and send what host
// ranks do, rank by rank.
func TestFreezeRanks(t *testing.T) {
	const b, T, steps = 2, 16, 3
	llama := model.Config{Name: "tiny-llama", Layers: 2, Hidden: 64, Heads: 4, KVHeads: 2, Vocab: 256, Context: 64, Untied: true,
		Norm: model.NormRMS, NoBias: true, MLP: model.MLPSwiGLU, Positions: model.PosRoPE}
	for i, tc := range []struct {
		cfg          model.Config
		freeze, lora string // lora: the targets of a LoRA of rank 4
		quantize     model.Quantization
	}{{tinyCfg, "layers:1", "", 0}, {tinyCfg, "embeddings,head", "", 0}, {llama, "layers:1,head", "", 0}, {llama, "embeddings", "", 0},
		{tinyCfg, "layers:1", "", model.QuantNF4}, {llama, "", "all-linear", model.QuantNF4}} {
		f, err := model.ParseFreeze(tc.freeze)
		if err != nil {
			t.Fatal(err)
		}
		cfg := tc.cfg
		cfg.Freeze, cfg.Quantize = f, tc.quantize
		if tc.lora != "" {
			targets, err := cfg.ParseLoRATargets(tc.lora)
			if err != nil {
				t.Fatal(err)
			}
			cfg.LoRA = model.LoRA{Rank: 4, Alpha: 8, Targets: targets}
		}
		for j, set := range []Setting{{Stage: 0, BucketBytes: 40 << 10}, {Stage: 1}, {Stage: 2, BucketBytes: 40 << 10}, {Stage: 3}, {Stage: 3, Prefetch: true}, {PS: true}} {
			N := 2 + 2*((i+j)%2) // 2 or 4 ranks (one: train's TestLoRA and TestQLoRA)
			t.Run(fmt.Sprintf("%s/%s/lora=%s/%s/N=%d/%s", cfg.Name, tc.freeze, tc.lora, tc.quantize, N, set), func(t *testing.T) {
				opt := train.DefaultOptimizer(model.AdamW)
				opt.LR = 1e-2
				init := model.InitParams(cfg, 3)
				ref, err := train.New(hosts(t, 1)[0], checked(t, setupOf(cfg, N*b, T, 1, 0, model.FP32, model.AdamW)), train.Options{Optimizer: opt})
				if err != nil {
					t.Fatal(err)
				}
				defer ref.Close()
				if err := ref.SetParams(init); err != nil {
					t.Fatal(err)
				}
				s := setupOf(cfg, b, T, N, set.Stage, model.FP32, model.AdamW)
				g, err := NewGroup(hosts(t, N))
				if err != nil {
					t.Fatal(err)
				}
				rk, err := NewRanks(g, checked(t, s), set, train.Options{Optimizer: opt})
				if err != nil {
					t.Fatal(err)
				}
				defer rk.Close()
				if err := rk.SetParams(init); err != nil {
					t.Fatal(err)
				}
				big, small := loaderBatches(t, N*b, T), loaderBatches(t, b, T)
				for step := range steps {
					mean, want := stepAsOneRank(t, ref, rk, big, small, N, b, T)
					if math.Abs(mean-want.Loss) > 1e-5*math.Abs(want.Loss) {
						t.Errorf("step %d: the ranks' mean loss %.7f, one rank's %.7f", step+1, mean, want.Loss)
					}
				}
				wp, err := ref.Params()
				if err != nil {
					t.Fatal(err)
				}
				bound := float64(steps) * 2 * float64(opt.LR)
				for r := range N {
					// Each rank's weights; under ZeRO-3, which keeps shards,
					// the weights the ranks' shards and frozen rows make.
					params := rk.Trainer(r).Params
					if set.Stage == 3 {
						params = rk.Params
					}
					gp, err := params()
					if err != nil {
						t.Fatal(err)
					}
					var worst, sum float64
					for _, p := range cfg.Params() {
						for k := p.Offset; k < p.Offset+p.Count; k++ {
							if p.Frozen && (gp[k] != wp[k] || !p.Quantized && gp[k] != init[k]) {
								t.Fatalf("rank %d: frozen %s[%d] is %v, was %v (one rank's %v)", r, p.Name, k-p.Offset, gp[k], init[k], wp[k])
							}
							d := math.Abs(float64(gp[k]) - float64(wp[k]))
							worst = max(worst, d)
							sum += d
						}
					}
					if mean := sum / float64(len(wp)); worst > bound || mean > 1e-6 {
						t.Errorf("rank %d: weights differ from one rank's by up to %g (mean %g), want at most %g (mean 1e-6)", r, worst, mean, bound)
					}
				}

				// Shape-only ranks = host ranks, allocations and traffic.
				tok := make([]int32, b*T)
				sim, err := Simulate(func() cuda.Device { return shape.New(0) }, checked(t, s), set, 2, nil)
				if err != nil {
					t.Fatal(err)
				}
				meas, err := Measure(hosts(t, N), s, set, train.Options{}, init, 2,
					func(int, int) ([]int32, []int32, error) { return tok, tok, nil })
				if err != nil {
					t.Fatal(err)
				}
				for r := range N {
					if sim[r].Stats != meas[r].Stats {
						t.Errorf("rank %d: simulated %+v, measured %+v", r, sim[r].Stats, meas[r].Stats)
					}
					if sim[r].Traffic != meas[r].Traffic {
						t.Errorf("rank %d: traffic simulated %+v, measured %+v", r, sim[r].Traffic, meas[r].Traffic)
					}
					codes, state := cfg.QuantBytes()
					if got, want := sim[r].Stats.CategoryRequested[cuda.Frozen].Peak, 4*(cfg.NumFrozen()-cfg.NumQuantized())+codes; got != want {
						t.Errorf("rank %d: frozen %d bytes, want the %d frozen weights whole, %d", r, got, cfg.NumFrozen(), want)
					}
					if got := sim[r].Stats.CategoryRequested[cuda.QuantState].Peak; got != state {
						t.Errorf("rank %d: quant_state %d bytes, want %d", r, got, state)
					}
					// A rank's activations: the exact formula's, a micro-batch's.
					if e, err := s.Estimate(); err != nil || sim[r].Stats.CategoryRequested[cuda.Activations].Peak != e.ActivationBytes(model.Exact) {
						t.Errorf("rank %d: activations %d bytes, the exact formula %d (%v)", r, sim[r].Stats.CategoryRequested[cuda.Activations].Peak, e.ActivationBytes(model.Exact), err)
					}
					// ZeRO-3 gathers a unit's trained rows (the frozen ones are
					// whole on every rank): the formula's largest unit (which
					// counts no prefetch, a setting of the ranks').
					if e, err := s.Estimate(); !set.Prefetch && (err != nil || sim[r].Stats.CategoryRequested[cuda.Gathered].Peak != e.Gathered) {
						t.Errorf("rank %d: gathered %d bytes, the formula %d (%v)", r, sim[r].Stats.CategoryRequested[cuda.Gathered].Peak, e.Gathered, err)
					}
				}
			})
		}
	}
}
