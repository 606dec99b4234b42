package train

import (
	"fmt"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
)

// The implementation-exact formula (model/exact.go) equals the simulation's
// activation peak, and the model-state formula each state's, in requested
// bytes, across presets, batch sizes,
// sequence lengths, precisions, checkpoint policies and architectures
// (norm, linear biases, MLP and its width, positions, key and value heads,
// naive and flash attention).
func TestExactFormulaEqualsSimulation(t *testing.T) {
	type shape struct {
		preset string
		B, T   int
	}
	shapes := []shape{
		{"tiny", 1, 1}, {"tiny", 3, 17}, {"tiny", 8, 64},
		{"gpt2", 4, 64}, {"gpt2", 1, 1024},
		{"gpt2-medium", 2, 256},
		{"gpt2-xl", 32, 1000},
		{"6b", 1, 2048},
	}
	pols := []string{"none", "full", "every:2", "every:5", "sqrt", "selective"}
	precs := []model.Precision{model.FP32, model.FP16, model.BF16}
	custom := model.Config{Name: "custom", Layers: 7, Hidden: 96, Heads: 3, Vocab: 1000, Context: 300, Untied: true}
	n := 0
	for i, sh := range shapes {
		for j, pol := range pols {
			prec := precs[(i+j)%len(precs)]
			cfg, err := model.Preset(sh.preset)
			if err != nil {
				t.Fatal(err)
			}
			check(t, cfg, sh.B, sh.T, prec, pol)
			n++
		}
	}
	for _, pol := range pols {
		for _, prec := range precs {
			check(t, custom, 2, 300, prec, pol)
			n++
		}
	}
	// The architectures beside GPT-2's: RMSNorm, no linear biases,
	// SwiGLU at LLaMA's width and at another, rotary positions,
	// grouped-query and multi-query attention, and together. group is the
	// query heads a key and value head serves (0: multi-head; where it
	// does not divide the heads, multi-query).
	for i, arch := range []struct {
		norm   model.Norm
		noBias bool
		mlp    model.MLP
		ffn    int
		pos    model.Positions
		group  int
	}{{model.NormRMS, false, model.MLPGELU, 0, 0, 0}, {model.NormLayer, true, model.MLPGELU, 0, 0, 0}, {model.NormLayer, false, model.MLPSwiGLU, 0, 0, 0},
		{model.NormLayer, false, model.MLPGELU, 100, 0, 0}, {model.NormLayer, false, model.MLPGELU, 0, model.PosRoPE, 0},
		{model.NormRMS, true, model.MLPSwiGLU, 0, model.PosRoPE, 0}, {model.NormRMS, true, model.MLPSwiGLU, 200, model.PosRoPE, 0},
		{model.NormLayer, false, model.MLPGELU, 0, 0, 1 << 30}, {model.NormRMS, true, model.MLPSwiGLU, 0, model.PosRoPE, 2}} {
		for _, attn := range []model.Attention{model.AttentionNaive, model.AttentionFlash} {
			for j, sh := range []shape{{"tiny", 3, 17}, {"gpt2", 2, 128}, {"custom", 2, 300}} {
				cfg := custom
				if sh.preset != "custom" {
					var err error
					if cfg, err = model.Preset(sh.preset); err != nil {
						t.Fatal(err)
					}
				}
				cfg.Norm, cfg.NoBias, cfg.MLP, cfg.FFN, cfg.Positions = arch.norm, arch.noBias, arch.mlp, arch.ffn, arch.pos
				switch {
				case arch.group == 0:
				case cfg.Heads%arch.group == 0:
					cfg.KVHeads = cfg.Heads / arch.group
				default:
					cfg.KVHeads = 1
				}
				cfg.Attention = attn
				for k, pol := range pols {
					check(t, cfg, sh.B, sh.T, precs[(i+j+k+int(attn))%len(precs)], pol)
					n++
				}
			}
		}
	}
	// fp32 main gradients: the gradients' buffer at 4 bytes a parameter,
	// the activations as they are (each kernel's 16-bit gradient is a
	// temporary).
	for _, preset := range []string{"tiny", "gpt2-medium"} {
		cfg, err := model.Preset(preset)
		if err != nil {
			t.Fatal(err)
		}
		for _, prec := range precs {
			for _, pol := range []string{"none", "full"} {
				checkGrads(t, cfg, 2, 64, prec, pol, model.GradsFP32)
				n++
			}
		}
	}
	// Fine-tunes with frozen parts (model.Freeze): the params, grads and
	// optimizer states of the trained rows, the frozen weights beside
	// them, and the activations of the blocks the backward pass reaches
	// (none of the dead ones'), with every policy.
	llama, err := model.Preset("tiny-llama")
	if err != nil {
		t.Fatal(err)
	}
	for i, fz := range []string{"embeddings", "head", "embeddings,head", "layers:1", "layers:2", "layers:3,head", "layers:7"} {
		f, err := model.ParseFreeze(fz)
		if err != nil {
			t.Fatal(err)
		}
		for j, cfg := range []model.Config{custom, llama} {
			if f.Blocks > cfg.Layers || f.Blocks == cfg.Layers && f.Head {
				continue
			}
			cfg.Freeze = f
			cfg.Attention = model.Attention(j % 2)
			for k, pol := range pols {
				check(t, cfg, 2, 33, precs[(i+j+k)%len(precs)], pol)
				n++
			}
		}
	}
	// LoRA (model.LoRA): the adapters' states, the frozen base beside
	// them, and what the adapters keep (x for A's gradient, x·Aᵀ for B's),
	// on every linear layer and on LLaMA's q and v alone.
	for i, lc := range []struct {
		cfg     model.Config
		targets string
		rank    int
	}{{custom, "all-linear", 4}, {custom, "c_attn", 8}, {llama, "all-linear", 2}, {llama, "q_proj,v_proj", 8}, {llama, "attention", 16}} {
		cfg := lc.cfg
		targets, err := cfg.ParseLoRATargets(lc.targets)
		if err != nil {
			t.Fatal(err)
		}
		cfg.LoRA = model.LoRA{Rank: lc.rank, Alpha: 16, Targets: targets}
		for _, q := range []model.Quantization{model.QuantNone, model.QuantNF4} {
			cfg.Quantize = q // QLoRA: the frozen linear weights' codes and state, the activations as they are
			for k, pol := range pols {
				cfg.Attention = model.Attention((i + k) % 2)
				check(t, cfg, 2, 33, precs[(i+k)%len(precs)], pol)
				n++
			}
		}
	}
	// Frozen blocks stored in NF4 without LoRA.
	for _, fz := range []string{"layers:1", "layers:3,head"} {
		cfg := custom
		var err error
		if cfg.Freeze, err = model.ParseFreeze(fz); err != nil {
			t.Fatal(err)
		}
		cfg.Quantize = model.QuantNF4
		for k, pol := range pols {
			check(t, cfg, 2, 33, precs[k%len(precs)], pol)
			n++
		}
	}
	t.Logf("%d combinations agree", n)
}

func check(t *testing.T, cfg model.Config, B, T int, prec model.Precision, policy string) {
	t.Helper()
	checkGrads(t, cfg, B, T, prec, policy, model.GradsLikeWeights)
}

func checkGrads(t *testing.T, cfg model.Config, B, T int, prec model.Precision, policy string, grads model.MainGrads) {
	t.Helper()
	name := fmt.Sprintf("%s/b=%d/s=%d/%s/%s/main-grads=%s/freeze=%s/lora=%d/quantize=%s", cfg.Name, B, T, prec, policy, grads, cfg.Freeze, cfg.LoRA.Rank, cfg.Quantize)
	pol, err := model.ParseCheckpoint(policy)
	if err != nil {
		t.Fatal(err)
	}
	s := model.Setup{Model: cfg, Batch: B, Seq: T, Precision: prec, Optimizer: model.Adam, Checkpoint: pol, Ranks: 1, TP: 1, PP: 1, MainGrads: grads}
	if pol.Kind == model.CheckpointEvery && pol.Every > cfg.Layers {
		return
	}
	if want := 4 * cfg.NumTrained(); grads == model.GradsFP32 {
		if st, err := s.RankStates(cfg.NumTrained(), 0); err != nil || st.Grads != want {
			t.Errorf("%s: the formula's grads %d bytes (%v), want 4·Φ = %d", name, st.Grads, err, want)
		}
	}
	e, err := s.Estimate()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	want := e.ActivationBytes(model.Exact)
	_, st, err := Simulate(shape.New(0), checked(t, s), 1, nil)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	// One rank holds every state whole: each category's flat buffer is the
	// formula's, the parameter count the table's.
	for _, sh := range e.States.Named() {
		if got := st.CategoryRequested[sh.Cat].Peak; got != sh.Bytes {
			t.Errorf("%s: simulated %v peak %d bytes, formula %d", name, sh.Cat, got, sh.Bytes)
		}
	}
	if got := st.CategoryRequested[cuda.Activations].Peak; got != want {
		var at string
		for _, a := range e.Activations {
			if a.Formula == model.Exact {
				at = fmt.Sprintf("%s %v", a.At, a.Terms)
			}
		}
		t.Errorf("%s: simulated activation peak %d bytes, formula %d (%+d) at %s", name, got, want, want-got, at)
	}
}
