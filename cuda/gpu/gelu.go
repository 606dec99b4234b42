//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the GELU family.

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
