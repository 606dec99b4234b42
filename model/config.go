// Package model is trainmem's GPT-2: its configuration and presets, the
// parameter table, the gorgonia graph built from trainmem's own ops, the
// llm.c checkpoint format, and the closed-form memory formulas of the
// literature (estimate.go), each citing its source.
package model

import (
	"fmt"
	"strings"

	"trainmem/cuda"
	"trainmem/cuda/enum"
)

// Config is a GPT-2 shape.
type Config struct {
	Name   string // preset name, or "custom"
	Layers int    // transformer blocks, L
	Hidden int    // channels, h (C in llm.c)
	Heads  int    // attention heads, a; must divide Hidden
	// KVHeads is the key and value heads (grouped-query attention, Ainslie
	// et al. 2023; Hugging Face's num_key_value_heads), each shared by
	// Heads/KVHeads query heads: Heads (or 0) is multi-head attention, 1
	// multi-query (Shazeer 2019). It must divide Heads.
	KVHeads int
	Vocab   int // vocabulary, V (50257 for GPT-2's BPE; not padded: parameter counts are exact)
	Context int // learned positions, the longest sequence (1024 for GPT-2)
	// Untied gives the model its own output projection (lm_head, V×h)
	// instead of reusing the token embedding (GPT-2 ties them).
	Untied bool
	// Norm is the norm of the blocks and the head: NormLayer (GPT-2's layer
	// norm, a gain and a bias) or NormRMS (LLaMA's RMSNorm, a gain alone).
	Norm Norm
	// NoBias leaves the biases out of the linear layers, as LLaMA has none
	// (Megatron-LM's --disable-bias-linear); a layer norm keeps its own.
	NoBias bool
	// MLP is the blocks' MLP: MLPGELU (GPT-2's: fc, GELU, proj) or
	// MLPSwiGLU (LLaMA's: one linear layer of the gate and up projections,
	// silu(gate)·up, the down projection).
	MLP MLP
	// FFN is the MLP's inner width, F (Hugging Face's intermediate_size);
	// 0 is the MLP's default (FFNWidth).
	FFN int
	// Positions is how the model knows where a token stands: PosLearned
	// (GPT-2's wpe table, Context rows) or PosRoPE (LLaMA's rotary
	// embedding of q and k, no table); RopeTheta is the rotary base θ (0:
	// DefaultRopeTheta).
	Positions Positions
	RopeTheta float64
	// Attention is how the attention is computed: AttentionNaive (the
	// probabilities stored, s² a head) or AttentionFlash (Dao et al. 2022:
	// the row log-sum-exp stored, the probabilities recomputed in
	// backward). It is no part of the weights: PresetOf and the file
	// formats ignore it.
	Attention Attention
	// NormEps is the norms' ε (0: LayerNormEps or RMSNormEps, the norm's
	// default; a Hugging Face config may give another).
	NormEps float64
	// Tensor is the tensor-parallel rank this config is the part of
	// (Config.TensorRank; tensor.go): its blocks' heads and MLP channels
	// split, the rest whole. The zero value is the whole model.
	Tensor TensorRank
	// Stage is the pipeline stage this config is (Config.PipelineStage;
	// pipeline.go): Layers is its blocks, the embedding on the first stage
	// only, the final layer norm and the head on the last. The zero value is
	// the whole model.
	Stage PipelineStage
	// Freeze is the parts a fine-tune does not train (freeze.go), LoRA its
	// low-rank adapters (lora.go), Quantize how it stores its frozen
	// linear weights (quant.go): no part of the weights' shape, so
	// PresetOf and the file formats ignore them.
	Freeze   Freeze
	LoRA     LoRA
	Quantize Quantization
}

// Presets, smallest first. GPT-2 shapes are from Radford et al. 2019
// (Table 2) and the released checkpoints; 6b is GPT-J-6B's shape (hidden
// 4096, 28 layers, 16 heads, vocabulary 50400, context 2048, untied head) as
// a GPT-2-style model. llama2-7b is LLaMA 2 7B (Touvron et al. 2023;
// meta-llama/Llama-2-7b-hf's config.json: hidden 4096, 32 layers, 32
// heads, intermediate_size 11008, vocabulary 32000, 4096 positions,
// rope_theta 10000, RMSNorm, no biases, an untied head; 6,738,415,616
// parameters). llama3-8b is Llama 3 8B (Meta 2024; meta-llama/Meta-Llama-3-8B's
// config.json: hidden 4096, 32 layers, 32 heads and 8 key and value heads,
// intermediate_size 14336, vocabulary 128256, 8192 positions, rope_theta
// 500000; the model card's 8.03B, 8,030,261,248 exactly). tinyllama-1.1b is
// TinyLlama 1.1B (Zhang et al. 2024; TinyLlama/TinyLlama-1.1B's config.json:
// hidden 2048, 22 layers, 32 heads and 4 key and value heads,
// intermediate_size 5632, vocabulary 32000, 2048 positions;
// 1,100,048,384 parameters). tiny-llama is tiny with LLaMA's blocks and
// grouped-query attention (2 key and value heads for 4 query heads), for
// tests.
var presets = []Config{
	{Name: "tiny", Layers: 2, Hidden: 64, Heads: 4, Vocab: 256, Context: 64},
	{Name: "tiny-llama", Layers: 2, Hidden: 64, Heads: 4, KVHeads: 2, Vocab: 256, Context: 64, Untied: true, Norm: NormRMS, NoBias: true, MLP: MLPSwiGLU, Positions: PosRoPE},
	{Name: "gpt2", Layers: 12, Hidden: 768, Heads: 12, Vocab: 50257, Context: 1024},
	{Name: "gpt2-medium", Layers: 24, Hidden: 1024, Heads: 16, Vocab: 50257, Context: 1024},
	{Name: "gpt2-large", Layers: 36, Hidden: 1280, Heads: 20, Vocab: 50257, Context: 1024},
	{Name: "gpt2-xl", Layers: 48, Hidden: 1600, Heads: 25, Vocab: 50257, Context: 1024},
	{Name: "6b", Layers: 28, Hidden: 4096, Heads: 16, Vocab: 50400, Context: 2048, Untied: true},
	{Name: "llama2-7b", Layers: 32, Hidden: 4096, Heads: 32, Vocab: 32000, Context: 4096, Untied: true,
		Norm: NormRMS, NoBias: true, MLP: MLPSwiGLU, FFN: 11008, Positions: PosRoPE},
	{Name: "tinyllama-1.1b", Layers: 22, Hidden: 2048, Heads: 32, KVHeads: 4, Vocab: 32000, Context: 2048, Untied: true,
		Norm: NormRMS, NoBias: true, MLP: MLPSwiGLU, FFN: 5632, Positions: PosRoPE},
	{Name: "llama3-8b", Layers: 32, Hidden: 4096, Heads: 32, KVHeads: 8, Vocab: 128256, Context: 8192, Untied: true,
		Norm: NormRMS, NoBias: true, MLP: MLPSwiGLU, FFN: 14336, Positions: PosRoPE, RopeTheta: 500000},
}

// PresetNames lists the presets, smallest first.
func PresetNames() []string {
	names := make([]string, len(presets))
	for i, p := range presets {
		names[i] = p.Name
	}
	return names
}

// Preset returns the named preset.
func Preset(name string) (Config, error) {
	for _, p := range presets {
		if p.Name == name {
			return p, nil
		}
	}
	return Config{}, fmt.Errorf("model: unknown preset %q (valid: %s)", name, strings.Join(PresetNames(), ", "))
}

// PresetOf names the preset with c's shape (the name aside), or "": an
// ε, θ or MLP width written out equals its default left out.
func PresetOf(c Config) string {
	c = c.canonical()
	for _, p := range presets {
		c.Name = p.Name
		if c == p.canonical() {
			return p.Name
		}
	}
	return ""
}

// canonical is c with its defaults left out (NormEps, RopeTheta, FFN at
// the values their zeros stand for), so that equal models compare equal.
func (c Config) canonical() Config {
	if c.NormEps > 0 && float32(c.NormEps) == float32((Config{Norm: c.Norm}).Eps()) {
		c.NormEps = 0
	}
	if c.RopeTheta == DefaultRopeTheta || c.Positions != PosRoPE {
		c.RopeTheta = 0
	}
	if c.FFN > 0 && c.FFN == (Config{Hidden: c.Hidden, MLP: c.MLP}).FFNWidth() {
		c.FFN = 0
	}
	if c.KVHeads == c.Heads {
		c.KVHeads = 0
	}
	c.Attention = AttentionNaive
	c.Freeze = Freeze{}
	c.LoRA = LoRA{}
	c.Quantize = QuantNone
	return c
}

// Validate checks that every size is positive and within its limit
// (MaxLayers, MaxHidden, MaxVocab, MaxContext) and that the heads divide
// the hidden size.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
		max  int
	}{{"layers", c.Layers, MaxLayers}, {"hidden", c.Hidden, MaxHidden}, {"heads", c.Heads, MaxHidden}, {"vocab", c.Vocab, MaxVocab}, {"context", c.Context, MaxContext}} {
		if f.v <= 0 || f.v > f.max {
			return cuda.Argf("model", f.name, f.v, "out of range", fmt.Sprintf("1 to %d", f.max))
		}
	}
	if c.Hidden%c.Heads != 0 {
		var ok []string
		for a := 1; a <= c.Hidden && len(ok) < 12; a++ {
			if c.Hidden%a == 0 {
				ok = append(ok, fmt.Sprint(a))
			}
		}
		return fmt.Errorf("model: heads %d does not divide hidden %d (valid head counts include %s)", c.Heads, c.Hidden, strings.Join(ok, ", "))
	}
	if c.KVHeads != 0 && (c.KVHeads < 0 || c.Heads%c.KVHeads != 0) {
		return fmt.Errorf("model: kv heads %d does not divide heads %d (valid: %s, or 0 for %d)", c.KVHeads, c.Heads, divisors(c.Heads), c.Heads)
	}
	if err := attentionNames.Check(c.Attention); err != nil {
		return err
	}
	if c.Attention == AttentionFlash && c.HeadDim() > cuda.FlashHeadDimMax {
		return fmt.Errorf("model: flash attention with heads of %d channels (%d heads of hidden %d; valid: heads of at most %d channels)", c.HeadDim(), c.Heads, c.Hidden, cuda.FlashHeadDimMax)
	}
	if err := c.Norm.Check(); err != nil {
		return err
	}
	if err := mlpNames.Check(c.MLP); err != nil {
		return err
	}
	if err := positionNames.Check(c.Positions); err != nil {
		return err
	}
	if c.Positions == PosRoPE && c.HeadDim()%2 != 0 {
		return fmt.Errorf("model: rotary positions pair a head's channels, and %d heads of hidden %d have %d each (valid: an even head size)", c.Heads, c.Hidden, c.HeadDim())
	}
	if c.RopeTheta != 0 && !(c.RopeTheta > 1 && c.RopeTheta <= 1e12) {
		return cuda.Argf("model", "rope theta", c.RopeTheta, "out of range", fmt.Sprintf("above 1 to 1e12, or 0 for %g", float64(DefaultRopeTheta)))
	}
	if c.NormEps != 0 && !(c.NormEps > 0 && c.NormEps < 1) {
		return cuda.Argf("model", "norm ε", c.NormEps, "out of range", "above 0, below 1, or 0 for the norm's default")
	}
	if c.FFN < 0 || c.FFN > MaxHidden*4 {
		return cuda.Argf("model", "ffn", c.FFN, "out of range", fmt.Sprintf("1 to %d, or 0 for the MLP's default", MaxHidden*4))
	}
	if t := c.Tensor.size(); t > 1 && c.FFNWidth()%t != 0 {
		return fmt.Errorf("model: %d tensor-parallel ranks do not divide the MLP's %d channels (valid: a tensor-parallel size dividing both the heads and the ffn)", t, c.FFNWidth())
	}
	if err := c.Stage.check(c.Layers); err != nil {
		return err
	}
	if err := c.Freeze.check(c); err != nil {
		return err
	}
	if err := c.LoRA.check(c); err != nil {
		return err
	}
	if err := c.checkQuantize(); err != nil {
		return err
	}
	return c.Tensor.check(c.Heads, c.KV(), c.Vocab)
}

// Norm is a model's kind of norm (Config.Norm): the variant of the device's
// norm family, cuda.Norm, which it is. NormLayer is the layer norm (Ba et
// al. 2016; GPT-2): y = (x - mean)·rstd·w + b; NormRMS is RMSNorm (Zhang
// and Sennrich 2019; LLaMA): y = x·rstd·w, no mean, no bias.
type Norm = cuda.Norm

const (
	NormLayer = cuda.NormLayer
	NormRMS   = cuda.NormRMS
)

// ParseNorm reads a norm's name: layernorm or rmsnorm.
func ParseNorm(s string) (Norm, error) { return cuda.ParseNorm(s) }

// Attention is how a model's attention is computed (Config.Attention).
type Attention uint8

const (
	AttentionNaive Attention = iota // the probabilities stored, a·s² a layer (Korthikanti et al.'s count)
	AttentionFlash                  // FlashAttention (Dao et al. 2022): the output and the fp32 row log-sum-exp stored
)

// attentionNames are the attentions' names, by Attention.
var attentionNames = enum.New[Attention]("model", "Attention", "attention", "naive", "flash")

func (a Attention) String() string { return attentionNames.String(a) }

// ParseAttention reads an attention's name: naive or flash.
func ParseAttention(s string) (Attention, error) {
	return attentionNames.Parse(s)
}

// Positions is a model's kind of position embedding (Config.Positions).
type Positions uint8

const (
	PosLearned Positions = iota // a learned table added to the token embedding (GPT-2's wpe)
	PosRoPE                     // rotary embedding of the queries and keys (Su et al. 2021; LLaMA)
)

// positionNames are the position embeddings' names, by Positions.
var positionNames = enum.New[Positions]("model", "Positions", "position embedding", "learned", "rope")

func (p Positions) String() string { return positionNames.String(p) }

// ParsePositions reads a position embedding's name: learned or rope.
func ParsePositions(s string) (Positions, error) {
	return positionNames.Parse(s)
}

// DefaultRopeTheta is the rotary base of LLaMA and LLaMA 2 (rope_theta in
// their config.json files: 10000.0).
const DefaultRopeTheta = 10000.0

// Theta is the rotary base θ: Config.RopeTheta, or DefaultRopeTheta.
func (c Config) Theta() float64 {
	if c.RopeTheta > 0 {
		return c.RopeTheta
	}
	return DefaultRopeTheta
}

// Eps is the norms' ε: Config.NormEps, or the norm's default.
func (c Config) Eps() float64 {
	switch {
	case c.NormEps > 0:
		return c.NormEps
	case c.Norm == NormRMS:
		return RMSNormEps
	}
	return LayerNormEps
}

// learnedPositions is wpe's rows: the context with learned positions, none
// with rotary ones.
func (c Config) learnedPositions() int {
	if c.Positions == PosRoPE {
		return 0
	}
	return c.Context
}

// MLP is a model's kind of MLP (Config.MLP).
type MLP uint8

const (
	MLPGELU   MLP = iota // GPT-2's: proj(gelu(fc(x))), fc h → F
	MLPSwiGLU            // LLaMA's (Shazeer 2020): down(silu(gate(x))·up(x)), gate and up h → F each
)

// mlpNames are the MLPs' names, by MLP.
var mlpNames = enum.New[MLP]("model", "MLP", "MLP", "gelu", "swiglu")

func (m MLP) String() string { return mlpNames.String(m) }

// ParseMLP reads an MLP's name: gelu or swiglu.
func ParseMLP(s string) (MLP, error) { return mlpNames.Parse(s) }

// SwiGLUMultiple is what LLaMA rounds a SwiGLU MLP's default width up to a
// multiple of (multiple_of = 256 in Meta's llama model.py).
const SwiGLUMultiple = 256

// FFNWidth is the MLP's inner width F: Config.FFN when set, else 4h for
// GELU (GPT-2's) and, for SwiGLU, LLaMA's rule: 2/3 of 4h, rounded up to
// a multiple of SwiGLUMultiple (llama2-7b: h 4096 gives 11,008), so that
// its three matrices hold about the parameters of GELU's two.
func (c Config) FFNWidth() int {
	switch {
	case c.FFN > 0:
		return c.FFN
	case c.MLP == MLPSwiGLU:
		f := (2*4*c.Hidden + 2) / 3 // ceil(8h/3)
		return (f + SwiGLUMultiple - 1) / SwiGLUMultiple * SwiGLUMultiple
	}
	return 4 * c.Hidden
}

// mlpIn is how many F-wide projections the MLP's first linear layer makes:
// GELU's one, SwiGLU's gate and up.
func (c Config) mlpIn() int {
	if c.MLP == MLPSwiGLU {
		return 2
	}
	return 1
}

// normParams is the parameters of one norm over h channels: a gain, and a
// layer norm's bias.
func (c Config) normParams() int64 {
	if c.Norm == NormRMS {
		return int64(c.Hidden)
	}
	return 2 * int64(c.Hidden)
}

// GPT2 reports whether c has GPT-2's architecture (layer norms, biased
// linear layers, a GELU MLP of 4h), the one llm.c's checkpoint format
// holds; a tied or untied head and any size are GPT-2's.
func (c Config) GPT2() bool {
	return c.Norm == NormLayer && !c.NoBias && c.MLP == MLPGELU && c.KV() == c.Heads && c.FFNWidth() == 4*c.Hidden && c.Positions == PosLearned &&
		float32(c.Eps()) == float32(LayerNormEps)
}

// HeadDim is the channels per head, h/a.
func (c Config) HeadDim() int { return c.Hidden / c.Heads }

// KV is the key and value heads: KVHeads, or Heads when it is 0.
func (c Config) KV() int {
	if c.KVHeads > 0 {
		return c.KVHeads
	}
	return c.Heads
}

// kvWidth is the channels of the keys (and of the values): KV·h/a, h with
// multi-head attention.
func (c Config) kvWidth() int { return c.KV() * c.HeadDim() }

// Param is one row of the parameter table: a named tensor, its shape, its
// element count and its offset (in elements) in the flat parameter buffer.
type Param struct {
	Name   string
	Shape  []int
	Count  int64
	Offset int64
	// Layer is the transformer block the tensor belongs to, or -1 for the
	// embeddings, the final layer norm and the head.
	Layer int
	// Decay is true for the matrices that weight decay applies to (the 2-D
	// weights: embeddings and linear layers), false for biases and layer
	// norm gains, as in GPT-2 training practice.
	Decay bool
	// Split is where a tensor-parallel rank's row sits in the whole
	// model's tensor of the same name; the zero value is the whole tensor.
	Split TensorSplit
	// Frozen is a row a fine-tune does not train (Config.Freeze); Store
	// is the row's offset in its own flat buffer: the trained rows' (the
	// params, grads and optimizer states, which hold trained rows only)
	// or the frozen rows'. With nothing frozen Store is Offset.
	Frozen bool
	Store  int64
	// Quantized is a frozen row stored quantized (Config.Quantize): its
	// Store is past the frozen rows kept in the working type, whose
	// buffer holds those alone.
	Quantized bool
}

// Params is the parameter table in flat-buffer order: embeddings, then each
// block's tensors together (so a block is one contiguous range, as ZeRO-3
// gathering wants), then the final layer norm and, when untied, the head.
// Linear weights are stored (out, in) as in llm.c: y = x·Wᵀ + b. For a
// tensor-parallel rank (c.Tensor) the split rows hold the rank's part, and
// Split says where it sits in the whole tensor (tensor.go). A pipeline
// stage (c.Stage, pipeline.go) holds its blocks, named as in the whole
// model, the embeddings on the first stage and the final layer norm and
// head on the last (a tied head's copy of wte after lnf).
func (c Config) Params() []Param {
	ps := c.table()
	if c.Quantize != QuantNone {
		c.storeQuantizedLast(ps)
	}
	return ps
}

// table is Params before the quantized rows' Store is moved
// (storeQuantizedLast).
func (c Config) table() []Param {
	h, L := c.Hidden, c.Layers
	t := c.Tensor.size()
	hp := h / t // this rank's channels of q, k, v and of the attention output
	var ps []Param
	var off, trained, frozen int64
	embed := false   // the rows being added are the embeddings' (Freeze.Embeddings)
	adapter := false // the rows being added are a LoRA's A and B
	add := func(name string, layer int, decay bool, split TensorSplit, shape ...int) {
		n := int64(1)
		for _, d := range shape {
			n *= int64(d)
		}
		p := Param{Name: name, Shape: shape, Count: n, Offset: off, Layer: layer, Decay: decay, Split: split}
		whole := layer
		if layer >= 0 {
			whole += c.Stage.Lo
		}
		p.Frozen = c.Freeze.frozen(whole, embed) || c.LoRA.On() && !adapter
		p.Quantized = c.quantized(p)
		at := &trained
		if p.Frozen {
			at = &frozen
		}
		p.Store = *at
		*at += n
		ps = append(ps, p)
		off += n
	}
	var whole TensorSplit
	kvw := c.kvWidth()
	kvp := kvw / t                        // this rank's channels of k and of v
	qkv := c.Tensor.parts(0, h, kvw, kvw) // column-parallel: rows of q, k and v of the rank's heads
	attn := c.Tensor.part(1, h)           // row-parallel: the attention output's columns
	F := c.FFNWidth()
	Fp := F / c.Tensor.size()                   // this rank's channels of the MLP
	k := c.mlpIn()                              // the F-wide projections of the MLP's first layer
	fc := c.Tensor.parts(0, []int{F, F}[:k]...) // column-parallel: the rank's rows of each projection (gate, up)
	proj := c.Tensor.part(1, F)                 // row-parallel: the MLP's columns
	_, vr := c.Tensor.VocabRows(c.Vocab)
	vocab := c.Tensor.vocab(c.Vocab) // vocabulary-parallel: the rank's rows
	if c.First() {
		embed = true
		add("wte", -1, true, vocab, vr, h) // token embedding (V, h); also the head when tied
		if p := c.learnedPositions(); p > 0 {
			add("wpe", -1, true, whole, p, h)
		}
		embed = false
	}
	norm := func(name string, layer int) { // a gain, and a layer norm's bias
		add(name+".w", layer, false, whole, h)
		if c.Norm == NormLayer {
			add(name+".b", layer, false, whole, h)
		}
	}
	bias := func(name string, layer int, split TensorSplit, n int) {
		if !c.NoBias {
			add(name, layer, false, split, n)
		}
	}
	// lora adds the LoRA of a block's linear layer, A then B (lora.go).
	lora := func(p, name string, layer, in int) {
		if a, ok := c.adapterOf(name); ok {
			adapter = true
			add(p+name+".lora_a", layer, true, whole, len(a.parts)*c.LoRA.Rank, in)
			add(p+name+".lora_b", layer, true, whole, a.rows(), c.LoRA.Rank)
			adapter = false
		}
	}
	for l := 0; l < L; l++ {
		p := fmt.Sprintf("h%d.", c.Stage.Lo+l)
		norm(p+"ln1", l)
		add(p+"attn.qkv.w", l, true, qkv, hp+2*kvp, h)
		bias(p+"attn.qkv.b", l, qkv, hp+2*kvp)
		lora(p, "attn.qkv", l, h)
		add(p+"attn.proj.w", l, true, attn, h, hp)
		bias(p+"attn.proj.b", l, whole, h)
		lora(p, "attn.proj", l, hp)
		norm(p+"ln2", l)
		add(p+"mlp.fc.w", l, true, fc, k*Fp, h)
		bias(p+"mlp.fc.b", l, fc, k*Fp)
		lora(p, "mlp.fc", l, h)
		add(p+"mlp.proj.w", l, true, proj, h, Fp)
		bias(p+"mlp.proj.b", l, whole, h)
		lora(p, "mlp.proj", l, Fp)
	}
	if !c.Last() {
		return ps
	}
	norm("lnf", -1)
	switch {
	case c.Untied:
		add("lm_head.w", -1, true, vocab, vr, h)
	case c.headCopy():
		embed = true
		add("wte", -1, true, vocab, vr, h) // the tied head's copy of the token embedding
	}
	return ps
}

// NumParams is the exact parameter count, Φ: V·h + ctx·h + L·(12h² + 13h) +
// 2h, plus V·h for an untied head (with RMSNorm a norm has h parameters,
// not 2h; without linear biases a block has 5h + k·F fewer, 9h for GPT-2's
// MLP; LayerParams). GPT-2 (124M) has 124,439,808; gpt2-xl
// 1,557,611,200. A tensor-parallel rank's is its own table's: its rows of
// the vocabulary (Tensor.VocabRows) and its part of each block
// (LayerParams).
func (c Config) NumParams() int64 {
	h, L := int64(c.Hidden), int64(c.Layers)
	_, vr := c.Tensor.VocabRows(c.Vocab)
	n := L * c.LayerParams()
	if c.First() {
		n += int64(vr)*h + int64(c.learnedPositions())*h
	}
	if c.Last() {
		n += c.normParams()
		if c.Untied || c.headCopy() {
			n += int64(vr) * h
		}
	}
	return n
}

// LayerParams is the parameter count of one transformer block, 12h² + 13h;
// of a tensor-parallel rank's part of it, 12h²/t + 7h/t + 6h (the split
// matrices and column-parallel biases, then the layer norms and the
// row-parallel biases, which every rank holds whole). That is GPT-2's
// MLP of F = 4h and multi-head attention; in general the attention's
// 2h² + 2h·kv (kv = KV·h/a, the keys' and the values' width) and the MLP's
// (k+1)·h·F, k = 1 projection (GELU) or 2 (SwiGLU's gate and up), the
// column-parallel biases h + 2kv + k·F. Without linear biases those and the 2h row-parallel
// ones go; an RMSNorm has h parameters where a layer norm has 2h.
func (c Config) LayerParams() int64 {
	h, t := int64(c.Hidden), int64(c.Tensor.size())
	F, k, kv := int64(c.FFNWidth()), int64(c.mlpIn()), int64(c.kvWidth())
	n := 2*h*(h/t) + 2*h*(kv/t) + (k+1)*h*(F/t) + 2*c.normParams()
	if !c.NoBias {
		n += h/t + 2*kv/t + k*F/t + 2*h
	}
	return n + c.loraParams()
}

// ParamByName finds a row of the parameter table.
func (c Config) ParamByName(name string) (Param, bool) {
	for _, p := range c.Params() {
		if p.Name == name {
			return p, true
		}
	}
	return Param{}, false
}

func (c Config) String() string {
	head := "tied head"
	if c.Untied {
		head = "untied head"
	}
	rank := ""
	if c.Tensor.Size > 1 {
		rank = fmt.Sprintf(", tensor-parallel rank %d of %d", c.Tensor.Rank, c.Tensor.Size)
	}
	if c.Stage.Size > 1 {
		rank += fmt.Sprintf(", pipeline stage %d of %d (blocks %d to %d)", c.Stage.Rank, c.Stage.Size, c.Stage.Lo, c.Stage.Lo+c.Layers-1)
	}
	arch := ""
	if c.Norm != NormLayer {
		arch += ", " + c.Norm.String()
	}
	if kv := c.KV(); kv != c.Heads {
		arch += fmt.Sprintf(", %d key and value heads", kv)
	}
	if c.NoBias {
		arch += ", no linear biases"
	}
	if c.MLP != MLPGELU || c.FFNWidth() != 4*c.Hidden {
		arch += fmt.Sprintf(", %s MLP of %d", c.MLP, c.FFNWidth())
	}
	if c.Positions == PosRoPE {
		arch += fmt.Sprintf(", rotary positions (θ %g)", c.Theta())
	}
	if c.Attention == AttentionFlash {
		arch += ", flash attention"
	}
	if c.canonical().NormEps > 0 {
		arch += fmt.Sprintf(", norm ε %g", c.Eps())
	}
	params := Comma(c.NumParams()) + " parameters"
	switch {
	case c.LoRA.On():
		params += fmt.Sprintf(" (%s trained: LoRA r %d, α %g on %s; %s frozen)", Comma(c.NumTrained()), c.LoRA.Rank, c.LoRA.Alpha,
			strings.Join(c.LoRA.Targets.Names(c), ", "), Comma(c.NumFrozen()))
	case c.Freeze.Any():
		params += fmt.Sprintf(" (%s trained, %s frozen: %s)", Comma(c.NumTrained()), Comma(c.NumFrozen()), c.Freeze)
	}
	if c.Quantize != QuantNone {
		params = strings.TrimSuffix(params, ")") + fmt.Sprintf(", %s of them in %s)", Comma(c.NumQuantized()), c.Quantize)
	}
	return fmt.Sprintf("%s: L=%d h=%d a=%d V=%d ctx=%d, %s%s%s, %s",
		c.Name, c.Layers, c.Hidden, c.Heads, c.Vocab, c.Context, head, arch, rank, params)
}

// Comma formats n with thousands separators: 124439808 → "124,439,808".
func Comma(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
