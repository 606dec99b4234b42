package model_test

import (
	"fmt"

	"trainmem/model"
)

// The source articles' question: GPT-2 XL with mixed-precision Adam at
// batch 32, sequence 1000, on one GPU.
func ExampleSetup_Estimate() {
	xl, _ := model.Preset("gpt2-xl")
	s := model.Setup{Model: xl, Batch: 32, Seq: 1000, Precision: model.FP16, Optimizer: model.Adam, Ranks: 1, TP: 1, PP: 1}
	e, err := s.Estimate()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("parameters:", model.Comma(e.Params))
	fmt.Println("fp16 weights:", model.GB(e.States.Params))
	fmt.Println("model states:", model.GB(e.States.Total()))
	for _, a := range e.Activations {
		fmt.Printf("activations (%s): %s\n", a.Formula, model.GB(a.Total))
	}
	// Output:
	// parameters: 1,557,611,200
	// fp16 weights: 3.12 GB
	// model states: 24.92 GB
	// activations (zero_paper): 58.98 GB
	// activations (korthikanti): 282.25 GB
	// activations (trainmem): 158.89 GB
}

// ZeRO paper Table 1: 7.5B parameters, mixed-precision Adam (K = 12), per
// rank on 64 data-parallel ranks.
func ExampleZeROStates() {
	for stage := 0; stage <= 3; stage++ {
		s, _ := model.ZeROStates(7500000000, model.FP16, model.Adam, 64, stage)
		fmt.Printf("stage %d: %s\n", stage, model.GB(s.Total()))
	}
	// Output:
	// stage 0: 120.00 GB
	// stage 1: 31.41 GB
	// stage 2: 16.64 GB
	// stage 3: 1.88 GB
}

// Korthikanti et al. 2022, Section 4.1: one GPT-2 XL layer at b=32, s=1000
// in 16 bits, and the same layer split over 5 tensor-parallel ranks (Table 2,
// sbh(10 + 24/t + 5as/(ht))).
func ExampleKorthikantiLayer() {
	l, _ := model.KorthikantiLayer(1000, 32, 1600, 25, 2, 1, false)
	fmt.Println("attention:", model.GB(l.Attention+l.Scores))
	fmt.Println("mlp:", model.GB(l.MLP))
	fmt.Println("layer norms:", model.GB(l.LayerNorms))
	fmt.Println("layer:", model.Comma(l.Total()), "bytes")
	tp, _ := model.KorthikantiLayer(1000, 32, 1600, 25, 2, 5, false)
	fmt.Println("layer, t=5:", model.Comma(tp.Total()), "bytes")
	// Output:
	// attention: 4.56 GB
	// mlp: 972.80 MB
	// layer norms: 204.80 MB
	// layer: 5,740,800,000 bytes
	// layer, t=5: 1,557,760,000 bytes
}

// How far checkpointing brings GPT-2 XL's activations down, and what it
// costs in recomputation.
func ExampleCheckpoint() {
	xl, _ := model.Preset("gpt2-xl")
	s := model.Setup{Model: xl, Batch: 32, Seq: 1000, Precision: model.FP16, Optimizer: model.Adam, Ranks: 1, TP: 1, PP: 1}
	for _, p := range []string{"none", "selective", "sqrt", "full"} {
		s.Checkpoint, _ = model.ParseCheckpoint(p)
		e, _ := s.Estimate()
		fmt.Printf("%-9s zero_paper %9s  korthikanti %9s  recompute %4.1f%%\n", p,
			model.GB(e.ActivationBytes(model.ZeROPaper)), model.GB(e.ActivationBytes(model.Korthikanti)), 100*e.Recompute.Fraction)
	}
	// Output:
	// none      zero_paper  58.98 GB  korthikanti 282.25 GB  recompute  0.0%
	// selective zero_paper  58.98 GB  korthikanti  94.25 GB  recompute  3.0%
	// sqrt      zero_paper   9.32 GB  korthikanti  47.59 GB  recompute 31.8%
	// full      zero_paper   6.14 GB  korthikanti  17.34 GB  recompute 31.8%
}

// The largest micro-batch that fits in an 80 GiB card.
func ExampleSetup_MaxBatch() {
	xl, _ := model.Preset("gpt2-xl")
	s := model.Setup{Model: xl, Seq: 1024, Precision: model.BF16, Optimizer: model.AdamW, Ranks: 1, TP: 1, PP: 1,
		Checkpoint: model.Checkpoint{Kind: model.CheckpointFull}}
	b, e, _ := s.MaxBatch(80<<30, model.Korthikanti)
	fmt.Println("micro-batch:", b, "total:", model.GiB(e.Total(model.Korthikanti)))
	// Output:
	// micro-batch: 109 total: 79.87 GiB
}

func ExampleParseBytes() {
	for _, s := range []string{"80GiB", "24GB", "1.5e9"} {
		n, _ := model.ParseBytes(s)
		fmt.Println(s, "=", model.Comma(n), "bytes =", model.Bytes(n))
	}
	// Output:
	// 80GiB = 85,899,345,920 bytes = 85.90 GB (80.00 GiB)
	// 24GB = 24,000,000,000 bytes = 24.00 GB (22.35 GiB)
	// 1.5e9 = 1,500,000,000 bytes = 1.50 GB (1.40 GiB)
}
