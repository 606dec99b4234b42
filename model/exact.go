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

// Exact is the name of the implementation-exact formula, the key of the
// "activations" object in trainmem's JSON.
const Exact = "trainmem"

const exactSource = "trainmem's own ops (model/op_*.go: the tensors each keeps for backward) at its executor's schedule (train/schedule.go)"

// BlockActivations is one transformer block's kept tensors in trainmem's
// implementation, in bytes, in the order the forward pass allocates them.
func (s Setup) BlockActivations() ([]Term, error) {
	var c calc
	ts := s.blockActivations(&c)
	return ts, c.err()
}

func (s Setup) blockActivations(c *calc) []Term {
	m := s.Model
	N := c.mul(int64(s.Batch), int64(s.Seq))
	e := s.Precision.Size()
	stats := c.mul(2, N, 4)
	nh := c.mul(N, int64(m.Hidden), e)
	probs := c.mul(int64(m.Heads), int64(s.Batch), int64(s.Seq), int64(s.Seq), e)
	return []Term{
		{"ln1_stats", stats}, {"ln1", nh}, {"qkv", c.mul(3, nh)}, {"attention_probs", probs},
		{"attention_out", nh}, {"residual1", nh}, {"ln2_stats", stats}, {"ln2", nh},
		{"mlp_fc", c.mul(4, nh)}, {"mlp_gelu", c.mul(4, nh)}, {"block_output", nh},
	}
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
	ids := c.mul(4, N)
	block := s.blockActivations(c)
	get := func(name string) int64 {
		for _, t := range block {
			if t.Name == name {
				return t.Bytes
			}
		}
		panic("model: no block term " + name)
	}
	blockTotal := sumTerms(block, c)
	head := []Term{{"final_layer_norm", c.add(c.mul(2, N, 4), nh)}, {"logits", c.mul(N, int64(m.Vocab), e)}, {"targets", ids}}
	act := Activations{Formula: Exact, Source: exactSource}

	// Candidates for the peak, each a list of terms.
	var best []Term
	var bestAt Moment
	consider := func(at Moment, ts []Term) {
		if tot := sumTerms(ts, c); best == nil || tot > sumTerms(best, c) {
			best, bestAt = ts, at
		}
	}
	embed := []Term{{"tokens", ids}, {"embedding", nh}}
	switch k := int64(s.Checkpoint.Segment(m.Layers)); {
	case s.Checkpoint.Kind == CheckpointSelective:
		probs := get("attention_probs")
		consider(Moment{Kind: EndOfForward}, append(append(append([]Term{}, embed...),
			Term{"blocks_without_probs", c.mul(L, blockTotal-probs)}), head...))
		// Block L-1's probabilities recomputed: earlier blocks whole but
		// for their probabilities, this block's layer norm 1 and qkv.
		consider(Moment{Kind: RecomputedProbs, First: int(L - 1), Last: int(L - 1)}, append(append([]Term{}, embed...),
			Term{"blocks_without_probs", c.mul(L-1, blockTotal-probs)},
			Term{"ln1_stats", get("ln1_stats")}, Term{"ln1", get("ln1")}, Term{"qkv", get("qkv")},
			Term{"recompute_probs", probs}))
	case k > 0:
		segs := ceilDiv(L, k)
		consider(Moment{Kind: EndOfForward}, append(append(append([]Term{}, embed...),
			Term{"checkpoints", c.mul(segs, nh)}), head...))
		// Segment j (blocks jk .. min((j+1)k, L)-1) recomputed: the
		// checkpoints of segments 0..j-1 are still alive; the segment's
		// blocks whole but for its last block's output, a checkpoint
		// already freed.
		for j := segs - 1; j >= 0 && j >= segs-2; j-- {
			kj := min(k, L-j*k)
			consider(Moment{Kind: RecomputedSegment, First: int(j * k), Last: int(j*k + kj - 1)}, append(append([]Term{}, embed...),
				Term{"checkpoints", c.mul(j, nh)},
				Term{"recompute_segment", c.add(c.mul(kj, blockTotal-nh), c.mul(kj-1, nh))}))
		}
	default:
		ts := append([]Term{}, embed...)
		for _, t := range block {
			ts = append(ts, Term{t.Name, c.mul(L, t.Bytes)})
		}
		consider(Moment{Kind: EndOfForward}, append(ts, head...))
	}
	act.Terms, act.At = best, bestAt
	act.Total = sumTerms(best, c)
	return act, true
}
