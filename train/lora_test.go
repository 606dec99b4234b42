package train

import (
	"fmt"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/model/reference"
)

// LoRA trains for real: at initialisation (B = 0) the adapted model's
// loss is the base model's bit for bit (the same base weights: InitParams
// draws them from the plain model's streams); over 30 steps of the
// default corpus the loss falls, the frozen base weights keep their bits,
// the adapters move, and the host's allocator equals the shape-only
// device's at every step. (The adapters' gradients against float64 finite
// differences: TestFiniteDifferences.)
func TestLoRA(t *testing.T) {
	const B, T, steps = 4, 32, 30
	for _, tc := range []struct {
		preset, targets string
		rank            int
		prec            model.Precision
	}{{"tiny", "all-linear", 8, model.FP32}, {"tiny-llama", "q_proj,v_proj", 4, model.FP32}, {"tiny-llama", "all-linear", 8, model.BF16}} {
		t.Run(fmt.Sprintf("%s/%s/r=%d/%s", tc.preset, tc.targets, tc.rank, tc.prec), func(t *testing.T) {
			base := mustPreset(t, tc.preset)
			cfg := base
			targets, err := cfg.ParseLoRATargets(tc.targets)
			if err != nil {
				t.Fatal(err)
			}
			cfg.LoRA = model.LoRA{Rank: tc.rank, Alpha: 2 * float64(tc.rank), Targets: targets}
			tokens, targets32 := batch(t, cfg, B, T, 5)
			baseLoss, _ := hostGrads(t, withPrecision(oneRank(base, B, T), tc.prec), model.InitParams(base, 9), tokens, targets32)

			s := withPrecision(oneRank(cfg, B, T), tc.prec)
			init := model.InitParams(cfg, 9)
			host, losses := trainAdapters(t, s, init, tokens, targets32, steps, baseLoss)
			after, err := host.Params()
			if err != nil {
				t.Fatal(err)
			}
			// The frozen weights are stored at the working width: bf16's
			// rounding of the initial values.
			stored := func(v float32) float32 {
				if tc.prec == model.BF16 {
					return cuda.BF16ToF32(cuda.F32ToBF16(v))
				}
				return v
			}
			moved := map[string]bool{}
			for _, p := range cfg.Params() {
				for i := p.Offset; i < p.Offset+p.Count; i++ {
					if p.Frozen && after[i] != stored(init[i]) {
						t.Fatalf("frozen %s[%d] is %v after training, was %v", p.Name, i-p.Offset, after[i], stored(init[i]))
					}
					if !p.Frozen && after[i] != init[i] {
						moved[p.Name] = true
					}
				}
				if !p.Frozen && !moved[p.Name] {
					t.Errorf("adapter %s did not move", p.Name)
				}
			}
			t.Logf("loss %.4f → %.4f; %d of %d parameters trained", losses[0], losses[len(losses)-1], cfg.NumTrained(), cfg.NumParams())
		})
	}
}

// trainAdapters trains a fine-tune of setup s from init for steps steps
// of one batch on the host, beside the shape-only device (whose allocator
// must equal the host's at every step), with AdamW at 1e-2: the first
// step's loss must be firstLoss (the base model's: the adapters start at
// B = 0), and the loss must fall by 3% at least. It returns the host's
// trainer and the losses.
func trainAdapters(t *testing.T, s model.Setup, init []float32, tokens, targets []int32, steps int, firstLoss float64) (*Trainer, []float64) {
	t.Helper()
	opt := DefaultOptimizer(model.AdamW)
	opt.LR = 1e-2
	host := newTrainer(t, reference.NewHost(t), s, Options{Optimizer: opt})
	if err := host.SetParams(init); err != nil {
		t.Fatal(err)
	}
	sim := newTrainer(t, shape.New(0), s, Options{Optimizer: opt})
	var losses []float64
	for step := 1; step <= steps; step++ {
		hr, _ := stepBoth(t, step, host, sim, tokens, targets)
		if step == 1 && hr.Loss != firstLoss {
			t.Errorf("step 1: loss %v with B = 0, the base model's %v", hr.Loss, firstLoss)
		}
		losses = append(losses, hr.Loss)
	}
	if last := losses[len(losses)-1]; !(last < 0.97*losses[0]) {
		t.Errorf("the loss went from %.4f to %.4f in %d steps on one batch", losses[0], last, steps)
	}
	return host, losses
}
