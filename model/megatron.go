package model

// Megatron-LM's theoretical memory report for a GPT of this shape
// (report_theoretical_memory in megatron/training/theoretical_memory_usage.py,
// NVIDIA/Megatron-LM at d98e8a64, Megatron Core 0.20.0), computed as that
// code computes it: in float64, in its order of operations, rounded to a
// byte at the end. It counts the most loaded rank, the first pipeline
// stage: its weights and optimizer states at 18 bytes a parameter (bf16
// weights, fp32 main gradients, fp32 main weights and Adam states), or
// 6 + 12/DP with the distributed optimizer, over the parameters of a shape
// without biases but the layer norms' and without position embeddings (an
// RMSNorm's gain alone, SwiGLU's three matrices of the MLP's width, the key
// and value projections of grouped-query attention's groups), the
// vocabulary padded to a multiple of 128·t; and its activations by
// Korthikanti et al.'s Table 2 without the attention scores, either
// compute_activation_memory (sequence parallelism with selective
// recomputation: 34sbh a layer, /t) or compute_activation_memory_without_sp
// (sbh(10 + 24/t) a layer, whatever the recomputation, times 1.05 for
// temporaries).

import (
	"errors"
	"fmt"
	"math"
)

// MegatronSource is the code the Megatron formula follows.
const MegatronSource = "report_theoretical_memory, megatron/training/theoretical_memory_usage.py, NVIDIA/Megatron-LM d98e8a64 (Megatron Core 0.20.0)"

// MegatronVocabMultiple is Megatron-LM's --make-vocab-size-divisible-by
// default: the vocabulary is padded to a multiple of it times t.
const MegatronVocabMultiple = 128

// MegatronMemory is Megatron-LM's theoretical memory of a setup's most
// loaded rank.
type MegatronMemory struct {
	PaddedVocab int
	// Params is the most loaded shard's parameters (the first stage's
	// blocks and embedding, a tensor rank's part of them, and the untied
	// head when there is one stage), BytesPerParam its 18 or 6 + 12/DP.
	Params, BytesPerParam float64
	// DistributedOptimizer: the setup shards the optimizer states (ZeRO
	// 1 and up), which Megatron-LM's distributed optimizer does.
	DistributedOptimizer bool
	// SequenceParallelPath: the activations are compute_activation_memory's
	// (sequence parallelism and selective recomputation), else
	// compute_activation_memory_without_sp's (with its 1.05).
	SequenceParallelPath bool
	// InFlight is the first stage's micro-batches in flight it counts:
	// min(M, P) (P when M is the estimate's M ≥ P).
	InFlight int
	// Block is a whole transformer layer's parameters as it counts them:
	// the attention's and the MLP's matrices and the two norms, no biases.
	Block float64
	// WeightsAndOptimizer and Activations are the report's two figures
	// in bytes, rounded from its float arithmetic.
	WeightsAndOptimizer, Activations int64
	// BeforeOverhead is compute_activation_memory_without_sp's figure
	// before its 1.05 for temporaries (Activations on the sequence-parallel
	// path, which has none).
	BeforeOverhead int64
}

// Total is the report's total.
func (m MegatronMemory) Total() int64 { return m.WeightsAndOptimizer + m.Activations }

// Megatron is Megatron-LM's theoretical memory of s (its shape, micro-batch,
// sequence, t, P, DP, ZeRO stage, sequence parallelism, policy and M).
func (s Setup) Megatron() (MegatronMemory, error) {
	if s.ParamsOnly() {
		return MegatronMemory{}, errors.New("model: Megatron-LM's theoretical memory needs a model's shape, not a parameter count")
	}
	if err := s.Validate(); err != nil {
		return MegatronMemory{}, err
	}
	c := s.Model
	h, a, L := float64(c.Hidden), float64(c.Heads), float64(c.Layers)
	tp, pp, dp := float64(s.TP), float64(s.PP), float64(s.Ranks)
	sq, b := float64(s.Seq), float64(s.Batch)
	multiple := MegatronVocabMultiple * s.TP
	m := MegatronMemory{PaddedVocab: (c.Vocab + multiple - 1) / multiple * multiple, DistributedOptimizer: s.ZeRO >= 1}
	padded := float64(m.PaddedVocab)
	ffn := float64(c.FFNWidth())
	gated := 1.0 // gated_linear_multiplier: 3/2 with --swiglu
	if c.MLP == MLPSwiGLU {
		gated = 3.0 / 2
	}

	// compute_weight_and_optimizer_memory, dense layers of attention
	// (kv_channels = h/a; num_query_groups the key and value heads, a
	// without --group-query-attention), its norms (norm_size: a layer
	// norm's weight and bias, an RMSNorm's weight) and MLP (gated for
	// SwiGLU).
	kv := float64(c.Hidden / c.Heads)
	ratio := kv * a / h
	groups := float64(c.KV())
	attention := 2 * h * h * ((1 + groups/a) * ratio)
	mlp := 2 * h * ffn * gated
	normSize := 2.0 // norm_size: 1 for RMSNorm, which has no bias
	if c.Norm == NormRMS {
		normSize = 1
	}
	norms := 2 * h * normSize
	embedding := h * padded
	finalNorm := normSize * h
	m.Block = attention + mlp + norms
	sharded := (attention + mlp) * L
	replicated := norms*L + finalNorm
	shardedMost := (sharded/pp + embedding) / tp
	replicatedMost := replicated / pp
	if c.Untied && s.PP == 1 {
		shardedMost += embedding / tp
	}
	m.Params = shardedMost + replicatedMost
	m.BytesPerParam = 18
	if m.DistributedOptimizer {
		m.BytesPerParam = 6 + 12/dp
	}
	weights := m.Params * m.BytesPerParam

	// The first stage's activations.
	m.SequenceParallelPath = s.SequenceParallel && s.Checkpoint.Kind == CheckpointSelective
	var act float64
	if m.SequenceParallelPath {
		act = (sq * b * h) * (18 + 4*(ffn/h))
	} else {
		act = sq * b * h * (10 + 24/tp)
	}
	act *= L
	act += 8 * sq * b * pp // the token ids, P micro-batches in flight
	act += sq * b * h * pp // the embedding's dropout mask
	m.InFlight = s.PP
	if s.PP > 1 && s.MicroBatches > 0 {
		act *= min(1, float64(s.MicroBatches)/pp)
		m.InFlight = min(s.MicroBatches, s.PP)
	}
	if m.SequenceParallelPath {
		if s.PP == 1 {
			act += sq * b * h * 4 * (1 + padded/h) // the head's input and the cross entropy
		}
		act /= tp
	} else {
		if s.PP == 1 {
			logits := sq * b * padded
			logits /= tp
			act += (logits + sq*b*h) * 2
		}
	}
	before := act
	if !m.SequenceParallelPath {
		act *= 1.05
	}
	var err error
	if m.WeightsAndOptimizer, err = roundBytes(weights); err == nil {
		m.Activations, err = roundBytes(act)
	}
	if err == nil {
		m.BeforeOverhead, err = roundBytes(before)
	}
	if err == nil && m.WeightsAndOptimizer > math.MaxInt64-m.Activations {
		err = ErrOverflow
	}
	return m, err
}

// roundBytes is a float byte count as an integer, ErrOverflow past int64.
func roundBytes(x float64) (int64, error) {
	r := math.Round(x)
	if !(r >= 0 && r < math.MaxInt64) {
		return 0, fmt.Errorf("%w: %g bytes", ErrOverflow, x)
	}
	return int64(r), nil
}
