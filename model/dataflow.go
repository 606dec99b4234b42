package model

// The forward dataflow of trainmem's GPT-2, described once. Build (graph.go)
// makes the graph's forward nodes from it, section by section: the
// embedding, L transformer blocks, the head. The implementation-exact
// formula (exact.go) counts from the same description what the backward
// pass keeps: which values, from a two-layer graph of the same structure
// (the arguments of the backward nodes the ops' SymDiff makes, so the op
// files alone say what each op keeps), and their sizes from the ops'
// signatures at the setup's own shape. A new kind of block is a new
// description here; neither Build nor the formula lists its tensors.

import (
	"fmt"
	"strings"
	"sync"

	"gorgonia.org/tensor"
)

// dataflow is the forward pass as three sections; each section's value is
// its last step's output (the embedding's and each block's the residual
// stream, the head's the loss).
type dataflow struct {
	embed, block, head []step
}

// step is one forward op: its node's name within its section (a block's
// nodes are named "h<l>."+name in the graph), the exact formula's name for
// its output where the backward pass keeps it (steps of one name make one
// term, in parts), a maker of a fresh op for one node (every node binds an
// op of its own), and its arguments in the op's order.
type step struct {
	name string
	term string
	op   func() op
	args []ref
}

// ref is a step's argument.
type ref struct {
	kind refKind
	name string // a parameter's name within its section (block parameters are "h<l>."+name)
	at   int    // the index of an earlier step of the section
}

type refKind uint8

const (
	refValue   refKind = iota // an earlier step's output
	refStream                 // the section's input: the residual stream
	refParam                  // a parameter
	refTokens                 // the token ids
	refTargets                // the next-token targets
)

// Terms of the graph's inputs where the backward pass keeps them.
const (
	tokensTerm  = "tokens"
	targetsTerm = "targets"
)

// LoRATermPrefix begins the terms of a LoRA's down projections, x·Aᵀ
// (lora_attn_qkv, ...): the exact formula's Adapters.
const LoRATermPrefix = "lora_"

// sectionOf builds a section from steps whose value arguments name earlier
// steps: "x" is the section's input, "tokens" and "targets" the graph's
// inputs, "@name" a parameter, any other name an earlier step.
type sectionOf struct {
	steps []step
	index map[string]int
	err   error
}

func (s *sectionOf) add(name, term string, mk func() op, args ...string) {
	st := step{name: name, term: term, op: mk}
	for _, a := range args {
		switch {
		case a == "x":
			st.args = append(st.args, ref{kind: refStream})
		case a == "tokens":
			st.args = append(st.args, ref{kind: refTokens})
		case a == "targets":
			st.args = append(st.args, ref{kind: refTargets})
		case len(a) > 1 && a[0] == '@':
			st.args = append(st.args, ref{kind: refParam, name: a[1:]})
		default:
			i, ok := s.index[a]
			if !ok && s.err == nil {
				s.err = fmt.Errorf("model: dataflow step %s reads %q, which no earlier step makes", name, a)
			}
			st.args = append(st.args, ref{kind: refValue, at: i})
		}
	}
	if s.index == nil {
		s.index = map[string]int{}
	}
	s.index[name] = len(s.steps)
	s.steps = append(s.steps, st)
}

// flowOf is the forward dataflow of cfg for a batch of B sequences of T
// tokens: GPT-2's pre-LN transformer. x = wte[tokens] + wpe; per block
// x += attn.proj(attention(attn.qkv(ln1(x)))), x += mlp.proj(gelu(
// mlp.fc(ln2(x)))); then lnf, logits = lnf·wteᵀ (or lm_head.wᵀ when untied),
// loss = mean cross-entropy. The architecture's choices (Config.Norm,
// NoBias, MLP, FFN) pick the norms' ops, the linear layers' biases and the
// MLP: SwiGLU's mlp.fc makes the gate and the up projection, each row
// [gate | up], and mlp.swiglu gates one by the other. Config.Attention
// picks the attention's ops: attn.probs and attn.out (the probabilities
// kept), or flash attention's attn.lse and attn.out (the row log-sum-exp
// kept, and the output, which its backward reads beside qkv).
//
// A tensor-parallel rank's (cfg.Tensor, tensor.go) blocks hold its heads
// (NH/t of them, C/t channels of q and the attention output, KV/t key and
// value heads) and F/t of the MLP's channels, between column-parallel and row-parallel layers.
// With sequence parallelism (cfg.Tensor.Sequence) the residual stream, the
// layer norms and the additions hold the rank's N/t rows.
func flowOf(cfg Config, B, T int) (dataflow, error) {
	N, C, V, NH := B*T, cfg.Hidden, cfg.Vocab, cfg.Heads
	tp := cfg.Tensor.size()
	Cp, NHp := C/tp, NH/tp // the rank's channels and heads
	KVp := cfg.KV() / tp   // the rank's key and value heads
	heads := AttentionShape{B: B, T: T, C: Cp, NH: NHp, KV: KVp}
	W := heads.QKVWidth()
	column, row := NotParallel, NotParallel
	if tp > 1 {
		column, row = ColumnParallel, RowParallel
	}
	seq := cfg.Tensor.seq()
	if N%seq != 0 {
		return dataflow{}, fmt.Errorf("model: sequence parallelism over %d ranks splits the b·s = %d rows of a micro-batch, which %d does not divide (valid: a batch and sequence whose product it divides)", seq, N, seq)
	}
	Ns := N / seq // the rows of the residual stream on this rank
	spSeq := 0    // the linear layers' Seq
	if seq > 1 {
		spSeq = seq
	}
	var embed, block, head sectionOf
	eps := float32(cfg.Eps())
	layerNorm := func(s *sectionOf, name, term, statsTerm, x string) {
		s.add(name+".stats", statsTerm, func() op { return &NormStatsOp{Kind: cfg.Norm, N: Ns, C: C, Eps: eps} }, x)
		args := []string{x, name + ".stats", "@" + name + ".w"}
		if cfg.Norm.Bias() {
			args = append(args, "@"+name+".b")
		}
		s.add(name, term, func() op { return &NormOp{Kind: cfg.Norm, N: Ns, C: C, Reduce: seq > 1} }, args...)
	}
	bias := !cfg.NoBias
	linear := func(s *sectionOf, name, term, x string, in, out int, bias bool, w string, par Parallel) {
		args := []string{x, "@" + w}
		if bias {
			args = append(args, "@"+name+".b")
		}
		sq := 0
		if par != NotParallel {
			sq = spSeq
		}
		mk := func() op { return &LinearOp{N: N, In: in, Out: out, Bias: bias, Parallel: par, Seq: sq} }
		a, adapted := cfg.adapterOf(name)
		if s != &block || !adapted {
			s.add(name, term, mk, args...)
			return
		}
		// A LoRA (lora.go): the frozen layer's output, the adapters' down
		// projections u = x·Aᵀ (kept for B's gradient), and the up
		// projections added into the adapted columns, under the layer's
		// own name.
		r := cfg.LoRA.Rank
		s.add(name+".base", "", mk, args...)
		s.add(name+".lora_a", LoRATermPrefix+strings.ReplaceAll(name, ".", "_"), func() op { return &LinearOp{N: N, In: in, Out: len(a.parts) * r} }, x, "@"+name+".lora_a")
		s.add(name, term, func() op {
			return &LoRAUpOp{LoRAShape: LoRAShape{N: N, Out: out, R: r, Parts: a.parts, Scale: cfg.LoRA.Scale()}}
		}, name+".base", name+".lora_a", "@"+name+".lora_b")
	}

	rotary := cfg.Positions == PosRoPE
	embedArgs := []string{"tokens", "@wte", "@wpe"}
	if rotary {
		embedArgs = embedArgs[:2]
	}
	if tp == 1 {
		embed.add("embed", "embedding", func() op { return &EmbeddingOp{B: B, T: T, C: C, V: V, Ctx: cfg.learnedPositions(), Rotary: rotary} }, embedArgs...)
	} else {
		// Vocabulary-parallel: the rank's rows, the positions added on
		// rank 0 alone, the ranks' lookups summed.
		lo, n := cfg.Tensor.VocabRows(V)
		embed.add("embed", "embedding", func() op {
			return &EmbeddingOp{B: B, T: T, C: C, V: n, Ctx: cfg.learnedPositions(), Lo: lo, Vocab: V, NoPositions: cfg.Tensor.Rank != 0, Seq: spSeq, Rotary: rotary}
		}, embedArgs...)
	}

	b := &block
	layerNorm(b, "ln1", "ln1", "ln1_stats", "x")
	qkv := "attn.qkv" // what the attention reads: q, k and v, the rotated ones with rotary positions
	if rotary {
		// The rotation's backward reads nothing: the projection's output
		// dies, the rotated q, k and v are what the attention keeps.
		linear(b, "attn.qkv", "", "ln1", C, W, bias, "attn.qkv.w", column)
		theta := float32(cfg.Theta())
		b.add("attn.rope", "qkv", func() op { return &RoPEOp{AttentionShape: heads, Theta: theta} }, "attn.qkv")
		qkv = "attn.rope"
	} else {
		linear(b, "attn.qkv", "qkv", "ln1", C, W, bias, "attn.qkv.w", column)
	}
	if cfg.Attention == AttentionFlash {
		b.add("attn.lse", "attention_lse", func() op { return &FlashAttentionStatsOp{AttentionShape: heads} }, qkv)
		b.add("attn.out", "attention_out", func() op { return &FlashAttentionOutOp{AttentionShape: heads} }, qkv, "attn.lse")
	} else {
		b.add("attn.probs", "attention_probs", func() op { return &AttentionProbsOp{AttentionShape: heads} }, qkv)
		b.add("attn.out", "attention_out", func() op { return &AttentionOutOp{AttentionShape: heads} }, qkv, "attn.probs")
	}
	linear(b, "attn.proj", "", "attn.out", Cp, C, bias, "attn.proj.w", row)
	b.add("res1", "residual1", func() op { return &AddOp{N: Ns, C: C} }, "x", "attn.proj")
	layerNorm(b, "ln2", "ln2", "ln2_stats", "res1")
	Fp := cfg.FFNWidth() / tp // the rank's channels of the MLP
	if cfg.MLP == MLPSwiGLU {
		linear(b, "mlp.fc", "mlp_fc", "ln2", C, 2*Fp, bias, "mlp.fc.w", column) // each row [gate | up]
		b.add("mlp.swiglu", "mlp_swiglu", func() op { return &SwiGLUOp{N: N, F: Fp} }, "mlp.fc")
		linear(b, "mlp.proj", "", "mlp.swiglu", Fp, C, bias, "mlp.proj.w", row)
	} else {
		linear(b, "mlp.fc", "mlp_fc", "ln2", C, Fp, bias, "mlp.fc.w", column)
		b.add("mlp.gelu", "mlp_gelu", func() op { return &GELUOp{N: N, C: Fp} }, "mlp.fc")
		linear(b, "mlp.proj", "", "mlp.gelu", Fp, C, bias, "mlp.proj.w", row)
	}
	b.add("res2", "block_output", func() op { return &AddOp{N: Ns, C: C} }, "res1", "mlp.proj")

	layerNorm(&head, "lnf", "final_layer_norm", "final_layer_norm", "x")
	w := "wte"
	if cfg.Untied {
		w = "lm_head.w"
	}
	if tp == 1 {
		linear(&head, "logits", "logits", "lnf", C, V, false, w, NotParallel)
		head.add("loss", "", func() op { return &CrossEntropyOp{N: N, V: V} }, "logits", "targets")
	} else {
		// The rank's columns of the logits (its rows of the head), the
		// cross entropy from the rows' statistics reduced over the ranks.
		lo, n := cfg.Tensor.VocabRows(V)
		linear(&head, "logits", "logits", "lnf", C, n, false, w, ColumnParallel)
		head.add("loss.stats", "cross_entropy_stats", func() op { return &CrossEntropyStatsOp{N: N, V: n, Lo: lo, Vocab: V} }, "logits", "targets")
		head.add("loss", "", func() op { return &CrossEntropyPartOp{N: N, V: n, Lo: lo, Vocab: V} }, "logits", "targets", "loss.stats")
	}

	for _, s := range []*sectionOf{&embed, &block, &head} {
		if s.err != nil {
			return dataflow{}, s.err
		}
	}
	return dataflow{embed: embed.steps, block: block.steps, head: head.steps}, nil
}

// kept is which values of a dataflow the backward pass reads, so that the
// forward pass keeps them until then: a flag a step of each section, and
// the graph's inputs.
type kept struct {
	embed, block, head []bool
	// first is the first block's, which differs from the others' where
	// its input needs no gradient and a frozen norm reads it (a LoRA's
	// first block: its ln1 has no backward, so its statistics are not
	// kept).
	first           []bool
	tokens, targets bool
}

// structureOf is the smallest config with cfg's structure: what decides
// which ops a graph has and how they connect, not how large they are.
func structureOf(cfg Config) Config {
	sc := Config{Name: "structure", Layers: 3, Hidden: 8, Heads: 2, Vocab: 16, Context: 4, Untied: cfg.Untied, Norm: cfg.Norm, NoBias: cfg.NoBias, MLP: cfg.MLP, Positions: cfg.Positions, Attention: cfg.Attention}
	if cfg.Tensor.size() > 1 {
		sc.Tensor = TensorRank{Size: 2, Sequence: cfg.Tensor.Sequence} // what a split keeps is the same on every rank and at every size
	}
	// What is frozen changes what the backward pass reads; dead blocks
	// (Config.DeadBlocks) keep nothing, and the exact formula counts their
	// last output as a later stage's input, so the structure has none.
	sc.Freeze = Freeze{Embeddings: cfg.Freeze.Embeddings, Head: cfg.Freeze.Head}
	if cfg.LoRA.On() {
		sc.LoRA = LoRA{Rank: 1, Alpha: 1, Targets: cfg.LoRA.Targets} // what a LoRA keeps is the same at every rank
	}
	return sc
}

var keptCache sync.Map // structureOf(cfg) → kept

// keptOf finds what the backward pass of cfg's graph keeps, in a
// three-layer graph of the same structure: a forward value is kept when a
// backward node takes it as an argument. The middle block's answer is
// every block's but the first's, which may keep less (kept.first); the
// last block is checked to agree with the middle one, so that a block
// whose output only the head (or only the next block) read could not be
// counted wrong.
func keptOf(cfg Config) (kept, error) {
	sc := structureOf(cfg)
	if k, ok := keptCache.Load(sc); ok {
		return k.(kept), nil
	}
	const B, T = 1, 2
	gr, err := Build(sc, B, T, tensor.Float32)
	if err != nil {
		return kept{}, err
	}
	flow, err := flowOf(sc, B, T)
	if err != nil {
		return kept{}, err
	}
	read := map[string]bool{}
	for _, n := range gr.G.AllNodes() {
		if _, forward := gr.LayerOf(n); forward || n.Op() == nil {
			continue
		}
		for _, a := range Args(n) {
			read[a.Name()] = true
		}
	}
	flags := func(prefix string, steps []step) []bool {
		f := make([]bool, len(steps))
		for i, s := range steps {
			f[i] = read[prefix+s.name]
		}
		return f
	}
	k := kept{
		embed: flags("", flow.embed), first: flags("h0.", flow.block), block: flags("h1.", flow.block), head: flags("", flow.head),
		tokens: read[gr.Tokens.Name()], targets: read[gr.Targets.Name()],
	}
	if last := flags("h2.", flow.block); fmt.Sprint(last) != fmt.Sprint(k.block) {
		return kept{}, fmt.Errorf("model: the last block keeps %v of its values, the one before %v: the exact formula counts every block but the first alike", last, k.block)
	}
	for i, f := range k.first {
		if f && !k.block[i] {
			return kept{}, fmt.Errorf("model: the first block keeps %s, which the others do not: the exact formula counts the first block's values among the others'", flow.block[i].name)
		}
	}
	for _, sec := range []struct {
		steps []step
		kept  []bool
	}{{flow.embed, k.embed}, {flow.block, k.block}, {flow.head, k.head}} {
		for i, s := range sec.steps {
			if sec.kept[i] && s.term == "" {
				return kept{}, fmt.Errorf("model: dataflow step %s is kept for backward and has no term in the exact formula", s.name)
			}
		}
	}
	keptCache.Store(sc, k)
	return k, nil
}
