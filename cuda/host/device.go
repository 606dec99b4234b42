// Package host is the CPU as a trainmem device. Its kernels (<family>.go,
// beside cuda/gpu/<family>.go and model/op_<family>.go) check their
// arguments with the checks every device shares (cuda.Check) and then run a generic kernel in the
// compute type: float64 when every float operand is F64, float32
// otherwise. Work is cut by rows, or by channels where a kernel reduces
// over rows, so that every output element is made by one goroutine in a
// fixed order.
package host

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"
	"trainmem/cuda"
	"trainmem/cuda/alloc"
)

// Options configure a host device.
type Options struct {
	// Threads is the number of cores kernels and the GEMM use; 0 means
	// runtime.GOMAXPROCS(0).
	Threads int
	// BLAS chooses the matrix multiply: BLASAuto (OpenBLAS when it loads,
	// else gonum; the environment variable TRAINMEM_BLAS=go|openblas
	// decides when set), BLASOpenBLAS or BLASGo.
	BLAS string
	// Capacity limits the bytes the allocator may reserve, as a card of
	// that size would; 0 means the machine's memory.
	Capacity int64
}

// Device is the CPU as a device: segments are anonymous memory mappings,
// kernels are Go, parallel over Threads cores with a fixed partition of the
// work (results are bit-identical run after run), the hottest loops with
// AVX2 twins that give the same bits (cuda/host/avx2), and matrix
// multiplies go to OpenBLAS or gonum (blas.go).
//
// Buffers of F32 and F64 are computed in place; F16 and BF16 values are
// converted to fp32 row by row or block by block in host-private scratch
// (outside the allocator, as a GPU kernel's registers are) and the results
// rounded back to nearest even. Arithmetic is fp32, or fp64 when every float
// operand is F64 (scratch buffers aside: an fp64 computation uses private
// fp64 scratch when given fp32 scratch). Reductions accumulate in float64.
type Device struct {
	alloc.Pool
	threads int
	blas    gemmBackend
	blasWhy error // why OpenBLAS was not loaded when it was looked for
	mem     *memory
	closed  bool
}

var _ cuda.Device = (*Device)(nil)
var _ cuda.Carder = (*Device)(nil)

// New returns a host device. It fails when opts.Threads is negative or
// the BLAS asked for cannot be had.
func New(opts Options) (*Device, error) {
	if opts.Threads < 0 {
		return nil, fmt.Errorf("cuda: New: Threads is %d, want ≥ 0", opts.Threads)
	}
	if opts.Capacity < 0 {
		return nil, fmt.Errorf("cuda: New: Capacity is %d, want ≥ 0", opts.Capacity)
	}
	threads := opts.Threads
	if threads == 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	be, why, err := chooseBLAS(opts.BLAS, threads)
	if err != nil {
		return nil, err
	}
	h := &Device{threads: threads, blas: be, blasWhy: why, mem: &memory{capacity: opts.Capacity}}
	h.Pool = alloc.NewPool(h.Name(), h.mem)
	return h, nil
}

// Name says "host", the thread count and the BLAS, e.g. "host (2 threads,
// OpenBLAS 0.3.21 Haswell)".
func (h *Device) Name() string {
	s := "s"
	if h.threads == 1 {
		s = ""
	}
	return fmt.Sprintf("host (%d thread%s, %s)", h.threads, s, h.blas.name())
}

// BLAS names the library the device multiplies with ("OpenBLAS 0.3.21
// Haswell", "gonum").
func (h *Device) BLAS() string { return h.blas.name() }

// PureGoFallback is why the device multiplies in pure Go when it looked for
// OpenBLAS and did not find it; nil when it uses OpenBLAS or was asked for
// pure Go (Options.BLAS, TRAINMEM_BLAS=go).
func (h *Device) PureGoFallback() error { return h.blasWhy }

// Threads is the number of cores the device computes on.
func (h *Device) Threads() int { return h.threads }

// MachineMemory implements cuda.MachineMemory: the host's segments are
// the machine's memory.
func (h *Device) MachineMemory() bool { return true }

// Computes is true.
func (h *Device) Computes() bool { return true }

// MemInfo returns the machine's available and total memory (from
// /proc/meminfo), or capacity minus reserved and the capacity when
// Options.Capacity was set.
func (h *Device) MemInfo() (free, total int64, err error) { return h.mem.MemInfo() }

type mark struct{ t time.Time }

// Mark reads the wall clock: host kernels are synchronous.
func (h *Device) Mark() (cuda.Mark, error) { return mark{time.Now()}, nil }

// Elapsed is the wall-clock time between two marks of a host device.
func (h *Device) Elapsed(from, to cuda.Mark) (time.Duration, error) {
	f, t, err := cuda.MarksOf[mark](from, to, "a host device")
	if err != nil {
		return 0, err
	}
	return t.t.Sub(f.t), nil
}

// Synchronize returns at once: host kernels finish before they return.
func (h *Device) Synchronize() error { return nil }

// Close unmaps every segment, live buffers' memory included; kernels and
// copies on the device fail afterwards.
func (h *Device) Close() error {
	if h.closed {
		return nil
	}
	h.closed = true
	return h.Allocator().Close()
}

// begin finishes a kernel's argument checks with what only the host knows:
// that it is open and the buffers are host memory.
func (h *Device) begin(kernel string, err error, bufs ...*cuda.Buffer) error {
	if err != nil {
		return err
	}
	if h.closed {
		return fmt.Errorf("cuda: %s: the host device is closed", kernel)
	}
	for _, b := range bufs {
		if b != nil && b.Len > 0 && len(b.Host()) != int(b.Bytes()) {
			return fmt.Errorf("cuda: %s: %s is not host memory (a buffer of another device?)", kernel, b)
		}
	}
	return nil
}

// launch is the course of a kernel family's method of one kernel, as on
// the GPU (gpu.Device.launch): the call's checks (check, cuda.Check's),
// the device's own (begin), then the kernel run.
func (h *Device) launch(kernel string, check error, run func(), bufs ...*cuda.Buffer) error {
	if err := h.begin(kernel, check, bufs...); err != nil {
		return err
	}
	run()
	return nil
}

// instance picks the instance of a generic kernel that a call computes in:
// k64, the float64 one, when all64 (every float operand is F64, as
// cuda.AllF64 tells), else k32, the float32 one.
func instance[K any](all64 bool, k64, k32 K) K {
	if all64 {
		return k64
	}
	return k32
}

// Upload copies src into dst, rounding to dst's DType (to nearest even,
// in one rounding from float64).
func (h *Device) Upload(dst *cuda.Buffer, src any) error {
	if err := h.begin("Upload", cuda.CheckHostValues("Upload", "src", src, dst), dst); err != nil {
		return err
	}
	switch s := src.(type) {
	case []int32:
		copy(Int32s(dst), s)
	case []uint8:
		copy(Uint8s(dst), s)
	case []float32:
		h.parallel(len(s), convertGrain, func(lo, hi int) { Encode(dst, lo, s[lo:hi]) })
	case []float64:
		h.parallel(len(s), convertGrain, func(lo, hi int) { Encode(dst, lo, s[lo:hi]) })
	}
	return nil
}

// Download copies src into dst, converting from src's DType (exactly,
// except fp64 into a []float32, which rounds to nearest even).
func (h *Device) Download(dst any, src *cuda.Buffer) error {
	if err := h.begin("Download", cuda.CheckHostValues("Download", "dst", dst, src), src); err != nil {
		return err
	}
	switch d := dst.(type) {
	case []int32:
		copy(d, Int32s(src))
	case []uint8:
		copy(d, Uint8s(src))
	case []float32:
		h.parallel(len(d), convertGrain, func(lo, hi int) { Decode(src, lo, d[lo:hi]) })
	case []float64:
		h.parallel(len(d), convertGrain, func(lo, hi int) { Decode(src, lo, d[lo:hi]) })
	}
	return nil
}

// convertGrain is the fewest elements worth a goroutine when converting.
const convertGrain = 1 << 15

// parallel runs fn over [0, n) cut into at most Threads contiguous chunks
// of at least grain items, and waits. The cut depends only on n, grain and
// the thread count, never on scheduling; every kernel makes each output
// element in one chunk, so results do not depend on the cut at all.
func (h *Device) parallel(n, grain int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if grain < 1 {
		grain = 1
	}
	p := h.threads
	if most := (n + grain - 1) / grain; most < p {
		p = most
	}
	if p <= 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	wg.Add(p - 1)
	for i := 1; i < p; i++ {
		lo, hi := int(int64(n)*int64(i)/int64(p)), int(int64(n)*int64(i+1)/int64(p))
		go func() {
			defer wg.Done()
			fn(lo, hi)
		}()
	}
	fn(0, int(int64(n)/int64(p)))
	wg.Wait()
}

// rows runs row(i, tmp) for every row i of n on the host's threads
// (parallel, grain rows at least a chunk), each chunk lending its rows tmp,
// width elements of scratch, in row order.
func rows[F float](h *Device, n, grain, width int, row func(i int, tmp []F)) {
	h.parallel(n, grain, func(lo, hi int) {
		tmp := getScratch[F](width)
		defer putScratch(tmp)
		for i := lo; i < hi; i++ {
			row(i, tmp)
		}
	})
}

// memory is the host's SegmentSource: anonymous private mappings
// (mmap_unix.go), zero-filled by the kernel and committed page by page as
// they are touched.
type memory struct {
	mu       sync.Mutex
	capacity int64 // 0: the machine's
	reserved int64
}

func (m *memory) AllocSegment(size int64) (alloc.Segment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.capacity > 0 && m.reserved+size > m.capacity {
		return alloc.Segment{}, fmt.Errorf("%w: a segment of %s does not fit (%s of %s reserved)",
			cuda.ErrNoMemory, cuda.FormatBytes(size), cuda.FormatBytes(m.reserved), cuda.FormatBytes(m.capacity))
	}
	b, err := mapMemory(size)
	if err != nil {
		return alloc.Segment{}, err
	}
	m.reserved += size
	return alloc.Segment{Base: sliceAddr(b), Size: size, Host: b}, nil
}

func (m *memory) FreeSegment(s alloc.Segment) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := unmapMemory(s.Host); err != nil {
		return err
	}
	m.reserved -= s.Size
	return nil
}

func (m *memory) MemInfo() (free, total int64, err error) {
	m.mu.Lock()
	capacity, reserved := m.capacity, m.reserved
	m.mu.Unlock()
	if capacity > 0 {
		return capacity - reserved, capacity, nil
	}
	return machineMemory()
}

var errNoMemInfo = errors.New("cuda: the machine's memory size is not known on this system")

// Memory is the machine's available and total memory (/proc/meminfo's
// MemAvailable and MemTotal), whatever device a run uses: what host-side
// buffers (a checkpoint being read) must fit in.
func Memory() (available, total int64, err error) { return machineMemory() }
