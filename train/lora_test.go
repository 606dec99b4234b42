package train

import (
	"fmt"
	"math"
	"strings"
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
	host, losses := trainBoth(t, s, opt, init, tokens, targets, steps)
	if losses[0] != firstLoss {
		t.Errorf("step 1: loss %v with B = 0, the base model's %v", losses[0], firstLoss)
	}
	if last := losses[len(losses)-1]; !(last < 0.97*losses[0]) {
		t.Errorf("the loss went from %.4f to %.4f in %d steps on one batch", losses[0], last, steps)
	}
	return host, losses
}

// trainBoth trains setup s from init with opt for steps steps of one
// batch on the host, beside the shape-only device, whose allocator must
// equal the host's at every step; it returns the host's trainer and the
// losses.
func trainBoth(t *testing.T, s model.Setup, opt Optimizer, init []float32, tokens, targets []int32, steps int) (*Trainer, []float64) {
	t.Helper()
	host := newTrainer(t, reference.NewHost(t), s, Options{Optimizer: opt})
	if err := host.SetParams(init); err != nil {
		t.Fatal(err)
	}
	sim := newTrainer(t, shape.New(0), s, Options{Optimizer: opt})
	var losses []float64
	for step := 1; step <= steps; step++ {
		hr, _ := stepBoth(t, step, host, sim, tokens, targets)
		losses = append(losses, hr.Loss)
	}
	return host, losses
}

// A LoRA merged into its base (model.MergeLoRA, PEFT's merge_and_unload)
// computes what the adapted model computes: in float64, with adapters far
// from zero, the merged base model's loss equals the LoRA model's within
// the merged weights' fp32 rounding (1e-6 relative), where the base alone
// is a hundred times farther at least, on each architecture, with
// rsLoRA's scale too.
func TestMergeLoRA(t *testing.T) {
	const B, T = 2, 16
	for _, tc := range []struct {
		preset, targets string
		rs              bool
	}{{"tiny", "all-linear", false}, {"tiny-llama", "all-linear", true}, {"tiny-llama", "q_proj,v_proj,down_proj", false}} {
		cfg := mustPreset(t, tc.preset)
		tg, err := cfg.ParseLoRATargets(tc.targets)
		if err != nil {
			t.Fatal(err)
		}
		cfg.LoRA = model.LoRA{Rank: 3, Alpha: 5, Targets: tg, RSLoRA: tc.rs}
		params := model.InitParams(cfg, 4)
		for _, p := range cfg.Params() {
			if strings.HasSuffix(p.Name, ".lora_b") {
				for i := p.Offset; i < p.Offset+p.Count; i++ {
					params[i] = float32(0.3 * math.Sin(float64(i)))
				}
			}
		}
		base, merged, err := model.MergeLoRA(cfg, params)
		if err != nil {
			t.Fatal(err)
		}
		tokens, targets := batch(t, cfg, B, T, 3)
		loss := func(c model.Config, p []float32) float64 {
			tr := newTrainer(t, reference.NewHost(t), oneRank(c, B, T), Options{Float64: true})
			f := make([]float64, len(p))
			for i, v := range p {
				f[i] = float64(v)
			}
			if err := tr.SetParams(f); err != nil {
				t.Fatal(err)
			}
			r, err := tr.ForwardBackward(tokens, targets)
			if err != nil {
				t.Fatal(err)
			}
			return r.Loss
		}
		// The merged weights are rounded to fp32, as a saved file holds
		// them: the LoRA model's loss within that rounding's effect.
		adapted, m := loss(cfg, params), loss(base, merged)
		// The base alone (the adapters dropped) is far from both.
		byName := map[string]model.Param{}
		for _, p := range cfg.Params() {
			byName[p.Name] = p
		}
		alone := make([]float32, base.NumParams())
		for _, p := range base.Params() {
			q := byName[p.Name]
			copy(alone[p.Offset:p.Offset+p.Count], params[q.Offset:q.Offset+q.Count])
		}
		plain := loss(base, alone)
		if d := math.Abs(adapted-m) / adapted; d > 1e-6 || math.Abs(adapted-plain) < 100*math.Abs(adapted-m) {
			t.Errorf("%s %s: LoRA loss %.12f, merged %.12f (relative %g), the base alone %.12f", tc.preset, tc.targets, adapted, m, d, plain)
		}
		if base.LoRA.On() || base.NumParams() != int64(len(merged)) {
			t.Errorf("%s: the merged model %s keeps a LoRA or has %d weights", tc.preset, base, len(merged))
		}
		t.Logf("%s %s: LoRA loss %.12f, merged %.12f, the base alone %.12f", tc.preset, tc.targets, adapted, m, plain)
	}
}
