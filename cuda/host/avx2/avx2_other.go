//go:build !amd64

package avx2

// Available is false off amd64.
const Available = false

// Adam does nothing off amd64.
func Adam(p, gr, m, v []float32, k *AdamConsts) int { return 0 }

// Exp does nothing off amd64.
func Exp(a []float64, k *ExpConsts) int { return 0 }

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
