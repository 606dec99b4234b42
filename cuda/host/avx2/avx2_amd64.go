package avx2

import "golang.org/x/sys/cpu"

// Available is whether the twins run here: the CPU has AVX2, the OS saves
// the YMM registers, and Go does not fuse the Go loops' multiply-adds
// (it does when built with GOAMD64=v3 or above, and then the loops' results
// are no longer the twins'; the Go loops run alone).
var Available = cpu.X86.HasAVX2 && !goFusesMultiplyAdds

// whole is how many of n elements a twin of the given width (a power of
// two) does: the whole groups, none where the twins do not run.
func whole(n, width int) int {
	if !Available {
		return 0
	}
	return n &^ (width - 1)
}

//go:noescape
func adamAVX2(p, gr, m, v *float32, n int, k *AdamConsts)

// Adam runs host's adamLoop over the longest prefix of p whose length is a
// multiple of 8 (gr, m and v at least as long), and returns that length.
func Adam(p, gr, m, v []float32, k *AdamConsts) int {
	n := whole(len(p), 8)
	if n == 0 {
		return 0
	}
	_, _, _ = gr[n-1], m[n-1], v[n-1]
	adamAVX2(&p[0], &gr[0], &m[0], &v[0], n, k)
	return n
}

//go:noescape
func expShiftedSumAVX2(e *float64, row *float32, n int, shift float64, sums *[4]float64, k *ExpConsts) int

//go:noescape
func geluAVX2(y, x *float32, n int, gc *GELUConsts, k *ExpConsts) int

//go:noescape
func geluBackwardAVX2(dx, dy, x *float32, n int, gc *GELUConsts, k *ExpConsts) int

// Each of the next runs its Go loop four elements at a time from the start
// of its slices, up to the first four whose exponentials' arguments are
// not all inside (k.Low, k.High) (NaNs included) or fewer than four
// remain, and returns how many elements it did.

// ExpShiftedSum is host's expShiftedSum: e[j] = exp(row[j] - shift) and
// sums[j%4] += e[j] (e at least as long as row).
func ExpShiftedSum(e []float64, row []float32, shift float64, sums *[4]float64, k *ExpConsts) int {
	n := whole(len(row), 4)
	if n == 0 {
		return 0
	}
	_ = e[n-1]
	return expShiftedSumAVX2(&e[0], &row[0], n, shift, sums, k)
}

// GELU is host's geluLoop: y[i] = GELU(x[i]) (x at least as long as y).
func GELU(y, x []float32, g *GELUConsts, k *ExpConsts) int {
	n := whole(len(y), 4)
	if n == 0 {
		return 0
	}
	_ = x[n-1]
	return geluAVX2(&y[0], &x[0], n, g, k)
}

// GELUBackward is host's geluBackwardLoop: dx[i] = dy[i]·GELU'(x[i]) (dy
// and x at least as long as dx).
func GELUBackward(dx, dy, x []float32, g *GELUConsts, k *ExpConsts) int {
	n := whole(len(dx), 4)
	if n == 0 {
		return 0
	}
	_, _ = dy[n-1], x[n-1]
	return geluBackwardAVX2(&dx[0], &dy[0], &x[0], n, g, k)
}

//go:noescape
func addAVX2(y, a, b *float32, n int)

//go:noescape
func accumulateAVX2(acc *float64, x *float32, n int)

//go:noescape
func roundAVX2(y *float32, x *float64, n int)

//go:noescape
func scaleAVX2(y *float32, n int, s float64)

//go:noescape
func layerNormRowAVX2(y, x, w, b *float32, n int, mean, rstd float32)

// The elementwise twins: each does the longest prefix of its first slice
// whose length is a multiple of its width (the other slices at least as
// long) and returns that length.

// Add is y[i] = a[i] + b[i] (host's addKernel and addBiasKernel).
func Add(y, a, b []float32) int {
	n := whole(len(y), 8)
	if n == 0 {
		return 0
	}
	_, _ = a[n-1], b[n-1]
	addAVX2(&y[0], &a[0], &b[0], n)
	return n
}

// Accumulate is acc[i] += float64(x[i]) (host's column sums).
func Accumulate(acc []float64, x []float32) int {
	n := whole(len(acc), 4)
	if n == 0 {
		return 0
	}
	_ = x[n-1]
	accumulateAVX2(&acc[0], &x[0], n)
	return n
}

// Round is y[i] = float32(x[i]).
func Round(y []float32, x []float64) int {
	n := whole(len(y), 4)
	if n == 0 {
		return 0
	}
	_ = x[n-1]
	roundAVX2(&y[0], &x[0], n)
	return n
}

// Scale is y[i] = float32(float64(y[i]) * s).
func Scale(y []float32, s float64) int {
	n := whole(len(y), 4)
	if n == 0 {
		return 0
	}
	scaleAVX2(&y[0], n, s)
	return n
}

// LayerNormRow is host's layerNormKernel on one row: y[c] =
// (x[c]-mean)*rstd*w[c] + b[c].
func LayerNormRow(y, x, w, b []float32, mean, rstd float32) int {
	n := whole(len(y), 8)
	if n == 0 {
		return 0
	}
	_, _, _ = x[n-1], w[n-1], b[n-1]
	layerNormRowAVX2(&y[0], &x[0], &w[0], &b[0], n, mean, rstd)
	return n
}

//go:noescape
func nonFinite32AVX2(w *uint32, n int) bool

//go:noescape
func layerNormGainAVX2(acc *float64, dy, x *float32, n int, mean, rstd float32)

//go:noescape
func sumLanesAVX2(x *float32, n int, sums *[4]float64)

//go:noescape
func squaredDevLanesAVX2(x *float32, n int, mean float64, sums *[4]float64)

//go:noescape
func layerNormBackwardSumsAVX2(dy, w, x *float32, n int, mean, rstd float32, sg, sgx *[4]float64)

//go:noescape
func layerNormBackwardRowAVX2(o, dy, w, x *float32, n int, mean, rstd, mg, mgx float32)

//go:noescape
func rowMaxAVX2(row *float32, n int, m *[8]float32)

// NonFinite32 is host's anyExponentAllOnes on the bits of float32 values:
// whether any of the longest prefix of w whose length is a multiple of 16
// is an Inf or a NaN, and that length.
func NonFinite32(w []uint32) (n int, found bool) {
	n = whole(len(w), 16)
	if n == 0 {
		return 0, false
	}
	return n, nonFinite32AVX2(&w[0], n)
}

// LayerNormGain is host's layerNormBackwardWKernel term: acc[c] +=
// float64(dy[c] * ((x[c] - mean) * rstd)).
func LayerNormGain(acc []float64, dy, x []float32, mean, rstd float32) int {
	n := whole(len(acc), 4)
	if n == 0 {
		return 0
	}
	_, _ = dy[n-1], x[n-1]
	layerNormGainAVX2(&acc[0], &dy[0], &x[0], n, mean, rstd)
	return n
}

// SumLanes is host's sumLanes: sums[j%4] += float64(x[j]).
func SumLanes(x []float32, sums *[4]float64) int {
	n := whole(len(x), 4)
	if n == 0 {
		return 0
	}
	sumLanesAVX2(&x[0], n, sums)
	return n
}

// SquaredDevLanes is host's squaredDevLanes: d := float64(x[j]) - mean;
// sums[j%4] += d*d.
func SquaredDevLanes(x []float32, mean float64, sums *[4]float64) int {
	n := whole(len(x), 4)
	if n == 0 {
		return 0
	}
	squaredDevLanesAVX2(&x[0], n, mean, sums)
	return n
}

// LayerNormBackwardSums is host's layerNormBackwardSums: g :=
// dy[c]*w[c]; sg[c%4] += float64(g); sgx[c%4] += float64(g * (x[c] -
// mean) * rstd).
func LayerNormBackwardSums(dy, w, x []float32, mean, rstd float32, sg, sgx *[4]float64) int {
	n := whole(len(dy), 4)
	if n == 0 {
		return 0
	}
	_, _ = w[n-1], x[n-1]
	layerNormBackwardSumsAVX2(&dy[0], &w[0], &x[0], n, mean, rstd, sg, sgx)
	return n
}

// LayerNormBackwardRow is host's layerNormBackwardXKernel output row:
// o[c] = rstd * (dy[c]*w[c] - mg - ((x[c]-mean)*rstd)*mgx).
func LayerNormBackwardRow(o, dy, w, x []float32, mean, rstd, mg, mgx float32) int {
	n := whole(len(o), 8)
	if n == 0 {
		return 0
	}
	_, _, _ = dy[n-1], w[n-1], x[n-1]
	layerNormBackwardRowAVX2(&o[0], &dy[0], &w[0], &x[0], n, mean, rstd, mg, mgx)
	return n
}

// RowMax is host's rowMax over the longest prefix of row whose length is
// a multiple of 8, into m, its eight running maxima (lane j%8).
func RowMax(row []float32, m *[8]float32) int {
	n := whole(len(row), 8)
	if n == 0 {
		return 0
	}
	rowMaxAVX2(&row[0], n, m)
	return n
}

//go:noescape
func bf16ToF32AVX2(dst *float32, src *uint16, n int)

//go:noescape
func f32ToBF16AVX2(dst *uint16, src *float32, n int)

// BF16ToF32 is cuda.BF16ToF32 on src into dst (src at least as long).
func BF16ToF32(dst []float32, src []uint16) int {
	n := whole(len(dst), 8)
	if n == 0 {
		return 0
	}
	_ = src[n-1]
	bf16ToF32AVX2(&dst[0], &src[0], n)
	return n
}

// F32ToBF16 is cuda.F32ToBF16 on src into dst (src at least as long).
func F32ToBF16(dst []uint16, src []float32) int {
	n := whole(len(dst), 8)
	if n == 0 {
		return 0
	}
	_ = src[n-1]
	f32ToBF16AVX2(&dst[0], &src[0], n)
	return n
}
