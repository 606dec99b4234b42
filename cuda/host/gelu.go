package host

// The host device's kernels: the GELU family.

import (
	"math"
	"trainmem/cuda"
)

// geluK is sqrt(2/π).
var geluK = math.Sqrt(2 / math.Pi)

// geluSigmoid returns σ(2u) = (1 + tanh u)/2 for GELU's u = sqrt(2/π)·(x +
// 0.044715·x³): one exponential instead of a tanh (several times slower in
// Go), with no cancellation for any x (exp overflowing to +Inf gives 0).
func geluSigmoid(x float64) float64 {
	return 1 / (1 + math.Exp(-2*geluK*(x+0.044715*x*x*x)))
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
		for i, v := range in[0][:len(out)] {
			xv := float64(v)
			out[i] = F(xv * geluSigmoid(xv))
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
		ds, xs := in[0][:len(out)], in[1][:len(out)]
		for i := range out {
			xv := float64(xs[i])
			s := geluSigmoid(xv)
			d := s + 2*xv*s*(1-s)*geluK*(1+3*0.044715*xv*xv)
			out[i] = F(float64(ds[i]) * d)
		}
	})
}
