package host

// The host device's kernels: the norm family (statistics, normalisation,
// the gradients of x and the gain), one set of loops for both variants:
// RMSNorm is the layer norm with the mean 0 and no bias (cuda.Norm).

import (
	"math"

	"trainmem/cuda"
	"trainmem/cuda/host/avx2"
)

// NormStats writes per row the layer norm's mean and 1/sqrt(var+eps), var
// the biased variance, or RMSNorm's 1/sqrt(mean(x²)+eps), from passes in
// float64.
func (h *Device) NormStats(n cuda.Norm, stats, x *cuda.Buffer, N, C int, eps float32) error {
	return h.launch(n.Kernel("Stats"), cuda.Check.NormStats(n, stats, x, N, C, eps), func() {
		instance(cuda.AllF64(stats, x), normStatsKernel[float64], normStatsKernel[float32])(h, n, stats, x, N, C, eps)
	}, stats, x)
}

func normStatsKernel[F float](h *Device, n cuda.Norm, stats, x *cuda.Buffer, N, C int, eps float32) {
	vs, vx := mkvec[F](stats), mkvec[F](x)
	k := n.Stats()
	rows(h, N, rowGrain(C), C+k, func(i int, tmp []F) {
		xs := vx.get(i*C, i*C+C, tmp[:C])
		mean := 0.0
		if n.Centred() {
			var sum [4]float64
			sumLanes(xs, &sum)
			mean = sum4(&sum) / float64(C)
		}
		var ss [4]float64
		squaredDevLanes(xs, mean, &ss) // RMSNorm: Σ x², the deviations from 0
		st := vs.out(k*i, k*i+k, tmp[C:])
		if n.Centred() {
			st[0] = F(mean)
		}
		st[k-1] = F(1 / math.Sqrt(sum4(&ss)/float64(C)+float64(eps)))
		vs.put(k*i, st)
	})
}

// rowStats reads row i's (mean, rstd) from stats (RMSNorm's mean is 0);
// tmp holds n.Stats() values.
func rowStats[F float](n cuda.Norm, vs vec[F], i int, tmp []F) (mean, rstd F) {
	k := n.Stats()
	st := vs.get(k*i, k*i+k, tmp[:k])
	if n.Centred() {
		mean = st[0]
	}
	return mean, st[k-1]
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

// Norm: y = (x - mean)·rstd·w + b (RMSNorm: mean 0, b 0).
func (h *Device) Norm(n cuda.Norm, y, x, stats, w, b *cuda.Buffer, N, C int) error {
	return h.launch(n.Kernel(""), cuda.Check.Norm(n, y, x, stats, w, b, N, C), func() {
		instance(cuda.AllF64(y, x, stats, w, b), normKernel[float64], normKernel[float32])(h, n, y, x, stats, w, b, N, C)
	}, y, x, stats, w, b)
}

func normKernel[F float](h *Device, n cuda.Norm, y, x, stats, w, b *cuda.Buffer, N, C int) {
	vy, vx, vs := mkvec[F](y), mkvec[F](x), mkvec[F](stats)
	wb := getScratch[F](2 * C)
	defer putScratch(wb)
	ws := mkvec[F](w).get(0, C, wb[:C])
	bs := wb[C:]
	if n.Bias() {
		bs = mkvec[F](b).get(0, C, bs)
	} else {
		clear(bs) // RMSNorm's: adding 0 leaves x·rstd·w as it is
	}
	k := n.Stats()
	rows(h, N, rowGrain(C), 2*C+k, func(i int, tmp []F) {
		mean, rstd := rowStats(n, vs, i, tmp[2*C:])
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

// NormBackwardX: dx = rstd·(g - mean_c(g) - xhat·mean_c(g·xhat)), g =
// dy·w, xhat = (x - mean)·rstd; the means in float64 (RMSNorm: mean 0 and
// no mean_c(g)).
func (h *Device) NormBackwardX(n cuda.Norm, dx, dy, x, stats, w *cuda.Buffer, N, C int) error {
	return h.launch(n.Kernel("BackwardX"), cuda.Check.NormBackwardX(n, dx, dy, x, stats, w, N, C), func() {
		instance(cuda.AllF64(dx, dy, x, stats, w), normBackwardXKernel[float64], normBackwardXKernel[float32])(h, n, dx, dy, x, stats, w, N, C)
	}, dx, dy, x, stats, w)
}

func normBackwardXKernel[F float](h *Device, n cuda.Norm, dx, dy, x, stats, w *cuda.Buffer, N, C int) {
	vdx, vdy, vx, vs := mkvec[F](dx), mkvec[F](dy), mkvec[F](x), mkvec[F](stats)
	wb := getScratch[F](C)
	defer putScratch(wb)
	ws := mkvec[F](w).get(0, C, wb)
	k := n.Stats()
	rows(h, N, rowGrain(C), 3*C+k, func(i int, tmp []F) {
		mean, rstd := rowStats(n, vs, i, tmp[3*C:])
		xs := vx.get(i*C, i*C+C, tmp[:C])
		ds := vdy.get(i*C, i*C+C, tmp[C:2*C])
		var sg, sgx [4]float64
		normBackwardSums(ds, ws, xs, mean, rstd, &sg, &sgx)
		mg, mgx := F(sum4(&sg)/float64(C)), F(sum4(&sgx)/float64(C))
		if !n.Centred() {
			mg = 0 // RMSNorm has no bias, whose gradient's mean this is
		}
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

// normBackwardSums adds, for g = dy[c]·w[c], float64(g) to sg[c%4] and
// float64(g·(x[c]-mean)·rstd) to sgx[c%4]; avx2.LayerNormBackwardSums is
// its fp32 twin.
func normBackwardSums[F float](ds, ws, xs []F, mean, rstd F, sg, sgx *[4]float64) {
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

// NormBackwardW: dw[c] = Σ_i dy[i, c]·xhat[i, c], summed in row order in
// float64.
func (h *Device) NormBackwardW(n cuda.Norm, dw, dy, x, stats *cuda.Buffer, N, C int) error {
	return h.launch(n.Kernel("BackwardW"), cuda.Check.NormBackwardW(n, dw, dy, x, stats, N, C), func() {
		instance(cuda.AllF64(dw, dy, x, stats), normBackwardWKernel[float64], normBackwardWKernel[float32])(h, n, dw, dy, x, stats, N, C)
	}, dw, dy, x, stats)
}

func normBackwardWKernel[F float](h *Device, n cuda.Norm, dw, dy, x, stats *cuda.Buffer, N, C int) {
	vdy, vx, vs := mkvec[F](dy), mkvec[F](x), mkvec[F](stats)
	columnSums(h, dw, N, C, func(i, c0, c1 int, acc []float64, tmp []F) {
		var stt [2]F
		mean, rstd := rowStats(n, vs, i, stt[:])
		m := c1 - c0
		xs := vx.get(i*C+c0, i*C+c1, tmp[:m])
		ds := vdy.get(i*C+c0, i*C+c1, tmp[m:2*m])
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
