package cuda

import (
	"math"
	"math/big"
	"testing"
)

func TestF16Known(t *testing.T) {
	// Bit patterns from the IEEE 754 binary16 tables (Wikipedia's
	// "Half-precision floating-point format" examples).
	for _, tc := range []struct {
		f    float32
		bits uint16
	}{
		{0, 0x0000},
		{float32(math.Copysign(0, -1)), 0x8000},
		{1, 0x3c00},
		{-2, 0xc000},
		{65504, 0x7bff},                            // largest finite
		{float32(math.Pow(2, -14)), 0x0400},        // smallest normal
		{float32(math.Pow(2, -24)), 0x0001},        // smallest subnormal
		{float32(1023 * math.Pow(2, -24)), 0x03ff}, // largest subnormal
		{0.333251953125, 0x3555},                   // 1/3 rounded
		{float32(math.Inf(1)), 0x7c00},
		{float32(math.Inf(-1)), 0xfc00},
		{1 + 1.0/1024, 0x3c01}, // next after one
	} {
		if got := F32ToF16(tc.f); got != tc.bits {
			t.Errorf("F32ToF16(%g) = %#04x, want %#04x", tc.f, got, tc.bits)
		}
		if got := F16ToF32(tc.bits); got != tc.f || math.Signbit(float64(got)) != math.Signbit(float64(tc.f)) {
			t.Errorf("F16ToF32(%#04x) = %g, want %g", tc.bits, got, tc.f)
		}
	}
}

func TestF16Rounding(t *testing.T) {
	ulp1 := float32(1.0 / 1024) // binary16 spacing in [1, 2)
	for _, tc := range []struct {
		name string
		f    float32
		bits uint16
	}{
		{"0.1", 0.1, 0x2e66},
		{"tie to even, down", 1 + ulp1/2, 0x3c00},
		{"tie to even, up", 1 + 3*ulp1/2, 0x3c02},
		{"just above a tie", math.Nextafter32(1+ulp1/2, 2), 0x3c01},
		{"just below a tie", math.Nextafter32(1+3*ulp1/2, 0), 0x3c01},
		{"65519 stays finite", 65519, 0x7bff},
		{"65520 ties to Inf", 65520, 0x7c00},
		{"1e6 overflows", 1e6, 0x7c00},
		{"-1e6 overflows", -1e6, 0xfc00},
		{"half the smallest subnormal ties to zero", float32(math.Pow(2, -25)), 0x0000},
		{"above half the smallest subnormal", math.Nextafter32(float32(math.Pow(2, -25)), 1), 0x0001},
		{"1.5 smallest subnormals ties to 2", float32(1.5 * math.Pow(2, -24)), 0x0002},
		{"2.5 smallest subnormals ties to 2", float32(2.5 * math.Pow(2, -24)), 0x0002},
		{"largest subnormal rounds up to normal", float32(1023.5 * math.Pow(2, -24)), 0x0400},
		{"tiny", 1e-30, 0x0000},
		{"negative tiny", -1e-30, 0x8000},
		{"binary32 subnormal", math.SmallestNonzeroFloat32, 0x0000},
	} {
		if got := F32ToF16(tc.f); got != tc.bits {
			t.Errorf("%s: F32ToF16(%g) = %#04x, want %#04x", tc.name, tc.f, got, tc.bits)
		}
	}
}

func TestBF16Known(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    float32
		bits uint16
	}{
		{"one", 1, 0x3f80},
		{"minus two", -2, 0xc000},
		{"pi", math.Pi, 0x4049},                    // 3.140625
		{"tie to even, down", 1 + 1.0/256, 0x3f80}, // halfway between 1 and 1+2^-7
		{"tie to even, up", 1 + 3.0/256, 0x3f82},
		{"largest finite", math.Float32frombits(0x7f7f0000), 0x7f7f},
		{"binary32 max overflows", math.MaxFloat32, 0x7f80},
		{"Inf", float32(math.Inf(1)), 0x7f80},
		{"-Inf", float32(math.Inf(-1)), 0xff80},
		{"subnormal kept", math.Float32frombits(0x00010000), 0x0001},
		{"subnormal rounds", math.Float32frombits(0x00018000), 0x0002},
	} {
		if got := F32ToBF16(tc.f); got != tc.bits {
			t.Errorf("%s: F32ToBF16(%g) = %#04x, want %#04x", tc.name, tc.f, got, tc.bits)
		}
	}
}

func TestHalfNaN(t *testing.T) {
	nan := float32(math.NaN())
	if h := F32ToF16(nan); h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
		t.Errorf("F32ToF16(NaN) = %#04x, not a NaN", h)
	}
	// A binary32 NaN whose payload lives only in the low bits must not
	// become Inf.
	low := math.Float32frombits(0xff800001)
	if h := F32ToF16(low); h != 0xfe00 {
		t.Errorf("F32ToF16(low-payload -NaN) = %#04x, want 0xfe00", h)
	}
	if h := F32ToBF16(low); h != 0xffc0 {
		t.Errorf("F32ToBF16(low-payload -NaN) = %#04x, want 0xffc0", h)
	}
	if f := F16ToF32(0x7e00); !math.IsNaN(float64(f)) {
		t.Errorf("F16ToF32(0x7e00) = %g, want NaN", f)
	}
	if f := BF16ToF32(0x7fc0); !math.IsNaN(float64(f)) {
		t.Errorf("BF16ToF32(0x7fc0) = %g, want NaN", f)
	}
}

// TestHalfRoundTripExhaustive widens every 16-bit pattern and narrows it
// back: each must come back unchanged, NaNs included.
func TestHalfRoundTripExhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		if got := F32ToF16(F16ToF32(h)); got != h {
			t.Fatalf("fp16 %#04x → %g → %#04x", h, F16ToF32(h), got)
		}
		if got := F32ToBF16(BF16ToF32(h)); got != h {
			t.Fatalf("bf16 %#04x → %g → %#04x", h, BF16ToF32(h), got)
		}
	}
}

// TestF16Exhaustive checks the narrowing of every value halfway between
// neighbouring binary16 values and one binary32 step on either side of it,
// against exact rational arithmetic.
func TestF16Exhaustive(t *testing.T) {
	for i := 0; i < 0x7c00; i++ { // positive finite values
		lo := F16ToF32(uint16(i))
		hi := F16ToF32(uint16(i + 1)) // 0x7c00 is +Inf: the tie is at 65520
		mid := new(big.Float).SetPrec(64).SetFloat64(float64(lo))
		if i+1 == 0x7c00 {
			mid.SetFloat64(65520)
		} else {
			mid.Add(mid, new(big.Float).SetFloat64(float64(hi)))
			mid.Quo(mid, big.NewFloat(2))
		}
		m, acc := mid.Float32()
		if acc != big.Exact {
			t.Fatalf("midpoint of %#04x is not a binary32", i)
		}
		even := uint16(i)
		if i&1 == 1 {
			even = uint16(i + 1)
		}
		for _, tc := range []struct {
			f    float32
			want uint16
		}{{m, even}, {math.Nextafter32(m, 0), uint16(i)}, {math.Nextafter32(m, float32(math.Inf(1))), uint16(i + 1)}} {
			if got := F32ToF16(tc.f); got != tc.want {
				t.Fatalf("F32ToF16(%g) = %#04x, want %#04x (between %#04x and %#04x)", tc.f, got, tc.want, i, i+1)
			}
			if got := F32ToF16(-tc.f); got != tc.want|0x8000 {
				t.Fatalf("F32ToF16(%g) = %#04x, want %#04x", -tc.f, got, tc.want|0x8000)
			}
		}
	}
}

func TestF64ToHalfSingleRounding(t *testing.T) {
	// 1 + 2^-11 + 2^-40 is just above the fp16 tie between 1 and 1+2^-10;
	// rounding through binary32 first would land on the tie (1+2^-11) and
	// then go down to 1. Correct rounding goes up.
	x := 1 + math.Pow(2, -11) + math.Pow(2, -40)
	if got := F64ToF16(x); got != 0x3c01 {
		t.Errorf("F64ToF16(1+2^-11+2^-40) = %#04x, want 0x3c01", got)
	}
	if got := F32ToF16(float32(x)); got != 0x3c00 {
		t.Errorf("the double rounding this guards against did not happen: %#04x", got)
	}
	y := 1 + math.Pow(2, -8) + math.Pow(2, -40)
	if got := F64ToBF16(y); got != 0x3f81 {
		t.Errorf("F64ToBF16(1+2^-8+2^-40) = %#04x, want 0x3f81", got)
	}
	for _, tc := range []struct {
		x    float64
		want uint16
	}{{1, 0x3c00}, {65520, 0x7c00}, {1e300, 0x7c00}, {-1e-300, 0x8000}, {math.Inf(-1), 0xfc00}} {
		if got := F64ToF16(tc.x); got != tc.want {
			t.Errorf("F64ToF16(%g) = %#04x, want %#04x", tc.x, got, tc.want)
		}
	}
	if got := F64ToF16(math.NaN()); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
		t.Errorf("F64ToF16(NaN) = %#04x", got)
	}
}
