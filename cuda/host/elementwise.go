package host

// The host device's kernels: fill, cast, add and the non-finite check.

import (
	"sync/atomic"
	"trainmem/cuda"
	"trainmem/cuda/host/avx2"
)

const (
	elemChunk = 4096    // elements converted and computed at a time
	elemGrain = 1 << 14 // fewest elements worth a goroutine
)

// rowGrain is the fewest rows of C elements worth a goroutine.
func rowGrain(C int) int { return max(1, elemGrain/C) }

// mapElems runs f over matching chunks of y and the inputs: f(out, ins)
// writes out[i] from ins[k][i]. y may alias any input exactly.
func mapElems[F float](h *Device, y *cuda.Buffer, ins []*cuda.Buffer, f func(out []F, in [][]F)) {
	vy := mkvec[F](y)
	vin := make([]vec[F], len(ins))
	for k, b := range ins {
		vin[k] = mkvec[F](b)
	}
	h.parallel(y.Len, elemGrain, func(lo, hi int) {
		tmp := getScratch[F]((len(ins) + 1) * elemChunk)
		defer putScratch(tmp)
		in := make([][]F, len(ins))
		for c0 := lo; c0 < hi; c0 += elemChunk {
			c1 := min(c0+elemChunk, hi)
			for k := range vin {
				in[k] = vin[k].get(c0, c1, tmp[k*elemChunk:(k+1)*elemChunk])
			}
			out := vy.out(c0, c1, tmp[len(ins)*elemChunk:])
			f(out, in)
			vy.put(c0, out)
		}
	})
}

// Fill sets every element of dst to v (rounded once to dst's DType).
func (h *Device) Fill(dst *cuda.Buffer, v float32) error {
	if err := h.begin("Fill", cuda.Check.Fill(dst, v), dst); err != nil {
		return err
	}
	switch dst.DType {
	case cuda.F32:
		fillSlice(h, view[float32](dst), v)
	case cuda.F64:
		fillSlice(h, view[float64](dst), float64(v))
	case cuda.F16:
		fillSlice(h, view[uint16](dst), cuda.F32ToF16(v))
	case cuda.BF16:
		fillSlice(h, view[uint16](dst), cuda.F32ToBF16(v))
	}
	return nil
}

func fillSlice[E any](h *Device, s []E, v E) {
	h.parallel(len(s), 1<<16, func(lo, hi int) {
		for i := range s[lo:hi] {
			s[lo+i] = v
		}
	})
}

// Cast converts src into dst, correctly rounded (one rounding from the
// exact value, whatever the two types).
func (h *Device) Cast(dst, src *cuda.Buffer) error {
	if err := h.begin("Cast", cuda.Check.Cast(dst, src), dst, src); err != nil {
		return err
	}
	if dst.DType == src.DType {
		if dst.Addr() != src.Addr() {
			h.parallel(len(dst.Host()), 1<<18, func(lo, hi int) { copy(dst.Host()[lo:hi], src.Host()[lo:hi]) })
		}
		return nil
	}
	// Every float type widens to float64 exactly; encode rounds once.
	h.parallel(dst.Len, elemGrain, func(lo, hi int) {
		tmp := getScratch[float64](elemChunk)
		defer putScratch(tmp)
		for c0 := lo; c0 < hi; c0 += elemChunk {
			c1 := min(c0+elemChunk, hi)
			t := tmp[:c1-c0]
			Decode(src, c0, t)
			Encode(dst, c0, t)
		}
	})
	return nil
}

// Add computes y = a + b elementwise; y may alias a or b.
func (h *Device) Add(y, a, b *cuda.Buffer) error {
	return h.launch("Add", cuda.Check.Add(y, a, b), func() { instance(cuda.AllF64(y, a, b), addKernel[float64], addKernel[float32])(h, y, a, b) }, y, a, b)
}

func addKernel[F float](h *Device, y, a, b *cuda.Buffer) {
	mapElems(h, y, []*cuda.Buffer{a, b}, func(out []F, in [][]F) {
		x, z := in[0][:len(out)], in[1][:len(out)]
		i := 0
		if o, ok := f32(out); ok {
			x32, _ := f32(x)
			z32, _ := f32(z)
			i = avx2.Add(o, x32, z32)
		}
		for ; i < len(out); i++ {
			out[i] = x[i] + z[i]
		}
	})
}

// NonFinite reports whether x holds an Inf or a NaN.
func (h *Device) NonFinite(x *cuda.Buffer) (bool, error) {
	_, err := cuda.Check.NonFinite(x)
	if err := h.begin("NonFinite", err, x); err != nil {
		return false, err
	}
	var found atomic.Bool
	h.parallel(x.Len, 1<<16, func(lo, hi int) {
		if nonFiniteRange(x, lo, hi) {
			found.Store(true)
		}
	})
	return found.Load(), nil
}
