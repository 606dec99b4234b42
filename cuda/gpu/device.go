//go:build trainmem_cuda

package gpu

// The CUDA device: trainmem's kernels on an NVIDIA GPU. gorgonia.org/cu
// drives the GPU (the primary context, a stream, memory, the module of our
// PTX, launches, events); the caching allocator takes its segments from
// cuMemAlloc; matrix products go to cuBLAS (blas.go, loaded at run
// time), everything else to the kernels of kernels/kernels.cu, which follow
// the host's algorithms (docs/architecture.md, "The CUDA device").
//
// Error policy: every driver and cuBLAS call is checked and its failure
// becomes an error that names the call and the CUDA error code. Kernels run
// asynchronously on the device's stream; a fault inside one surfaces at the
// next synchronizing call (Synchronize, Download, NonFinite, Elapsed), or
// right after the kernel with TRAINMEM_CUDA_SYNC=1, which synchronizes and
// checks after every launch and names the kernel.

// Kernels (<family>.go, beside cuda/host/<family>.go): each checks its
// arguments with the checks every device shares (cuda.Check) exactly as the
// host and shape devices do, then queues its kernel calls (calls.go) or
// cuBLAS products on the device's stream.

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"
	"trainmem/cuda"
	"trainmem/cuda/alloc"
	"trainmem/cuda/host"
	"unsafe"

	"gorgonia.org/cu"
)

// driverState is what became of cuInit (driver_shim.go).
type driverState struct {
	called  bool     // cuInit ran (gorgonia.org/cu's init)
	result  int      // its CUresult; -1 when libcuda.so.1 did not load
	dlerror string   // why libcuda.so.1 did not load
	missing []string // driver functions the installed libcuda lacks
	shim    bool     // the driver is bound at run time (shim.c)
}

// driverSymbols are the driver functions the CUDA device calls through
// gorgonia.org/cu; a libcuda without one of them cannot run it.
var driverSymbols = []string{
	"cuDeviceGet", "cuDeviceGetCount", "cuDeviceGetAttribute", "cuDeviceGetName", "cuDeviceTotalMem_v2",
	"cuDriverGetVersion", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent", "cuStreamCreate", "cuStreamDestroy_v2",
	"cuStreamSynchronize", "cuModuleLoadDataEx", "cuModuleGetFunction", "cuFuncGetAttribute", "cuLaunchKernel",
	"cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2",
	"cuMemcpyDtoDAsync_v2", "cuMemsetD8Async", "cuEventCreate", "cuEventDestroy_v2", "cuEventRecord",
	"cuEventSynchronize", "cuEventElapsedTime",
}

// cuResultNames name the CUresult codes trainmem is likely to meet, with
// what to do about them.
var cuResultNames = map[int]string{
	1:   "CUDA_ERROR_INVALID_VALUE",
	2:   "CUDA_ERROR_OUT_OF_MEMORY",
	3:   "CUDA_ERROR_NOT_INITIALIZED",
	4:   "CUDA_ERROR_DEINITIALIZED",
	46:  "CUDA_ERROR_DEVICE_UNAVAILABLE: the GPU is busy or in exclusive mode",
	100: "CUDA_ERROR_NO_DEVICE: no CUDA-capable GPU is visible (see nvidia-smi, CUDA_VISIBLE_DEVICES)",
	101: "CUDA_ERROR_INVALID_DEVICE",
	200: "CUDA_ERROR_INVALID_IMAGE",
	201: "CUDA_ERROR_INVALID_CONTEXT",
	209: "CUDA_ERROR_NO_BINARY_FOR_GPU",
	218: "CUDA_ERROR_INVALID_PTX",
	222: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION: the driver is older than the PTX (ISA 7.8, CUDA 11.8); update the NVIDIA driver",
	400: "CUDA_ERROR_INVALID_HANDLE",
	500: "CUDA_ERROR_NOT_FOUND",
	700: "CUDA_ERROR_ILLEGAL_ADDRESS: a kernel touched memory outside its buffers (TRAINMEM_CUDA_SYNC=1 names the kernel)",
	701: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	702: "CUDA_ERROR_LAUNCH_TIMEOUT",
	719: "CUDA_ERROR_LAUNCH_FAILED: a kernel faulted (TRAINMEM_CUDA_SYNC=1 names the kernel)",
	803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
	999: "CUDA_ERROR_UNKNOWN",
}

// cudaError is a failed driver call.
type cudaError struct {
	call string
	code int
	err  error // gorgonia.org/cu's error, when it made one
}

func (e *cudaError) Error() string {
	name := cuResultNames[e.code]
	if name == "" && e.err != nil {
		name = e.err.Error()
	}
	if name == "" {
		name = "unknown CUresult"
	}
	return fmt.Sprintf("cuda: %s: %s (CUresult %d)", e.call, name, e.code)
}

func (e *cudaError) Unwrap() error { return e.err }

// Is makes an out-of-memory result match ErrNoMemory, so that the caching
// allocator empties its cache and retries as it does on every device.
func (e *cudaError) Is(target error) bool { return target == cuda.ErrNoMemory && e.code == 2 }

// cuErr turns gorgonia.org/cu's error into one naming the call; nil stays nil.
func cuErr(call string, err error) error {
	if err == nil {
		return nil
	}
	code := -1
	if v := reflect.ValueOf(err); v.Kind() == reflect.Int {
		code = int(v.Int())
	}
	return &cudaError{call: call, code: code, err: err}
}

// Available reports whether a CUDA device can be opened here, and
// otherwise why not, in words fit for a skipped test or a command's error:
// no NVIDIA driver (libcuda.so.1 missing), cuInit's failure, no GPU, or a
// driver without a function trainmem needs.
func Available() error {
	st := driverStatus()
	switch {
	case !st.called:
		return errors.New("cuda: the CUDA driver was not initialized (gorgonia.org/cu's init did not call cuInit)")
	case st.result < 0:
		return fmt.Errorf("cuda: no NVIDIA driver on this machine: %s", st.dlerror)
	case st.result != 0:
		return &cudaError{call: "cuInit", code: st.result}
	}
	var lacking []string
	for _, s := range driverSymbols {
		for _, m := range st.missing {
			if s == m {
				lacking = append(lacking, s)
			}
		}
	}
	if len(lacking) > 0 {
		return fmt.Errorf("cuda: the NVIDIA driver lacks %s", strings.Join(lacking, ", "))
	}
	n, err := cu.NumDevices()
	if err != nil {
		return cuErr("cuDeviceGetCount", err)
	}
	if n == 0 {
		return errors.New("cuda: the NVIDIA driver sees no GPU (cuDeviceGetCount = 0)")
	}
	return nil
}

// card is what a process learns and loads once per GPU: its properties,
// its primary context (retained for the life of the process, so that
// devices opened one after another, as the tests do, neither recreate it
// nor JIT the PTX again) and the kernels' module.
type card struct {
	ordinal      int
	dev          cu.Device
	ctx          cu.CUContext
	name         string
	major, minor int
	total        int64
	sms          int
	driver       int // cuDriverGetVersion, e.g. 13000
	ptx          int // the PTX target loaded
	lim          launchLimits
	mod          cu.Module
	fns          map[string]cudaFn
}

type cudaFn struct {
	f          cu.Function
	maxThreads int // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
	smem       int // static shared memory, bytes
}

var cards struct {
	mu sync.Mutex
	m  map[int]*card
}

func openCard(ordinal int) (*card, error) {
	cards.mu.Lock()
	defer cards.mu.Unlock()
	if c := cards.m[ordinal]; c != nil {
		return c, nil
	}
	n, err := cu.NumDevices()
	if err != nil {
		return nil, cuErr("cuDeviceGetCount", err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cuda: GPU %d does not exist: the driver sees %d", ordinal, n)
	}
	c := &card{ordinal: ordinal, fns: map[string]cudaFn{}}
	if c.dev, err = cu.GetDevice(ordinal); err != nil {
		return nil, cuErr("cuDeviceGet", err)
	}
	if c.name, err = c.dev.Name(); err != nil {
		return nil, cuErr("cuDeviceGetName", err)
	}
	if c.total, err = c.dev.TotalMem(); err != nil {
		return nil, cuErr("cuDeviceTotalMem", err)
	}
	c.driver = cu.Version()
	attrs := []struct {
		a   cu.DeviceAttribute
		dst *int
	}{
		{cu.ComputeCapabilityMajor, &c.major}, {cu.ComputeCapabilityMinor, &c.minor},
		{cu.MultiprocessorCount, &c.sms}, {cu.MaxThreadsPerBlock, &c.lim.maxThreads},
		{cu.MaxBlockDimX, &c.lim.maxBlock[0]}, {cu.MaxBlockDimY, &c.lim.maxBlock[1]}, {cu.MaxBlockDimZ, &c.lim.maxBlock[2]},
		{cu.MaxGridDimX, &c.lim.maxGrid[0]}, {cu.MaxGridDimY, &c.lim.maxGrid[1]}, {cu.MaxGridDimZ, &c.lim.maxGrid[2]},
		{cu.MaxSharedMemoryPerBlock, &c.lim.maxSmem},
	}
	for _, a := range attrs {
		v, err := c.dev.Attribute(a.a)
		if err != nil {
			return nil, cuErr(fmt.Sprintf("cuDeviceGetAttribute(%d)", a.a), err)
		}
		*a.dst = v
	}
	if c.ptx, err = choosePTX(c.major, c.minor, PTXTargets); err != nil {
		return nil, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if c.ctx, err = c.dev.RetainPrimaryCtx(); err != nil {
		return nil, cuErr("cuDevicePrimaryCtxRetain", err)
	}
	if err := cu.SetCurrentContext(c.ctx); err != nil {
		return nil, cuErr("cuCtxSetCurrent", err)
	}
	if c.mod, err = loadModule(embeddedPTX[c.ptx], fmt.Sprintf("JIT of the compute_%d PTX for sm_%d%d", c.ptx, c.major, c.minor)); err != nil {
		return nil, err
	}
	for _, name := range kernelEntries() {
		f, err := c.mod.Function(name)
		if err != nil {
			return nil, cuErr("cuModuleGetFunction("+name+")", err)
		}
		fn := cudaFn{f: f}
		if fn.maxThreads, err = f.Attribute(cu.FnMaxThreadsPerBlock); err != nil {
			return nil, cuErr("cuFuncGetAttribute("+name+", MAX_THREADS_PER_BLOCK)", err)
		}
		if fn.smem, err = f.Attribute(cu.SharedSizeBytes); err != nil {
			return nil, cuErr("cuFuncGetAttribute("+name+", SHARED_SIZE_BYTES)", err)
		}
		c.fns[name] = fn
	}
	if cards.m == nil {
		cards.m = map[int]*card{}
	}
	cards.m[ordinal] = c
	return c, nil
}

// loadModule JIT-compiles ptx with the driver's logs captured
// (cuModuleLoadDataEx), so that a failure says what the compiler said, not
// only its error number. The context must be current.
func loadModule(ptx, what string) (cu.Module, error) {
	errLog := &cu.JITErrorLogBuffer{Buffer: make([]byte, 8192)}
	infoLog := &cu.JITInfoLogBuffer{Buffer: make([]byte, 8192)}
	m, err := cu.LoadDataEx(ptx, errLog, infoLog)
	if err == nil {
		return m, nil
	}
	e := cuErr("cuModuleLoadDataEx ("+what+")", err)
	if log := strings.TrimSpace(cString(errLog.Buffer)); log != "" {
		return m, fmt.Errorf("%w; the JIT says: %s", e, log)
	}
	return m, e
}

// cString is b up to its first NUL byte.
func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// Options configure a CUDA device.
type Options struct {
	// Ordinal is the GPU, as the driver numbers them (after
	// CUDA_VISIBLE_DEVICES).
	Ordinal int
	// Sync synchronizes and checks after every kernel and cuBLAS call, so
	// that a fault names its kernel (slow; for debugging). The environment
	// variable TRAINMEM_CUDA_SYNC=1 sets it too.
	Sync bool
}

// status words on the device, outside the allocator (cuMemAlloc'd once per
// device, like the context's own memory): [0] a bad token id was seen, [1]
// by which kernel, [2] at which position, [3] the id; [4] NonFinite's flag.
const (
	statusWords = 8
	statusFlag  = 4 * 4 // byte offset of NonFinite's flag
)

var statusKernels = map[int32]string{1: "Embedding", 2: "EmbeddingBackwardTokens", 3: "CrossEntropy", 4: "CrossEntropyBackward",
	5: "CrossEntropyPartSums", 6: "CrossEntropyPartBackward"}

// Device is an NVIDIA GPU as a cuda.Device. It is safe for use by several
// goroutines (calls are serialized); each call makes the device's context
// current on its OS thread.
type Device struct {
	alloc.Pool
	mu       sync.Mutex
	card     *card
	stream   cu.Stream
	status   cu.DevicePtr
	blas     *cublasHandle
	ws       *cuda.Buffer // cuBLAS's workspace, from the allocator on first use
	wsBytes  int64
	events   [256]eventSlot
	nextEv   int
	ints     []intShadow // host copies of uploaded int32 buffers
	staged   [][]byte    // uploads' staging memory, kept until the stream drains
	syncEach bool
	closed   bool
}

var (
	_ cuda.Device            = (*Device)(nil)
	_ cuda.PeakReporter      = (*Device)(nil)
	_ cuda.LibraryWorkspacer = (*Device)(nil)
)

// New opens GPU opts.Ordinal: it fails with Available's reason on a
// machine without a usable GPU, or when the card is older than the kernels
// (compute capability 8.0). cuBLAS is loaded at the first matrix product
// that goes to it (blasReady), so that the other kernels run without it.
func New(opts Options) (*Device, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	c, err := openCard(opts.Ordinal)
	if err != nil {
		return nil, err
	}
	d := &Device{card: c, syncEach: opts.Sync || os.Getenv("TRAINMEM_CUDA_SYNC") == "1"}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(c.ctx); err != nil {
		return nil, cuErr("cuCtxSetCurrent", err)
	}
	fail := func(err error) (*Device, error) {
		d.release()
		return nil, err
	}
	if d.stream, err = cu.MakeStream(cu.DefaultStream); err != nil {
		return fail(cuErr("cuStreamCreate", err))
	}
	if d.status, err = cu.MemAlloc(statusWords * 4); err != nil {
		return fail(cuErr("cuMemAlloc(status words)", err))
	}
	if err := cu.MemsetD8Async(d.status, 0, statusWords*4, d.stream); err != nil {
		return fail(cuErr("cuMemsetD8Async(status words)", err))
	}
	d.Pool = alloc.NewPool(d.Name(), memory{d})
	return d, nil
}

// Name says "cuda", the card, its compute capability and memory, the
// driver, the PTX it runs and cuBLAS, e.g. "cuda:0 (NVIDIA H200, sm_90,
// 139.8 GiB, driver 13.0, compute_90 PTX, cuBLAS 13.0.0)".
func (d *Device) Name() string {
	c := d.card
	s := fmt.Sprintf("cuda:%d (%s, sm_%d%d, %s, driver %d.%d, compute_%d PTX", c.ordinal, c.name, c.major, c.minor,
		cuda.FormatBytes(c.total), c.driver/1000, c.driver%1000/10, c.ptx)
	if d.blas != nil {
		s += ", cuBLAS " + d.blas.versionString() + " (" + d.blas.lib + ")"
	}
	if d.syncEach {
		s += ", synchronized after every kernel"
	}
	return s + ")"
}

// Computes is true.
func (d *Device) Computes() bool { return true }

// PeakFLOPS is the card's datasheet peak for products stored as dt
// (plan.go's gpuPeak).
func (d *Device) PeakFLOPS(dt cuda.DType) (float64, string) {
	return gpuPeak(d.card.name, d.card.major, d.card.minor, dt)
}

// LibraryWorkspaceBytes is cuBLAS's workspace in the allocator: 0 before
// the first cuBLAS call, then cublasWorkspaceBytes for the card.
func (d *Device) LibraryWorkspaceBytes() int64 { return d.wsBytes }

// enter takes the device for one call: the lock, the OS thread, and the
// context made current on it.
func (d *Device) enter(op string) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return fmt.Errorf("cuda: %s: the CUDA device is closed", op)
	}
	runtime.LockOSThread()
	if err := cu.SetCurrentContext(d.card.ctx); err != nil {
		runtime.UnlockOSThread()
		d.mu.Unlock()
		return cuErr("cuCtxSetCurrent", err)
	}
	return nil
}

func (d *Device) leave() {
	runtime.UnlockOSThread()
	d.mu.Unlock()
}

// begin finishes a kernel's argument checks (cuda.Check, shared with every
// device) with what only this device knows, then enters. The caller must
// leave when it returns nil.
func (d *Device) begin(kernel string, err error, bufs ...*cuda.Buffer) error {
	if err != nil {
		return err
	}
	for _, b := range bufs {
		if b != nil && b.Host() != nil {
			return fmt.Errorf("cuda: %s: %s is host memory (a buffer of another device?)", kernel, b)
		}
	}
	return d.enter(kernel)
}

// launch is the course of a kernel family's method of one kernel: the
// call's checks (check, cuda.Check's), the device entered, then the call
// (built only once the arguments are checked) run.
func (d *Device) launch(kernel string, check error, call func() *kcall, bufs ...*cuda.Buffer) error {
	if err := d.begin(kernel, check, bufs...); err != nil {
		return err
	}
	defer d.leave()
	return d.run(call())
}

// launchTargets is launch for a kernel that reads class ids, as the
// host's: the targets are checked to be in [0, vocab) from their host copy
// (checkIDsOnHost), and the kernel records any it meets out of range.
func (d *Device) launchTargets(kernel string, check error, targets *cuda.Buffer, vocab int, call func() *kcall, bufs ...*cuda.Buffer) error {
	if err := d.begin(kernel, check, bufs...); err != nil {
		return err
	}
	defer d.leave()
	checked, err := d.checkIDsOnHost(kernel, "target", targets, 0, vocab)
	if err != nil {
		return err
	}
	return d.runChecked(call(), checked)
}

// run launches one kernel call after checking its arguments against the
// kernel's signature and its geometry against the card's and the kernel's
// limits.
func (d *Device) run(c *kcall) error {
	if err := c.verify(); err != nil {
		return err
	}
	fn, ok := d.card.fns[c.name]
	if !ok {
		return fmt.Errorf("cuda: internal: kernel %s is not in the module", c.name)
	}
	lim := d.card.lim
	lim.maxThreads = min(lim.maxThreads, fn.maxThreads)
	lim.staticSmem = fn.smem
	if err := c.l.check(c.name, lim); err != nil {
		return err
	}
	params := make([]unsafe.Pointer, len(c.args))
	for i := range c.args {
		params[i] = unsafe.Pointer(&c.args[i])
	}
	g, b := c.l.grid, c.l.block
	if err := fn.f.Launch(g[0], g[1], g[2], b[0], b[1], b[2], c.l.smem, d.stream, params); err != nil {
		return cuErr(fmt.Sprintf("cuLaunchKernel(%s, grid %v, block %v)", c.name, g, b), err)
	}
	if d.syncEach {
		return d.syncCheck(c.name)
	}
	return nil
}

// syncCheck waits for the stream, lets the uploads' staging memory go and
// reads the status words.
func (d *Device) syncCheck(after string) error {
	if err := d.stream.Synchronize(); err != nil {
		if after != "" {
			return cuErr("cuStreamSynchronize after "+after, err)
		}
		return cuErr("cuStreamSynchronize", err)
	}
	clear(d.staged)
	d.staged = d.staged[:0]
	return d.checkStatus()
}

// checkStatus reads the status words (synchronously) and turns a bad token
// id a kernel found into an error, then clears them.
func (d *Device) checkStatus() error {
	var w [4]int32
	if err := cu.MemcpyDtoHAsync(unsafe.Pointer(&w[0]), d.status, 16, d.stream); err != nil {
		return cuErr("cuMemcpyDtoHAsync(status words)", err)
	}
	if err := d.stream.Synchronize(); err != nil {
		return cuErr("cuStreamSynchronize", err)
	}
	if w[0] == 0 {
		return nil
	}
	if err := cu.MemsetD8Async(d.status, 0, 16, d.stream); err != nil {
		return cuErr("cuMemsetD8Async(status words)", err)
	}
	what := "token id"
	if w[1] >= 3 {
		what = "target"
	}
	return fmt.Errorf("cuda: %s: %s %d at position %d is outside [0, V) (found on the device)", statusKernels[w[1]], what, w[3], w[2])
}

// memory is the CUDA device's SegmentSource: cuMemAlloc and cuMemFree.
// The allocator calls it from the device's own calls, with the context
// current.
type memory struct{ d *Device }

func (m memory) AllocSegment(size int64) (alloc.Segment, error) {
	p, err := cu.MemAlloc(size)
	if err != nil {
		e := cuErr(fmt.Sprintf("cuMemAlloc(%s)", cuda.FormatBytes(size)), err)
		if errors.Is(e, cuda.ErrNoMemory) {
			return alloc.Segment{}, fmt.Errorf("%w: %v", cuda.ErrNoMemory, e)
		}
		return alloc.Segment{}, e
	}
	return alloc.Segment{Base: uintptr(p), Size: size}, nil
}

func (m memory) FreeSegment(s alloc.Segment) error {
	// Kernels still queued may use the segment: wait for them.
	if err := m.d.stream.Synchronize(); err != nil {
		return cuErr("cuStreamSynchronize", err)
	}
	return cuErr(fmt.Sprintf("cuMemFree(%#x, %s)", s.Base, cuda.FormatBytes(s.Size)), cu.MemFree(cu.DevicePtr(s.Base)))
}

func (m memory) MemInfo() (free, total int64, err error) {
	free, total, err = cu.MemInfo()
	return free, total, cuErr("cuMemGetInfo", err)
}

// Alloc implements Device.Alloc: segments come from cuMemAlloc.
func (d *Device) Alloc(cat cuda.Category, dt cuda.DType, n int) (*cuda.Buffer, error) {
	if err := d.enter("Alloc"); err != nil {
		return nil, err
	}
	defer d.leave()
	return d.Pool.Alloc(cat, dt, n)
}

// Free implements Device.Free. The block returns to the cache at once:
// kernels queued on the device's one stream that still use it run before
// any later use of the memory, as in PyTorch.
func (d *Device) Free(b *cuda.Buffer) {
	if b != nil && b.Owner() != nil {
		d.mu.Lock()
		d.dropShadows(b.Addr(), b.Addr()+uintptr(b.Owner().Size()))
		d.mu.Unlock()
	}
	d.Pool.Free(b)
}

// EmptyCache implements Device.EmptyCache (cuMemFree of unused segments).
func (d *Device) EmptyCache() error {
	if err := d.enter("EmptyCache"); err != nil {
		return err
	}
	defer d.leave()
	return d.Pool.EmptyCache()
}

// MemInfo is cuMemGetInfo: the card's free and total memory. Used minus
// the allocator's reserved bytes is what the CUDA context, cuBLAS and the
// device's status words hold.
func (d *Device) MemInfo() (free, total int64, err error) {
	if err := d.enter("MemInfo"); err != nil {
		return 0, 0, err
	}
	defer d.leave()
	return memory{d}.MemInfo()
}

// intShadow is a host copy of an uploaded int32 buffer. Only Upload writes
// int32 buffers (no kernel does), so the copy stays exact until the memory
// is freed; kernels that read token ids are checked against it on the host,
// before launch, with the host's own messages.
type intShadow struct {
	addr uintptr
	vals []int32
}

func (d *Device) dropShadows(lo, hi uintptr) {
	keep := d.ints[:0]
	for _, s := range d.ints {
		if s.addr+uintptr(4*len(s.vals)) <= lo || s.addr >= hi {
			keep = append(keep, s)
		}
	}
	d.ints = keep
}

func (d *Device) shadowOf(b *cuda.Buffer) ([]int32, bool) {
	for _, s := range d.ints {
		if b.Addr() >= s.addr && b.Addr()+uintptr(4*b.Len) <= s.addr+uintptr(4*len(s.vals)) {
			off := int((b.Addr() - s.addr) / 4)
			return s.vals[off : off+b.Len], true
		}
	}
	return nil, false
}

// checkIDsOnHost checks ids against the vocabulary from their host copy;
// found is false when there is none (then the kernel's own check, read
// after it ran, decides).
func (d *Device) checkIDsOnHost(kernel, what string, ids *cuda.Buffer, T, V int) (found bool, err error) {
	vals, ok := d.shadowOf(ids)
	if !ok {
		return false, nil
	}
	return true, cuda.CheckIDs(kernel, what, vals, T, V)
}

// Upload converts src into dst's type on the host (cuda/host/mem.go's Encode: the host's rounding)
// and copies it on the device's stream.
func (d *Device) Upload(dst *cuda.Buffer, src any) error {
	return d.hostCopy("Upload", cuda.CheckHostValues("Upload", "src", src, dst), dst, func(stage *cuda.Buffer) error {
		switch s := src.(type) {
		case []int32:
			copy(host.Int32s(stage), s)
			d.dropShadows(dst.Addr(), dst.Addr()+uintptr(dst.Bytes()))
			d.ints = append(d.ints, intShadow{addr: dst.Addr(), vals: append([]int32(nil), s...)})
		case []uint8:
			copy(host.Uint8s(stage), s)
		case []float32:
			host.Encode(stage, 0, s)
		case []float64:
			host.Encode(stage, 0, s)
		}
		// From pageable memory the driver returns once it has staged the
		// bytes, but that is its behaviour, not its contract: the staging
		// memory is kept until the stream is next known drained (syncCheck).
		err := cu.MemcpyHtoDAsync(cu.DevicePtr(dst.Addr()), unsafe.Pointer(&stage.Host()[0]), dst.Bytes(), d.stream)
		if err == nil {
			d.staged = append(d.staged, stage.Host())
		}
		return cuErr(fmt.Sprintf("cuMemcpyHtoDAsync(%s)", dst), err)
	})
}

// Download copies src to the host after the work queued before it, and
// converts it (cuda/host/mem.go's Decode: the host's rounding).
func (d *Device) Download(dst any, src *cuda.Buffer) error {
	return d.hostCopy("Download", cuda.CheckHostValues("Download", "dst", dst, src), src, func(stage *cuda.Buffer) error {
		if err := cu.MemcpyDtoHAsync(unsafe.Pointer(&stage.Host()[0]), cu.DevicePtr(src.Addr()), src.Bytes(), d.stream); err != nil {
			return cuErr(fmt.Sprintf("cuMemcpyDtoHAsync(%s)", src), err)
		}
		if err := d.syncCheck(""); err != nil {
			return err
		}
		switch v := dst.(type) {
		case []int32:
			copy(v, host.Int32s(stage))
		case []uint8:
			copy(v, host.Uint8s(stage))
		case []float32:
			host.Decode(stage, 0, v)
		case []float64:
			host.Decode(stage, 0, v)
		}
		return nil
	})
}

// hostCopy is the course of a copy between host values and b (Upload,
// Download): the checks (check), the device entered, nothing to do for an
// empty buffer, else move given host staging of b's type and size.
func (d *Device) hostCopy(what string, check error, b *cuda.Buffer, move func(stage *cuda.Buffer) error) error {
	if err := d.begin(what, check, b); err != nil {
		return err
	}
	defer d.leave()
	if b.Len == 0 {
		return nil
	}
	return move(cuda.NewBuffer(b.DType, b.Len, 0, 0, stageBytes(b.Bytes()), nil))
}

// stageBytes is host staging memory for n bytes, 8-byte aligned for the
// typed views of cuda/host/mem.go.
func stageBytes(n int64) []byte {
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&w[0])), n)
}

// eventSlot is a CUDA event reused round-robin by Mark; gen tells a mark
// from a later one in the same slot.
type eventSlot struct {
	ev  cu.Event
	gen uint64
}

type mark struct {
	d    *Device
	slot int
	gen  uint64
}

// Mark records a CUDA event on the device's stream. The device keeps the
// last 256 marks; Elapsed refuses an older one.
func (d *Device) Mark() (cuda.Mark, error) {
	if err := d.enter("Mark"); err != nil {
		return nil, err
	}
	defer d.leave()
	i := d.nextEv
	d.nextEv = (d.nextEv + 1) % len(d.events)
	s := &d.events[i]
	if s.ev == (cu.Event{}) {
		ev, err := cu.MakeEvent(cu.DefaultEvent)
		if err != nil {
			return nil, cuErr("cuEventCreate", err)
		}
		s.ev = ev
	}
	s.gen++
	if err := s.ev.Record(d.stream); err != nil {
		return nil, cuErr("cuEventRecord", err)
	}
	return mark{d: d, slot: i, gen: s.gen}, nil
}

// Elapsed is the device time between two marks (cuEventElapsedTime), after
// waiting for the later one.
func (d *Device) Elapsed(from, to cuda.Mark) (time.Duration, error) {
	f, t, err := cuda.MarksOf[mark](from, to, "this CUDA device")
	if err != nil {
		return 0, err
	}
	if f.d != d || t.d != d {
		return 0, fmt.Errorf("cuda: Elapsed: a mark of another CUDA device")
	}
	if err := d.enter("Elapsed"); err != nil {
		return 0, err
	}
	defer d.leave()
	for _, m := range []mark{f, t} {
		if d.events[m.slot].gen != m.gen {
			return 0, fmt.Errorf("cuda: Elapsed: a mark older than the device's last %d", len(d.events))
		}
	}
	if err := d.events[t.slot].ev.Synchronize(); err != nil {
		return 0, cuErr("cuEventSynchronize", err)
	}
	ms, err := d.events[f.slot].ev.Elapsed(d.events[t.slot].ev)
	if err != nil {
		return 0, cuErr("cuEventElapsedTime", err)
	}
	return time.Duration(ms * float64(time.Millisecond)), nil
}

// Synchronize waits for all queued work and reports a kernel's bad token
// id or a fault.
func (d *Device) Synchronize() error {
	if err := d.enter("Synchronize"); err != nil {
		return err
	}
	defer d.leave()
	return d.syncCheck("")
}

// Close waits for the device, gives every segment back (cuMemFree) and
// destroys cuBLAS's handle, the events, the status words and the stream.
// The primary context and the kernels' module stay for the process (see
// card). Buffers still alive become invalid.
func (d *Device) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(d.card.ctx); err != nil {
		return cuErr("cuCtxSetCurrent", err)
	}
	var errs []error
	if err := d.stream.Synchronize(); err != nil {
		errs = append(errs, cuErr("cuStreamSynchronize", err))
	}
	if d.blas != nil { // before its workspace goes with the segments
		errs = append(errs, d.blas.destroy())
		d.blas = nil
	}
	if a := d.Allocator(); a != nil {
		errs = append(errs, a.Close())
	}
	errs = append(errs, d.release())
	d.closed = true
	return errors.Join(errs...)
}

// release destroys what New made, in reverse.
func (d *Device) release() error {
	var errs []error
	if d.blas != nil {
		errs = append(errs, d.blas.destroy())
		d.blas = nil
	}
	for i := range d.events {
		if d.events[i].ev != (cu.Event{}) {
			errs = append(errs, cuErr("cuEventDestroy", cu.DestroyEvent(&d.events[i].ev)))
		}
	}
	if d.status != 0 {
		errs = append(errs, cuErr("cuMemFree(status words)", cu.MemFree(d.status)))
		d.status = 0
	}
	if d.stream != (cu.Stream{}) {
		errs = append(errs, cuErr("cuStreamDestroy", d.stream.Destroy()))
	}
	d.ints = nil
	return errors.Join(errs...)
}

// memsetZero zeroes n elements of b from element off (zero bits are +0 in
// every float type).
func (d *Device) memsetZero(b *cuda.Buffer, off, n int) error {
	if n == 0 {
		return nil
	}
	sz := int64(b.DType.Size())
	err := cu.MemsetD8Async(cu.DevicePtr(b.Addr()+uintptr(int64(off)*sz)), 0, int64(n)*sz, d.stream)
	return cuErr(fmt.Sprintf("cuMemsetD8Async(%s)", b), err)
}

// blasReady loads cuBLAS and gives it its workspace from the allocator,
// tagged workspace, on first use (so a fresh device holds nothing).
func (d *Device) blasReady() error {
	if d.ws != nil {
		return nil
	}
	if d.blas == nil {
		b, err := newCUBLAS(uintptr(unsafe.Pointer(d.stream.C())))
		if err != nil {
			return err
		}
		d.blas = b
	}
	n := cublasWorkspaceBytes(d.card.major)
	ws, err := d.Pool.Alloc(cuda.Workspace, cuda.F32, int(n/4))
	if err != nil {
		return fmt.Errorf("cuda: cuBLAS workspace: %w", err)
	}
	if err := d.blas.setWorkspace(ws.Addr(), n); err != nil {
		d.Pool.Free(ws)
		return err
	}
	d.ws, d.wsBytes = ws, n
	return nil
}

// gemm runs a normalized MatMul: on cuBLAS when it takes the operand types
// and sizes, else on gemm_generic (skip names A's known zeros for it).
func (d *Device) gemm(n cuda.MatMul, skip int) error {
	if ab, ct, compute, ok := blasTypes(n.A.DType, n.B.DType, n.C.DType); ok {
		call := columnMajor(n)
		if call.check() == nil {
			if err := d.blasReady(); err != nil {
				return err
			}
			if err := d.blas.gemm(call, ab, ct, compute); err != nil {
				return err
			}
			if d.syncEach {
				return d.syncCheck("cuBLAS GEMM")
			}
			return nil
		}
	}
	return d.run(gemmGenericCall(n, skip))
}

// kernelEntries lists every entry point the module must have.
func kernelEntries() []string {
	var out []string
	for base := range kernelSignatures {
		if singleEntry[base] {
			out = append(out, base)
		} else {
			out = append(out, base+"_f32", base+"_f64")
		}
	}
	return out
}

func memcpyDtoD(d *Device, dst, src *cuda.Buffer) error {
	return cu.MemcpyDtoDAsync(cu.DevicePtr(dst.Addr()), cu.DevicePtr(src.Addr()), dst.Bytes(), d.stream)
}

func memsetD8(d *Device, p cu.DevicePtr, n int64) error { return cu.MemsetD8Async(p, 0, n, d.stream) }

// readInt32s copies len(dst) int32 words from p (the copy to pageable
// memory returns when done).
func readInt32s(d *Device, dst []int32, p cu.DevicePtr) error {
	return cu.MemcpyDtoHAsync(unsafe.Pointer(&dst[0]), p, int64(4*len(dst)), d.stream)
}
