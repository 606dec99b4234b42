//go:build trainmem_cuda

package gpu

// cuBLAS, loaded at run time when the device first multiplies:
// libcublas.so.13, .12, .11 in turn, by the loader's path and then in
// Python's NVIDIA wheels (cublasCandidates), or the file TRAINMEM_CUBLAS
// names, so that one binary, built here against CUDA 11.8's headers, uses
// whatever CUDA the GPU machine has, and kernels that need no cuBLAS run
// without it.
// Nothing of cuBLAS is linked or included: the few types and functions
// trainmem calls are declared below, with the values of cublas_api.h and
// library_types.h (stable across CUDA 11, 12 and 13). Handles, streams and
// device pointers cross into C as 64-bit integers.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>

typedef int tmb_status;      // cublasStatus_t
typedef void *tmb_handle;    // cublasHandle_t
typedef int (*tmb_create_fn)(tmb_handle *);
typedef int (*tmb_destroy_fn)(tmb_handle);
typedef int (*tmb_set_stream_fn)(tmb_handle, void *);
typedef int (*tmb_set_workspace_fn)(tmb_handle, void *, size_t);
typedef int (*tmb_set_math_fn)(tmb_handle, int);
typedef int (*tmb_version_fn)(tmb_handle, int *);
typedef int (*tmb_gemm_ex_fn)(tmb_handle, int, int, int, int, int, const void *, const void *, int, int,
	const void *, int, int, const void *, void *, int, int, int, int);
typedef int (*tmb_gemm_sb_fn)(tmb_handle, int, int, int, int, int, const void *, const void *, int, int, long long,
	const void *, int, int, long long, const void *, void *, int, int, long long, int, int, int);

static tmb_create_fn tmb_create_p;
static tmb_destroy_fn tmb_destroy_p;
static tmb_set_stream_fn tmb_set_stream_p;
static tmb_set_workspace_fn tmb_set_workspace_p;
static tmb_set_math_fn tmb_set_math_p;
static tmb_version_fn tmb_version_p;
static tmb_gemm_ex_fn tmb_gemm_ex_p;
static tmb_gemm_sb_fn tmb_gemm_sb_p;

static void *tmb_lib;

// tmb_open loads name and every function; NULL on success, else why not.
static const char *tmb_open(const char *name) {
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		return e != NULL ? e : "dlopen failed";
	}
#define TMB_LOAD(var, type, sym) if ((var = (type)dlsym(h, sym)) == NULL) { dlclose(h); return "missing " sym; }
	TMB_LOAD(tmb_create_p, tmb_create_fn, "cublasCreate_v2")
	TMB_LOAD(tmb_destroy_p, tmb_destroy_fn, "cublasDestroy_v2")
	TMB_LOAD(tmb_set_stream_p, tmb_set_stream_fn, "cublasSetStream_v2")
	TMB_LOAD(tmb_set_workspace_p, tmb_set_workspace_fn, "cublasSetWorkspace_v2")
	TMB_LOAD(tmb_set_math_p, tmb_set_math_fn, "cublasSetMathMode")
	TMB_LOAD(tmb_version_p, tmb_version_fn, "cublasGetVersion_v2")
	TMB_LOAD(tmb_gemm_ex_p, tmb_gemm_ex_fn, "cublasGemmEx")
	TMB_LOAD(tmb_gemm_sb_p, tmb_gemm_sb_fn, "cublasGemmStridedBatchedEx")
#undef TMB_LOAD
	tmb_lib = h;
	return NULL;
}

// tmb_close unloads the library tmb_open loaded (one whose cublasCreate
// failed).
static void tmb_close(void) {
	if (tmb_lib != NULL) dlclose(tmb_lib);
	tmb_lib = NULL;
}

static int tmb_create(unsigned long long *h) {
	tmb_handle p = NULL;
	int r = tmb_create_p(&p);
	*h = (unsigned long long)p;
	return r;
}
static int tmb_destroy(unsigned long long h) { return tmb_destroy_p((tmb_handle)h); }
static int tmb_set_stream(unsigned long long h, unsigned long long s) { return tmb_set_stream_p((tmb_handle)h, (void *)s); }
static int tmb_set_workspace(unsigned long long h, unsigned long long p, unsigned long long n) {
	return tmb_set_workspace_p((tmb_handle)h, (void *)p, (size_t)n);
}
static int tmb_set_math(unsigned long long h, int mode) { return tmb_set_math_p((tmb_handle)h, mode); }
static int tmb_version(unsigned long long h, int *v) { return tmb_version_p((tmb_handle)h, v); }

// tmb_gemm: cublasGemmEx (batch 1) or cublasGemmStridedBatchedEx, with
// alpha and beta as the compute type wants them (fp32, or fp64 for
// CUBLAS_COMPUTE_64F = 70), on the host. Algorithm CUBLAS_GEMM_DEFAULT (-1).
static int tmb_gemm(unsigned long long h, int ta, int tb, int m, int n, int k, int compute, double alpha, double beta,
		unsigned long long A, int at, int lda, long long sa, unsigned long long B, int bt, int ldb, long long sb,
		unsigned long long C, int ct, int ldc, long long sc, int batch) {
	float af = (float)alpha, bf = (float)beta;
	const void *pa = compute == 70 ? (const void *)&alpha : (const void *)&af;
	const void *pb = compute == 70 ? (const void *)&beta : (const void *)&bf;
	if (batch == 1)
		return tmb_gemm_ex_p((tmb_handle)h, ta, tb, m, n, k, pa, (const void *)A, at, lda, (const void *)B, bt, ldb,
			pb, (void *)C, ct, ldc, compute, -1);
	return tmb_gemm_sb_p((tmb_handle)h, ta, tb, m, n, k, pa, (const void *)A, at, lda, sa, (const void *)B, bt, ldb, sb,
		pb, (void *)C, ct, ldc, sc, batch, compute, -1);
}
*/
import "C"

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unsafe"
)

// cublasMathMode: CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION:
// no TF32, and split-K partial sums stay fp32 for 16-bit outputs, so that
// every product accumulates in fp32 and is rounded once, as on the host.
const cublasMathMode = 16

// cublasLib is the cuBLAS this process uses, chosen by the first device
// that multiplies (device.go's blasReady): the first candidate
// (cublasCandidates) that loads and whose cublasCreate works. A later
// device uses the same one.
var cublasLib struct {
	mu     sync.Mutex
	chosen string
}

// newCUBLAS makes a cuBLAS handle on stream. The first time it tries the
// candidates in turn, falling back to the next when one does not load or its
// cublasCreate fails (a cuBLAS newer than the driver), and its error names
// every library tried and why each failed.
func newCUBLAS(stream uintptr) (*cublasHandle, error) {
	cublasLib.mu.Lock()
	defer cublasLib.mu.Unlock()
	if cublasLib.chosen != "" {
		return createCUBLAS(cublasLib.chosen, stream)
	}
	var why []string
	for _, name := range cublasCandidates(os.Getenv, filepath.Glob) {
		cn := C.CString(name)
		e := C.tmb_open(cn)
		C.free(unsafe.Pointer(cn))
		if e != nil {
			why = append(why, fmt.Sprintf("%s: %s", name, C.GoString(e)))
			continue
		}
		b, err := createCUBLAS(name, stream)
		if err != nil {
			C.tmb_close()
			why = append(why, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		cublasLib.chosen = name
		return b, nil
	}
	return nil, fmt.Errorf("cuda: no usable cuBLAS (tried %s); install CUDA's cuBLAS (libcublas.so.12 or .13) or set TRAINMEM_CUBLAS to the library's path", strings.Join(why, "; "))
}

// cublasStatusNames are cublasStatus_t's values.
var cublasStatusNames = map[int]string{
	1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
	8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}

func blasErr(call string, status C.int) error {
	if status == 0 {
		return nil
	}
	name := cublasStatusNames[int(status)]
	if name == "" {
		name = "unknown cuBLAS status"
	}
	return fmt.Errorf("cuda: %s: %s (%d)", call, name, int(status))
}

// cublasHandle is one cuBLAS handle, bound to the device's context and stream.
type cublasHandle struct {
	h       C.ulonglong
	lib     string
	version int
}

// createCUBLAS makes a handle with the loaded library lib, bound to
// stream, in cuBLAS's fp32-accumulating math mode.
func createCUBLAS(lib string, stream uintptr) (*cublasHandle, error) {
	b := &cublasHandle{lib: lib}
	if err := blasErr("cublasCreate", C.tmb_create(&b.h)); err != nil {
		return nil, err
	}
	var v C.int
	steps := []struct {
		call   string
		status C.int
	}{
		{"cublasSetStream", C.tmb_set_stream(b.h, C.ulonglong(stream))},
		{"cublasSetMathMode", C.tmb_set_math(b.h, cublasMathMode)},
		{"cublasGetVersion", C.tmb_version(b.h, &v)},
	}
	for _, s := range steps {
		if err := blasErr(s.call, s.status); err != nil {
			C.tmb_destroy(b.h)
			return nil, err
		}
	}
	b.version = int(v)
	return b, nil
}

// versionString is cuBLAS's version as major.minor.patch (cublasGetVersion
// gives major·10000 + minor·100 + patch since cuBLAS 11, major·1000 +
// minor·100 + patch before).
func (b *cublasHandle) versionString() string {
	v := b.version
	if v >= 100000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100)
}

func (b *cublasHandle) setWorkspace(ptr uintptr, bytes int64) error {
	return blasErr("cublasSetWorkspace", C.tmb_set_workspace(b.h, C.ulonglong(ptr), C.ulonglong(bytes)))
}

func (b *cublasHandle) gemm(c blasCall, abType, cType, compute int) error {
	op := func(t bool) C.int {
		if t {
			return 1 // CUBLAS_OP_T
		}
		return 0 // CUBLAS_OP_N
	}
	call := "cublasGemmEx"
	if c.batch > 1 {
		call = "cublasGemmStridedBatchedEx"
	}
	st := C.tmb_gemm(b.h, op(c.transA), op(c.transB), C.int(c.m), C.int(c.n), C.int(c.k), C.int(compute),
		C.double(c.alpha), C.double(c.beta),
		C.ulonglong(c.a.Addr()), C.int(abType), C.int(c.lda), C.longlong(c.strideA),
		C.ulonglong(c.b.Addr()), C.int(abType), C.int(c.ldb), C.longlong(c.strideB),
		C.ulonglong(c.c.Addr()), C.int(cType), C.int(c.ldc), C.longlong(c.strideC), C.int(c.batch))
	if st != 0 {
		return blasErr(fmt.Sprintf("%s(m=%d n=%d k=%d batch=%d)", call, c.m, c.n, c.k, c.batch), st)
	}
	return nil
}

func (b *cublasHandle) destroy() error { return blasErr("cublasDestroy", C.tmb_destroy(b.h)) }
