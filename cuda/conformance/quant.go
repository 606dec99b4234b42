package conformance

// The quantization family (QuantizeNF4, DequantizeNF4, QuantizeBlockwise,
// DequantizeBlockwise): its tests against float64 references of the
// algorithms (QLoRA, Dettmers et al. 2023, Section 3: blockwise absmax
// scaling to the nearest of the 16 NF4 values; bitsandbytes' blockwise
// 8-bit quantization to the nearest value of a code map), the references
// themselves, and its calls with bad and good arguments.
//
// Codes are compared exactly. A device normalizes in its compute type
// (x·(1/absmax) in fp32), the reference in float64, so a value whose
// normalized form lies within that rounding of the midpoint between two
// codes may take either: such values are counted and logged, every other
// code must be the reference's. Scales equal the reference's as stored
// (fp32), the offset within one fp32 rounding of the float64 mean.

import (
	"math"
	"sort"
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "quantization", tests: []familyTest{{"NF4", testNF4}, {"Blockwise8", testBlockwise8}},
		invalid: invalidQuant, valid: validQuant})
}

func invalidQuant(f *fixture) []badCall {
	d := f.d
	x := f.f32(100)
	codes, absmax := f.alloc(cuda.U8, 50), f.f32(2)
	codes8, absmax8 := f.alloc(cuda.U8, 100), f.f32(1)
	return []badCall{
		{"QuantizeNF4 short codes", d.QuantizeNF4(f.alloc(cuda.U8, 49), absmax, x), []string{"QuantizeNF4", "codes has 49 elements, want (n+1)/2 = 50"}},
		{"QuantizeNF4 fp32 codes", d.QuantizeNF4(f.f32(50), absmax, x), []string{"QuantizeNF4", "codes is fp32, want uint8"}},
		{"QuantizeNF4 absmax", d.QuantizeNF4(codes, f.f32(1), x), []string{"QuantizeNF4", "absmax has 1 elements, want ceil(n/64) = 2"}},
		{"QuantizeNF4 uint8 x", d.QuantizeNF4(codes, absmax, f.alloc(cuda.U8, 100)), []string{"QuantizeNF4", "x is uint8, want a float type"}},
		{"DequantizeNF4 bf16 absmax", d.DequantizeNF4(x, codes, f.alloc(cuda.BF16, 2)), []string{"DequantizeNF4", "absmax is bf16, want fp32"}},
		{"DequantizeNF4 y over absmax", d.DequantizeNF4(x.View(0, 64), f.alloc(cuda.U8, 32), x.View(63, 1)), []string{"DequantizeNF4", "overlaps absmax"}},
		{"QuantizeBlockwise bf16 x", d.QuantizeBlockwise(codes8, absmax8, nil, f.alloc(cuda.BF16, 100), cuda.DynamicSigned), []string{"QuantizeBlockwise", "x is bf16, want fp32"}},
		{"QuantizeBlockwise offset", d.QuantizeBlockwise(codes8, absmax8, f.f32(2), x, cuda.DynamicSigned), []string{"QuantizeBlockwise", "offset has 2 elements, want 1"}},
		{"QuantizeBlockwise map", d.QuantizeBlockwise(codes8, absmax8, nil, x, cuda.CodeMap(9)), []string{"QuantizeBlockwise", "map is 9"}},
		{"DequantizeBlockwise short codes", d.DequantizeBlockwise(x, f.alloc(cuda.U8, 99), absmax8, nil, cuda.DynamicSigned), []string{"DequantizeBlockwise", "codes has 99 elements, want n = 100"}},
		{"DequantizeBlockwise fp16 y", d.DequantizeBlockwise(f.alloc(cuda.F16, 100), codes8, absmax8, nil, cuda.DynamicSigned), []string{"DequantizeBlockwise", "y is fp16, want fp32"}},
	}
}

func validQuant(f *fixture, dt cuda.DType) []goodCall {
	d := f.d
	x, y := f.alloc(dt, 300), f.alloc(dt, 300)
	codes, absmax := f.alloc(cuda.U8, 150), f.f32(5)
	x8, codes8, absmax8, off := f.f32(300), f.alloc(cuda.U8, 300), f.f32(2), f.f32(1)
	return []goodCall{
		{"QuantizeNF4", func() error { return d.QuantizeNF4(codes, absmax, x) }},
		{"DequantizeNF4", func() error { return d.DequantizeNF4(y, codes, absmax) }},
		{"QuantizeBlockwise", func() error { return d.QuantizeBlockwise(codes8, absmax8, off, x8, cuda.DynamicSigned) }},
		{"DequantizeBlockwise", func() error { return d.DequantizeBlockwise(x8, codes8, absmax8, off, cuda.DynamicSigned) }},
	}
}

// nearest is the index of the value of table nearest v, the lower on a
// tie, and whether v is within slack of the midpoint between two values
// (then a device computing in less precision may take either).
func nearest(table []float64, v, slack float64) (int, bool) {
	i := sort.SearchFloat64s(table, v) // the first value ≥ v
	switch {
	case i == 0:
		return 0, false
	case i == len(table):
		return len(table) - 1, false
	}
	mid := (table[i-1] + table[i]) / 2
	ambiguous := math.Abs(v-mid) <= slack
	if v > mid {
		return i, ambiguous
	}
	return i - 1, ambiguous
}

// refNF4 is QLoRA's NF4 quantization of xs in float64: each block's
// absmax, then each value's nearest NF4 value to x/absmax (code 7, 0.0,
// for a block of zeros); slack is the compute type's rounding of the
// normalized values.
func refNF4(xs []float64, slack float64) (codes []int, ambiguous []bool, absmax []float64) {
	table := cuda.NF4Values[:]
	for b0 := 0; b0 < len(xs); b0 += cuda.NF4Block {
		blk := xs[b0:min(b0+cuda.NF4Block, len(xs))]
		m := 0.0
		for _, v := range blk {
			m = max(m, math.Abs(v))
		}
		absmax = append(absmax, m)
		for _, v := range blk {
			c, amb := cuda.NF4Zero, false
			if m != 0 {
				c, amb = nearest(table, v/m, slack)
			}
			codes = append(codes, c)
			ambiguous = append(ambiguous, amb)
		}
	}
	return codes, ambiguous, absmax
}

// unpackNF4 is the n codes of packed NF4 bytes, the first of a byte high.
func unpackNF4(packed []uint8, n int) []int {
	out := make([]int, n)
	for i := range out {
		c := packed[i/2]
		if i%2 == 0 {
			c >>= 4
		}
		out[i] = int(c & 15)
	}
	return out
}

// compareCodes checks got against the reference's codes: equal except
// where the reference marks a value ambiguous.
func compareCodes(t *testing.T, what string, got, want []int, ambiguous []bool) {
	t.Helper()
	bad, amb, differ := 0, 0, 0
	for i := range want {
		if ambiguous[i] {
			amb++
		}
		if got[i] != want[i] {
			if ambiguous[i] {
				differ++
				continue
			}
			if bad < 5 {
				t.Errorf("%s: code [%d] is %d, want %d", what, i, got[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d codes differ from the reference", what, bad, len(want))
	}
	t.Logf("%s: %d codes, %d within the compute type's rounding of a midpoint (%d of them differ)", what, len(want), amb, differ)
}

// slackFor is the rounding of a normalized value x·(1/absmax) in dt's
// compute type: two roundings of at most half an ulp of 1.
func slackFor(dt cuda.DType) float64 {
	if dt == cuda.F64 {
		return 1e-15
	}
	return math.Ldexp(1, -23)
}

func testNF4(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		// An odd count with a short last block, one block of zeros, and
		// values exactly on NF4 values (x = NF4·absmax).
		n := 37*cuda.NF4Block + 27
		vals := e.randn(n)
		for i := 5 * cuda.NF4Block; i < 6*cuda.NF4Block; i++ {
			vals[i] = 0
		}
		for k := range cuda.NF4Block {
			vals[7*cuda.NF4Block+k] = 2 * cuda.NF4Values[k%16] // absmax 2
		}
		x, xs := e.buf(dt, vals)
		codes, absmax := e.out(cuda.U8, cuda.NF4Bytes(n)), e.out(cuda.F32, cuda.Blocks(n, cuda.NF4Block))
		e.must(e.d.QuantizeNF4(codes, absmax, x))
		packed := make([]uint8, codes.Len)
		e.must(e.d.Download(packed, codes))
		if packed[len(packed)-1]&15 != cuda.NF4Zero {
			t.Errorf("the last byte of an odd count is %#x, want its low half %d (0.0)", packed[len(packed)-1], cuda.NF4Zero)
		}
		want, amb, wantMax := refNF4(xs, slackFor(dt))
		got := unpackNF4(packed, n)
		compareCodes(t, "NF4 codes", got, want, amb)
		for k := range cuda.NF4Values {
			if i := 7*cuda.NF4Block + k; got[i] != k {
				t.Errorf("x = %g·absmax: code %d, want %d", cuda.NF4Values[k], got[i], k)
			}
		}
		for i := range wantMax {
			wantMax[i] = float64(float32(wantMax[i])) // stored as fp32
		}
		compare(t, "NF4 absmax", e.get(absmax), wantMax, tol{})

		// Dequantize: the codes' values times the stored scales, against
		// the reference's; and the quantization error, stated.
		y := e.out(dt, n)
		e.must(e.d.DequantizeNF4(y, codes, absmax))
		ys, scales := e.get(y), e.get(absmax)
		ref := make([]float64, n)
		var worst, sq float64
		for i := range ref {
			ref[i] = float64(float32(cuda.NF4Values[got[i]])) * scales[i/cuda.NF4Block]
			if s := scales[i/cuda.NF4Block]; s != 0 {
				d := (ys[i] - xs[i]) / s
				worst, sq = max(worst, math.Abs(d)), sq+d*d
			}
		}
		compare(t, "NF4 dequantized", ys, ref, tolFor(dt))
		t.Logf("NF4 of N(0,1) values: error |x - dequantized| up to %.4f of the block's absmax, RMS %.4f", worst, math.Sqrt(sq/float64(n)))
		if worst > 0.5*(cuda.NF4Values[1]-cuda.NF4Values[0])+1e-2 {
			t.Errorf("NF4's error %.4f of absmax is more than half the widest gap between NF4 values", worst)
		}
	})
}

// refQuantize8 is blockwise 8-bit quantization of vals in float64: each
// block's scale its largest magnitude, each value's code the nearest in
// table to value/scale (a block of zeros: the code of 0), a value within
// slack(value/scale) of a midpoint marked ambiguous; with signed a code
// of the other sign is moved one toward the value's (bitsandbytes keeps a
// small negative m from rounding to +0).
func refQuantize8(vals, table []float64, slack func(q float64) float64, signed bool) (codes []int, ambiguous []bool, scales []float64) {
	for b0 := 0; b0 < len(vals); b0 += cuda.Block8 {
		blk := vals[b0:min(b0+cuda.Block8, len(vals))]
		m := 0.0
		for _, x := range blk {
			m = max(m, math.Abs(x))
		}
		scales = append(scales, m)
		for _, x := range blk {
			q := 0.0
			if m != 0 {
				q = x / m
			}
			c, amb := nearest(table, q, slack(q))
			if signed && math.Signbit(table[c]) != math.Signbit(x) {
				if x > 0 {
					c++
				} else {
					c--
				}
			}
			codes = append(codes, c)
			ambiguous = append(ambiguous, amb)
		}
	}
	return codes, ambiguous, scales
}

// mapOf is a code map's values in float64.
func mapOf(m cuda.CodeMap) []float64 {
	out := make([]float64, 256)
	for i, v := range m.Values() {
		out[i] = float64(v)
	}
	return out
}

func testBlockwise8(t *testing.T, nd NewDevice) {
	for _, m := range []cuda.CodeMap{cuda.DynamicSigned, cuda.DynamicUnsigned} {
		for _, withOffset := range []bool{false, true} {
			if withOffset && m == cuda.DynamicUnsigned {
				continue // differences from a mean are signed
			}
			name := m.String()
			if withOffset {
				name += "-offset"
			}
			t.Run(name, func(t *testing.T) {
				e := newEnv(t, nd)
				n := 9*cuda.Block8 + 77
				vals := e.randn(n)
				if m == cuda.DynamicUnsigned {
					for i := range vals {
						vals[i] = vals[i] * vals[i] // Adam's v: ≥ 0
					}
				} else if withOffset {
					for i := range vals {
						vals[i] = 3 + math.Abs(vals[i]) // NF4's scales: positive, around a mean
					}
				}
				for i := 2 * cuda.Block8; i < 3*cuda.Block8 && !withOffset; i++ {
					vals[i] = 0
				}
				x, xs := e.buf(cuda.F32, vals)
				codes, absmax := e.out(cuda.U8, n), e.out(cuda.F32, cuda.Blocks(n, cuda.Block8))
				var off *cuda.Buffer
				var offset float32
				if withOffset {
					off = e.out(cuda.F32, 1)
				}
				e.must(e.d.QuantizeBlockwise(codes, absmax, off, x, m))
				if withOffset {
					sum := 0.0
					for _, v := range xs {
						sum += v
					}
					got := e.get(off)[0]
					want := sum / float64(n)
					if math.Abs(got-want) > math.Ldexp(math.Abs(want), -24)*1.01 {
						t.Errorf("offset %.9g, want the mean %.9g within fp32's rounding", got, want)
					}
					offset = float32(got)
				}
				table := mapOf(m)
				diffs := make([]float64, n) // less the offset, in fp32 as the devices take it
				for i, v := range xs {
					diffs[i] = float64(float32(v) - offset)
				}
				want, amb, wantMax := refQuantize8(diffs, table, func(float64) float64 { return math.Ldexp(1, -23) }, false)
				packed := make([]uint8, n)
				e.must(e.d.Download(packed, codes))
				got := make([]int, n)
				for i, c := range packed {
					got[i] = int(c)
				}
				compareCodes(t, "8-bit codes", got, want, amb)
				compare(t, "8-bit absmax", e.get(absmax), wantMax, tol{})

				y := e.out(cuda.F32, n)
				e.must(e.d.DequantizeBlockwise(y, codes, absmax, off, m))
				scales := e.get(absmax)
				ref := make([]float64, n)
				var worst float64
				for i := range ref {
					ref[i] = table[got[i]]*scales[i/cuda.Block8] + float64(offset)
					if s := scales[i/cuda.Block8]; s != 0 {
						worst = max(worst, math.Abs(ref[i]-xs[i])/s)
					}
				}
				compare(t, "8-bit dequantized", e.get(y), ref, tolFor(cuda.F32))
				t.Logf("%s: error |x - dequantized| up to %.2g of the block's absmax", m, worst)
			})
		}
	}
}
