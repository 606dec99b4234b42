// Package cuda is trainmem's device contract: the Device and Kernels
// interfaces every device implements, the Buffer they hand out, the storage
// types (DType) and memory categories (Category) that are trainmem's
// vocabulary everywhere, the allocator statistics (Stats), the kernels'
// argument structs and the argument checks every device runs (Check).
//
// The implementations live beside it, each a package of its own:
//
//	cuda/alloc        the caching allocator every device allocates through
//	cuda/host         the CPU with real memory
//	cuda/shape        allocator bookkeeping only, for dry runs of any size
//	cuda/gpu          NVIDIA GPUs (build tag trainmem_cuda)
//	cuda/conformance  the suite every device passes
//
// Every device allocates through the same allocator, so a dry run on the
// shape device reproduces the allocator statistics of a real run byte for
// byte; the devices differ only in where segments come from and whether
// kernels compute.
//
// Error policy: methods return errors; an error names the kernel and the bad
// argument. Arguments are checked by the same code on every device
// (Checks), so a wrong shape fails on the shape device exactly as it would
// on a GPU. Panics are reserved for broken invariants.
//
// This package imports no other package of trainmem but its leaf
// cuda/enum (cmd/trainmem's TestLayers).
package cuda

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"trainmem/cuda/enum"
)

// DType is the storage type of a buffer's elements. Kernels compute in fp32
// (fp64 for F64 buffers, used by the float64 reference checks) whatever the
// storage type, as GPU kernels do.
type DType uint8

const (
	F32  DType = iota // IEEE binary32
	F16               // IEEE binary16 (storage only)
	BF16              // bfloat16 (storage only)
	F64               // IEEE binary64 (reference computations)
	I32               // token ids
	// U8 is bytes: quantized codes (model.NF4's two 4-bit codes a byte,
	// the 8-bit codes of blockwise quantization). Not a float type: only
	// the quantization kernels (quant.go) read and write it.
	U8
)

// Size is the element size in bytes.
func (d DType) Size() int {
	switch d {
	case F16, BF16:
		return 2
	case F64:
		return 8
	case U8:
		return 1
	default:
		return 4
	}
}

var dtypeNames = enum.New[DType]("cuda", "DType", "dtype", "fp32", "fp16", "bf16", "fp64", "int32", "uint8")

func (d DType) String() string { return dtypeNames.String(d) }

// Float reports whether d holds floating-point values.
func (d DType) Float() bool { return d <= F64 }

// Category tags every allocation with the memory category it belongs to. The
// names are trainmem's vocabulary everywhere: estimates, allocator statistics
// and reports.
type Category uint8

const (
	Params      Category = iota // working weights (fp16/bf16 under mixed precision, else fp32)
	Grads                       // parameter gradients
	Master                      // fp32 master weights (mixed precision only)
	AdamM                       // first moment (Adam's m; SGD momentum's buffer)
	AdamV                       // second moment (Adam's v)
	Activations                 // forward values kept for the backward pass
	Temporaries                 // values that die inside a phase
	Workspace                   // kernel and library scratch
	Gathered                    // ZeRO-3 parameters fetched for use
	Comm                        // collective buffers
	// Frozen is the weights a fine-tune does not train (model.Freeze): no
	// gradient, no optimizer state. It is the eleventh category, so
	// MemoryViz's ten colours (d3's ordinal scale reuses its range) give it
	// the params' colour: weights either way.
	Frozen
	// QuantState is what a quantized weight needs beside its codes
	// (model.Quantization): the blockwise scales and their own scales
	// and offsets, bitsandbytes' QuantState. The twelfth category.
	QuantState
	NumCategories
)

var categoryNames = enum.New[Category]("cuda", "Category", "memory category",
	"params", "grads", "master", "adam_m", "adam_v",
	"activations", "temporaries", "workspace", "gathered", "comm", "frozen", "quant_state",
)

func (c Category) String() string { return categoryNames.String(c) }

// ModelState reports whether c is one of the model states (params, grads,
// master, adam_m, adam_v, which the ZeRO paper's 2Φ + 2Φ + KΦ counts, and
// the frozen weights of a fine-tune with their quantization state).
func (c Category) ModelState() bool { return c <= AdamV || c == Frozen || c == QuantState }

// MarshalText is the category's name, so that maps keyed by category are
// JSON objects keyed by name ({"params": ...}); UnmarshalText reads it.
func (c Category) MarshalText() ([]byte, error)  { return categoryNames.Marshal(c) }
func (c *Category) UnmarshalText(b []byte) error { return categoryNames.Unmarshal(c, b) }

// Categories lists every category in report order.
func Categories() []Category { return categoryNames.Values() }

// ParseCategory is the inverse of Category.String.
func ParseCategory(s string) (Category, error) { return categoryNames.Parse(s) }

// Mark is a point on a device's timeline (a CUDA event on a GPU, a wall-clock
// reading on the host, nothing on Shape).
type Mark interface{}

// MarksOf reads the two marks Elapsed is given as the device's own mark
// type M, and refuses a mark of another kind naming it and the device
// (what).
func MarksOf[M Mark](from, to Mark, what string) (M, M, error) {
	f, ok := from.(M)
	if !ok {
		return f, f, fmt.Errorf("cuda: Elapsed: from is %T, not a mark of %s", from, what)
	}
	t, ok := to.(M)
	if !ok {
		return f, t, fmt.Errorf("cuda: Elapsed: to is %T, not a mark of %s", to, what)
	}
	return f, t, nil
}

// Kernels are the kernel families the executor lowers the GPT-2 graph to. All
// dimensions are in elements; N is the number of rows (batch·sequence), C the
// channels, V the vocabulary, NH the heads. Every float buffer may be stored
// in any float DType unless a kernel says otherwise; arithmetic is fp32 (fp64
// when every float operand is F64). Buffers a kernel documents as F32 (layer
// norm statistics, the loss, scratch) are F64 instead when the kernel's other
// float operands are F64: that is the float64 reference mode used by the
// finite-difference checks. Outputs are overwritten, never accumulated,
// unless a kernel says otherwise.
type Kernels interface {
	ElementwiseKernels
	EmbeddingKernels
	NormKernels
	BiasKernels
	MatMulKernels
	GELUKernels
	SwiGLUKernels
	RoPEKernels
	AttentionKernels
	FlashKernels
	CrossEntropyKernels
	OptimizerKernels
	QuantKernels
}

// AllF64 reports whether every non-nil buffer is F64: a kernel then
// computes in float64 (the reference mode of the Kernels interface).
func AllF64(bs ...*Buffer) bool {
	for _, b := range bs {
		if b != nil && b.DType != F64 {
			return false
		}
	}
	return true
}

// Device is where trainmem allocates and computes.
type Device interface {
	// Name says which device this is, e.g. "host (2 threads, OpenBLAS)".
	Name() string
	// Computes is false for devices that only keep books (Shape).
	Computes() bool

	// Alloc takes n elements of dt from the caching allocator, tagged cat.
	Alloc(cat Category, dt DType, n int) (*Buffer, error)
	// Free returns b (which must come from Alloc, not View) to the cache.
	Free(b *Buffer)
	// Stats returns the allocator statistics.
	Stats() Stats
	// ResetPeakStats sets every peak to the current value.
	ResetPeakStats()
	// EmptyCache releases every unused cached segment to the device.
	EmptyCache() error
	// MemInfo returns the device's free and total memory in bytes (what
	// cuMemGetInfo reports on a GPU; the capacity and reserved bytes on
	// Shape; the machine's available and total memory on the host).
	MemInfo() (free, total int64, err error)

	// Upload copies host values into dst, converting to dst's DType. src is
	// a []float32, []float64 or []int32 of length dst.Len.
	Upload(dst *Buffer, src any) error
	// Download copies src into dst, a []float32, []float64 or []int32 of
	// length src.Len, converting from src's DType.
	Download(dst any, src *Buffer) error

	// Mark records a point on the device's timeline; Elapsed is the device
	// time between two marks.
	Mark() (Mark, error)
	Elapsed(from, to Mark) (time.Duration, error)
	// Synchronize waits for all queued work.
	Synchronize() error
	// Close releases everything the device holds.
	Close() error

	Kernels
}

// PeakReporter is implemented by devices that know their peak arithmetic
// rate, for model FLOPs utilization (MFU) in step records: the host (its
// cores' fp32 peak, host.PeakGFLOPS) and the CUDA device (a datasheet table
// by card, cuda/gpu/plan.go's gpuPeak). dt is the storage type of the run's
// products: a GPU's tensor cores set the peak for fp16 and bf16, its fp32
// units for fp32. flops is 0 when the peak is unknown; how says where the
// number comes from.
type PeakReporter interface {
	PeakFLOPS(dt DType) (flops float64, how string)
}

// Carder is a device timed as a card of the time model on its own
// kernels (the host: Roofline's limits measured, not read from a
// datasheet), its kernels run by Threads threads.
type Carder interface {
	Device
	Card() (Roofline, error)
	Threads() int
}

// PeakEnv is the environment variable that overrides every device's peak,
// in GFLOP/s.
const PeakEnv = "TRAINMEM_PEAK_GFLOPS"

// PeakOverride reads PeakEnv: its value in GFLOP/s when set, ok false when
// unset, and an error naming the value when it is not a positive finite
// number (a typo is refused, not ignored).
func PeakOverride() (gflops float64, ok bool, err error) {
	s := os.Getenv(PeakEnv)
	if s == "" {
		return 0, false, nil
	}
	v, perr := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if perr != nil || !(v*1e9 >= MinPeakFLOPS && v*1e9 <= MaxPeakFLOPS) {
		return 0, false, fmt.Errorf("%s=%q: not a peak in GFLOP/s (valid: %g to %g, e.g. 989000 for an H100's bf16 peak, or unset)", PeakEnv, s, MinPeakFLOPS/1e9, MaxPeakFLOPS/1e9)
	}
	return v, true, nil
}

// MachineMemory is implemented by devices whose memory is the machine's
// own (the host device): their allocations and a run's host-side buffers
// come out of one memory, and MemInfo is the whole machine's, not a card's.
type MachineMemory interface {
	MachineMemory() bool
}

// OnMachineMemory says whether dev's memory is the machine's own.
func OnMachineMemory(dev Device) bool {
	m, ok := dev.(MachineMemory)
	return ok && m.MachineMemory()
}

// LibraryWorkspacer is implemented by devices whose libraries hold scratch
// from the caching allocator, tagged workspace, that no kernel of the
// Kernels interface asks for (cuBLAS's workspace on the CUDA device). The
// shape-only device has no such library, so a measured run's workspace
// exceeds the simulated one by exactly these bytes, once cuBLAS has run.
type LibraryWorkspacer interface {
	LibraryWorkspaceBytes() int64
}
