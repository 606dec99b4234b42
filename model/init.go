package model

import (
	"math"
	"math/rand/v2"
	"strings"
)

// InitStd is the standard deviation of GPT-2's initial embeddings and linear
// weights (Radford et al. 2019; nanoGPT's _init_weights).
const InitStd = 0.02

// InitParams returns freshly initialised parameters of cfg, flat in
// Config.Params() order, with GPT-2's scheme: embeddings and linear weights
// (the untied head included) drawn from normal(0, 0.02); the residual output
// projections attn.proj.w and mlp.proj.w from normal(0, 0.02/sqrt(2L)), so
// that the residual stream's variance does not grow with depth ("we scale the
// weights of residual layers at initialization by a factor of 1/√N where N
// is the number of residual layers", Radford et al. 2019, §2.3); biases 0;
// layer-norm gains 1. The same seed gives the same values, bit for bit: each
// tensor draws from its own PCG stream, seeded by seed and its index in the
// table, so a tensor's values do not depend on the tensors before it.
//
// A LoRA's adapters start as PEFT's do (peft's LoraLayer.reset_lora_parameters,
// init_lora_weights True): A from kaiming_uniform(a = √5), uniform in
// ±1/√in, and B zero, so that the adapted model starts as the base model;
// the base rows draw from the streams of their index in the table without
// the adapters, so a LoRA's base weights are the plain model's of the same
// seed.
func InitParams(cfg Config, seed uint64) []float32 {
	params := make([]float32, cfg.NumParams())
	initRows(cfg, seed, params, false)
	return params
}

// InitAdapters initialises the rows of a LoRA's adapters in params (the
// whole table of cfg, flat) as InitParams does, the rest left as it is:
// for adapters over base weights loaded from a file (--load).
func InitAdapters(cfg Config, seed uint64, params []float32) { initRows(cfg, seed, params, true) }

// initRows is InitParams's initialisation of params's rows, of the
// adapters' only with adaptersOnly.
func initRows(cfg Config, seed uint64, params []float32, adaptersOnly bool) {
	table := cfg.Params()
	residualStd := InitStd / math.Sqrt(2*float64(cfg.Layers))
	base := 0 // the row's index in the table without a LoRA's rows
	for i, p := range table {
		dst := params[p.Offset : p.Offset+p.Count]
		lora := strings.HasSuffix(p.Name, ".lora_a") || strings.HasSuffix(p.Name, ".lora_b")
		stream := uint64(base)
		if lora {
			stream = 1<<40 + uint64(i)
		} else {
			base++
		}
		if adaptersOnly && !lora {
			continue
		}
		switch {
		case strings.HasSuffix(p.Name, ".lora_b"):
			clear(dst)
		case strings.HasSuffix(p.Name, ".lora_a"):
			bound := 1 / math.Sqrt(float64(p.Shape[1]))
			rng := rand.New(rand.NewPCG(seed, stream))
			for j := range dst {
				dst[j] = float32((2*rng.Float64() - 1) * bound)
			}
		case strings.HasSuffix(p.Name, "ln1.w"), strings.HasSuffix(p.Name, "ln2.w"), p.Name == "lnf.w":
			for j := range dst {
				dst[j] = 1
			}
		case len(p.Shape) == 1: // biases (layer-norm biases included)
			// already zero
		default:
			std := InitStd
			if strings.HasSuffix(p.Name, "attn.proj.w") || strings.HasSuffix(p.Name, "mlp.proj.w") {
				std = residualStd
			}
			rng := rand.New(rand.NewPCG(seed, stream))
			for j := range dst {
				dst[j] = float32(rng.NormFloat64() * std)
			}
		}
	}
}
