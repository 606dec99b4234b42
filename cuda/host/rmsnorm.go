package host

// The host device's kernels: the RMSNorm family (the row statistic, the
// normalisation, the gradients of x and the gain), the layer norm's loops
// without the mean and the bias.

import (
	"math"

	"trainmem/cuda"
)

// RMSNormStats writes per row 1/sqrt(mean(x²)+eps), the sum of squares in
// float64.
func (h *Device) RMSNormStats(stats, x *cuda.Buffer, N, C int, eps float32) error {
	return h.launch("RMSNormStats", cuda.Check.RMSNormStats(stats, x, N, C, eps), func() {
		instance(cuda.AllF64(stats, x), rmsNormStatsKernel[float64], rmsNormStatsKernel[float32])(h, stats, x, N, C, eps)
	}, stats, x)
}

func rmsNormStatsKernel[F float](h *Device, stats, x *cuda.Buffer, N, C int, eps float32) {
	vs, vx := mkvec[F](stats), mkvec[F](x)
	rows(h, N, rowGrain(C), C+1, func(i int, tmp []F) {
		xs := vx.get(i*C, i*C+C, tmp[:C])
		var ss [4]float64
		squaredDevLanes(xs, 0, &ss) // Σ x², the layer norm's squared deviations from 0
		st := vs.out(i, i+1, tmp[C:])
		st[0] = F(1 / math.Sqrt(sum4(&ss)/float64(C)+float64(eps)))
		vs.put(i, st)
	})
}

// RMSNorm: y = x·rstd·w.
func (h *Device) RMSNorm(y, x, stats, w *cuda.Buffer, N, C int) error {
	return h.launch("RMSNorm", cuda.Check.RMSNorm(y, x, stats, w, N, C), func() {
		instance(cuda.AllF64(y, x, stats, w), rmsNormKernel[float64], rmsNormKernel[float32])(h, y, x, stats, w, N, C)
	}, y, x, stats, w)
}

func rmsNormKernel[F float](h *Device, y, x, stats, w *cuda.Buffer, N, C int) {
	vy, vx, vs := mkvec[F](y), mkvec[F](x), mkvec[F](stats)
	wb := getScratch[F](C)
	defer putScratch(wb)
	ws := mkvec[F](w).get(0, C, wb)
	rows(h, N, rowGrain(C), 2*C+1, func(i int, tmp []F) {
		rstd := vs.get(i, i+1, tmp[2*C:])[0]
		xs := vx.get(i*C, i*C+C, tmp[:C])
		o := vy.out(i*C, i*C+C, tmp[C:2*C])
		for c := range o {
			o[c] = xs[c] * rstd * ws[c]
		}
		vy.put(i*C, o)
	})
}

// RMSNormBackwardX: dx = rstd·(g - xhat·mean_c(g·xhat)), g = dy·w,
// xhat = x·rstd; the mean in float64.
func (h *Device) RMSNormBackwardX(dx, dy, x, stats, w *cuda.Buffer, N, C int) error {
	return h.launch("RMSNormBackwardX", cuda.Check.RMSNormBackwardX(dx, dy, x, stats, w, N, C), func() {
		instance(cuda.AllF64(dx, dy, x, stats, w), rmsNormBackwardXKernel[float64], rmsNormBackwardXKernel[float32])(h, dx, dy, x, stats, w, N, C)
	}, dx, dy, x, stats, w)
}

func rmsNormBackwardXKernel[F float](h *Device, dx, dy, x, stats, w *cuda.Buffer, N, C int) {
	vdx, vdy, vx, vs := mkvec[F](dx), mkvec[F](dy), mkvec[F](x), mkvec[F](stats)
	wb := getScratch[F](C)
	defer putScratch(wb)
	ws := mkvec[F](w).get(0, C, wb)
	rows(h, N, rowGrain(C), 3*C+1, func(i int, tmp []F) {
		rstd := vs.get(i, i+1, tmp[3*C:])[0]
		xs := vx.get(i*C, i*C+C, tmp[:C])
		ds := vdy.get(i*C, i*C+C, tmp[C:2*C])
		var sgx [4]float64
		for c := range ds {
			sgx[c%4] += float64(ds[c] * ws[c] * (xs[c] * rstd))
		}
		mgx := F(sum4(&sgx) / float64(C))
		o := vdx.out(i*C, i*C+C, tmp[2*C:3*C])
		for c := range o {
			xhat := xs[c] * rstd
			o[c] = rstd * (ds[c]*ws[c] - xhat*mgx)
		}
		vdx.put(i*C, o)
	})
}

// RMSNormBackwardW: dw[c] = Σ_i dy[i, c]·xhat[i, c], summed in row order
// in float64 (the column sums of the bias and layer-norm gradients).
func (h *Device) RMSNormBackwardW(dw, dy, x, stats *cuda.Buffer, N, C int) error {
	return h.launch("RMSNormBackwardW", cuda.Check.RMSNormBackwardW(dw, dy, x, stats, N, C), func() {
		instance(cuda.AllF64(dw, dy, x, stats), rmsNormBackwardWKernel[float64], rmsNormBackwardWKernel[float32])(h, dw, dy, x, stats, N, C)
	}, dw, dy, x, stats)
}

func rmsNormBackwardWKernel[F float](h *Device, dw, dy, x, stats *cuda.Buffer, N, C int) {
	vdy, vx, vs := mkvec[F](dy), mkvec[F](x), mkvec[F](stats)
	columnSums(h, dw, N, C, func(i, c0, c1 int, acc []float64, tmp []F) {
		var stt [1]F
		rstd := vs.get(i, i+1, stt[:])[0]
		n := c1 - c0
		xs := vx.get(i*C+c0, i*C+c1, tmp[:n])
		ds := vdy.get(i*C+c0, i*C+c1, tmp[n:2*n])
		for c := range acc {
			acc[c] += float64(ds[c] * (xs[c] * rstd))
		}
	})
}
