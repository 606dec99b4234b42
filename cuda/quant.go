package cuda

// The quantization family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/quant.go and cuda/gpu/quant.go implement
// it).
//
// They are the storage formats of bitsandbytes (version 0.50.1, read from
// bitsandbytes/functional.py and csrc/kernels.cu), which QLoRA (Dettmers
// et al. 2023) stores its frozen weights in and 8-bit optimizers (Dettmers
// et al. 2022) their states:
//
//   - 4-bit NormalFloat (NF4): blocks of NF4Block weights, each scaled by
//     its absolute maximum and rounded to the nearest of the 16 values of
//     NF4Values, two codes a byte, the first in the high four bits;
//   - blockwise 8-bit: blocks of Block8 values, each scaled by its
//     absolute maximum and rounded to the nearest of the 256 values of a
//     CodeMap (bitsandbytes' dynamic maps), one code a byte. NF4's
//     double quantization stores the NF4 scales this way, less their mean
//     (the offset).

import (
	"fmt"
	"math"
	"sort"
	"sync"

	"trainmem/cuda/enum"
)

// NF4Block is the weights an NF4 scale covers: bitsandbytes' blocksize
// for 4-bit weights (Params4bit's default, the one transformers'
// load_in_4bit uses).
const NF4Block = 64

// Block8 is the values an 8-bit scale covers: bitsandbytes'
// quantize_blockwise blocksize for NF4's double quantization (QLoRA
// Section 3) and its blockwise optimizers' (BLOCKSIZE_2STATE).
const Block8 = 256

// NF4Values are the 16 values of 4-bit NormalFloat, ascending, as QLoRA's
// Appendix E and bitsandbytes' nf4_dequantization_lut list them (rounded
// to fp32 by the kernels, which compute in fp32).
var NF4Values = [16]float64{
	-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
	-0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
	0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
	0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0,
}

// NF4Zero is the code of 0.0, which an all-zero block's weights take (its
// scale is 0), and the low half of the last byte of an odd count.
const NF4Zero = 7

// NF4Bytes is the bytes of the codes of n weights: two a byte.
func NF4Bytes[I ~int | ~int64](n I) I { return (n + 1) / 2 }

// Blocks is how many blocks of size block n values make (the last one
// possibly short).
func Blocks[I ~int | ~int64](n I, block int) I { return (n + I(block) - 1) / I(block) }

// CodeMap is an 8-bit code: the 256 values a blockwise 8-bit code stands
// for, ascending.
type CodeMap uint8

const (
	// DynamicSigned is bitsandbytes' create_dynamic_map(signed=True): 0,
	// 1 and 127 values of each sign spread over seven decades, more in
	// each decade nearer 1 (Dettmers 2016's dynamic tree quantization).
	// NF4's scales and Adam's m are stored in it.
	DynamicSigned CodeMap = iota
	// DynamicUnsigned is create_dynamic_map(signed=False): 0, 1 and 254
	// positive values. Adam's v is stored in it.
	DynamicUnsigned
)

var codeMapNames = enum.New[CodeMap]("cuda", "CodeMap", "8-bit code map", "dynamic", "dynamic_unsigned")

func (m CodeMap) String() string { return codeMapNames.String(m) }

// Values is the map's 256 values, ascending: what bitsandbytes'
// create_dynamic_map returns (as torch computes it, bit for bit).
func (m CodeMap) Values() *[256]float32 {
	mapsOnce.Do(func() {
		maps[DynamicSigned] = dynamicMap(true)
		maps[DynamicUnsigned] = dynamicMap(false)
	})
	return &maps[m]
}

var (
	mapsOnce sync.Once
	maps     [2][256]float32
)

// dynamicMap is create_dynamic_map(signed, max_exponent_bits=7,
// total_bits=8): for each decade i = 0..6, the midpoints of
// torch.linspace(0.1, 1, k) (k = 2^i + 1 signed, 2^(i+1) + 1 unsigned)
// times 10^(i-6), with their negations when signed; then 0 and 1, sorted.
// Every step rounds to fp32 as torch's float32 tensors do; linspace is
// torch's CPU kernel's (torchLinspace), so that the values are the ones
// bitsandbytes builds, bit for bit.
func dynamicMap(signed bool) [256]float32 {
	var data []float32
	for i := range 7 {
		k := 1<<(i+1) + 1
		if signed {
			k = 1<<i + 1
		}
		b := torchLinspace(0.1, 1, k)
		scale := float32(math.Pow(10, float64(i-6)))
		for j := 0; j+1 < k; j++ {
			mean := (b[j] + b[j+1]) / 2
			data = append(data, scale*mean)
			if signed {
				data = append(data, -scale*mean)
			}
		}
	}
	data = append(data, 0, 1)
	sort.Slice(data, func(a, b int) bool { return data[a] < data[b] })
	var out [256]float32
	if copy(out[:], data) != 256 || len(data) != 256 {
		panic(fmt.Sprintf("cuda: the dynamic map has %d values, want 256", len(data)))
	}
	return out
}

// torchLinspace is torch.linspace(start, end, n, dtype=float32) as
// torch's CPU kernel computes it: step = (end-start)/(n-1) in fp32, the
// first half counted up from start and the second down from end, each a
// fused multiply-add, in pairs of chunks of 8 whose elements add k·step to
// the chunk's first, and the rest one at a time.
func torchLinspace(start, end float32, n int) []float32 {
	step := (end - start) / float32(n-1)
	half := n / 2
	at := func(i int) float32 {
		if i < half {
			return float32(math.FMA(float64(step), float64(i), float64(start)))
		}
		return float32(math.FMA(-float64(step), float64(n-i-1), float64(end)))
	}
	out := make([]float32, n)
	i := 0
	for ; i <= n-16; i += 16 {
		for _, c := range []int{i, i + 8} {
			base := at(c)
			for k := range 8 {
				out[c+k] = base + float32(float32(k)*step)
			}
		}
	}
	for ; i < n; i++ {
		out[i] = at(i)
	}
	return out
}

// QuantKernels are the quantization family: NF4 and blockwise 8-bit,
// each way.
type QuantKernels interface {
	// QuantizeNF4 quantizes x (any float type, n values) into codes (U8,
	// NF4Bytes(n)) and absmax (F32, Blocks(n, NF4Block)): absmax[b] is
	// the largest |x| of block b, and each value's code is the index of
	// the NF4 value nearest x·(1/absmax) in fp32 (ties to the lower, as
	// bitsandbytes' strict comparisons with the midpoints), NF4Zero for a
	// block of zeros.
	QuantizeNF4(codes, absmax, x *Buffer) error
	// DequantizeNF4 is y = NF4Values[code]·absmax[block] (y any float
	// type, n values; the product in fp32, in fp64 for an F64 y).
	DequantizeNF4(y, codes, absmax *Buffer) error
	// QuantizeBlockwise quantizes x (F32, n values) into codes (U8, n)
	// of map m and absmax (F32, Blocks(n, Block8)), as QuantizeNF4 with
	// m's 256 values (ties to bitsandbytes' binary search's choice).
	// With offset (F32, 1 element; nil for none) it first stores the mean
	// of x in offset, rounded once to fp32, and quantizes x - offset.
	QuantizeBlockwise(codes, absmax, offset, x *Buffer, m CodeMap) error
	// DequantizeBlockwise is y = m[code]·absmax[block] (+ offset when
	// offset is not nil), y F32, in fp32 arithmetic.
	DequantizeBlockwise(y, codes, absmax, offset *Buffer, m CodeMap) error
}

func (c *checker) codeMap(m CodeMap) {
	if c.err == nil && m > DynamicUnsigned {
		c.fail("map is %d, want %s or %s", m, DynamicSigned, DynamicUnsigned)
	}
}

// nf4 checks NF4's codes and scales of n values.
func (c *checker) nf4(codes, absmax *Buffer, n int) {
	c.typed("codes", codes, U8, NF4Bytes(n), "(n+1)/2")
	c.typed("absmax", absmax, F32, Blocks(n, NF4Block), fmt.Sprintf("ceil(n/%d)", NF4Block))
}

// blockwise checks the fp32 values (vals, named name) of blockwise 8-bit
// codes and scales, and the offset.
func (c *checker) blockwise(name string, vals, codes, absmax, offset *Buffer, m CodeMap) {
	if c.buf(name, vals) && vals.DType != F32 {
		c.fail("%s is %s, want fp32", name, vals.DType)
	}
	if c.err != nil {
		return
	}
	n := vals.Len
	c.typed("codes", codes, U8, n, "n")
	c.typed("absmax", absmax, F32, Blocks(n, Block8), fmt.Sprintf("ceil(n/%d)", Block8))
	if offset != nil {
		c.typed("offset", offset, F32, 1, "1")
	}
	c.codeMap(m)
}

func (Checks) QuantizeNF4(codes, absmax, x *Buffer) error {
	c := check("QuantizeNF4")
	if c.float("x", x) {
		c.nf4(codes, absmax, x.Len)
	}
	c.disjoint("absmax", absmax, "x", x)
	return c.err
}

func (Checks) DequantizeNF4(y, codes, absmax *Buffer) error {
	c := check("DequantizeNF4")
	if c.float("y", y) {
		c.nf4(codes, absmax, y.Len)
	}
	c.disjointFrom("y", y, "codes", codes, "absmax", absmax)
	return c.err
}

func (Checks) QuantizeBlockwise(codes, absmax, offset, x *Buffer, m CodeMap) error {
	c := check("QuantizeBlockwise")
	c.blockwise("x", x, codes, absmax, offset, m)
	c.disjointFrom("absmax", absmax, "x", x, "offset", offset)
	c.disjoint("offset", offset, "x", x)
	return c.err
}

func (Checks) DequantizeBlockwise(y, codes, absmax, offset *Buffer, m CodeMap) error {
	c := check("DequantizeBlockwise")
	c.blockwise("y", y, codes, absmax, offset, m)
	c.disjointFrom("y", y, "codes", codes, "absmax", absmax, "offset", offset)
	return c.err
}
