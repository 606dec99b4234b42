//go:build amd64 && !amd64.v3

package avx2

// goFusesMultiplyAdds: below GOAMD64=v3 the compiler rounds every multiply
// and add, as the twins do.
const goFusesMultiplyAdds = false
