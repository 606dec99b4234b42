//go:build trainmem_cuda

package gpu

import (
	"os"
	"strings"
	"testing"
	"trainmem/cuda"

	"gorgonia.org/cu"
)

// TestDriverShim checks what the shim made of the machine's driver. Here
// the test binary started, gorgonia.org/cu's init ran, and the process was
// not ended by it, whatever the machine has: that is the shim's point.
// With TRAINMEM_FAKE_LIBCUDA=1 (CI, with testdata/fakecuda.c on
// LD_LIBRARY_PATH) the fake driver's answers must come through the
// trampolines intact.
func TestDriverShim(t *testing.T) {
	st := driverStatus()
	if !st.called {
		t.Fatal("cuInit was not called by gorgonia.org/cu's init")
	}
	t.Logf("driver: shim %t, cuInit result %d, dlopen %q, %d functions missing", st.shim, st.result, st.dlerror, len(st.missing))
	err := Available()
	switch {
	case os.Getenv("TRAINMEM_FAKE_LIBCUDA") == "1":
		if st.result != 100 || st.dlerror != "" {
			t.Fatalf("the fake libcuda's cuInit gives 100; the shim saw %d (%q)", st.result, st.dlerror)
		}
		if v := cu.Version(); v != 13000 {
			t.Errorf("cuDriverGetVersion through the trampoline = %d, want the fake's 13000", v)
		}
		if err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_NO_DEVICE") {
			t.Errorf("Available = %v, want CUDA_ERROR_NO_DEVICE", err)
		}
		if !strings.Contains(strings.Join(st.missing, " "), "cuLaunchKernel") {
			t.Errorf("the fake libcuda has no cuLaunchKernel, yet the shim did not list it missing: %v", st.missing)
		}
	case st.shim && st.result < 0:
		if err == nil || !strings.Contains(err.Error(), "no NVIDIA driver") {
			t.Errorf("without libcuda.so.1, Available = %v", err)
		}
		// Calls through the trampolines fail cleanly instead of crashing.
		if _, err := cu.NumDevices(); err == nil {
			t.Error("cuDeviceGetCount succeeded without a driver")
		}
	}
	if err != nil {
		if _, err2 := New(Options{}); err2 == nil || err2.Error() != err.Error() {
			t.Errorf("New = %v, want Available's %v", err2, err)
		}
	}
}

// openOrSkip opens GPU 0 for a test, closed when the test ends, or skips
// the test with the reason there is none.
func openOrSkip(t *testing.T) *Device {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("no CUDA device here, skipped: %v", err)
	}
	d, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestCUDADevice runs what the conformance suite cannot see: the kernel
// table against the loaded module, cuBLAS's workspace in the allocator,
// marks, and the card's name and peak.
func TestCUDADevice(t *testing.T) {
	d := openOrSkip(t)
	t.Logf("%s", d.Name())
	for _, name := range kernelEntries() {
		fn := d.card.fns[name]
		if fn.maxThreads < 256 {
			t.Errorf("%s can launch only %d threads a block; the launches use up to 256 (1024 for column sums)", name, fn.maxThreads)
		}
	}
	if d.LibraryWorkspaceBytes() != 0 || d.Stats().AllocatedBytes.Current != 0 {
		t.Error("a fresh CUDA device holds allocator memory")
	}
	a, _ := d.Alloc(cuda.Temporaries, cuda.F16, 64*64)
	b, _ := d.Alloc(cuda.Temporaries, cuda.F16, 64*64)
	c, _ := d.Alloc(cuda.Temporaries, cuda.F32, 64*64)
	for _, x := range []*cuda.Buffer{a, b} {
		if err := d.Fill(x, 1); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.MatMul(cuda.MatMul{M: 64, N: 64, K: 64, A: a, B: b, C: c, Alpha: 1}); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, 64*64)
	if err := d.Download(out, c); err != nil {
		t.Fatal(err)
	}
	if out[0] != 64 || out[len(out)-1] != 64 {
		t.Errorf("ones·ones over K = 64 gave %g, %g", out[0], out[len(out)-1])
	}
	t.Logf("%s", d.Name()) // with the cuBLAS the product loaded
	want := cublasWorkspaceBytes(d.card.major)
	if d.LibraryWorkspaceBytes() != want || d.Stats().CategoryAllocated[cuda.Workspace].Current != want {
		t.Errorf("cuBLAS workspace %d, workspace category %d; want %d", d.LibraryWorkspaceBytes(), d.Stats().CategoryAllocated[cuda.Workspace].Current, want)
	}
	if peak, how := d.PeakFLOPS(cuda.BF16); peak <= 0 {
		t.Logf("peak unknown: %s", how)
	}
	free, total, err := d.MemInfo()
	if err != nil || free <= 0 || total < free {
		t.Errorf("MemInfo = %d, %d, %v", free, total, err)
	}
}

// A PTX the driver's JIT refuses says what the JIT said (the emulated
// driver's error log names what is wrong with the image).
func TestJITLog(t *testing.T) {
	d := openOrSkip(t)
	if err := d.enter("TestJITLog"); err != nil {
		t.Fatal(err)
	}
	_, err := loadModule("this is not PTX", "a test image")
	d.leave()
	if err == nil || !strings.Contains(err.Error(), "cuModuleLoadDataEx (a test image)") || !strings.Contains(err.Error(), "the JIT says: ") {
		t.Errorf("loading a bad image: %v", err)
	}
	t.Logf("%v", err)
}

// cuBLAS is loaded when a product first needs it, not when the device
// opens: the other kernels run without it.
func TestCUBLASLoadedLazily(t *testing.T) {
	d := openOrSkip(t)
	if d.blas != nil || strings.Contains(d.Name(), "cuBLAS") {
		t.Errorf("a fresh device has cuBLAS: %s", d.Name())
	}
}

// When a cuBLAS loads but its cublasCreate fails (one newer than the
// driver), the next one is used; when none works, the error names every
// library tried. The emulated GPU's cuBLAS fails as
// TRAINMEM_EMU_CUBLAS_BROKEN asks (make test-cuda-emu runs this test
// alone, with it set, in a process of its own).
func TestCUBLASFallback(t *testing.T) {
	broken := os.Getenv("TRAINMEM_EMU_CUBLAS_BROKEN")
	if broken == "" {
		t.Skip("runs on the emulated GPU with TRAINMEM_EMU_CUBLAS_BROKEN set (make test-cuda-emu)")
	}
	if err := Available(); err != nil {
		t.Fatal(err)
	}
	d, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	a, _ := d.Alloc(cuda.Temporaries, cuda.F32, 4)
	b, _ := d.Alloc(cuda.Temporaries, cuda.F32, 4)
	c, _ := d.Alloc(cuda.Temporaries, cuda.F32, 4)
	err = d.MatMul(cuda.MatMul{M: 2, N: 2, K: 2, A: a, B: b, C: c, Alpha: 1})
	switch broken {
	case "all":
		if err == nil || !strings.Contains(err.Error(), "libcublas.so.13: cuda: cublasCreate") || !strings.Contains(err.Error(), "libcublas.so.12: cuda: cublasCreate") {
			t.Errorf("every cuBLAS broken: %v", err)
		}
	default:
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(d.Name(), "libcublas.so.12") {
			t.Errorf("cuBLAS .%s broken, the device uses %s", broken, d.Name())
		}
	}
	t.Logf("%s; %v", d.Name(), err)
}
