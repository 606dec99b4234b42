package avx2

import "golang.org/x/sys/cpu"

// Available is whether the twins run here: the CPU has AVX2 and the OS
// saves the YMM registers.
var Available = cpu.X86.HasAVX2

//go:noescape
func adamAVX2(p, gr, m, v *float32, n int, k *AdamConsts)

// Adam runs host's adamLoop over the longest prefix of p whose length is a
// multiple of 8 (gr, m and v at least as long), and returns that length.
func Adam(p, gr, m, v []float32, k *AdamConsts) int {
	n := len(p) &^ 7
	if !Available || n == 0 {
		return 0
	}
	_, _, _ = gr[n-1], m[n-1], v[n-1]
	adamAVX2(&p[0], &gr[0], &m[0], &v[0], n, k)
	return n
}

//go:noescape
func expAVX2(a *float64, n int, k *ExpConsts) int

// Exp runs host's expLoop four elements at a time over a, up to the first
// four whose arguments are not all inside (k.Low, k.High) (NaNs
// included) or fewer than four remain, and returns how many it did.
func Exp(a []float64, k *ExpConsts) int {
	n := len(a) &^ 3
	if !Available || n == 0 {
		return 0
	}
	return expAVX2(&a[0], n, k)
}
