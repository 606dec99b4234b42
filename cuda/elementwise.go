package cuda

// The elementwise family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/elementwise.go and cuda/gpu/elementwise.go implement it).

// ElementwiseKernels are the elementwise family: fills, casts, sums and
// the Inf/NaN check.
type ElementwiseKernels interface {
	// Fill sets every element of dst to v.
	Fill(dst *Buffer, v float32) error
	// Cast converts src into dst elementwise (same length; any float types).
	Cast(dst, src *Buffer) error
	// Add computes y = a + b elementwise (same length). y may alias a or b.
	Add(y, a, b *Buffer) error
	// NonFinite reports whether x holds an Inf or a NaN (fp16 loss scaling).
	// On Shape it is always false.
	NonFinite(x *Buffer) (bool, error)
}

func (Checks) Fill(dst *Buffer, v float32) error {
	c := check("Fill")
	c.float("dst", dst)
	return c.err
}

// Cast: dst may be src itself (same type: nothing to do), never a
// view that overlaps it otherwise (a copy or a cast over overlapping
// memory reads what it has written).
func (Checks) Cast(dst, src *Buffer) error {
	c := check("Cast")
	c.elementwise("dst", dst, "src", src)
	if c.err == nil && !(dst.addr == src.addr && dst.DType == src.DType) {
		c.disjoint("dst", dst, "src", src)
	}
	return c.err
}

func (Checks) Add(y, a, b *Buffer) error { return checkElementwise("Add", "y", y, "a", a, "b", b) }

func (Checks) NonFinite(x *Buffer) (bool, error) {
	c := check("NonFinite")
	c.float("x", x)
	return false, c.err
}
