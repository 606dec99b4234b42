package host

// The host device's kernels: the GELU family.

import (
	"math"
	"trainmem/cuda"
	"trainmem/cuda/host/avx2"
)

// geluK is sqrt(2/π).
var geluK = math.Sqrt(2 / math.Pi)

// geluTwin holds the GELU loops' constants, their float64 values, for the
// AVX2 twins.
var geluTwin = avx2.GELUConsts{M2K: avx2.Lanes(-2 * geluK), C: avx2.Lanes(0.044715), K: avx2.Lanes(geluK), C3: avx2.Lanes(3 * 0.044715), One: avx2.Lanes(1)}

// geluExp sets e[i] = exp(-2u) for GELU's u = sqrt(2/π)·(x + 0.044715·x³)
// at x = float64(xs[i]), so that σ(2u) = (1 + tanh u)/2 = 1/(1 + e[i]): one
// exponential instead of a tanh (several times slower in Go), with no
// cancellation for any x (e overflowing to +Inf gives σ = 0).
func geluExp[F float](e []float64, xs []F) {
	for i, v := range xs {
		x := float64(v)
		e[i] = -2 * geluK * (x + 0.044715*x*x*x)
	}
	expLoop(e[:len(xs)])
}

// GELU: y = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) elementwise,
// evaluated in float64 as x·σ(2u) (the same function) and rounded once.
func (h *Device) GELU(y, x *cuda.Buffer) error {
	return h.launch("GELU", cuda.Check.GELU(y, x), func() { instance(cuda.AllF64(y, x), geluKernel[float64], geluKernel[float32])(h, y, x) }, y, x)
}

func geluKernel[F float](h *Device, y, x *cuda.Buffer) {
	mapElems(h, y, []*cuda.Buffer{x}, func(out []F, in [][]F) { geluRun(out, in[0][:len(out)]) })
}

// geluRun is GELU on xs into out: avx2.GELU where it runs, geluLoop for
// the rest.
func geluRun[F float](out, xs []F) {
	var twin func(lo int) int
	if o32, ok := f32(out); ok {
		x32, _ := f32(xs)
		twin = func(lo int) int { return lo + avx2.GELU(o32[lo:], x32[lo:], &geluTwin, &expTwin) }
	}
	withTwin(len(out), twin, func(lo, hi int) { geluLoop(out[lo:hi], xs[lo:hi]) })
}

// geluLoop is GELU on xs into out, element by element (expChunk at a
// time); avx2.GELU is its fp32 twin.
func geluLoop[F float](out, xs []F) {
	var e [expChunk]float64
	for c0 := 0; c0 < len(xs); c0 += expChunk {
		x := xs[c0:min(c0+expChunk, len(xs))]
		geluExp(e[:], x)
		for i, v := range x {
			out[c0+i] = F(float64(v) * (1 / (1 + e[i])))
		}
	}
}

// GELUBackward: dx = dy·GELU'(x). With s = σ(2u) = (1 + tanh u)/2,
// GELU'(x) = 0.5·(1 + tanh u) + 0.5·x·(1 - tanh² u)·u'(x) = s + 2x·s·(1-s)·u'(x),
// u'(x) = sqrt(2/π)·(1 + 3·0.044715·x²).
func (h *Device) GELUBackward(dx, dy, x *cuda.Buffer) error {
	return h.launch("GELUBackward", cuda.Check.GELUBackward(dx, dy, x), func() {
		instance(cuda.AllF64(dx, dy, x), geluBackwardKernel[float64], geluBackwardKernel[float32])(h, dx, dy, x)
	}, dx, dy, x)
}

func geluBackwardKernel[F float](h *Device, dx, dy, x *cuda.Buffer) {
	mapElems(h, dx, []*cuda.Buffer{dy, x}, func(out []F, in [][]F) {
		geluBackwardRun(out, in[0][:len(out)], in[1][:len(out)])
	})
}

// geluBackwardRun is GELUBackward on ds and xs into out:
// avx2.GELUBackward where it runs, geluBackwardLoop for the rest.
func geluBackwardRun[F float](out, ds, xs []F) {
	var twin func(lo int) int
	if o32, ok := f32(out); ok {
		d32, _ := f32(ds)
		x32, _ := f32(xs)
		twin = func(lo int) int { return lo + avx2.GELUBackward(o32[lo:], d32[lo:], x32[lo:], &geluTwin, &expTwin) }
	}
	withTwin(len(out), twin, func(lo, hi int) { geluBackwardLoop(out[lo:hi], ds[lo:hi], xs[lo:hi]) })
}

// geluBackwardLoop is GELUBackward element by element (expChunk at a
// time); avx2.GELUBackward is its fp32 twin.
func geluBackwardLoop[F float](out, ds, xs []F) {
	var e [expChunk]float64
	for c0 := 0; c0 < len(xs); c0 += expChunk {
		x := xs[c0:min(c0+expChunk, len(xs))]
		geluExp(e[:], x)
		for i, v := range x {
			xv := float64(v)
			s := 1 / (1 + e[i])
			d := s + 2*xv*s*(1-s)*geluK*(1+3*0.044715*xv*xv)
			out[c0+i] = F(float64(ds[c0+i]) * d)
		}
	}
}
