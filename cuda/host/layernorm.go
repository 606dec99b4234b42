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
	return h.launch("LayerNormStats", cuda.Check.LayerNormStats(stats, x, N, C, eps), func() {
		instance(cuda.AllF64(stats, x), layerNormStatsKernel[float64], layerNormStatsKernel[float32])(h, stats, x, N, C, eps)
	}, stats, x)
}

func layerNormStatsKernel[F float](h *Device, stats, x *cuda.Buffer, N, C int, eps float32) {
	vs, vx := mkvec[F](stats), mkvec[F](x)
	rows(h, N, rowGrain(C), C+2, func(i int, tmp []F) {
		xs := vx.get(i*C, i*C+C, tmp[:C])
		var sum, ss [4]float64
		sumLanes(xs, &sum)
		mean := sum4(&sum) / float64(C)
		squaredDevLanes(xs, mean, &ss)
		st := vs.out(2*i, 2*i+2, tmp[C:])
		st[0] = F(mean)
		st[1] = F(1 / math.Sqrt(sum4(&ss)/float64(C)+float64(eps)))
		vs.put(2*i, st)
	})
}

// sumLanes adds float64(x[j]) to sums[j%4]; avx2.SumLanes is its fp32
// twin. Four running sums, added up by sum4, let the additions overlap.
func sumLanes[F float](x []F, sums *[4]float64) {
	j := 0
	if x32, ok := f32(x); ok {
		j = avx2.SumLanes(x32, sums)
	}
	for ; j < len(x); j++ {
		sums[j%4] += float64(x[j])
	}
}

// squaredDevLanes adds (float64(x[j]) - mean)² to sums[j%4];
// avx2.SquaredDevLanes is its fp32 twin.
func squaredDevLanes[F float](x []F, mean float64, sums *[4]float64) {
	j := 0
	if x32, ok := f32(x); ok {
		j = avx2.SquaredDevLanes(x32, mean, sums)
	}
	for ; j < len(x); j++ {
		d := float64(x[j]) - mean
		sums[j%4] += d * d
	}
}

// LayerNorm: y = (x - mean)·rstd·w + b.
func (h *Device) LayerNorm(y, x, stats, w, b *cuda.Buffer, N, C int) error {
	return h.launch("LayerNorm", cuda.Check.LayerNorm(y, x, stats, w, b, N, C), func() {
		instance(cuda.AllF64(y, x, stats, w, b), layerNormKernel[float64], layerNormKernel[float32])(h, y, x, stats, w, b, N, C)
	}, y, x, stats, w, b)
}

func layerNormKernel[F float](h *Device, y, x, stats, w, b *cuda.Buffer, N, C int) {
	vy, vx, vs := mkvec[F](y), mkvec[F](x), mkvec[F](stats)
	wb := getScratch[F](2 * C)
	defer putScratch(wb)
	ws := mkvec[F](w).get(0, C, wb[:C])
	bs := mkvec[F](b).get(0, C, wb[C:])
	rows(h, N, rowGrain(C), 2*C+2, func(i int, tmp []F) {
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
	})
}

// LayerNormBackwardX: dx = rstd·(g - mean_c(g) - xhat·mean_c(g·xhat)),
// g = dy·w, xhat = (x - mean)·rstd; the means in float64.
func (h *Device) LayerNormBackwardX(dx, dy, x, stats, w *cuda.Buffer, N, C int) error {
	return h.launch("LayerNormBackwardX", cuda.Check.LayerNormBackwardX(dx, dy, x, stats, w, N, C), func() {
		instance(cuda.AllF64(dx, dy, x, stats, w), layerNormBackwardXKernel[float64], layerNormBackwardXKernel[float32])(h, dx, dy, x, stats, w, N, C)
	}, dx, dy, x, stats, w)
}

func layerNormBackwardXKernel[F float](h *Device, dx, dy, x, stats, w *cuda.Buffer, N, C int) {
	vdx, vdy, vx, vs := mkvec[F](dx), mkvec[F](dy), mkvec[F](x), mkvec[F](stats)
	wb := getScratch[F](C)
	defer putScratch(wb)
	ws := mkvec[F](w).get(0, C, wb)
	rows(h, N, rowGrain(C), 3*C+2, func(i int, tmp []F) {
		st := vs.get(2*i, 2*i+2, tmp[3*C:])
		mean, rstd := st[0], st[1]
		xs := vx.get(i*C, i*C+C, tmp[:C])
		ds := vdy.get(i*C, i*C+C, tmp[C:2*C])
		var sg, sgx [4]float64
		layerNormBackwardSums(ds, ws, xs, mean, rstd, &sg, &sgx)
		mg, mgx := F(sum4(&sg)/float64(C)), F(sum4(&sgx)/float64(C))
		o := vdx.out(i*C, i*C+C, tmp[2*C:3*C])
		c := 0
		if o32, ok := f32(o); ok {
			d32, _ := f32(ds)
			w32, _ := f32(ws)
			x32, _ := f32(xs)
			c = avx2.LayerNormBackwardRow(o32, d32, w32, x32, float32(mean), float32(rstd), float32(mg), float32(mgx))
		}
		for ; c < len(o); c++ {
			xhat := (xs[c] - mean) * rstd
			o[c] = rstd * (ds[c]*ws[c] - mg - xhat*mgx)
		}
		vdx.put(i*C, o)
	})
}

// layerNormBackwardSums adds, for g = dy[c]·w[c], float64(g) to
// sg[c%4] and float64(g·(x[c]-mean)·rstd) to sgx[c%4];
// avx2.LayerNormBackwardSums is its fp32 twin.
func layerNormBackwardSums[F float](ds, ws, xs []F, mean, rstd F, sg, sgx *[4]float64) {
	c := 0
	if d32, ok := f32(ds); ok {
		w32, _ := f32(ws)
		x32, _ := f32(xs)
		c = avx2.LayerNormBackwardSums(d32, w32, x32, float32(mean), float32(rstd), sg, sgx)
	}
	for ; c < len(ds); c++ {
		g := ds[c] * ws[c]
		sg[c%4] += float64(g)
		sgx[c%4] += float64(g * (xs[c] - mean) * rstd)
	}
}

// LayerNormBackwardW: dw[c] = Σ_i dy[i, c]·xhat[i, c], summed in row order
// in float64.
func (h *Device) LayerNormBackwardW(dw, dy, x, stats *cuda.Buffer, N, C int) error {
	return h.launch("LayerNormBackwardW", cuda.Check.LayerNormBackwardW(dw, dy, x, stats, N, C), func() {
		instance(cuda.AllF64(dw, dy, x, stats), layerNormBackwardWKernel[float64], layerNormBackwardWKernel[float32])(h, dw, dy, x, stats, N, C)
	}, dw, dy, x, stats)
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
		c := 0
		if d32, ok := f32(ds); ok {
			x32, _ := f32(xs)
			c = avx2.LayerNormGain(acc, d32, x32, float32(mean), float32(rstd))
		}
		for ; c < len(acc); c++ {
			acc[c] += float64(ds[c] * ((xs[c] - mean) * rstd))
		}
	})
}
