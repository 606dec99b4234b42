package host

// Typed access to host buffers. A buffer's memory is the []byte of its
// mapping; typed slices over it are made with unsafe.Slice from the address
// of its first byte (never from an integer), so go vet stays clean and the
// Go runtime never sees a pointer into memory it does not own as anything
// but a slice.

import (
	"math/bits"
	"sync"
	"trainmem/cuda"
	"trainmem/cuda/host/avx2"
	"unsafe"
)

// float is the compute type of a host kernel: float32, or float64 when
// every float operand is F64.
type float interface{ ~float32 | ~float64 }

// view is a buffer in host memory as a slice of its elements, E being the
// Go type of its DType's bits.
func view[E float32 | float64 | uint8 | uint16 | uint32 | uint64 | int32](b *cuda.Buffer) []E {
	if b.Len == 0 {
		return nil
	}
	return unsafe.Slice((*E)(unsafe.Pointer(unsafe.SliceData(b.Host()))), b.Len)
}

// Int32s is an I32 buffer in host memory as its values.
func Int32s(b *cuda.Buffer) []int32 { return view[int32](b) }

// Uint8s is a U8 buffer in host memory as its bytes.
func Uint8s(b *cuda.Buffer) []uint8 { return view[uint8](b) }

// Decode reads elements [lo, lo+len(dst)) of b, a buffer in host memory
// (the host device's, or another device's staging copy), into dst, exactly
// (fp64 into float32 rounds to nearest even).
func Decode[T float](b *cuda.Buffer, lo int, dst []T) {
	hi := lo + len(dst)
	switch b.DType {
	case cuda.F32:
		for i, v := range view[float32](b)[lo:hi] {
			dst[i] = T(v)
		}
	case cuda.F64:
		for i, v := range view[float64](b)[lo:hi] {
			dst[i] = T(v)
		}
	case cuda.F16:
		for i, v := range view[uint16](b)[lo:hi] {
			dst[i] = T(cuda.F16ToF32(v))
		}
	case cuda.BF16:
		src := view[uint16](b)[lo:hi]
		i := 0
		if d, ok := f32(dst); ok {
			i = avx2.BF16ToF32(d, src)
		}
		for ; i < len(src); i++ {
			dst[i] = T(cuda.BF16ToF32(src[i]))
		}
	default:
		panic("cuda: decode of " + b.DType.String())
	}
}

// Encode writes src into elements [lo, lo+len(src)) of b, a buffer in host
// memory, rounding to nearest even in one rounding.
func Encode[T float](b *cuda.Buffer, lo int, src []T) {
	hi := lo + len(src)
	switch s := any(src).(type) {
	case []float32:
		switch b.DType {
		case cuda.F32:
			copy(view[float32](b)[lo:hi], s)
		case cuda.F64:
			d := view[float64](b)[lo:hi]
			for i, v := range s {
				d[i] = float64(v)
			}
		case cuda.F16:
			d := view[uint16](b)[lo:hi]
			for i, v := range s {
				d[i] = cuda.F32ToF16(v)
			}
		case cuda.BF16:
			d := view[uint16](b)[lo:hi]
			for i := avx2.F32ToBF16(d, s); i < len(s); i++ {
				d[i] = cuda.F32ToBF16(s[i])
			}
		default:
			panic("cuda: encode into " + b.DType.String())
		}
	case []float64:
		switch b.DType {
		case cuda.F32:
			d := view[float32](b)[lo:hi]
			for i, v := range s {
				d[i] = float32(v)
			}
		case cuda.F64:
			copy(view[float64](b)[lo:hi], s)
		case cuda.F16:
			d := view[uint16](b)[lo:hi]
			for i, v := range s {
				d[i] = cuda.F64ToF16(v)
			}
		case cuda.BF16:
			d := view[uint16](b)[lo:hi]
			for i, v := range s {
				d[i] = cuda.F64ToBF16(v)
			}
		default:
			panic("cuda: encode into " + b.DType.String())
		}
	}
}

// f32 is s as []float32 when F is float32, for the AVX2 twins
// (cuda/host/avx2), which take fp32 slices.
func f32[F float](s []F) ([]float32, bool) {
	r, ok := any(s).([]float32)
	return r, ok
}

// sum4 is the sum of four running sums (element j in sums[j%4]: the
// kernels' reductions and their AVX2 twins keep one a lane), in the one
// order (s0+s1)+(s2+s3).
func sum4(s *[4]float64) float64 { return (s[0] + s[1]) + (s[2] + s[3]) }

// vec is a buffer seen as a vector of the compute type T: its own memory
// when it is stored as T, else decoded and encoded piece by piece.
type vec[T float] struct {
	b   *cuda.Buffer
	raw []T // the buffer's memory when its DType is T
}

func mkvec[T float](b *cuda.Buffer) vec[T] {
	v := vec[T]{b: b}
	if b == nil || b.Len == 0 {
		return v
	}
	var z T
	switch any(z).(type) {
	case float32:
		if b.DType == cuda.F32 {
			v.raw = any(view[float32](b)).([]T)
		}
	case float64:
		if b.DType == cuda.F64 {
			v.raw = any(view[float64](b)).([]T)
		}
	}
	return v
}

// get returns elements [lo, hi): the buffer's memory, or a copy decoded
// into tmp (which must hold hi-lo elements).
func (v vec[T]) get(lo, hi int, tmp []T) []T {
	if v.raw != nil {
		return v.raw[lo:hi:hi]
	}
	tmp = tmp[:hi-lo]
	Decode(v.b, lo, tmp)
	return tmp
}

// out returns where to write elements [lo, hi): the buffer's memory, or
// tmp, which put then encodes.
func (v vec[T]) out(lo, hi int, tmp []T) []T {
	if v.raw != nil {
		return v.raw[lo:hi:hi]
	}
	return tmp[:hi-lo]
}

// put stores x, from out or get, as elements [lo, lo+len(x)); a no-op when
// x is the buffer's own memory.
func (v vec[T]) put(lo int, x []T) {
	if v.raw == nil {
		Encode(v.b, lo, x)
	}
}

// putSums rounds the float64 sums acc to T and stores them as elements
// [lo, lo+len(acc)), through tmp (as for out) unless the buffer is stored
// as T.
func (v vec[T]) putSums(lo int, acc []float64, tmp []T) {
	o := v.out(lo, lo+len(acc), tmp)
	for c := range o {
		o[c] = T(acc[c])
	}
	v.put(lo, o)
}

// Scratch: host-private slices, pooled by power-of-two capacity so that
// kernels on 16-bit buffers do not allocate on every call.
type scratchPool[T float] struct{ pools [64]sync.Pool }

var (
	scratch32 scratchPool[float32]
	scratch64 scratchPool[float64]
)

func (p *scratchPool[T]) get(n int) []T {
	if n == 0 {
		return nil
	}
	k := bits.Len(uint(n - 1))
	if s, ok := p.pools[k].Get().(*[]T); ok {
		return (*s)[:n]
	}
	return make([]T, n, 1<<k)
}

func (p *scratchPool[T]) put(s []T) {
	if cap(s) == 0 {
		return
	}
	k := bits.Len(uint(cap(s) - 1))
	if 1<<k != cap(s) {
		return // not from get
	}
	s = s[:0]
	p.pools[k].Put(&s)
}

// getScratch borrows n elements of host-private scratch of type T;
// putScratch gives them back.
func getScratch[T float](n int) []T {
	var z T
	switch any(z).(type) {
	case float32:
		return any(scratch32.get(n)).([]T)
	default:
		return any(scratch64.get(n)).([]T)
	}
}

func putScratch[T float](s []T) {
	switch s := any(s).(type) {
	case []float32:
		scratch32.put(s)
	case []float64:
		scratch64.put(s)
	}
}

// nonFiniteRange reports whether elements [lo, hi) of b hold an Inf or a NaN.
func nonFiniteRange(b *cuda.Buffer, lo, hi int) bool {
	switch b.DType {
	case cuda.F32:
		ws := view[uint32](b)[lo:hi]
		n, found := avx2.NonFinite32(ws)
		return found || anyExponentAllOnes(ws[n:], 0x7f800000)
	case cuda.F64:
		return anyExponentAllOnes(view[uint64](b)[lo:hi], 0x7ff0000000000000)
	case cuda.F16:
		return anyExponentAllOnes(view[uint16](b)[lo:hi], 0x7c00)
	case cuda.BF16:
		return anyExponentAllOnes(view[uint16](b)[lo:hi], 0x7f80)
	}
	return false
}

// anyExponentAllOnes reports whether a word of ws, the bits of floats
// whose exponent field is exp, has that field all ones (an Inf or a NaN).
// Without a branch an element: w&exp + exp's lowest bit carries into the
// sign bit exactly when the field is all ones, and never beyond it, so the
// sign bit of the OR of those sums answers for every word at once (four
// running ORs let the loads overlap).
func anyExponentAllOnes[W uint16 | uint32 | uint64](ws []W, exp W) bool {
	low := exp & -exp
	var a0, a1, a2, a3 W
	i := 0
	for ; i+4 <= len(ws); i += 4 {
		w := ws[i : i+4 : i+4]
		a0 |= w[0]&exp + low
		a1 |= w[1]&exp + low
		a2 |= w[2]&exp + low
		a3 |= w[3]&exp + low
	}
	for _, w := range ws[i:] {
		a0 |= w&exp + low
	}
	return (a0|a1|a2|a3)&(exp+low) != 0
}
