package host

// The host device's exponential: the one the kernels that exponentiate
// every element (cross entropy, the attention softmax, GELU) use, a slice
// at a time.

import (
	"math"
	"trainmem/cuda/host/avx2"
)

// expTable holds 2^(j/256) for j in [0, 256).
var expTable = func() (t [256]float64) {
	for j := range t {
		t[j] = math.Exp2(float64(j) / 256)
	}
	return t
}()

const (
	expScale = 256 * math.Log2E
	// ln 2 / 256 split in two: expLn2Hi has trailing zero bits, so k·expLn2Hi
	// is exact for every k the range allows.
	expLn2Hi = 0.693147180369123816490 / 256
	expLn2Lo = 1.90821492927058770002e-10 / 256
	// expRound is 1.5·2^52: adding it rounds to an integer held in the low
	// bits of the mantissa.
	expRound = 0x1.8p52
)

// expTwin holds expLoop's constants, the Go loop's float64 values, for
// its AVX2 twins.
var expTwin = avx2.ExpConsts{
	Low: avx2.Lanes(-708), High: avx2.Lanes(709), Scale: avx2.Lanes(expScale), Round: avx2.Lanes(expRound),
	Ln2Hi: avx2.Lanes(expLn2Hi), Ln2Lo: avx2.Lanes(expLn2Lo),
	C5: avx2.Lanes(1.0 / 120), C4: avx2.Lanes(1.0 / 24), C3: avx2.Lanes(1.0 / 6), C2: avx2.Lanes(0.5), One: avx2.Lanes(1),
	Mask: [4]uint64{255, 255, 255, 255}, Table: &expTable,
}

// withTwin runs a loop over [0, n) as twin, an AVX2 twin that does
// elements from lo to the end it returns, then loop, the Go loop, for the
// (up to) four elements the twin stopped before, and the twin again. The
// twins stop only before four elements whose exponentials leave the fast
// range, so the Go loop sees those and the tail. A nil twin (none for the
// compute type) leaves all of it to loop.
func withTwin(n int, twin func(lo int) int, loop func(lo, hi int)) {
	if !avx2.Available || twin == nil {
		loop(0, n)
		return
	}
	for lo := 0; lo < n; {
		lo = twin(lo)
		hi := min(lo+4, n)
		loop(lo, hi)
		lo = hi
	}
}

// expChunk is how many exponentials a kernel computes at a time, in an
// array on its goroutine's stack.
const expChunk = 512

// expLoop sets a[i] = e^a[i] for every element, in float64, within 2 ulp
// of math.Exp (TestExpLoop), about three times as fast (BenchmarkExp):
// e^x = 2^(k/256)·e^r with k = round(x·256/ln 2) and |r| ≤ ln 2/512, 2^(k/256)
// from expTable and the exponent bits, e^r by its Taylor polynomial of
// degree 5 (error below r⁶/720 < 2e-20). Go inlines no function this
// large, so the kernels call it on a slice, not an element. Arguments
// outside [-708, 709] (where the result leaves the normal range), ±Inf and
// NaN take math.Exp. The EXP macro of avx2_amd64.s is its twin, inside
// the twins of the kernels that exponentiate.
func expLoop(a []float64) {
	for i, x := range a {
		if !(x > -708 && x < 709) {
			a[i] = math.Exp(x)
			continue
		}
		t := x*expScale + expRound
		kb := math.Float64bits(t)
		kf := t - expRound
		r := x - kf*expLn2Hi - kf*expLn2Lo
		// e^r - 1, so that 2^(j/256)·e^r = T + T·(e^r - 1) rounds once
		// near T.
		q := r * (1 + r*(0.5+r*(1.0/6+r*(1.0/24+r*(1.0/120)))))
		tj := expTable[kb&255]
		// kb's low bits hold k (two's complement for k < 0): its low 8
		// bits pick the table entry and the rest is added to the exponent.
		a[i] = math.Float64frombits(math.Float64bits(tj+tj*q) + (kb>>8)<<52)
	}
}
