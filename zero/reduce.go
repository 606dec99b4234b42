package zero

import (
	"trainmem/cuda"
	"trainmem/cuda/host"
)

// copyHost copies src into dst, buffers of one dtype and length in host
// memory.
func copyHost(dst, src *cuda.Buffer) { copy(dst.Host(), src.Host()) }

// reduceChunk bounds the scratch a reduction converts through.
const reduceChunk = 1 << 14

// reduceHost computes acc = acc op own elementwise, buffers of one dtype
// and length in host memory: in fp32 (fp64 for F64) with one rounding to
// the storage type, int32 sums wrapping.
func reduceHost(acc, own *cuda.Buffer, op Op) {
	switch acc.DType {
	case cuda.I32:
		a, b := host.Int32s(acc), host.Int32s(own)
		for i := range a {
			a[i] = apply(op, a[i], b[i])
		}
	case cuda.F64:
		reduceFloats[float64](acc, own, op)
	default:
		reduceFloats[float32](acc, own, op)
	}
}

func reduceFloats[T float32 | float64](acc, own *cuda.Buffer, op Op) {
	a, b := make([]T, min(acc.Len, reduceChunk)), make([]T, min(acc.Len, reduceChunk))
	for lo := 0; lo < acc.Len; lo += reduceChunk {
		n := min(reduceChunk, acc.Len-lo)
		host.Decode(acc, lo, a[:n])
		host.Decode(own, lo, b[:n])
		for i := range n {
			a[i] = apply(op, a[i], b[i])
		}
		host.Encode(acc, lo, a[:n])
	}
}

// apply is one reduction of two values; Min and Max compare with < and >,
// as NCCL's ncclMin and ncclMax do.
func apply[T int32 | float32 | float64](op Op, a, b T) T {
	switch op {
	case Min:
		if b < a {
			return b
		}
		return a
	case Max:
		if b > a {
			return b
		}
		return a
	}
	return a + b
}
