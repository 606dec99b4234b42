package model

import "testing"

// TestMegatron holds Setup.Megatron to the numbers Megatron-LM's own
// functions give for the same configurations: compute_weight_and_optimizer_memory
// and compute_activation_memory / compute_activation_memory_without_sp of
// megatron/training/theoretical_memory_usage.py at NVIDIA/Megatron-LM
// d98e8a64 (Megatron Core 0.20.0), run unchanged under Python 3.11 with
// the arguments these setups set (kv_channels h/a, ffn_hidden_size the
// MLP's width, normalization LayerNorm or RMSNorm, swiglu for SwiGLU,
// group_query_attention with num_query_groups the key and value heads
// where they are fewer than the heads, no MoE, MTP or virtual stages, padded_vocab_size by
// vocab_size_with_padding with make_vocab_size_divisible_by 128,
// use_distributed_optimizer for ZeRO ≥ 1, recompute_granularity
// 'selective' for selective, num_microbatches M or None), each figure
// rounded to a byte.
func TestMegatron(t *testing.T) {
	gpt3 := Config{Name: "gpt3-175b", Layers: 96, Hidden: 12288, Heads: 96, Vocab: 50257, Context: 2048}
	llama2Blocks := Config{Name: "llama2-7b-blocks", Layers: 32, Hidden: 4096, Heads: 32, Vocab: 32000, Context: 4096,
		Untied: true, Norm: NormRMS, NoBias: true, MLP: MLPSwiGLU}
	for _, tc := range []struct {
		name            string
		cfg             Config
		b, seq          int
		tp, pp, dp, m   int
		zero            int
		sp              bool
		ckpt            CheckpointKind
		padded          int
		weights, act    int64
		spPath, distOpt bool
	}{
		{"gpt2-xl dp 8, distributed optimizer", mustPreset(t, "gpt2-xl"), 4, 1024, 1, 1, 8, 0, 1, false, CheckpointNone, 50304, 11665176000, 11683622093, false, true},
		{"6b tp 4 × pp 4 × dp 4, M 8, sequence parallel, selective", mustPreset(t, "6b"), 1, 2048, 4, 4, 4, 8, 1, true, CheckpointSelective, 50688, 3639085056, 2004893696, true, true},
		{"GPT-3 175B tp 8 × pp 16 × dp 8, M 64, sequence parallel, selective", gpt3, 1, 2048, 8, 16, 8, 64, 0, true, CheckpointSelective, 51200, 25882094592, 10318020608, true, false},
		{"tiny untied tp 2", func() Config { c := mustPreset(t, "tiny"); c.Untied = true; return c }(), 2, 64, 2, 1, 1, 0, 0, false, CheckpointNone, 256, 1191168, 439757, false, false},
		{"6b tp 2 × pp 2 × dp 2, M 1, selective without sequence parallelism", mustPreset(t, "6b"), 2, 2048, 2, 2, 2, 1, 1, false, CheckpointSelective, 50432, 18153652224, 5443402138, false, true},
		// LLaMA's blocks (RMSNorm: norm_size 1; SwiGLU: gated_linear_multiplier
		// 3/2, ffn_hidden_size 11,008 and 256), untied, no linear biases.
		{"llama2-7b blocks tp 2 × pp 2 × dp 2, M 4, sequence parallel, selective", llama2Blocks, 1, 4096, 2, 2, 2, 4, 1, true, CheckpointSelective, 32000, 20216045568, 7734329344, true, true},
		{"tiny llama blocks tp 2", func() Config {
			c := mustPreset(t, "tiny")
			c.Untied, c.Norm, c.NoBias, c.MLP = true, NormRMS, true, MLPSwiGLU
			return c
		}(), 2, 64, 2, 1, 1, 0, 0, false, CheckpointNone, 256, 1480320, 439757, false, false},
		// Grouped-query attention (group_query_attention, num_query_groups
		// the key and value heads): Llama 3 8B's 8 of 32, tiny-llama's 2 of 4.
		{"llama3-8b tp 2 × pp 2 × dp 2, M 4, sequence parallel, selective", mustPreset(t, "llama3-8b"), 1, 4096, 2, 2, 2, 4, 1, true, CheckpointSelective, 128256, 24091582464, 8606744576, true, true},
		{"tiny-llama tp 2", mustPreset(t, "tiny-llama"), 2, 64, 2, 1, 1, 0, 0, false, CheckpointNone, 256, 1406592, 439757, false, false},
	} {
		s := Setup{Model: tc.cfg, Batch: tc.b, Seq: tc.seq, Precision: BF16, Optimizer: Adam, Checkpoint: Checkpoint{Kind: tc.ckpt},
			Ranks: tc.dp, ZeRO: tc.zero, TP: tc.tp, PP: tc.pp, MicroBatches: tc.m, SequenceParallel: tc.sp}
		m, err := s.Megatron()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if m.PaddedVocab != tc.padded || m.WeightsAndOptimizer != tc.weights || m.Activations != tc.act || m.SequenceParallelPath != tc.spPath || m.DistributedOptimizer != tc.distOpt {
			t.Errorf("%s: padded vocabulary %d, weights and optimizer %d, activations %d (sequence-parallel path %v, distributed optimizer %v); Megatron-LM: %d, %d, %d (%v, %v)",
				tc.name, m.PaddedVocab, m.WeightsAndOptimizer, m.Activations, m.SequenceParallelPath, m.DistributedOptimizer, tc.padded, tc.weights, tc.act, tc.spPath, tc.distOpt)
		}
		if m.Total() != tc.weights+tc.act {
			t.Errorf("%s: total %d", tc.name, m.Total())
		}
	}
	// Where Megatron-LM's count and the table agree (no biases, a
	// vocabulary that needs no padding, no position table): LLaMA's
	// blocks, whose weights its report and the estimate count alike.
	for _, c := range []Config{mustPreset(t, "llama2-7b"), mustPreset(t, "llama3-8b"), mustPreset(t, "tinyllama-1.1b")} {
		m, err := (Setup{Model: c, Batch: 1, Seq: 1024, Precision: BF16, Optimizer: Adam, Ranks: 1, TP: 1, PP: 1}).Megatron()
		if err != nil {
			t.Fatal(err)
		}
		if want := c.NumParams(); m.PaddedVocab != c.Vocab || int64(m.Params) != want || m.Params != float64(want) {
			t.Errorf("%s: Megatron-LM counts %v parameters (vocabulary padded to %d), the table %d", c.Name, m.Params, m.PaddedVocab, want)
		}
	}
	if _, err := (Setup{Params: 1e9, Precision: BF16, Optimizer: Adam, Ranks: 1, TP: 1, PP: 1}).Megatron(); err == nil {
		t.Error("a parameter count has a Megatron shape")
	}
}
