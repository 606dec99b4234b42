//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the GELU family.

// The family's kernels (kernels/gelu.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"gelu":          "pipii",
		"gelu_backward": "pipipii",
	})
}

// GELU: y = x·σ(2u), in fp64, rounded once.
func (d *Device) GELU(y, x *cuda.Buffer) error {
	if err := d.begin("GELU", cuda.Check.GELU(y, x), y, x); err != nil {
		return err
	}
	defer d.leave()
	if y.Len == 0 {
		return nil
	}
	return d.run(geluCall(y, x))
}

// GELUBackward: dx = dy·GELU'(x), in fp64.
func (d *Device) GELUBackward(dx, dy, x *cuda.Buffer) error {
	if err := d.begin("GELUBackward", cuda.Check.GELUBackward(dx, dy, x), dx, dy, x); err != nil {
		return err
	}
	defer d.leave()
	if dx.Len == 0 {
		return nil
	}
	return d.run(geluBackwardCall(dx, dy, x))
}

func geluCall(y, x *cuda.Buffer) *kcall {
	return newCall("gelu", cuda.AllF64(y, x), gridStride(int64(y.Len), elemBlock)).buf(y).buf(x).int(int64(y.Len))
}

func geluBackwardCall(dx, dy, x *cuda.Buffer) *kcall {
	return newCall("gelu_backward", cuda.AllF64(dx, dy, x), gridStride(int64(dx.Len), elemBlock)).buf(dx).buf(dy).buf(x).int(int64(dx.Len))
}
