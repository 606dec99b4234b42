//go:build !amd64

package avx2

// Available is false off amd64.
const Available = false

// Adam does nothing off amd64.
func Adam(p, gr, m, v []float32, k *AdamConsts) int { return 0 }

// Exp does nothing off amd64.
func Exp(a []float64, k *ExpConsts) int { return 0 }
