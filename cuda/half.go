package cuda

// IEEE binary16 and bfloat16 conversions, round to nearest even, as CUDA's
// __float2half_rn and __float2bfloat16_rn. Widening is exact. NaNs keep
// their sign and as much payload as fits, and stay NaN (the quiet bit is set
// when the kept payload would be zero); f16 → f32 → f16 and bf16 → f32 →
// bf16 give back every one of the 65536 bit patterns.

import "math"

// F16ToF32 widens an IEEE binary16 bit pattern exactly.
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	man := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf or NaN: payload shifted into place
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal: rebias 15 → 127
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	}
	// Subnormal: man·2^-24, exact in binary32.
	f := float32(man) * (1.0 / (1 << 24))
	if sign != 0 {
		f = -f
	}
	return f
}

// F32ToF16 rounds f to the nearest binary16, ties to even; beyond 65504
// (past the halfway point to 65536) it gives ±Inf.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0xff {
		if man == 0 {
			return sign | 0x7c00
		}
		p := uint16(man >> 13)
		if p == 0 {
			p = 0x200 // keep it a NaN
		}
		return sign | 0x7c00 | p
	}
	e := exp - 127 + 15 // binary16 biased exponent
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal (or zero) in binary16: the value is m·2^-24 with m
		// = full significand (24 bits, implicit one) shifted right.
		if e < -10 {
			// Below half the smallest subnormal (2^-25): rounds to zero.
			// Exactly 2^-25 needs e = -10 with a zero mantissa, handled
			// below.
			return sign
		}
		full := man | 0x800000
		shift := uint32(14 - e) // 24-bit significand → 10-bit subnormal field
		return sign | uint16(roundShift(full, shift))
	}
	// Normal: drop 13 mantissa bits, rounding; a carry out of the mantissa
	// bumps the exponent, possibly to Inf, which is right.
	return sign | uint16(uint32(e)<<10+roundShift(man, 13))
}

// roundShift returns x >> s rounded to nearest, ties to even (s ≥ 1).
func roundShift(x, s uint32) uint32 {
	if s >= 32 {
		return 0
	}
	q := x >> s
	rem := x & (1<<s - 1)
	half := uint32(1) << (s - 1)
	if rem > half || rem == half && q&1 == 1 {
		q++
	}
	return q
}

// BF16ToF32 widens a bfloat16 bit pattern exactly.
func BF16ToF32(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// F32ToBF16 rounds f to the nearest bfloat16, ties to even.
func F32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN
		p := uint16(b >> 16)
		if p&0x7f == 0 {
			p |= 0x40
		}
		return p
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// f64ToF32Odd rounds x to binary32 with round-to-odd: exact values are
// kept, inexact ones truncated toward zero with the last bit set. Rounding
// that result to a format of at most 22 significand bits (binary16,
// bfloat16) to nearest even gives x correctly rounded, with no double
// rounding error.
func f64ToF32Odd(x float64) float32 {
	r := float32(x)
	if float64(r) == x || x != x {
		return r
	}
	if math.Abs(float64(r)) > math.Abs(x) {
		// Rounded away from zero: step back one unit toward zero.
		r = math.Float32frombits(math.Float32bits(r) - 1)
	}
	return math.Float32frombits(math.Float32bits(r) | 1)
}

// F64ToF16 rounds x to the nearest binary16 (ties to even) in one rounding.
func F64ToF16(x float64) uint16 { return F32ToF16(f64ToF32Odd(x)) }

// F64ToBF16 rounds x to the nearest bfloat16 (ties to even) in one rounding.
func F64ToBF16(x float64) uint16 { return F32ToBF16(f64ToF32Odd(x)) }
