//go:build amd64.v3

package avx2

// goFusesMultiplyAdds: built with GOAMD64=v3 or above, the compiler turns
// x*y + z into an FMA (its AMD64.rules), which the twins do not.
const goFusesMultiplyAdds = true
