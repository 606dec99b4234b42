package train

import (
	"fmt"
	"math"
	"testing"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/model/reference"
)

// QLoRA trains for real: LoRA over a base model whose frozen linear
// weights are stored in NF4 (model.QuantNF4). At initialisation (B = 0)
// its loss is, bit for bit, the loss of the base model whose linear
// weights are the NF4 weights dequantized (so each op reads exactly the
// weights the codes hold, dequantized where it reads them); over 30 steps
// the loss falls, the codes and their quantization state keep their bits,
// and the host's allocator equals the shape-only device's at every step,
// the dequantized temporaries included.
func TestQLoRA(t *testing.T) {
	const B, T, steps = 4, 32, 30
	for _, tc := range []struct {
		preset string
		prec   model.Precision
		ckpt   model.Checkpoint
	}{{"tiny", model.FP32, model.Checkpoint{}}, {"tiny-llama", model.BF16, model.Checkpoint{}}, {"tiny-llama", model.BF16, model.Checkpoint{Kind: model.CheckpointFull}}} {
		t.Run(fmt.Sprintf("%s/%s/%s", tc.preset, tc.prec, tc.ckpt), func(t *testing.T) {
			base := mustPreset(t, tc.preset)
			cfg := base
			targets, err := cfg.ParseLoRATargets("all-linear")
			if err != nil {
				t.Fatal(err)
			}
			cfg.LoRA = model.LoRA{Rank: 8, Alpha: 16, Targets: targets}
			cfg.Quantize = model.QuantNF4
			tokens, targets32 := batch(t, cfg, B, T, 5)

			s := withPrecision(oneRank(cfg, B, T), tc.prec)
			s.Checkpoint = tc.ckpt
			init := model.InitParams(cfg, 9)
			// The weights as loaded: the quantized ones dequantized. (A
			// trainer of its own: trainAdapters's makes the same, and
			// its allocator's history is compared with a simulation's.)
			loader := newTrainer(t, reference.NewHost(t), s, Options{})
			if err := loader.SetParams(init); err != nil {
				t.Fatal(err)
			}
			loaded, err := loader.Params()
			if err != nil {
				t.Fatal(err)
			}
			// The base model with the dequantized weights, and the NF4
			// error: at most half the widest gap between NF4 values of a
			// block's absmax, here stated against the largest weight.
			baseParams := make([]float32, base.NumParams())
			byName := map[string]model.Param{}
			for _, p := range cfg.Params() {
				byName[p.Name] = p
			}
			var worst float64
			for _, p := range base.Params() {
				q := byName[p.Name]
				copy(baseParams[p.Offset:p.Offset+p.Count], loaded[q.Offset:q.Offset+q.Count])
				if !q.Quantized {
					continue
				}
				var mx float64
				for i := q.Offset; i < q.Offset+q.Count; i++ {
					mx = max(mx, math.Abs(float64(init[i])))
				}
				for i := q.Offset; i < q.Offset+q.Count; i++ {
					worst = max(worst, math.Abs(float64(loaded[i]-init[i]))/mx)
				}
			}
			if worst == 0 || worst > (cuda.NF4Values[1]-cuda.NF4Values[0])/2+0.01 {
				t.Errorf("NF4 changed the weights by up to %.4f of the largest weight, want in (0, half the widest NF4 gap]", worst)
			}
			baseLoss, _ := hostGrads(t, withPrecision(oneRank(base, B, T), tc.prec), baseParams, tokens, targets32)

			codes := func(tr *Trainer) []uint8 {
				var all []uint8
				for _, b := range []*cuda.Buffer{tr.quant.codes, tr.quant.scales} {
					v := make([]uint8, b.Len)
					if err := tr.dev.Download(v, b); err != nil {
						t.Fatal(err)
					}
					all = append(all, v...)
				}
				for _, b := range []*cuda.Buffer{tr.quant.scales2, tr.quant.offsets} {
					v := make([]float32, b.Len)
					if err := tr.dev.Download(v, b); err != nil {
						t.Fatal(err)
					}
					for _, f := range v {
						bits := math.Float32bits(f)
						all = append(all, uint8(bits), uint8(bits>>8), uint8(bits>>16), uint8(bits>>24))
					}
				}
				return all
			}
			host, losses := trainAdapters(t, s, init, tokens, targets32, steps, baseLoss)
			before, after := codes(loader), codes(host)
			for i := range before {
				if before[i] != after[i] {
					t.Fatalf("the quantized weights' byte %d changed in training: %#x → %#x", i, before[i], after[i])
				}
			}
			st := host.Device().Stats()
			codesBytes, stateBytes := cfg.QuantBytes()
			if got := st.CategoryRequested[cuda.QuantState].Current; got != stateBytes {
				t.Errorf("quant_state holds %d bytes, model.QuantBytes %d", got, stateBytes)
			}
			plain := (cfg.NumFrozen() - cfg.NumQuantized()) * int64(s.Precision.Size())
			if got := st.CategoryRequested[cuda.Frozen].Current; got != plain+codesBytes {
				t.Errorf("frozen holds %d bytes, want %d in the working type and %d of codes", got, plain, codesBytes)
			}
			t.Logf("loss %.4f → %.4f; %d weights in NF4 (%d bytes and %d of state), NF4's error up to %.4f of the largest weight",
				losses[0], losses[len(losses)-1], cfg.NumQuantized(), codesBytes, stateBytes, worst)
		})
	}
}
