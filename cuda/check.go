package cuda

// Argument validation shared by every device: a kernel's checks run before
// anything else on Host, Shape and CUDA alike, so that a wrong shape or type
// fails the same way in a dry run as on a card. Checks that need the data
// (token ids within the vocabulary) can only run on devices that hold it;
// they are here too (CheckIDs), called by those devices.
//
// Messages name the kernel and the argument and give the expected value
// with its formula: "cuda: LayerNorm: x has 100 elements, want N·C = 128".

import (
	"fmt"
	"math"
	"strconv"
)

// Checks is the argument validation of every kernel, shared by every
// device: Host and CUDA call it before they compute, and Shape, which
// computes nothing, is Checks and its allocator. Check is the value to call
// it through: cuda.Check.Norm(cuda.NormLayer, y, x, stats, w, b, N, C).
type Checks struct{}

var _ Kernels = Checks{}

// Check is the one Checks value.
var Check Checks

type checker struct {
	kernel string
	err    error
}

func check(kernel string) *checker { return &checker{kernel: kernel} }

func (c *checker) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("cuda: %s: %s", c.kernel, fmt.Sprintf(format, args...))
	}
}

// positive checks named dimensions: dims("B", B, "T", T).
func (c *checker) positive(namesAndValues ...any) {
	for i := 0; i+1 < len(namesAndValues); i += 2 {
		if v := namesAndValues[i+1].(int); v <= 0 {
			c.fail("%s is %d, want > 0", namesAndValues[i], v)
		}
	}
}

// buf checks that b is a usable buffer; later checks on b are skipped when
// it is not.
func (c *checker) buf(name string, b *Buffer) bool {
	switch {
	case c.err != nil:
		return false
	case b == nil:
		c.fail("%s is nil", name)
	case b.freed:
		c.fail("%s (%s) was freed", name, b)
	default:
		return true
	}
	return false
}

// float checks a buffer of any float type.
func (c *checker) float(name string, b *Buffer) bool {
	if !c.buf(name, b) {
		return false
	}
	if !b.DType.Float() || b.DType > F64 {
		c.fail("%s is %s, want a float type", name, b.DType)
		return false
	}
	return true
}

// floats checks a float buffer of want elements, want given with its
// formula.
func (c *checker) floats(name string, b *Buffer, want int, formula string) {
	c.float(name, b)
	c.length(name, b, want, formula)
}

// stats checks a norm's statistics: fp32 or fp64, per values for each of N
// rows (a layer norm's (mean, rstd), RMSNorm's rstd).
func (c *checker) stats(b *Buffer, N, per int) {
	c.f32or64("stats", b)
	formula := "N"
	if per != 1 {
		formula = strconv.Itoa(per) + "·N"
	}
	c.length("stats", b, per*N, formula)
}

// eps checks a norm's ε: finite and ≥ 0.
func (c *checker) eps(eps float32) {
	c.finite("eps", eps)
	if c.err == nil && eps < 0 {
		c.fail("eps is %g, want ≥ 0", eps)
	}
}

// rows checks float buffers of N rows of C (name, buffer pairs), in order.
func (c *checker) rows(N, C int, namesAndBuffers ...any) {
	for i := 0; i+1 < len(namesAndBuffers); i += 2 {
		c.floats(namesAndBuffers[i].(string), namesAndBuffers[i+1].(*Buffer), N*C, "N·C")
	}
}

// channels checks float buffers of C elements, one a channel (gains,
// biases and their gradients).
func (c *checker) channels(C int, namesAndBuffers ...any) {
	for i := 0; i+1 < len(namesAndBuffers); i += 2 {
		c.floats(namesAndBuffers[i].(string), namesAndBuffers[i+1].(*Buffer), C, "C")
	}
}

// f32or64 checks a buffer that must be fp32 or fp64 (statistics, losses,
// optimizer state, scratch).
func (c *checker) f32or64(name string, b *Buffer) bool {
	if !c.buf(name, b) {
		return false
	}
	if b.DType != F32 && b.DType != F64 {
		c.fail("%s is %s, want fp32 or fp64", name, b.DType)
		return false
	}
	return true
}

// ids checks an int32 buffer of want elements.
func (c *checker) ids(name string, b *Buffer, want int, formula string) {
	c.typed(name, b, I32, want, formula)
}

// typed checks a buffer of type dt and want elements.
func (c *checker) typed(name string, b *Buffer, dt DType, want int, formula string) {
	if !c.buf(name, b) {
		return
	}
	if b.DType != dt {
		c.fail("%s is %s, want %s", name, b.DType, dt)
		return
	}
	c.length(name, b, want, formula)
}

// length checks b.Len == want, want given with its formula.
func (c *checker) length(name string, b *Buffer, want int, formula string) {
	if c.err == nil && b != nil && b.Len != want {
		if formula == strconv.Itoa(want) {
			c.fail("%s has %d elements, want %d", name, b.Len, want)
		} else {
			c.fail("%s has %d elements, want %s = %d", name, b.Len, formula, want)
		}
	}
}

// atLeast checks b.Len ≥ want.
func (c *checker) atLeast(name string, b *Buffer, want int, formula string) {
	if c.err == nil && b != nil && b.Len < want {
		c.fail("%s has %d elements, want at least %s = %d", name, b.Len, formula, want)
	}
}

// floatRows checks a float buffer that holds whole rows of C and at least
// min of them.
func (c *checker) floatRows(name string, b *Buffer, C, min int, minFormula string) {
	if !c.float(name, b) {
		return
	}
	if b.Len%C != 0 {
		c.fail("%s has %d elements, not a whole number of rows of C = %d", name, b.Len, C)
	} else if b.Len/C < min {
		c.fail("%s has %d rows of C = %d, want at least %s = %d", name, b.Len/C, C, minFormula, min)
	}
}

// elementwise checks the buffers of an elementwise kernel, given as name,
// buffer pairs, the output first: every one a float buffer, the inputs of
// the output's length.
func (c *checker) elementwise(namesAndBuffers ...any) {
	for i := 0; i+1 < len(namesAndBuffers); i += 2 {
		c.float(namesAndBuffers[i].(string), namesAndBuffers[i+1].(*Buffer))
	}
	outName, out := namesAndBuffers[0].(string), namesAndBuffers[1].(*Buffer)
	for i := 2; i+1 < len(namesAndBuffers); i += 2 {
		c.sameLen(namesAndBuffers[i].(string), namesAndBuffers[i+1].(*Buffer), outName, out)
	}
}

// checkElementwise is the whole check of an elementwise kernel: float
// buffers (names and buffers in turn, the output first) of the output's
// length.
func checkElementwise(kernel string, namesAndBuffers ...any) error {
	c := check(kernel)
	c.elementwise(namesAndBuffers...)
	return c.err
}

func (c *checker) sameLen(name string, b *Buffer, refName string, ref *Buffer) {
	if c.err == nil && b != nil && ref != nil && b.Len != ref.Len {
		c.fail("%s has %d elements, want %s's %d", name, b.Len, refName, ref.Len)
	}
}

// disjoint checks that an output does not overlap an input in memory.
func (c *checker) disjoint(outName string, out *Buffer, inName string, in *Buffer) {
	if c.err == nil && out != nil && in != nil && overlap(out, in) {
		c.fail("%s (%s) overlaps %s (%s)", outName, out, inName, in)
	}
}

// disjointFrom checks out against each of the named inputs, given as
// name, buffer pairs.
func (c *checker) disjointFrom(outName string, out *Buffer, namesAndBuffers ...any) {
	for i := 0; i+1 < len(namesAndBuffers); i += 2 {
		c.disjoint(outName, out, namesAndBuffers[i].(string), namesAndBuffers[i+1].(*Buffer))
	}
}

func overlap(a, b *Buffer) bool {
	if a.Len == 0 || b.Len == 0 {
		return false
	}
	a0, a1 := a.addr, a.addr+uintptr(a.Bytes())
	b0, b1 := b.addr, b.addr+uintptr(b.Bytes())
	return a0 < b1 && b0 < a1
}

func (c *checker) finite(name string, v float32) {
	if c.err == nil && (math.IsNaN(float64(v)) || math.IsInf(float64(v), 0)) {
		c.fail("%s is %g, want a finite value", name, v)
	}
}

// CheckHostValues checks Upload's source or Download's destination: a
// []float32, []float64, []int32 or []uint8 of length b.Len: int32 exactly
// for I32 buffers, uint8 for U8 ones, floats for the float types.
func CheckHostValues(op, name string, vals any, b *Buffer) error {
	c := check(op)
	if b == nil {
		c.fail("buffer is nil")
		return c.err
	}
	if !c.buf("buffer", b) {
		return c.err
	}
	var n int
	exact := DType(255) // the buffer type the values must have, when not a float type
	switch v := vals.(type) {
	case []float32:
		n = len(v)
	case []float64:
		n = len(v)
	case []int32:
		n, exact = len(v), I32
	case []uint8:
		n, exact = len(v), U8
	default:
		c.fail("%s is %T, want []float32, []float64, []int32 or []uint8", name, vals)
		return c.err
	}
	switch {
	case (exact != DType(255) || !b.DType.Float()) && exact != b.DType:
		c.fail("%s is %T for a buffer of %s", name, vals, b.DType)
	case n != b.Len:
		c.fail("%s has %d elements, want the buffer's %d", name, n, b.Len)
	}
	return c.err
}
