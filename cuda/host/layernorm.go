package host

// The host device's kernels: the layer-norm family (statistics, normalisation, the gradients of x and the gain).

import (
	"math"
	"trainmem/cuda"
	"trainmem/cuda/host/avx2"
)

// LayerNormStats writes per row the mean and 1/sqrt(var+eps), var the
// biased variance, both from two passes in float64.
func (h *Device) LayerNormStats(stats, x *cuda.Buffer, N, C int, eps float32) error {
	if err := h.begin("LayerNormStats", cuda.Check.LayerNormStats(stats, x, N, C, eps), stats, x); err != nil {
		return err
	}
	instance(cuda.AllF64(stats, x), layerNormStatsKernel[float64], layerNormStatsKernel[float32])(h, stats, x, N, C, eps)
	return nil
}

func layerNormStatsKernel[F float](h *Device, stats, x *cuda.Buffer, N, C int, eps float32) {
	vs, vx := mkvec[F](stats), mkvec[F](x)
	h.parallel(N, rowGrain(C), func(lo, hi int) {
		tmp := getScratch[F](C + 2)
		defer putScratch(tmp)
		for i := lo; i < hi; i++ {
			xs := vx.get(i*C, i*C+C, tmp[:C])
			var sum float64
			for _, v := range xs {
				sum += float64(v)
			}
			mean := sum / float64(C)
			var ss float64
			for _, v := range xs {
				d := float64(v) - mean
				ss += d * d
			}
			st := vs.out(2*i, 2*i+2, tmp[C:])
			st[0] = F(mean)
			st[1] = F(1 / math.Sqrt(ss/float64(C)+float64(eps)))
			vs.put(2*i, st)
		}
	})
}

// LayerNorm: y = (x - mean)·rstd·w + b.
func (h *Device) LayerNorm(y, x, stats, w, b *cuda.Buffer, N, C int) error {
	if err := h.begin("LayerNorm", cuda.Check.LayerNorm(y, x, stats, w, b, N, C), y, x, stats, w, b); err != nil {
		return err
	}
	instance(cuda.AllF64(y, x, stats, w, b), layerNormKernel[float64], layerNormKernel[float32])(h, y, x, stats, w, b, N, C)
	return nil
}

func layerNormKernel[F float](h *Device, y, x, stats, w, b *cuda.Buffer, N, C int) {
	vy, vx, vs := mkvec[F](y), mkvec[F](x), mkvec[F](stats)
	wb := getScratch[F](2 * C)
	defer putScratch(wb)
	ws := mkvec[F](w).get(0, C, wb[:C])
	bs := mkvec[F](b).get(0, C, wb[C:])
	h.parallel(N, rowGrain(C), func(lo, hi int) {
		tmp := getScratch[F](2*C + 2)
		defer putScratch(tmp)
		for i := lo; i < hi; i++ {
			st := vs.get(2*i, 2*i+2, tmp[2*C:])
			mean, rstd := st[0], st[1]
			xs := vx.get(i*C, i*C+C, tmp[:C])
			o := vy.out(i*C, i*C+C, tmp[C:2*C])
			c := 0
			if o32, ok := f32(o); ok {
				x32, _ := f32(xs)
				w32, _ := f32(ws)
				b32, _ := f32(bs)
				c = avx2.LayerNormRow(o32, x32, w32, b32, float32(mean), float32(rstd))
			}
			for ; c < len(o); c++ {
				o[c] = (xs[c]-mean)*rstd*ws[c] + bs[c]
			}
			vy.put(i*C, o)
		}
	})
}

// LayerNormBackwardX: dx = rstd·(g - mean_c(g) - xhat·mean_c(g·xhat)),
// g = dy·w, xhat = (x - mean)·rstd; the means in float64.
func (h *Device) LayerNormBackwardX(dx, dy, x, stats, w *cuda.Buffer, N, C int) error {
	if err := h.begin("LayerNormBackwardX", cuda.Check.LayerNormBackwardX(dx, dy, x, stats, w, N, C), dx, dy, x, stats, w); err != nil {
		return err
	}
	instance(cuda.AllF64(dx, dy, x, stats, w), layerNormBackwardXKernel[float64], layerNormBackwardXKernel[float32])(h, dx, dy, x, stats, w, N, C)
	return nil
}

func layerNormBackwardXKernel[F float](h *Device, dx, dy, x, stats, w *cuda.Buffer, N, C int) {
	vdx, vdy, vx, vs := mkvec[F](dx), mkvec[F](dy), mkvec[F](x), mkvec[F](stats)
	wb := getScratch[F](C)
	defer putScratch(wb)
	ws := mkvec[F](w).get(0, C, wb)
	h.parallel(N, rowGrain(C), func(lo, hi int) {
		tmp := getScratch[F](3*C + 2)
		defer putScratch(tmp)
		for i := lo; i < hi; i++ {
			st := vs.get(2*i, 2*i+2, tmp[3*C:])
			mean, rstd := st[0], st[1]
			xs := vx.get(i*C, i*C+C, tmp[:C])
			ds := vdy.get(i*C, i*C+C, tmp[C:2*C])
			var sg, sgx float64
			for c := range xs {
				g := ds[c] * ws[c]
				sg += float64(g)
				sgx += float64(g * (xs[c] - mean) * rstd)
			}
			mg, mgx := F(sg/float64(C)), F(sgx/float64(C))
			o := vdx.out(i*C, i*C+C, tmp[2*C:3*C])
			for c := range o {
				xhat := (xs[c] - mean) * rstd
				o[c] = rstd * (ds[c]*ws[c] - mg - xhat*mgx)
			}
			vdx.put(i*C, o)
		}
	})
}

// LayerNormBackwardW: dw[c] = Σ_i dy[i, c]·xhat[i, c], summed in row order
// in float64.
func (h *Device) LayerNormBackwardW(dw, dy, x, stats *cuda.Buffer, N, C int) error {
	if err := h.begin("LayerNormBackwardW", cuda.Check.LayerNormBackwardW(dw, dy, x, stats, N, C), dw, dy, x, stats); err != nil {
		return err
	}
	instance(cuda.AllF64(dw, dy, x, stats), layerNormBackwardWKernel[float64], layerNormBackwardWKernel[float32])(h, dw, dy, x, stats, N, C)
	return nil
}

func layerNormBackwardWKernel[F float](h *Device, dw, dy, x, stats *cuda.Buffer, N, C int) {
	vdy, vx, vs := mkvec[F](dy), mkvec[F](x), mkvec[F](stats)
	columnSums(h, dw, N, C, func(i, c0, c1 int, acc []float64, tmp []F) {
		var stt [2]F
		st := vs.get(2*i, 2*i+2, stt[:])
		mean, rstd := st[0], st[1]
		n := c1 - c0
		xs := vx.get(i*C+c0, i*C+c1, tmp[:n])
		ds := vdy.get(i*C+c0, i*C+c1, tmp[n:2*n])
		for c := range acc {
			acc[c] += float64(ds[c] * ((xs[c] - mean) * rstd))
		}
	})
}
