//go:build trainmem_cuda

package cuda

// The CUDA device's kernels: the GELU family.

// GELU: y = x·σ(2u), in fp64, rounded once.
func (d *CUDA) GELU(y, x *Buffer) error {
	if err := d.begin("GELU", checkGELU(y, x), y, x); err != nil {
		return err
	}
	defer d.leave()
	if y.Len == 0 {
		return nil
	}
	return d.run(geluCall(y, x))
}

// GELUBackward: dx = dy·GELU'(x), in fp64.
func (d *CUDA) GELUBackward(dx, dy, x *Buffer) error {
	if err := d.begin("GELUBackward", checkGELUBackward(dx, dy, x), dx, dy, x); err != nil {
		return err
	}
	defer d.leave()
	if dx.Len == 0 {
		return nil
	}
	return d.run(geluBackwardCall(dx, dy, x))
}
