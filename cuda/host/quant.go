package host

import (
	"math"

	"trainmem/cuda"
)

// The quantization family (cuda/quant.go): bitsandbytes' blockwise
// quantization kernels (csrc/kernels.cu's kQuantizeBlockwise and
// kDequantizeBlockwise, NF4 and General8bit), one block at a time.

// QuantizeNF4 quantizes x blockwise to NF4: a block's absmax, then each
// value's code from x·(1/absmax), two codes a byte, the first high.
func (h *Device) QuantizeNF4(codes, absmax, x *cuda.Buffer) error {
	return h.launch("QuantizeNF4", cuda.Check.QuantizeNF4(codes, absmax, x), func() {
		instance(x.DType == cuda.F64, quantizeNF4[float64], quantizeNF4[float32])(h, codes, absmax, x)
	}, codes, absmax, x)
}

// nf4Mids are the midpoints of neighbouring NF4 values in F, the
// thresholds of bitsandbytes' dQuantizeNF4 (exactly the float64
// midpoints, rounded to F as its fp32 literals are).
func nf4Mids[F float]() [15]F {
	var t [15]F
	for i := range t {
		t[i] = F((cuda.NF4Values[i] + cuda.NF4Values[i+1]) / 2)
	}
	return t
}

// nf4Code is the NF4 code of a normalized value: how many thresholds it
// is above (strictly, so a tie takes the lower code).
func nf4Code[F float](v F, mids *[15]F) uint8 {
	var c uint8
	for _, t := range mids {
		if v > t {
			c++
		}
	}
	return c
}

func quantizeNF4[F float](h *Device, codes, absmax, x *cuda.Buffer) {
	n, mids := x.Len, nf4Mids[F]()
	cs, am := Uint8s(codes), view[float32](absmax)
	h.parallel(cuda.Blocks(n, cuda.NF4Block), 64, func(lo, hi int) {
		var v [cuda.NF4Block]F
		for b := lo; b < hi; b++ {
			i0 := b * cuda.NF4Block
			blk := v[:min(cuda.NF4Block, n-i0)]
			Decode(x, i0, blk)
			var m F
			for _, e := range blk {
				m = max(m, F(math.Abs(float64(e))))
			}
			am[b] = float32(m)
			inv := 1 / m
			code := func(k int) uint8 {
				if k >= len(blk) || m == 0 {
					return cuda.NF4Zero
				}
				return nf4Code(blk[k]*inv, &mids)
			}
			for k := 0; k < len(blk); k += 2 {
				cs[(i0+k)/2] = code(k)<<4 | code(k+1)
			}
		}
	})
}

// DequantizeNF4 is y = NF4Values[code]·absmax, the value as fp32 (the
// product exact in fp64 for an F64 y, else rounded to fp32), then stored.
func (h *Device) DequantizeNF4(y, codes, absmax *cuda.Buffer) error {
	return h.launch("DequantizeNF4", cuda.Check.DequantizeNF4(y, codes, absmax), func() {
		instance(y.DType == cuda.F64, dequantizeNF4[float64], dequantizeNF4[float32])(h, y, codes, absmax)
	}, y, codes, absmax)
}

func dequantizeNF4[F float](h *Device, y, codes, absmax *cuda.Buffer) {
	var lut [16]F
	for i, v := range cuda.NF4Values {
		lut[i] = F(float32(v))
	}
	n, cs, am := y.Len, Uint8s(codes), view[float32](absmax)
	h.parallel(cuda.Blocks(n, cuda.NF4Block), 64, func(lo, hi int) {
		var v [cuda.NF4Block]F
		for b := lo; b < hi; b++ {
			i0 := b * cuda.NF4Block
			blk, s := v[:min(cuda.NF4Block, n-i0)], F(am[b])
			for k := range blk {
				c := cs[(i0+k)/2]
				if k%2 == 0 {
					c >>= 4
				}
				blk[k] = lut[c&15] * s
			}
			Encode(y, i0, blk)
		}
	})
}

// QuantizeBlockwise quantizes x (less its mean, with offset) blockwise to
// the 8-bit codes of m: a block's absmax, then each value's code from
// v·(1/absmax) by bitsandbytes' search (dQuantize).
func (h *Device) QuantizeBlockwise(codes, absmax, offset, x *cuda.Buffer, m cuda.CodeMap) error {
	return h.launch("QuantizeBlockwise", cuda.Check.QuantizeBlockwise(codes, absmax, offset, x, m), func() {
		xs, cs, am := view[float32](x), Uint8s(codes), view[float32](absmax)
		var off float32
		if offset != nil {
			var sum float64
			for _, v := range xs {
				sum += float64(v)
			}
			if len(xs) > 0 {
				off = float32(sum / float64(len(xs)))
			}
			view[float32](offset)[0] = off
		}
		code := m.Values()
		h.parallel(cuda.Blocks(len(xs), cuda.Block8), 16, func(lo, hi int) {
			var v [cuda.Block8]float32
			for b := lo; b < hi; b++ {
				i0 := b * cuda.Block8
				blk := v[:min(cuda.Block8, len(xs)-i0)]
				var mx float32
				for k := range blk {
					blk[k] = xs[i0+k] - off
					mx = max(mx, float32(math.Abs(float64(blk[k]))))
				}
				am[b] = mx
				inv := 1 / mx
				for k, e := range blk {
					if mx == 0 {
						e = 0 // a block of zeros: bitsandbytes' 0·(1/0) would be NaN
					} else {
						e *= inv
					}
					cs[i0+k] = quantize8(code, e)
				}
			}
		})
	}, codes, absmax, offset, x)
}

// quantize8 is the code of x (a value in [-1, 1]) in an 8-bit map, as
// bitsandbytes' dQuantize finds it: a binary search from the middle, then
// the nearer of the two values it ends between (a value on their fp32
// midpoint takes the one the search ended on).
func quantize8(code *[256]float32, x float32) uint8 {
	pivot, upperPivot, lowerPivot := 127, 255, 0
	lower, upper := float32(-1), float32(1)
	val := code[pivot]
	for i := 64; i > 0; i >>= 1 {
		if x > val {
			lowerPivot, lower = pivot, val
			pivot += i
		} else {
			upperPivot, upper = pivot, val
			pivot -= i
		}
		val = code[pivot]
	}
	if upperPivot == 255 {
		upper = code[upperPivot]
	}
	if lowerPivot == 0 {
		lower = code[lowerPivot]
	}
	if x > val {
		if x > (upper+val)*0.5 {
			return uint8(upperPivot)
		}
		return uint8(pivot)
	}
	if x < (lower+val)*0.5 {
		return uint8(lowerPivot)
	}
	return uint8(pivot)
}

// DequantizeBlockwise is y = m[code]·absmax (+ offset), in fp32: the
// product rounded, then the sum, as torch's dequantize_blockwise and its
// in-place add of the offset.
func (h *Device) DequantizeBlockwise(y, codes, absmax, offset *cuda.Buffer, m cuda.CodeMap) error {
	return h.launch("DequantizeBlockwise", cuda.Check.DequantizeBlockwise(y, codes, absmax, offset, m), func() {
		ys, cs, am := view[float32](y), Uint8s(codes), view[float32](absmax)
		var off float32
		if offset != nil {
			off = view[float32](offset)[0]
		}
		code := m.Values()
		h.parallel(len(ys), 1<<14, func(lo, hi int) {
			for i := lo; i < hi; i++ {
				v := float32(code[cs[i]] * am[i/cuda.Block8]) // rounded before the add: no fused multiply-add
				if offset != nil {
					v += off
				}
				ys[i] = v
			}
		})
	}, y, codes, absmax, offset)
}
