package gpu

// Kernel calls of the CUDA device, built in pure Go so that they can be
// checked without a GPU. Each family's file (cuda/gpu/<family>.go) holds
// its builders, which return a kcall: the kernel's entry point (NAME_f32 or
// NAME_f64 by the host's rule: fp64 when every float operand is fp64), its
// launch geometry and its arguments, every one an 8-byte slot (kernels.cu's
// conventions), and registers its kernels' parameter kinds (kernelFamily).
// calls_test.go parses the PTX and checks every builder's argument list,
// slot by slot, against the kernel's parameters.

import (
	"fmt"
	"math"
	"trainmem/cuda"
)

// kcall is one kernel launch.
type kcall struct {
	name  string
	l     launch
	args  []uint64
	kinds []byte // per argument: 'p' pointer, 'i' integer (also dtype codes), 'f' double
}

func newCall(base string, f64 bool, l launch) *kcall {
	name := base
	if f64 {
		name += "_f64"
	} else {
		name += "_f32"
	}
	return &kcall{name: name, l: l}
}

// plain is a call of a kernel with a single entry point.
func plain(name string, l launch) *kcall { return &kcall{name: name, l: l} }

func (c *kcall) ptr(a uintptr) *kcall {
	c.args = append(c.args, uint64(a))
	c.kinds = append(c.kinds, 'p')
	return c
}

// buf passes a buffer as its address and its dtype code.
func (c *kcall) buf(b *cuda.Buffer) *kcall {
	if b == nil { // an operand a kernel does not read (an embedding's absent wpe)
		return c.ptr(0).int(int64(cuda.F32))
	}
	return c.ptr(b.Addr()).int(int64(b.DType))
}

// ids passes an int32 buffer as its address alone.
func (c *kcall) ids(b *cuda.Buffer) *kcall { return c.ptr(b.Addr()) }

func (c *kcall) int(v int64) *kcall {
	c.args = append(c.args, uint64(v))
	c.kinds = append(c.kinds, 'i')
	return c
}

func (c *kcall) flag(v bool) *kcall {
	if v {
		return c.int(1)
	}
	return c.int(0)
}

func (c *kcall) f64(v float64) *kcall {
	c.args = append(c.args, math.Float64bits(v))
	c.kinds = append(c.kinds, 'f')
	return c
}

// kernelSignatures are the kernels' parameter kinds, registered by each
// family's file (kernelFamily) from its kernels/<family>.cuh; the launcher
// refuses a call whose kinds differ, and the test checks this table against
// the PTX.
var kernelSignatures = map[string]string{}

// singleEntry are the kernels with one entry point (no compute type).
var singleEntry = map[string]bool{}

// kernelFamily registers a family's kernels: their parameter kinds by
// base name (NAME for NAME_f32 and NAME_f64, or the one entry point of a
// kernel listed in single).
func kernelFamily(sigs map[string]string, single ...string) {
	for name, kinds := range sigs {
		if _, dup := kernelSignatures[name]; dup {
			panic("cuda: internal: kernel " + name + " registered twice")
		}
		kernelSignatures[name] = kinds
	}
	for _, name := range single {
		singleEntry[name] = true
	}
}

// signature returns the parameter kinds of an entry point (NAME, NAME_f32
// or NAME_f64).
func signature(entry string) (string, bool) {
	if s, ok := kernelSignatures[entry]; ok {
		return s, true
	}
	for _, suf := range []string{"_f32", "_f64"} {
		if len(entry) > len(suf) && entry[len(entry)-len(suf):] == suf {
			s, ok := kernelSignatures[entry[:len(entry)-len(suf)]]
			return s, ok
		}
	}
	return "", false
}

// verify checks a call's arguments against its kernel's signature.
func (c *kcall) verify() error {
	want, ok := signature(c.name)
	if !ok {
		return fmt.Errorf("cuda: internal: no kernel %q", c.name)
	}
	if string(c.kinds) != want {
		return fmt.Errorf("cuda: internal: kernel %s takes (%s), the call passes (%s)", c.name, want, c.kinds)
	}
	return nil
}
