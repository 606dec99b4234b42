package host

// The host device's kernels: the GELU family.

import (
	"math"
	"trainmem/cuda"
)

// geluK is sqrt(2/π).
var geluK = math.Sqrt(2 / math.Pi)

// geluExp sets e[i] = exp(-2u) for GELU's u = sqrt(2/π)·(x + 0.044715·x³)
// at x = float64(xs[i]), so that σ(2u) = (1 + tanh u)/2 = 1/(1 + e[i]): one
// exponential instead of a tanh (several times slower in Go), with no
// cancellation for any x (e overflowing to +Inf gives σ = 0).
func geluExp[F float](e []float64, xs []F) {
	for i, v := range xs {
		x := float64(v)
		e[i] = -2 * geluK * (x + 0.044715*x*x*x)
	}
	expInPlace(e[:len(xs)])
}

// GELU: y = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) elementwise,
// evaluated in float64 as x·σ(2u) (the same function) and rounded once.
func (h *Device) GELU(y, x *cuda.Buffer) error {
	if err := h.begin("GELU", cuda.Check.GELU(y, x), y, x); err != nil {
		return err
	}
	instance(cuda.AllF64(y, x), geluKernel[float64], geluKernel[float32])(h, y, x)
	return nil
}

func geluKernel[F float](h *Device, y, x *cuda.Buffer) {
	mapElems(h, y, []*cuda.Buffer{x}, func(out []F, in [][]F) {
		var e [expChunk]float64
		for c0 := 0; c0 < len(out); c0 += expChunk {
			xs := in[0][c0:min(c0+expChunk, len(out))]
			geluExp(e[:], xs)
			for i, v := range xs {
				out[c0+i] = F(float64(v) * (1 / (1 + e[i])))
			}
		}
	})
}

// GELUBackward: dx = dy·GELU'(x). With s = σ(2u) = (1 + tanh u)/2,
// GELU'(x) = 0.5·(1 + tanh u) + 0.5·x·(1 - tanh² u)·u'(x) = s + 2x·s·(1-s)·u'(x),
// u'(x) = sqrt(2/π)·(1 + 3·0.044715·x²).
func (h *Device) GELUBackward(dx, dy, x *cuda.Buffer) error {
	if err := h.begin("GELUBackward", cuda.Check.GELUBackward(dx, dy, x), dx, dy, x); err != nil {
		return err
	}
	instance(cuda.AllF64(dx, dy, x), geluBackwardKernel[float64], geluBackwardKernel[float32])(h, dx, dy, x)
	return nil
}

func geluBackwardKernel[F float](h *Device, dx, dy, x *cuda.Buffer) {
	mapElems(h, dx, []*cuda.Buffer{dy, x}, func(out []F, in [][]F) {
		var e [expChunk]float64
		for c0 := 0; c0 < len(out); c0 += expChunk {
			c1 := min(c0+expChunk, len(out))
			ds, xs := in[0][c0:c1], in[1][c0:c1]
			geluExp(e[:], xs)
			for i, v := range xs {
				xv := float64(v)
				s := 1 / (1 + e[i])
				d := s + 2*xv*s*(1-s)*geluK*(1+3*0.044715*xv*xv)
				out[c0+i] = F(float64(ds[i]) * d)
			}
		}
	})
}
