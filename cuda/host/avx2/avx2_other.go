//go:build !amd64

package avx2

// Available is false off amd64.
const Available = false

// Adam does nothing off amd64.
func Adam(p, gr, m, v []float32, k *AdamConsts) int { return 0 }

// ExpShiftedSum does nothing off amd64.
func ExpShiftedSum(e []float64, row []float32, shift float64, sums *[4]float64, k *ExpConsts) int {
	return 0
}

// GELU does nothing off amd64.
func GELU(y, x []float32, g *GELUConsts, k *ExpConsts) int { return 0 }

// GELUBackward does nothing off amd64.
func GELUBackward(dx, dy, x []float32, g *GELUConsts, k *ExpConsts) int { return 0 }

// Add does nothing off amd64.
func Add(y, a, b []float32) int { return 0 }

// Accumulate does nothing off amd64.
func Accumulate(acc []float64, x []float32) int { return 0 }

// Round does nothing off amd64.
func Round(y []float32, x []float64) int { return 0 }

// Scale does nothing off amd64.
func Scale(y []float32, s float64) int { return 0 }

// LayerNormRow does nothing off amd64.
func LayerNormRow(y, x, w, b []float32, mean, rstd float32) int { return 0 }

// NonFinite32 does nothing off amd64.
func NonFinite32(w []uint32) (n int, found bool) { return 0, false }

// LayerNormGain does nothing off amd64.
func LayerNormGain(acc []float64, dy, x []float32, mean, rstd float32) int { return 0 }

// SumLanes does nothing off amd64.
func SumLanes(x []float32, sums *[4]float64) int { return 0 }

// SquaredDevLanes does nothing off amd64.
func SquaredDevLanes(x []float32, mean float64, sums *[4]float64) int { return 0 }

// LayerNormBackwardSums does nothing off amd64.
func LayerNormBackwardSums(dy, w, x []float32, mean, rstd float32, sg, sgx *[4]float64) int {
	return 0
}

// LayerNormBackwardRow does nothing off amd64.
func LayerNormBackwardRow(o, dy, w, x []float32, mean, rstd, mg, mgx float32) int { return 0 }

// RowMax does nothing off amd64.
func RowMax(row []float32, m *[8]float32) int { return 0 }

// BF16ToF32 does nothing off amd64.
func BF16ToF32(dst []float32, src []uint16) int { return 0 }

// F32ToBF16 does nothing off amd64.
func F32ToBF16(dst []uint16, src []float32) int { return 0 }
