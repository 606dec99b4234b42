package model

// The implementation-exact activation formula: what trainmem's own GPT-2
// keeps for the backward pass, tensor by tensor, and when in the step the
// activation memory peaks. It is derived from the ops' documented saved
// tensors (the op_*.go files) and the executor's schedule (package
// train: creation order, every value freed after its last use, checkpoint
// segments recomputed whole before their first backward use), and it equals
// trainmem's simulation and measurement of the `activations` category byte
// for byte (in requested bytes, before the allocator's rounding). It is what
// lets trainmem predict models too large to run, and what explains the
// published formulas' gaps.
//
// Per transformer block, with N = b·s rows, h channels, a heads, e bytes a
// stored value (2 under mixed precision, 4 in fp32) and 4-byte statistics:
//
//	ln1_stats, ln2_stats   2·N·4 each    mean and 1/std of each row (fp32)
//	ln1, ln2               N·h·e each    layer-norm outputs (the linear layers' inputs)
//	qkv                    3·N·h·e       attention input projections (AttnGrad reads q, k, v)
//	attention_probs        a·b·s²·e      causal softmax, one tensor (no dropout)
//	attention_out          N·h·e         the projection's input
//	residual1              N·h·e         the residual stream between the two halves
//	mlp_fc                 4·N·h·e       GELU's input
//	mlp_gelu               4·N·h·e       the projection's input
//	block_output           N·h·e         the residual stream leaving the block
//
// that is 16·N·h·e + a·b·s²·e + 16·N bytes a block; the embedding keeps its
// output (N·h·e) and the token ids (4N), the head its layer norm (N·h·e +
// 8N), the logits (N·V·e) and the targets (4N). Korthikanti et al. count 16
// values a layer too (34·sbh bytes with 16-bit values and dropout masks), but
// two score tensors and a dropout mask: 5·a·s²·b bytes where trainmem keeps
// 2·a·s²·b; the ZeRO paper's 12·h·b·s values leave the scores out.
//
// The peak: without recomputation, activations only grow in the forward pass
// and only shrink in the backward pass, so the peak is the end of the forward
// pass. With recomputation, the candidates are the end of the forward pass
// and the moment each recomputation completes (the backward pass frees the
// head and every later block before then); the formula takes the largest.

const exactSource = "trainmem's own ops (model/op_*.go: the tensors each keeps for backward) at its executor's schedule (train/schedule.go)"

// BlockActivations is one transformer block's kept tensors in trainmem's
// implementation, in bytes, in the order the forward pass allocates them.
func (s Setup) BlockActivations() ([]Term, error) {
	var c calc
	b := s.block(&c)
	return b.terms(), c.err()
}

// block is one transformer block's kept tensors, by name.
type block struct {
	ln1Stats, ln1, qkv, probs, attnOut, residual1, ln2Stats, ln2, fc, gelu, output Term
}

func (b block) terms() []Term {
	return []Term{b.ln1Stats, b.ln1, b.qkv, b.probs, b.attnOut, b.residual1, b.ln2Stats, b.ln2, b.fc, b.gelu, b.output}
}

func (s Setup) block(c *calc) block {
	m := s.Model
	N := c.mul(int64(s.Batch), int64(s.Seq))
	e := s.Precision.Size()
	nh := c.mul(N, int64(m.Hidden), e)
	stats := func(name string) Term {
		return termOf(c, name, Part{Kind: Statistics, Count: 1, Layers: 1, Bytes: s.normStatsBytes(c, N)})
	}
	values := func(name string, n int64) Term {
		return termOf(c, name, Part{Kind: LayerValues, Count: n, Layers: 1, Bytes: c.mul(n, nh)})
	}
	return block{
		ln1Stats: stats("ln1_stats"), ln1: values("ln1", 1), qkv: values("qkv", 3),
		probs: termOf(c, "attention_probs", Part{Kind: Scores, Count: 1, Layers: 1,
			Bytes: c.mul(int64(m.Heads), int64(s.Batch), int64(s.Seq), int64(s.Seq), e)}),
		attnOut: values("attention_out", 1), residual1: values("residual1", 1),
		ln2Stats: stats("ln2_stats"), ln2: values("ln2", 1),
		fc: values("mlp_fc", 4), gelu: values("mlp_gelu", 4), output: values("block_output", 1),
	}
}

// normStatsBytes is what a norm of N rows keeps as its statistics, from
// the norm's statistic op (StatisticLen) at 4 bytes a value.
func (s Setup) normStatsBytes(c *calc, N int64) int64 {
	return c.mul(StatisticLen(&LayerNormStatsOp{N: int(N), C: s.Model.Hidden}), 4)
}

// exact is the implementation-exact activation peak and its terms at the
// moment of the peak. It needs one device's schedule: no tensor or pipeline
// parallelism (data-parallel ranks and ZeRO do not change activations).
func (s Setup) exact(c *calc) (Activations, bool) {
	if s.TP != 1 || s.PP != 1 {
		return Activations{}, false
	}
	m := s.Model
	L := int64(m.Layers)
	N := c.mul(int64(s.Batch), int64(s.Seq))
	e := s.Precision.Size()
	nh := c.mul(N, int64(m.Hidden), e)
	ids := func(name string) Term { return termOf(c, name, Part{Kind: TokenIDs, Count: 1, Bytes: c.mul(4, N)}) }
	b := s.block(c)
	all := b.terms()
	var rest []Term // the block but for its probabilities
	for _, t := range all {
		if t.Name != b.probs.Name {
			rest = append(rest, t)
		}
	}
	withoutProbs := termOf(c, "block").plus(c, "block", rest...)
	withoutOutput := termOf(c, "block").plus(c, "block", all[:len(all)-1]...) // the output is the block's last tensor
	head := []Term{
		termOf(c, "final_layer_norm", Part{Kind: Statistics, Count: 1, Bytes: s.normStatsBytes(c, N)}, Part{Kind: Outside, Count: 1, Bytes: nh}),
		termOf(c, "logits", Part{Kind: Outside, Count: 1, Bytes: c.mul(N, int64(m.Vocab), e)}),
		ids("targets"),
	}
	act := Activations{Formula: Exact, Source: exactSource}

	// Candidates for the peak, each a list of terms.
	var best []Term
	var bestAt Moment
	consider := func(at Moment, ts ...[]Term) {
		var all []Term
		for _, t := range ts {
			all = append(all, t...)
		}
		if tot := sumTerms(all, c); best == nil || tot > sumTerms(best, c) {
			best, bestAt = all, at
		}
	}
	k := int64(s.Checkpoint.Segment(m.Layers))
	embedKind := Outside
	if k > 0 {
		embedKind = Checkpoints // segment 0's input
	}
	embed := []Term{ids("tokens"), termOf(c, "embedding", Part{Kind: embedKind, Count: 1, Bytes: nh})}
	checkpoints := func(n int64) Term {
		return termOf(c, "checkpoints", Part{Kind: Checkpoints, Count: n, Bytes: c.mul(n, nh)})
	}
	switch {
	case s.Checkpoint.Kind == CheckpointSelective:
		consider(Moment{Kind: EndOfForward}, embed, []Term{withoutProbs.times(c, L, "blocks_without_probs")}, head)
		// Block L-1's probabilities recomputed: earlier blocks whole but
		// for their probabilities, this block's layer norm 1 and qkv.
		recomputed := b.probs.times(c, 1, "recompute_probs")
		consider(Moment{Kind: RecomputedProbs, First: int(L - 1), Last: int(L - 1)}, embed,
			[]Term{withoutProbs.times(c, L-1, "blocks_without_probs"), b.ln1Stats, b.ln1, b.qkv, recomputed})
	case k > 0:
		segs := ceilDiv(L, k)
		consider(Moment{Kind: EndOfForward}, embed, []Term{checkpoints(segs)}, head)
		// Segment j (blocks jk .. min((j+1)k, L)-1) recomputed: the
		// checkpoints of segments 0..j-1 are still alive; the segment's
		// blocks whole but for its last block's output, a checkpoint
		// already freed.
		for j := segs - 1; j >= 0 && j >= segs-2; j-- {
			kj := min(k, L-j*k)
			segment := withoutOutput.times(c, kj, "recompute_segment").plus(c, "recompute_segment", b.output.times(c, kj-1, ""))
			consider(Moment{Kind: RecomputedSegment, First: int(j * k), Last: int(j*k + kj - 1)}, embed,
				[]Term{checkpoints(j), segment})
		}
	default:
		ts := make([]Term, len(all))
		for i, t := range all {
			ts[i] = t.times(c, L, t.Name)
		}
		consider(Moment{Kind: EndOfForward}, embed, ts, head)
	}
	act.Terms, act.At = best, bestAt
	act.Total = sumTerms(best, c)
	return act, true
}
