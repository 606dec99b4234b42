//go:build trainmem_cuda

package gpu

import (
	"fmt"
	"trainmem/cuda"
)

// The CUDA device's kernels: fill, cast, add and the non-finite check.

// The family's kernels (kernels/elementwise.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"fill":       "piif",
		"cast":       "pipii",
		"non_finite": "piip",
		"add":        "pipipii",
	}, "fill", "cast", "non_finite")
}

// Fill sets every element of dst to v (rounded once to dst's type).
func (d *Device) Fill(dst *cuda.Buffer, v float32) error {
	if err := d.begin("Fill", cuda.Check.Fill(dst, v), dst); err != nil {
		return err
	}
	defer d.leave()
	if dst.Len == 0 {
		return nil
	}
	return d.run(fillCall(dst, v))
}

// Cast converts src into dst, correctly rounded; a same-type cast copies.
func (d *Device) Cast(dst, src *cuda.Buffer) error {
	if err := d.begin("Cast", cuda.Check.Cast(dst, src), dst, src); err != nil {
		return err
	}
	defer d.leave()
	if dst.Len == 0 {
		return nil
	}
	if dst.DType == src.DType {
		if dst.Addr() == src.Addr() {
			return nil
		}
		return cuErr(fmt.Sprintf("cuMemcpyDtoDAsync(%s ← %s)", dst, src), memcpyDtoD(d, dst, src))
	}
	return d.run(castCall(dst, src))
}

// Add computes y = a + b; y may alias a or b.
func (d *Device) Add(y, a, b *cuda.Buffer) error {
	if err := d.begin("Add", cuda.Check.Add(y, a, b), y, a, b); err != nil {
		return err
	}
	defer d.leave()
	if y.Len == 0 {
		return nil
	}
	return d.run(addCall(y, a, b))
}

// NonFinite reports whether x holds an Inf or a NaN; it waits for the
// device.
func (d *Device) NonFinite(x *cuda.Buffer) (bool, error) {
	_, err := cuda.Check.NonFinite(x)
	if err := d.begin("NonFinite", err, x); err != nil {
		return false, err
	}
	defer d.leave()
	if x.Len == 0 {
		return false, nil
	}
	flag := d.status + statusFlag
	if err := cuErr("cuMemsetD8Async(NonFinite flag)", memsetD8(d, flag, 4)); err != nil {
		return false, err
	}
	if err := d.run(nonFiniteCall(x, uintptr(flag))); err != nil {
		return false, err
	}
	var f [1]int32
	if err := cuErr("cuMemcpyDtoHAsync(NonFinite flag)", readInt32s(d, f[:], flag)); err != nil {
		return false, err
	}
	if err := d.syncCheck("non_finite"); err != nil {
		return false, err
	}
	return f[0] != 0, nil
}

func fillCall(dst *cuda.Buffer, v float32) *kcall {
	return plain("fill", gridStride(int64(dst.Len), elemBlock)).buf(dst).int(int64(dst.Len)).f64(float64(v))
}

func castCall(dst, src *cuda.Buffer) *kcall {
	return plain("cast", gridStride(int64(dst.Len), elemBlock)).buf(dst).buf(src).int(int64(dst.Len))
}

func nonFiniteCall(x *cuda.Buffer, flag uintptr) *kcall {
	return plain("non_finite", gridStride(int64(x.Len), elemBlock)).buf(x).int(int64(x.Len)).ptr(flag)
}

func addCall(y, a, b *cuda.Buffer) *kcall {
	return newCall("add", cuda.AllF64(y, a, b), gridStride(int64(y.Len), elemBlock)).buf(y).buf(a).buf(b).int(int64(y.Len))
}
