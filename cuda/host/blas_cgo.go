//go:build cgo

package host

// OpenBLAS, found at run time: dlopen("libopenblas.so.0"), then
// "libopenblas.so", and dlsym for cblas_sgemm, cblas_dgemm and
// openblas_set_num_threads. Nothing is linked at build time, so the binary
// starts on machines without OpenBLAS and uses gonum there.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>

typedef void (*tm_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
	const float *, int, float, float *, int);
typedef void (*tm_dgemm_fn)(int, int, int, int, int, int, double, const double *, int,
	const double *, int, double, double *, int);
typedef void (*tm_threads_fn)(int);
typedef char *(*tm_string_fn)(void);

static tm_sgemm_fn tm_sgemm_p;
static tm_dgemm_fn tm_dgemm_p;
static tm_threads_fn tm_threads_p;
static tm_string_fn tm_config_p;

// tm_open loads name and its symbols; it returns NULL on success, else why not.
static const char *tm_open(const char *name) {
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		return e != NULL ? e : "dlopen failed";
	}
	tm_sgemm_fn s = (tm_sgemm_fn)dlsym(h, "cblas_sgemm");
	tm_dgemm_fn d = (tm_dgemm_fn)dlsym(h, "cblas_dgemm");
	tm_threads_fn t = (tm_threads_fn)dlsym(h, "openblas_set_num_threads");
	if (s == NULL || d == NULL || t == NULL) {
		dlclose(h);
		return "cblas_sgemm, cblas_dgemm or openblas_set_num_threads missing";
	}
	tm_sgemm_p = s;
	tm_dgemm_p = d;
	tm_threads_p = t;
	tm_config_p = (tm_string_fn)dlsym(h, "openblas_get_config");
	return NULL;
}

static const char *tm_config(void) { return tm_config_p != NULL ? tm_config_p() : ""; }
static void tm_set_threads(int n) { tm_threads_p(n); }

// CBLAS enums: CblasRowMajor 101, CblasNoTrans 111, CblasTrans 112.
static void tm_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *a, int lda,
		const float *b, int ldb, float beta, float *c, int ldc) {
	tm_sgemm_p(101, ta ? 112 : 111, tb ? 112 : 111, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
static void tm_dgemm(int ta, int tb, int m, int n, int k, double alpha, const double *a, int lda,
		const double *b, int ldb, double beta, double *c, int ldc) {
	tm_dgemm_p(101, ta ? 112 : 111, tb ? 112 : 111, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"unsafe"
)

var openblas struct {
	once    sync.Once
	err     error
	version string // "OpenBLAS 0.3.21" or the like
	core    string // the kernel set it chose, e.g. "Haswell"

	// mu serializes calls: the thread count is process-wide, and several
	// host devices (ZeRO ranks) may multiply at once.
	mu      sync.Mutex
	threads int
}

type openBLAS struct{ threads int }

func loadOpenBLAS(threads int) (gemmBackend, error) {
	openblas.once.Do(func() {
		// Older OpenBLAS builds pick kernels that misbehave on some
		// machines; the project's machines run Haswell's (design.md).
		// A value the user set is kept.
		if os.Getenv("OPENBLAS_CORETYPE") == "" {
			os.Setenv("OPENBLAS_CORETYPE", "Haswell")
		}
		// OpenBLAS's idle workers spin on sched_yield for 2^28 cycles
		// (about 0.1 s) after every call, taking the cores from the Go
		// kernels that run between two GEMMs: a quarter of a tiny step's
		// time on two cores. 2^4 cycles puts them to sleep at once; large
		// GEMMs lose nothing to the wake-up (gpt2 at b=4, s=64: 2.07 s a
		// step spinning, 1.82 s sleeping).
		if os.Getenv("OPENBLAS_THREAD_TIMEOUT") == "" {
			os.Setenv("OPENBLAS_THREAD_TIMEOUT", "4")
		}
		var why []string
		for _, name := range []string{"libopenblas.so.0", "libopenblas.so"} {
			cname := C.CString(name)
			e := C.tm_open(cname)
			C.free(unsafe.Pointer(cname))
			if e == nil {
				openblas.version, openblas.core = parseOpenBLASConfig(C.GoString(C.tm_config()))
				return
			}
			why = append(why, C.GoString(e))
		}
		openblas.err = fmt.Errorf("cuda: OpenBLAS not found: %s", strings.Join(why, "; "))
	})
	if openblas.err != nil {
		return nil, openblas.err
	}
	if threads < 1 {
		return nil, errors.New("cuda: OpenBLAS needs at least one thread")
	}
	return openBLAS{threads: threads}, nil
}

func (o openBLAS) name() string {
	if openblas.core != "" {
		return openblas.version + " " + openblas.core
	}
	return openblas.version
}

func (o openBLAS) lock() {
	openblas.mu.Lock()
	if openblas.threads != o.threads {
		C.tm_set_threads(C.int(o.threads))
		openblas.threads = o.threads
	}
}

func fitsInt32(vs ...int) bool {
	for _, v := range vs {
		if v > math.MaxInt32 {
			return false
		}
	}
	return true
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func (o openBLAS) sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	cblasGemm(o, gonumBLAS{}.sgemm, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func (o openBLAS) dgemm(tA, tB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	cblasGemm(o, gonumBLAS{}.dgemm, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// cblasGemm runs one GEMM on OpenBLAS (cblas_sgemm for float32,
// cblas_dgemm for float64) with o's thread count and the lock held, or on
// gonum, the same GEMM's fallback, when a dimension does not fit CBLAS's
// int.
func cblasGemm[F float32 | float64](o openBLAS, fallback func(tA, tB bool, m, n, k int, alpha F, a []F, lda int, b []F, ldb int, beta F, c []F, ldc int),
	tA, tB bool, m, n, k int, alpha F, a []F, lda int, b []F, ldb int, beta F, c []F, ldc int) {
	if !fitsInt32(m, n, k, lda, ldb, ldc) {
		fallback(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
		return
	}
	o.lock()
	defer openblas.mu.Unlock()
	pa, pb, pc := unsafe.Pointer(&a[0]), unsafe.Pointer(&b[0]), unsafe.Pointer(&c[0])
	switch any(alpha).(type) {
	case float32:
		C.tm_sgemm(cbool(tA), cbool(tB), C.int(m), C.int(n), C.int(k), C.float(alpha),
			(*C.float)(pa), C.int(lda), (*C.float)(pb), C.int(ldb), C.float(beta), (*C.float)(pc), C.int(ldc))
	case float64:
		C.tm_dgemm(cbool(tA), cbool(tB), C.int(m), C.int(n), C.int(k), C.double(alpha),
			(*C.double)(pa), C.int(lda), (*C.double)(pb), C.int(ldb), C.double(beta), (*C.double)(pc), C.int(ldc))
	}
}
