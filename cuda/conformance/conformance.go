// Package conformance checks a cuda.Device against references written
// here, independently of any device: plain float64 loops, no BLAS, no code
// shared with the kernels. Every device runs it (Host with each BLAS, Shape,
// and CUDA where there is a GPU):
//
//	func TestConformance(t *testing.T) {
//		conformance.RunAll(t, func(t *testing.T) cuda.Device { return newMyDevice(t) })
//	}
//
// There is one subtest per kernel family. On devices that compute, each
// kernel runs with every float storage type (fp32, fp16, bf16, fp64) and
// its outputs are compared with the reference evaluated on the inputs as
// stored (so input rounding is not the kernel's error); the gradient
// kernels are checked also against central finite differences of the
// forward reference. Devices that do not compute (Shape) are checked for
// argument validation and allocator behaviour, which every device must
// share. Each comparison logs its largest difference (go test -v).
//
// Tolerances, for an output stored as (see tolFor):
//
//	fp64: 1e-10 relative: float64 arithmetic, in another order
//	fp32: 1e-5 relative: fp32 arithmetic, reductions of up to a few hundred terms
//	fp16: 2^-11 + 1e-5 relative: the storage rounding bound (half an ulp) on top of fp32's
//	bf16: 2^-8 + 1e-5 relative: likewise
//
// each with an absolute allowance of 1e-5 (1e-10 for fp64) times the
// largest magnitude in the reference tensor, for elements near zero that
// result from cancellation, and for fp16 half its smallest subnormal
// (2^-25). Gradients against finite differences (fp64 only, step 1e-6):
// 1e-6 relative plus 1e-6 times the largest magnitude.
package conformance

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"trainmem/cuda"
)

// NewDevice makes a fresh device for one subtest; RunAll closes it.
type NewDevice func(t *testing.T) cuda.Device

// RunAll runs every conformance subtest on devices from newDevice.
func RunAll(t *testing.T, newDevice func(t *testing.T) cuda.Device) {
	probe := newDevice(t)
	computes := probe.Computes()
	if err := probe.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	nd := NewDevice(newDevice)
	t.Run("Allocator", func(t *testing.T) { testAllocator(t, nd) })
	t.Run("Copy", func(t *testing.T) { testCopy(t, nd, computes) })
	t.Run("Validation", func(t *testing.T) { testValidation(t, nd, computes) })
	if !computes {
		t.Run("KernelsAcceptValidArguments", func(t *testing.T) { testValidCalls(t, nd) })
		return
	}
	for _, f := range families {
		for _, k := range f.tests {
			t.Run(k.name, func(t *testing.T) { k.test(t, nd) })
		}
	}
}

// family is one kernel family's part of the suite, kept in the family's
// file (conformance/<family>.go, named as cuda/<family>.go) with its float64
// references: tests check its kernels against them on a computing device;
// invalid makes calls with bad arguments, each with the words its error must
// hold, on every device; valid makes calls with good arguments, which must
// succeed on a device that does not compute and allocate nothing.
type family struct {
	name    string
	tests   []familyTest
	invalid func(f *fixture) []badCall
	valid   func(f *fixture, dt cuda.DType) []goodCall
}

type familyTest struct {
	name string
	test func(*testing.T, NewDevice)
}

// badCall is a call with a bad argument and what its error must say.
type badCall struct {
	name string
	err  error
	want []string
}

// goodCall is a call with good arguments, made when run is called.
type goodCall struct {
	name string
	run  func() error
}

// families are the registered kernel families, in their files' order.
var families []family

// register adds a family to the suite (from its file's init).
func register(f family) { families = append(families, f) }

// fixture allocates the buffers of the validation calls on one device;
// computes says whether it computes (checks that need the data run only
// there).
type fixture struct {
	*env
	computes bool
}

// alloc takes n elements of dt, tagged temporaries.
func (f *fixture) alloc(dt cuda.DType, n int) *cuda.Buffer {
	b, err := f.d.Alloc(cuda.Temporaries, dt, n)
	f.must(err)
	return b
}

// f32 takes n fp32 elements.
func (f *fixture) f32(n int) *cuda.Buffer { return f.alloc(cuda.F32, n) }

// forTypes runs f once per float storage type, each on a fresh device.
func forTypes(t *testing.T, nd NewDevice, f func(e *env, dt cuda.DType)) {
	for _, dt := range floatTypes {
		t.Run(dt.String(), func(t *testing.T) { f(newEnv(t, nd), dt) })
	}
}

// Sizes: large enough that a device which splits work over cores splits
// these (tens of thousands of elements, hundreds of rows), small enough for
// the float64 loops; the finite-difference checks use smaller ones still.
//
// The float64 references (ref*, in each family's file) are written from the
// definitions in cuda.Kernels as plainly as possible: loops over the index
// space, no reuse of the devices' code. They are slow and that is fine: the
// suite's sizes are small.

// floatTypes are the storage types every kernel runs with.
var floatTypes = []cuda.DType{cuda.F32, cuda.F16, cuda.BF16, cuda.F64}

// stateType is the type of statistics, losses, scratch and optimizer
// state that goes with a storage type: fp64 for fp64 runs, else fp32.
func stateType(dt cuda.DType) cuda.DType {
	if dt == cuda.F64 {
		return cuda.F64
	}
	return cuda.F32
}

// tol is an allowance |got - want| ≤ rel·|want| + abs·max|want| + floor.
type tol struct{ rel, abs, floor float64 }

// tolFor is the allowance for an output stored as dt (see the package
// documentation).
func tolFor(dt cuda.DType) tol {
	switch dt {
	case cuda.F64:
		return tol{1e-10, 1e-10, 0}
	case cuda.F16:
		return tol{math.Ldexp(1, -11) + 1e-5, 1e-5, math.Ldexp(1, -25)}
	case cuda.BF16:
		return tol{math.Ldexp(1, -8) + 1e-5, 1e-5, 0}
	default:
		return tol{1e-5, 1e-5, 0}
	}
}

// fdTol is the allowance of a gradient against finite differences.
var fdTol = tol{1e-6, 1e-6, 0}

// env is one subtest's device and random numbers.
type env struct {
	t   *testing.T
	d   cuda.Device
	rng *rand.Rand
}

func newEnv(t *testing.T, nd NewDevice) *env {
	t.Helper()
	d := nd(t)
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	// A seed per test name: reruns see the same numbers.
	var seed uint64
	for _, c := range t.Name() {
		seed = seed*131 + uint64(c)
	}
	return &env{t: t, d: d, rng: rand.New(rand.NewPCG(seed, 0x7e57))}
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) randn(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = e.rng.NormFloat64()
	}
	return v
}

func (e *env) uniform(n int, lo, hi float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = lo + (hi-lo)*e.rng.Float64()
	}
	return v
}

// buf allocates a buffer of dt holding vals and returns it with the values
// as stored (rounded to dt).
func (e *env) buf(dt cuda.DType, vals []float64) (*cuda.Buffer, []float64) {
	e.t.Helper()
	b, err := e.d.Alloc(cuda.Temporaries, dt, len(vals))
	e.must(err)
	e.must(e.d.Upload(b, vals))
	return b, e.get(b)
}

// out allocates an output buffer of n elements filled with NaN (bytes
// with 0xA5), so that an element the kernel fails to write shows.
func (e *env) out(dt cuda.DType, n int) *cuda.Buffer {
	e.t.Helper()
	b, err := e.d.Alloc(cuda.Temporaries, dt, n)
	e.must(err)
	if dt == cuda.U8 {
		fill := make([]uint8, n)
		for i := range fill {
			fill[i] = 0xA5
		}
		e.must(e.d.Upload(b, fill))
		return b
	}
	e.must(e.d.Fill(b, float32(math.NaN())))
	return b
}

// codes is a U8 buffer holding vals.
func (e *env) codes(vals []uint8) *cuda.Buffer { return exactBuf(e, cuda.U8, vals) }

// ids is an I32 buffer holding vals.
func (e *env) ids(vals []int32) *cuda.Buffer { return exactBuf(e, cuda.I32, vals) }

// exactBuf is a buffer of dt (I32 or U8) holding vals.
func exactBuf[E int32 | uint8](e *env, dt cuda.DType, vals []E) *cuda.Buffer {
	e.t.Helper()
	b, err := e.d.Alloc(cuda.Temporaries, dt, len(vals))
	e.must(err)
	e.must(e.d.Upload(b, vals))
	return b
}

func (e *env) randIDs(n, V int) ([]int32, *cuda.Buffer) {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(e.rng.IntN(V))
	}
	return ids, e.ids(ids)
}

func (e *env) get(b *cuda.Buffer) []float64 {
	e.t.Helper()
	v := make([]float64, b.Len)
	e.must(e.d.Download(v, b))
	return v
}

// compare checks got against want within tl and logs the largest
// differences.
func compare(t *testing.T, what string, got, want []float64, tl tol) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d values, want %d", what, len(got), len(want))
		return
	}
	scale := 0.0
	for _, w := range want {
		if !math.IsNaN(w) && !math.IsInf(w, 0) {
			scale = max(scale, math.Abs(w))
		}
	}
	worst, worstAt := 0.0, -1 // the largest diff as a fraction of its allowance
	maxDiff, maxRel := 0.0, 0.0
	bad := 0
	for i := range want {
		d := math.Abs(got[i] - want[i])
		allowed := tl.rel*math.Abs(want[i]) + tl.abs*scale + tl.floor
		switch {
		case math.IsNaN(got[i]) && math.IsNaN(want[i]), got[i] == want[i]: // both NaN, equal infinities, exact
			d = 0
		case math.IsNaN(got[i]) || math.IsNaN(want[i]) || math.IsInf(got[i], 0) || math.IsInf(want[i], 0):
			d, allowed = math.Inf(1), 0
		}
		maxDiff = max(maxDiff, d)
		if want[i] != 0 {
			maxRel = max(maxRel, d/math.Abs(want[i]))
		}
		r := d / allowed
		if allowed == 0 {
			r = 0
			if d > 0 {
				r = math.Inf(1)
			}
		}
		if r > 1 {
			bad++
		}
		if r > worst || worstAt < 0 {
			worst, worstAt = r, i
		}
	}
	msg := fmt.Sprintf("%s: %d values, max |diff| %.3g, max rel %.3g, worst at [%d]: got %.9g want %.9g (%.2f of the allowance rel %.3g + %.3g·%.3g + %.3g)",
		what, len(want), maxDiff, maxRel, worstAt, got[worstAt], want[worstAt], worst, tl.rel, tl.abs, scale, tl.floor)
	if bad > 0 {
		t.Errorf("%s; %d values outside the tolerance", msg, bad)
	} else {
		t.Log(msg)
	}
}

// dot is Σ a·b.
func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// FiniteDiff returns the central finite difference of f at x with respect
// to every element of x (x is restored).
func FiniteDiff(x []float64, f func() float64) []float64 {
	const h = 1e-6
	g := make([]float64, len(x))
	for i := range x {
		x0 := x[i]
		x[i] = x0 + h
		fp := f()
		x[i] = x0 - h
		fm := f()
		x[i] = x0
		g[i] = (fp - fm) / (2 * h)
	}
	return g
}
