package host

import (
	"trainmem/cuda"
	"trainmem/cuda/host/avx2"
)

// The host device's kernels: the bias family (AddBias, and SumRows, the bias gradient; the column sums the layer norm's gain gradient shares).

// columnSums runs the reductions over rows (LayerNormBackwardW, SumRows):
// channels are cut into ranges, and each range is summed over every row in
// order, in float64. term(i, c0, c1, acc) adds row i's contribution to
// channels [c0, c1) into acc (indexed from c0).
func columnSums[F float](h *Device, dst *cuda.Buffer, N, C int, term func(i, c0, c1 int, acc []float64, tmp []F)) {
	vd := mkvec[F](dst)
	h.parallel(C, 64, func(c0, c1 int) {
		acc := getScratch[float64](c1 - c0)
		tmp := getScratch[F](3 * (c1 - c0))
		defer putScratch(acc)
		defer putScratch(tmp)
		clear(acc)
		for i := 0; i < N; i++ {
			term(i, c0, c1, acc, tmp[:2*(c1-c0)])
		}
		vd.putSums(c0, acc, tmp[2*(c1-c0):])
	})
}

// SumRows: dst[c] = Σ_i src[i, c], in row order in float64.
func (h *Device) SumRows(dst, src *cuda.Buffer, N, C int) error {
	return h.launch("SumRows", cuda.Check.SumRows(dst, src, N, C), func() {
		instance(cuda.AllF64(dst, src), sumRowsKernel[float64], sumRowsKernel[float32])(h, dst, src, N, C)
	}, dst, src)
}

func sumRowsKernel[F float](h *Device, dst, src *cuda.Buffer, N, C int) {
	vs := mkvec[F](src)
	columnSums(h, dst, N, C, func(i, c0, c1 int, acc []float64, tmp []F) {
		row := vs.get(i*C+c0, i*C+c1, tmp[:c1-c0])
		c := 0
		if r, ok := f32(row); ok {
			c = avx2.Accumulate(acc, r)
		}
		for ; c < len(row); c++ {
			acc[c] += float64(row[c])
		}
	})
}

// AddBias: y[i, c] += b[c] in place.
func (h *Device) AddBias(y, b *cuda.Buffer, N, C int) error {
	return h.launch("AddBias", cuda.Check.AddBias(y, b, N, C), func() { instance(cuda.AllF64(y, b), addBiasKernel[float64], addBiasKernel[float32])(h, y, b, N, C) }, y, b)
}

func addBiasKernel[F float](h *Device, y, b *cuda.Buffer, N, C int) {
	vy := mkvec[F](y)
	bb := getScratch[F](C)
	defer putScratch(bb)
	bs := mkvec[F](b).get(0, C, bb)
	rows(h, N, rowGrain(C), C, func(i int, tmp []F) {
		row := vy.get(i*C, i*C+C, tmp)
		c := 0
		if r, ok := f32(row); ok {
			b32, _ := f32(bs)
			c = avx2.Add(r, r, b32)
		}
		for ; c < len(row); c++ {
			row[c] += bs[c]
		}
		vy.put(i*C, row)
	})
}
