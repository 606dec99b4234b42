// Package avx2 holds the AVX2 twins of the host device's hottest loops
// (avx2_amd64.s): the same operations in the same order as the Go loops of
// package host they stand in for, eight fp32 or four fp64 elements at a
// time, so that results are identical bit for bit. IEEE rounds each
// lane's add, multiply, divide and square root as it rounds the scalar's,
// Go does not fuse multiply-adds on amd64 below GOAMD64=v3, and neither do
// the twins (built with GOAMD64=v3 the twins stand aside: Available). Each
// function does the longest prefix it can and returns its length, 0 where
// the CPU lacks AVX2 (or off amd64); the caller's Go loop does the rest.
// The twins are in a package of their own because Go assembly cannot sit
// beside cgo (package host's OpenBLAS binding). host's TestAVX2Twins checks
// them against the Go loops.
package avx2

// AdamConsts are the fp32 scalars of host's adamLoop, laid out for
// adamAVX2 (offsets in avx2_amd64.s).
type AdamConsts struct {
	GS, WD, B1, OneMinusB1, B2, OneMinusB2, C1, C2, Eps, LR float32
	Decoupled                                               uint32 // 1 for AdamW's decoupled weight decay
}

// ExpConsts are host's expLoop's float64 constants and table, laid out
// for the exponential of avx2_amd64.s (offsets there), each constant four
// times over so that the instructions read it from memory: arguments
// outside (Low, High) are left to the Go loop; C5..C2 and One are the
// Taylor coefficients of e^r - 1 = r·(1 + r·(C2 + r·(C3 + r·(C4 + r·C5))));
// Mask is 255, the table index's bits.
type ExpConsts struct {
	Low, High, Scale, Round, Ln2Hi, Ln2Lo, C5, C4, C3, C2, One [4]float64
	Mask                                                       [4]uint64
	Table                                                      *[256]float64 // 2^(j/256)
}

// GELUConsts are host's GELU loops' float64 constants, each four times
// over: M2K is -2·sqrt(2/π), C 0.044715, K sqrt(2/π), C3 3·0.044715.
type GELUConsts struct {
	M2K, C, K, C3, One [4]float64
}

// Lanes is v four times over, for ExpConsts and GELUConsts.
func Lanes(v float64) [4]float64 { return [4]float64{v, v, v, v} }
