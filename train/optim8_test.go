package train

import (
	"fmt"
	"math"
	"testing"

	"trainmem/model"
)

// 8-bit Adam trains for real: tiny and tiny-llama (and a LoRA of
// tiny-llama, whose adapters are small tensors and large ones) with
// adamw8bit on the host beside the shape-only device, whose allocator
// must equal the host's at every step; the loss falls and follows fp32
// AdamW's from the same start (the 8-bit moments approximate fp32's: the
// first step's loss equal, every later one within 10% as the run overfits
// its one batch); the states' bytes are the formula's, to the byte.
func TestAdam8bit(t *testing.T) {
	const B, T, steps = 4, 32, 20
	for _, tc := range []struct {
		preset string
		prec   model.Precision
		lora   bool
	}{{"tiny", model.FP32, false}, {"tiny-llama", model.BF16, false}, {"tiny-llama", model.BF16, true}} {
		t.Run(fmt.Sprintf("%s/%s/lora=%t", tc.preset, tc.prec, tc.lora), func(t *testing.T) {
			cfg := mustPreset(t, tc.preset)
			if tc.lora {
				targets, err := cfg.ParseLoRATargets("all-linear")
				if err != nil {
					t.Fatal(err)
				}
				cfg.LoRA = model.LoRA{Rank: 64, Alpha: 16, Targets: targets}
			}
			tokens, targets := batch(t, cfg, B, T, 5)
			init := model.InitParams(cfg, 9)
			run := func(kind model.Optimizer) ([]float64, *Trainer) {
				s := withPrecision(oneRank(cfg, B, T), tc.prec)
				s.Optimizer = kind
				opt := DefaultOptimizer(kind)
				opt.LR = 3e-3
				host, losses := trainBoth(t, s, opt, init, tokens, targets, steps)
				e, err := s.Estimate()
				if err != nil {
					t.Fatal(err)
				}
				st := host.Device().Stats()
				for _, sh := range e.States.Named() {
					if got := st.CategoryRequested[sh.Cat].Current; got != sh.Bytes {
						t.Errorf("%s: %s holds %d bytes, the formula %d", kind, sh.Cat, got, sh.Bytes)
					}
				}
				return losses, host
			}
			q, _ := run(model.AdamW8bit)
			f, _ := run(model.AdamW)
			if !(q[steps-1] < 0.95*q[0]) {
				t.Errorf("adamw8bit: the loss went from %.4f to %.4f in %d steps", q[0], q[steps-1], steps)
			}
			var worst float64
			for i := range q {
				worst = max(worst, math.Abs(q[i]-f[i])/f[i])
			}
			if worst > 0.1 || q[0] != f[0] {
				t.Errorf("adamw8bit's losses differ from adamw's by up to %.2f%%", 100*worst)
			}
			var big int64
			for _, p := range cfg.Params() {
				if !p.Frozen && p.Count >= model.Min8bitSize {
					big += p.Count
				}
			}
			t.Logf("loss %.4f → %.4f (adamw %.4f → %.4f, up to %.3f%% apart); %d of %d trained parameters with 8-bit states",
				q[0], q[steps-1], f[0], f[steps-1], 100*worst, big, cfg.NumTrained())
		})
	}
}
