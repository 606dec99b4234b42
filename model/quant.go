package model

import (
	"fmt"
	"strings"

	"trainmem/cuda"
	"trainmem/cuda/enum"
)

// Quantization is how a fine-tune stores its frozen linear weights
// (Config.Quantize; --quantize). QuantNF4 is QLoRA's (Dettmers et al.
// 2023, Section 3) as bitsandbytes stores it (load_in_4bit with
// bnb_4bit_quant_type nf4 and bnb_4bit_use_double_quant; its Params4bit
// and QuantState, version 0.50.1): each frozen linear weight of the blocks
// in 4-bit NormalFloat, blocks of 64 scaled by their absolute maximum,
// those scales quantized again to 8 bits in blocks of 256 less their mean
// (double quantization), with fp32 scales of their own. The embeddings,
// the norms, the biases and the head stay in the working type, as
// bitsandbytes leaves them (it replaces the linear layers only, and
// transformers keeps lm_head out). The forward and backward passes
// dequantize a weight into a temporary of the working type where an op
// reads it and free it after the op, as bitsandbytes' MatMul4Bit does.
type Quantization uint8

const (
	QuantNone Quantization = iota
	QuantNF4
)

var quantizationNames = enum.New[Quantization]("model", "Quantization", "quantization", "none", "nf4")

func (q Quantization) String() string { return quantizationNames.String(q) }

// ParseQuantization reads a --quantize value: none or nf4.
func ParseQuantization(s string) (Quantization, error) { return quantizationNames.Parse(s) }

// QuantSizes is the storage of one NF4 weight of n values (bitsandbytes'
// quantize_4bit with compress_statistics): Codes bytes of 4-bit codes
// ((n+1)/2), Scales 8-bit codes of the block scales (one per 64 values),
// and Scales2 fp32 scales of those (one per 256 scales), beside one fp32
// offset (the scales' mean).
type QuantSizes struct{ Codes, Scales, Scales2 int64 }

// NF4Sizes is the storage of n values in NF4 with double quantization.
func NF4Sizes(n int64) QuantSizes {
	blocks := cuda.Blocks(n, cuda.NF4Block)
	return QuantSizes{Codes: cuda.NF4Bytes(n), Scales: blocks, Scales2: cuda.Blocks(blocks, cuda.Block8)}
}

// StateBytes is the bytes of the quantization state (cuda.QuantState):
// the scales' codes, their fp32 scales and the fp32 offset.
func (q QuantSizes) StateBytes() int64 { return q.Scales + 4*q.Scales2 + 4 }

// NF4BitsPerWeight is QLoRA's 4 + 8/64 + 32/(64·256) = 4.127 bits a
// weight with double quantization (Section 3), for counts of whole
// second-level blocks; QuantSizes is exact for any count.
const NF4BitsPerWeight = 4 + 8.0/cuda.NF4Block + 32.0/(cuda.NF4Block*cuda.Block8)

// quantized reports whether a row is stored quantized: a frozen linear
// weight of a block (two dimensions; the norms and biases have one).
func (c Config) quantized(p Param) bool {
	return c.Quantize != QuantNone && p.Frozen && p.Layer >= 0 && len(p.Shape) == 2
}

// NumQuantized is the frozen weights c stores quantized.
func (c Config) NumQuantized() int64 {
	if c.Quantize == QuantNone {
		return 0
	}
	var n int64
	for _, p := range c.Params() {
		if p.Quantized {
			n += p.Count
		}
	}
	return n
}

// QuantBytes is the bytes of c's quantized weights: their codes (frozen)
// and their quantization state, each matrix quantized on its own
// (QuantUnits).
func (c Config) QuantBytes() (codes, state int64) {
	if c.Quantize == QuantNone {
		return 0, 0
	}
	for _, p := range c.Params() {
		if p.Quantized {
			for _, n := range c.QuantUnits(p) {
				q := NF4Sizes(n)
				codes += q.Codes
				state += q.StateBytes()
			}
		}
	}
	return codes, state
}

// QuantUnits is the sizes of the weight matrices a quantized row holds, in
// its order, each quantized on its own as bitsandbytes quantizes each
// linear module: LLaMA's q_proj, k_proj and v_proj (which trainmem stacks
// in attn.qkv) and gate_proj and up_proj (stacked in mlp.fc) a matrix
// each; any other row (GPT-2's c_attn is one module) one.
func (c Config) QuantUnits(p Param) []int64 {
	h, in := int64(c.Hidden), int64(c.Hidden)
	switch {
	case !c.llamaModules():
	case strings.HasSuffix(p.Name, ".attn.qkv.w"):
		kv := int64(c.kvWidth())
		return []int64{h * in, kv * in, kv * in}
	case strings.HasSuffix(p.Name, ".mlp.fc.w"):
		f := int64(c.FFNWidth())
		return []int64{f * in, f * in}
	}
	return []int64{p.Count}
}

// storeQuantizedLast gives the quantized rows the last offsets of the
// frozen rows' buffer (Param.Store), after the frozen rows kept whole, so
// that the buffer of the working type holds those alone, at the front.
func (c Config) storeQuantizedLast(ps []Param) {
	var plain int64
	for _, p := range ps {
		if p.Frozen && !p.Quantized {
			plain += p.Count
		}
	}
	var at, q int64
	for i := range ps {
		switch {
		case ps[i].Quantized:
			ps[i].Store = plain + q
			q += ps[i].Count
		case ps[i].Frozen:
			ps[i].Store = at
			at += ps[i].Count
		}
	}
}

// checkQuantize refuses a quantization with nothing to quantize or on a
// layout it does not take yet.
func (c Config) checkQuantize() error {
	if err := quantizationNames.Check(c.Quantize); err != nil {
		return err
	}
	switch {
	case c.Quantize == QuantNone:
		return nil
	case !c.LoRA.On() && c.Freeze.Blocks == 0:
		return fmt.Errorf("model: quantize %s stores frozen linear weights and %s has none (valid: with LoRA, --lora-rank, or frozen blocks, --freeze layers:N)", c.Quantize, c.Name)
	case c.Tensor.size() > 1:
		return fmt.Errorf("model: quantize %s over %d tensor-parallel ranks: not yet (valid: tp 1)", c.Quantize, c.Tensor.size())
	}
	return nil
}
