package host

// The host device's kernels: the SwiGLU family.

import "trainmem/cuda"

// swigluSigmoid sets e[j] = σ(g[j]) = 1/(1 + exp(-g[j])) in float64 (an
// exponential overflowing to +Inf gives σ = 0), up to expChunk at a time:
// the exponentials of -g by expShiftedSum (its AVX2 twin where there is
// one, the cross entropy's), the sums it keeps unused.
func swigluSigmoid[F float](e []float64, g []F) {
	var neg [expChunk]F
	n := neg[:len(g)]
	for j, v := range g {
		n[j] = -v
	}
	var sums [4]float64
	expShiftedSum(e, n, 0, &sums)
	for j := range g {
		e[j] = 1 / (1 + e[j])
	}
}

// SwiGLU: y[i, j] = silu(g)·u, g = x[i, j], u = x[i, F+j], evaluated in
// float64 and rounded once.
func (h *Device) SwiGLU(y, x *cuda.Buffer, N, F int) error {
	return h.launch("SwiGLU", cuda.Check.SwiGLU(y, x, N, F), func() { instance(cuda.AllF64(y, x), swigluKernel[float64], swigluKernel[float32])(h, y, x, N, F) }, y, x)
}

func swigluKernel[T float](h *Device, y, x *cuda.Buffer, N, F int) {
	vy, vx := mkvec[T](y), mkvec[T](x)
	h.parallel(N, rowGrain(3*F), func(lo, hi int) {
		tmp := getScratch[T](3 * F)
		defer putScratch(tmp)
		var e [expChunk]float64
		for i := lo; i < hi; i++ {
			xs := vx.get(2*i*F, 2*i*F+2*F, tmp[:2*F])
			g, u := xs[:F], xs[F:]
			o := vy.out(i*F, i*F+F, tmp[2*F:])
			for c0 := 0; c0 < F; c0 += expChunk {
				c1 := min(c0+expChunk, F)
				swigluSigmoid(e[:], g[c0:c1])
				for j := c0; j < c1; j++ {
					gv := float64(g[j])
					o[j] = T(gv * e[j-c0] * float64(u[j]))
				}
			}
			vy.put(i*F, o)
		}
	})
}

// SwiGLUBackward: with s = σ(g), d silu(g)/dg = s·(1 + g·(1 - s)), so the
// gate's gradient is dy·u·s·(1 + g·(1 - s)) and the projection's
// dy·g·s, in float64.
func (h *Device) SwiGLUBackward(dx, dy, x *cuda.Buffer, N, F int) error {
	return h.launch("SwiGLUBackward", cuda.Check.SwiGLUBackward(dx, dy, x, N, F), func() {
		instance(cuda.AllF64(dx, dy, x), swigluBackwardKernel[float64], swigluBackwardKernel[float32])(h, dx, dy, x, N, F)
	}, dx, dy, x)
}

func swigluBackwardKernel[T float](h *Device, dx, dy, x *cuda.Buffer, N, F int) {
	vdx, vdy, vx := mkvec[T](dx), mkvec[T](dy), mkvec[T](x)
	h.parallel(N, rowGrain(5*F), func(lo, hi int) {
		tmp := getScratch[T](5 * F)
		defer putScratch(tmp)
		var e [expChunk]float64
		for i := lo; i < hi; i++ {
			xs := vx.get(2*i*F, 2*i*F+2*F, tmp[:2*F])
			ds := vdy.get(i*F, i*F+F, tmp[2*F:3*F])
			g, u := xs[:F], xs[F:]
			o := vdx.out(2*i*F, 2*i*F+2*F, tmp[3*F:])
			for c0 := 0; c0 < F; c0 += expChunk {
				c1 := min(c0+expChunk, F)
				swigluSigmoid(e[:], g[c0:c1])
				for j := c0; j < c1; j++ {
					gv, s, d := float64(g[j]), e[j-c0], float64(ds[j])
					o[j] = T(d * float64(u[j]) * s * (1 + gv*(1-s)))
					o[F+j] = T(d * gv * s)
				}
			}
			vdx.put(2*i*F, o)
		}
	})
}
