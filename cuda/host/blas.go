package host

// The host's matrix multiply decides its speed (design.md: pure-Go gonum
// reaches about 20 GFLOP/s on GPT-2 shapes with 2 cores, OpenBLAS about
// 150-170). The host uses OpenBLAS when the machine has it, loaded at run
// time (dlopen, so one binary runs with or without it; blas_cgo.go), and
// gonum's pure-Go BLAS otherwise: when the library is missing, in builds
// without cgo (blas_nocgo.go), or when TRAINMEM_BLAS=go.

import (
	"fmt"
	"os"
	"runtime"
	"strings"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"

	"trainmem/cuda"
)

// gemmBackend is a row-major BLAS level-3 GEMM: C = alpha·op(A)·op(B) +
// beta·C with op(A) m×k, op(B) k×n. Implementations may use several
// threads inside a call but give the same bits for the same call.
type gemmBackend interface {
	name() string
	sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int)
	dgemm(tA, tB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int)
}

// BLAS backends Options.BLAS accepts.
const (
	BLASAuto     = ""         // OpenBLAS when available, else gonum; TRAINMEM_BLAS may choose
	BLASOpenBLAS = "openblas" // OpenBLAS, or an error when it cannot be loaded
	BLASGo       = "go"       // gonum's pure-Go BLAS
)

// chooseBLAS returns the backend for a host device of the given thread
// count. choice is Options.BLAS; when empty, TRAINMEM_BLAS decides, and
// when that is empty too, OpenBLAS if it loads, else gonum.
// fallback is why an automatic choice fell back to gonum (nil when it did
// not, or when gonum was chosen).
func chooseBLAS(choice string, threads int) (be gemmBackend, fallback error, err error) {
	if choice == BLASAuto {
		choice = os.Getenv(BLASEnv)
	}
	switch choice {
	case BLASGo:
		return gonumBLAS{}, nil, nil
	case BLASOpenBLAS:
		be, err := loadOpenBLAS(threads)
		return be, nil, err
	case BLASAuto:
		be, err := loadOpenBLAS(threads)
		if err == nil {
			return be, nil, nil
		}
		return gonumBLAS{}, err, nil
	}
	return nil, nil, fmt.Errorf("cuda: unknown BLAS %q (valid: %q, %q, or empty for automatic)", choice, BLASOpenBLAS, BLASGo)
}

// BLASEnv is the environment variable that chooses the host's BLAS.
const BLASEnv = "TRAINMEM_BLAS"

// CheckEnv checks the environment variables the host device reads
// (TRAINMEM_BLAS, TRAINMEM_PEAK_GFLOPS), so that a command refuses a typo
// before any work, naming the variable and what is valid.
func CheckEnv() error {
	switch v := os.Getenv(BLASEnv); v {
	case BLASAuto, BLASOpenBLAS, BLASGo:
	default:
		return fmt.Errorf("%s=%q: unknown BLAS (valid: %s, %s, or unset for OpenBLAS when installed, else Go)", BLASEnv, v, BLASOpenBLAS, BLASGo)
	}
	_, _, err := cuda.PeakOverride()
	return err
}

// OpenBLASAvailable reports whether OpenBLAS can be loaded, and why not.
func OpenBLASAvailable() error {
	_, err := loadOpenBLAS(runtime.GOMAXPROCS(0))
	return err
}

// gonumBLAS is gonum's pure-Go BLAS. It parallelizes large products over
// GOMAXPROCS goroutines by fixed blocks of C, so results do not depend on
// scheduling.
type gonumBLAS struct{}

func (gonumBLAS) name() string { return "gonum" }

func trans(t bool) blas.Transpose {
	if t {
		return blas.Trans
	}
	return blas.NoTrans
}

func (gonumBLAS) sgemm(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	gonum.Implementation{}.Sgemm(trans(tA), trans(tB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

func (gonumBLAS) dgemm(tA, tB bool, m, n, k int, alpha float64, a []float64, lda int, b []float64, ldb int, beta float64, c []float64, ldc int) {
	gonum.Implementation{}.Dgemm(trans(tA), trans(tB), m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
}

// parseOpenBLASConfig takes openblas_get_config's "OpenBLAS 0.3.21
// NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64" apart into
// "OpenBLAS 0.3.21" and the core name.
func parseOpenBLASConfig(cfg string) (version, core string) {
	f := strings.Fields(cfg)
	version = "OpenBLAS"
	if len(f) >= 2 && f[0] == "OpenBLAS" {
		version = f[0] + " " + f[1]
	}
	for _, w := range f[2:] {
		if w != strings.ToUpper(w) { // options are upper case; the core name is not
			core = w
		}
	}
	return version, core
}
