//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the SwiGLU family.

// The family's kernels (kernels/swiglu.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"swiglu":          "pipiii",
		"swiglu_backward": "pipipiii",
	})
}

// SwiGLU: y = silu(g)·u, in fp64, rounded once.
func (d *Device) SwiGLU(y, x *cuda.Buffer, N, F int) error {
	return d.launch("SwiGLU", cuda.Check.SwiGLU(y, x, N, F), func() *kcall { return swigluCall(y, x, N, F) }, y, x)
}

// SwiGLUBackward: the gate's and the projection's gradients, in fp64.
func (d *Device) SwiGLUBackward(dx, dy, x *cuda.Buffer, N, F int) error {
	return d.launch("SwiGLUBackward", cuda.Check.SwiGLUBackward(dx, dy, x, N, F), func() *kcall { return swigluBackwardCall(dx, dy, x, N, F) }, dx, dy, x)
}

func swigluCall(y, x *cuda.Buffer, N, F int) *kcall {
	return newCall("swiglu", cuda.AllF64(y, x), gridStride(int64(N)*int64(F), elemBlock)).
		buf(y).buf(x).int(int64(N)).int(int64(F))
}

func swigluBackwardCall(dx, dy, x *cuda.Buffer, N, F int) *kcall {
	return newCall("swiglu_backward", cuda.AllF64(dx, dy, x), gridStride(int64(N)*int64(F), elemBlock)).
		buf(dx).buf(dy).buf(x).int(int64(N)).int(int64(F))
}
