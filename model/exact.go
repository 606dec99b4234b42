package model

import (
	"fmt"
	"strings"
)

// The implementation-exact activation formula: what trainmem's own GPT-2
// keeps for the backward pass, tensor by tensor, and when in the step the
// activation memory peaks. It is derived from the forward dataflow
// (dataflow.go: which values the backward ops made by the ops' SymDiff
// read, their sizes from the ops' signatures) and the executor's schedule
// (package train: creation order, every value freed after its last use,
// checkpoint segments recomputed whole before their first backward use),
// and it equals
// trainmem's simulation and measurement of the `activations` category byte
// for byte (in requested bytes, before the allocator's rounding). It is what
// lets trainmem predict models too large to run, and what explains the
// published formulas' gaps.
//
// What the derivation gives a transformer block, with N = b·s rows, h channels, a heads, e bytes a
// stored value (2 under mixed precision, 4 in fp32) and 4-byte statistics:
//
//	ln1_stats, ln2_stats   2·N·4 each    mean and 1/std of each row (fp32)
//	ln1, ln2               N·h·e each    layer-norm outputs (the linear layers' inputs)
//	qkv                    3·N·h·e       attention input projections (its backward op reads q, k, v)
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

// TrainmemActivations is the implementation-exact formula's activations of
// c's rank: of a setup whose model is a part (a tensor-parallel rank's, a
// pipeline stage's, Checked.TensorRank and StageRank) the part's, else as
// the estimate's trainmem formula.
func (c Checked) TrainmemActivations() (Activations, error) {
	if err := c.Err(); err != nil {
		return Activations{}, err
	}
	var k calc
	a, ok, err := c.s.exact(&k)
	switch {
	case err != nil:
		return Activations{}, err
	case !ok:
		return Activations{}, fmt.Errorf("model: the %s formula counts one pipeline stage's activations: give a stage's setup (Checked.StageRank)", Exact)
	}
	return a, k.err()
}

const exactSource = "trainmem's own ops (model/op_*.go: the tensors each keeps for backward) at its executor's schedule (train/schedule.go)"

// KeptTensors is what trainmem's implementation keeps for the backward
// pass, section by section, in bytes, in the order the forward pass
// allocates them: the embedding's (with the token ids), one transformer
// block's, and the head's (with the targets).
type KeptTensors struct{ Embed, Block, Head []Term }

// KeptTensors is what s's forward pass keeps for the backward pass.
func (s Setup) KeptTensors() (KeptTensors, error) {
	var c calc
	f, err := s.flowTerms(&c)
	if err != nil {
		return KeptTensors{}, err
	}
	return KeptTensors{Embed: f.embed, Block: f.block, Head: f.head}, c.err()
}

// flowTerms is what each section of the dataflow keeps for the backward
// pass, as terms in forward order (dataflow.go): which values, from the
// graph's backward nodes (keptOf), and their bytes, from the ops'
// signatures at s's shape. The graph's inputs are terms of the section
// whose step reads them, before that step's own.
type flowTerms struct {
	embed, block, head []Term
	// first is the first block's terms: the block's, or fewer (kept.first).
	first []Term
	// output is the block's output term (its last step's), the input of
	// the next block: a segment's checkpoint. inputKept is whether the
	// first block's backward pass reads its input (the embedding's output,
	// a later stage's input).
	output    string
	inputKept bool
	// tokens is whether the backward pass reads the token ids.
	tokens bool
}

func (s Setup) flowTerms(c *calc) (flowTerms, error) {
	m := s.Model
	flow, err := flowOf(m, s.Batch, s.Seq)
	if err != nil {
		return flowTerms{}, err
	}
	k, err := keptOf(m)
	if err != nil {
		return flowTerms{}, err
	}
	N := c.mul(int64(s.Batch), int64(s.Seq))
	nh := c.mul(N, int64(m.Hidden))
	e := s.Precision.Size()
	ids := Part{Kind: TokenIDs, Count: 1, Bytes: c.mul(N, 4)}
	terms := func(steps []step, kept []bool, layers int64) []Term {
		var ts []Term
		var tokensDone, targetsDone bool // an input is kept once, however many steps read it
		add := func(name string, p Part) {
			if n := len(ts); n > 0 && ts[n-1].Name == name {
				ts[n-1] = ts[n-1].plus(c, name, termOf(c, name, p))
				return
			}
			ts = append(ts, termOf(c, name, p))
		}
		for i, st := range steps {
			for _, a := range st.args {
				switch {
				case a.kind == refTokens && k.tokens && !tokensDone:
					add(tokensTerm, ids)
					tokensDone = true
				case a.kind == refTargets && k.targets && !targetsDone:
					add(targetsTerm, ids)
					targetsDone = true
				}
			}
			if !kept[i] {
				continue
			}
			o := st.op()
			elems := int64(1)
			for _, d := range o.signature().out {
				elems = c.mul(elems, int64(d))
			}
			p := Part{Kind: Outside, Count: 1, Bytes: c.mul(elems, e)}
			switch {
			case IsStatistic(o):
				p = Part{Kind: Statistics, Count: 1, Bytes: c.mul(elems, 4)}
			case IsDroppedBySelective(o):
				p.Kind = Scores
			case strings.HasPrefix(st.term, LoRATermPrefix):
				p.Kind = Adapters
			case layers > 0:
				// s·b·h tensors: a wider one counts as several.
				p.Kind, p.Count = LayerValues, 1
				if nh > 0 && elems%nh == 0 {
					p.Count = elems / nh
				}
			}
			if layers > 0 {
				p.Layers = layers
			}
			add(st.term, p)
		}
		return ts
	}
	return flowTerms{
		embed: terms(flow.embed, k.embed, 0), block: terms(flow.block, k.block, 1), head: terms(flow.head, k.head, 0),
		first:     terms(flow.block, k.first, 1),
		output:    flow.block[len(flow.block)-1].term,
		inputKept: k.embed[len(k.embed)-1],
		tokens:    k.tokens,
	}, nil
}

// exact is the implementation-exact activation peak and its terms at the
// moment of the peak (data-parallel ranks and ZeRO do not change
// activations). With tensor parallelism it is a rank's, of its part of the
// model (every part is alike: the split divides the heads evenly). With
// pipeline stages it is one stage's, of a setup whose model is the stage
// (Checked.StageRank): a stage but the first keeps its received input
// where the first keeps the embedding's, a stage but the last no head and
// not its last block's output (sent on, not read by its backward pass),
// and a stage that holds F micro-batches in flight peaks with F-1 of them
// whole (their end of the forward pass) beside one micro-batch's peak: in
// both schedules a backward pass (and its recomputation) runs beside the
// others in flight, and the last forward pass before it completes them.
func (s Setup) exact(c *calc) (Activations, bool, error) {
	if s.PP != 1 && s.Model.Stage.Size != s.PP {
		return Activations{}, false, nil // the whole of several stages: each stage has its own
	}
	if s.TP > 1 && s.Model.Tensor.Size != s.TP {
		if s.SequenceParallel && (s.Batch*s.Seq)%s.TP != 0 {
			return Activations{}, false, nil // trainmem runs no such split: its rows are b·s/t each
		}
		part, err := s.Model.TensorRank(s.TP, 0)
		if err != nil {
			return Activations{}, false, err
		}
		part.Tensor.Sequence = s.SequenceParallel
		s.Model = part
	}
	m := s.Model
	// Dead blocks (frozen, nothing trained below them) keep nothing for
	// the backward pass, which never reaches them: the blocks above them
	// count as a later stage's do, their input the last dead block's
	// output, and checkpointing segments them alone.
	dead := m.DeadBlocks()
	L := int64(m.Layers - dead)
	first := m.First() && dead == 0
	f, err := s.flowTerms(c)
	if err != nil {
		return Activations{}, false, err
	}
	all := f.block
	// The block but for what selective recomputation drops (the
	// probabilities), and the block but for its output (a checkpoint when
	// segments are recomputed); the tensors the dropped ones are
	// recomputed from (those before them), and the dropped ones.
	type split struct{ withoutProbs, withoutOutput, beforeProbs, probs []Term }
	splitOf := func(ts []Term) (s split) {
		for _, t := range ts {
			if t.Name != f.output {
				s.withoutOutput = append(s.withoutOutput, t)
			}
			if t.has(Scores) {
				s.probs = append(s.probs, t)
				continue
			}
			s.withoutProbs = append(s.withoutProbs, t)
			if len(s.probs) == 0 {
				s.beforeProbs = append(s.beforeProbs, t)
			}
		}
		return s
	}
	sp := splitOf(all)
	withoutProbs, withoutOutput, beforeProbs, probs := sp.withoutProbs, sp.withoutOutput, sp.beforeProbs, sp.probs
	// The first block (of those the backward pass reaches) may keep less
	// than the others (kept.first: a LoRA's, whose frozen ln1 has no
	// backward): it is counted on its own where it differs.
	fsp := splitOf(f.first)
	differs := len(f.first) != len(all)
	inFirst := func(name string) bool {
		for _, t := range f.first {
			if t.Name == name {
				return true
			}
		}
		return false
	}
	var output Term
	for _, t := range all {
		if t.Name == f.output {
			output = t
		}
	}
	block := termOf(c, "block")
	head := f.head
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
	k := int64(s.Checkpoint.Segment(int(L)))
	embedKind := Outside
	if k > 0 {
		embedKind = Checkpoints // segment 0's input
	}
	var embed []Term
	for _, t := range f.embed {
		for i, p := range t.Parts {
			if p.Kind == Outside {
				t.Parts[i].Kind = embedKind
			}
		}
		embed = append(embed, t)
	}
	if !first {
		// A later stage's input, received: the previous stage's last
		// block's output, kept as the embedding's would be (when the first
		// block's backward pass reads it); above dead blocks, the last
		// one's output.
		name := "stage_input"
		if dead > 0 {
			name = "dead_blocks_output"
		}
		embed = nil
		if f.inputKept {
			embed = []Term{termOf(c, name, Part{Kind: embedKind, Count: 1, Bytes: output.Bytes})}
		}
	}
	if !m.Last() {
		head = nil
	}
	embed0 := embed // what segment 0's recomputation holds of the embedding's
	if first && k > 0 && !f.inputKept && !f.tokens {
		// Segment 0's input, the embedding's output, is read by no
		// backward op (a LoRA's first block): its recomputation makes it
		// again from the token ids, which are kept for it until then.
		embed = append(embed0[:len(embed0):len(embed0)], termOf(c, tokensTerm, Part{Kind: TokenIDs, Count: 1, Bytes: c.mul(int64(s.Batch), int64(s.Seq), 4)}))
	}
	// sent is how many block outputs the stage does not keep: its last
	// block's, on a stage before the last.
	sent := int64(0)
	if !m.Last() {
		sent = 1
	}
	// A checkpoint is a block's output: N·h values, or the rank's N/t rows
	// of them with sequence parallelism.
	checkpoints := func(n int64) Term {
		return termOf(c, "checkpoints", Part{Kind: Checkpoints, Count: n, Bytes: c.mul(n, output.Bytes)})
	}
	var end []Term // the end of the forward pass: what a micro-batch in flight holds
	endOfForward := func(ts ...[]Term) {
		for _, t := range ts {
			end = append(end, t...)
		}
		consider(Moment{Kind: EndOfForward}, ts...)
	}
	switch {
	case L == 0:
		// Every block dead: the policy has nothing to recompute.
		endOfForward(embed, head)
	case s.Checkpoint.Kind == CheckpointSelective && differs:
		// No pipeline stages with a fine-tune (Validate): nothing is sent.
		kept, keptFirst := block.plus(c, "block", withoutProbs...), block.plus(c, "block", fsp.withoutProbs...)
		endOfForward(embed, []Term{keptFirst.times(c, 1, "first_block_without_probs"), kept.times(c, L-1, "blocks_without_probs")}, head)
		// Block L-1's probabilities recomputed beside the blocks before it.
		earlier := []Term{keptFirst.times(c, 1, "first_block_without_probs"), kept.times(c, L-2, "blocks_without_probs")}
		before, dropped := beforeProbs, probs
		if L == 1 {
			earlier, before, dropped = nil, fsp.beforeProbs, fsp.probs
		}
		recomputed := block.plus(c, "", dropped...).times(c, 1, "recompute_probs")
		consider(Moment{Kind: RecomputedProbs, First: int(L - 1), Last: int(L - 1)}, embed, earlier, before, []Term{recomputed})
	case s.Checkpoint.Kind == CheckpointSelective:
		kept := block.plus(c, "block", withoutProbs...)
		blocks := []Term{kept.times(c, L, "blocks_without_probs")}
		if sent > 0 {
			var keptLast []Term
			for _, t := range withoutProbs {
				if t.Name != f.output {
					keptLast = append(keptLast, t)
				}
			}
			blocks = []Term{kept.times(c, L-1, "blocks_without_probs"), block.plus(c, "", keptLast...).times(c, 1, "last_block_without_probs")}
		}
		endOfForward(embed, blocks, head)
		// Block L-1's probabilities recomputed: earlier blocks whole but
		// for their probabilities, this block's tensors they are
		// recomputed from (its layer norm 1 and qkv).
		recomputed := block.plus(c, "", probs...).times(c, 1, "recompute_probs")
		consider(Moment{Kind: RecomputedProbs, First: int(L - 1), Last: int(L - 1)}, embed,
			[]Term{kept.times(c, L-1, "blocks_without_probs")}, beforeProbs, []Term{recomputed})
	case k > 0:
		segs := ceilDiv(L, k)
		endOfForward(embed, []Term{checkpoints(segs - sent)}, head)
		// Segment j (blocks jk .. min((j+1)k, L)-1) recomputed: the
		// checkpoints of segments 0..j-1 are still alive; the segment's
		// blocks whole but for its last block's output, a checkpoint
		// already freed.
		for j := segs - 1; j >= 0 && j >= segs-2; j-- {
			kj := min(k, L-j*k)
			segment := block.plus(c, "block", withoutOutput...).times(c, kj, "recompute_segment").plus(c, "recompute_segment", output.times(c, kj-1, ""))
			if j == 0 && differs {
				segment = block.plus(c, "block", fsp.withoutOutput...).times(c, 1, "").
					plus(c, "recompute_segment", block.plus(c, "block", withoutOutput...).times(c, kj-1, ""), output.times(c, kj-1, ""))
			}
			at := embed
			if j == 0 {
				at = embed0
			}
			consider(Moment{Kind: RecomputedSegment, First: int(j * k), Last: int(j*k + kj - 1)}, at,
				[]Term{checkpoints(j), segment})
		}
	default:
		ts := make([]Term, len(all))
		for i, t := range all {
			n := L
			if t.Name == f.output {
				n -= sent
			}
			if !inFirst(t.Name) {
				n-- // a term the first block does not keep
			}
			ts[i] = t.times(c, n, t.Name)
		}
		endOfForward(embed, ts, head)
	}
	if m.Stage.Size > 1 {
		if f := s.inFlight(m.Stage.Rank); f > 1 {
			others := termOf(c, "").plus(c, "", end...).times(c, f-1, "micro_batches_in_flight")
			best = append([]Term{others}, best...)
		}
	}
	act.Terms, act.At = best, bestAt
	act.Total = sumTerms(best, c)
	return act, true, nil
}
