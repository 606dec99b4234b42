package train

import (
	"testing"

	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/model/reference"
)

// A fine-tune with frozen parts (model.Freeze) computes the trained rows'
// gradients the whole model computes, bit for bit in fp32 (the same ops on
// the same values, summed in the same order: the backward pass only leaves
// out the frozen rows' gradients and, below the first trained block, every
// input gradient), and the same loss; the frozen weights are the bits they
// were after steps of training, the trained ones move, and the host's
// allocator equals the shape-only device's at every step.
func TestFreeze(t *testing.T) {
	const B, T = 2, 16
	for _, name := range []string{"tiny", "tiny-llama"} {
		for _, fz := range []string{"embeddings", "head", "layers:1", "layers:2", "embeddings,head"} {
			cfg := mustPreset(t, name)
			f, err := model.ParseFreeze(fz)
			if err != nil {
				t.Fatal(err)
			}
			t.Run(name+"/"+fz, func(t *testing.T) {
				params := model.InitParams(cfg, 7)
				tokens, targets := batch(t, cfg, B, T, 3)
				wholeLoss, whole := hostGrads(t, oneRank(cfg, B, T), params, tokens, targets)
				frozenCfg := cfg
				frozenCfg.Freeze = f
				s := oneRank(frozenCfg, B, T)
				loss, got := hostGrads(t, s, params, tokens, targets)
				if loss != wholeLoss {
					t.Errorf("loss %v, the whole model's %v", loss, wholeLoss)
				}
				want, _ := model.Trained(frozenCfg, whole)
				if len(got) != len(want) || int64(len(got)) != frozenCfg.NumTrained() {
					t.Fatalf("%d gradients, want the %d trained parameters' (%d)", len(got), frozenCfg.NumTrained(), len(want))
				}
				for i := range want {
					if got[i] != want[i] {
						t.Fatalf("gradient %d of the trained rows is %v, the whole model's %v", i, got[i], want[i])
					}
				}

				host := newTrainer(t, reference.NewHost(t), s, Options{})
				if err := host.SetParams(params); err != nil {
					t.Fatal(err)
				}
				sim := newTrainer(t, shape.New(0), s, Options{})
				for step := 1; step <= 3; step++ {
					stepBoth(t, step, host, sim, tokens, targets)
				}
				after, err := host.Params()
				if err != nil {
					t.Fatal(err)
				}
				moved := false
				for _, p := range frozenCfg.Params() {
					for i := p.Offset; i < p.Offset+p.Count; i++ {
						if p.Frozen && after[i] != params[i] {
							t.Fatalf("frozen %s[%d] is %v after 3 steps, was %v", p.Name, i-p.Offset, after[i], params[i])
						}
						moved = moved || !p.Frozen && after[i] != params[i]
					}
				}
				if !moved {
					t.Error("no trained weight moved in 3 steps")
				}
			})
		}
	}
}

// ParseFreeze reads every part and refuses what the model cannot take,
// naming it; a frozen table counts its rows apart.
func TestFreezeParts(t *testing.T) {
	gpt2 := mustPreset(t, "gpt2")
	for spec, want := range map[string]int64{
		// wte (50257·768) and wpe (1024·768) frozen: 124,439,808 − 39,383,808.
		"embeddings": 124439808 - (50257+1024)*768,
		// and 4 blocks of 7,087,872 (12h² + 13h at h 768).
		"layers:4": 124439808 - (50257+1024)*768 - 4*7087872,
		// the final layer norm (2h); the tied head is wte, trained.
		"head": 124439808 - 2*768,
	} {
		f, err := model.ParseFreeze(spec)
		if err != nil {
			t.Fatal(err)
		}
		c := gpt2
		c.Freeze = f
		if got := c.NumTrained(); got != want {
			t.Errorf("%s: %d trained, want %d", spec, got, want)
		}
		if f.String() != spec {
			t.Errorf("%s reads back as %q", spec, f)
		}
	}
	for _, bad := range []string{"layers:0", "layers:x", "wte", "head,head", "layers:3:4"} {
		if _, err := model.ParseFreeze(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
	c := mustPreset(t, "tiny")
	for _, spec := range []string{"layers:3", "layers:2,head"} {
		f, _ := model.ParseFreeze(spec)
		c.Freeze = f
		if err := c.Validate(); err == nil {
			t.Errorf("tiny (2 blocks) took freeze %s", spec)
		}
	}
}
