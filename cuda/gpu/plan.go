package gpu

// The pure-Go half of the CUDA device (device.go, build tag trainmem_cuda):
// every decision that needs no GPU — which PTX a card runs, launch
// geometry and its limits, how a row-major MatMul becomes a column-major
// cuBLAS call, which operand types cuBLAS takes, the cuBLAS workspace and
// the peak arithmetic rate of a card — lives here, untagged, so that
// `go test ./cuda` checks it on any machine.

import (
	"fmt"
	"math"
	"os"
	"trainmem/cuda"
)

// PTXTargets are the virtual architectures the kernels are compiled for
// (cuda/gpu/kernels/kernels_sm*.ptx, `make ptx`): compute_80 (Ampere, the first
// with bf16 arithmetic) and compute_90 (Hopper). Newer cards run the newest
// of them, compiled for the card by the driver's JIT.
var PTXTargets = []int{80, 90}

// choosePTX returns the PTX target a card of compute capability
// major.minor runs: the newest target not above the card's.
func choosePTX(major, minor int, targets []int) (int, error) {
	cc := 10*major + minor
	best := -1
	for _, t := range targets {
		if t <= cc && t > best {
			best = t
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("cuda: compute capability %d.%d is below %d.%d, the oldest the kernels are built for (compute_%d: bf16 arithmetic needs Ampere or newer)",
			major, minor, minTarget(targets)/10, minTarget(targets)%10, minTarget(targets))
	}
	return best, nil
}

func minTarget(ts []int) int {
	m := math.MaxInt
	for _, t := range ts {
		m = min(m, t)
	}
	return m
}

// launchLimits are a card's (and a kernel's) limits on a launch.
type launchLimits struct {
	maxThreads int    // threads per block, for this kernel (registers decide)
	maxBlock   [3]int // block dimensions
	maxGrid    [3]int // grid dimensions
	maxSmem    int    // static plus dynamic shared memory per block, bytes
	staticSmem int    // the kernel's static shared memory, bytes
}

// launch is one kernel launch's geometry.
type launch struct {
	grid, block [3]int
	smem        int // dynamic shared memory, bytes
}

// check compares a launch with the limits and says which one it breaks.
func (l launch) check(kernel string, lim launchLimits) error {
	threads := 1
	for i, axis := range [3]string{"x", "y", "z"} {
		if l.block[i] < 1 || l.grid[i] < 1 {
			return fmt.Errorf("cuda: %s: launch of grid %v, block %v: every dimension must be at least 1", kernel, l.grid, l.block)
		}
		if l.block[i] > lim.maxBlock[i] {
			return fmt.Errorf("cuda: %s: block %s dimension %d exceeds the device's %d", kernel, axis, l.block[i], lim.maxBlock[i])
		}
		if l.grid[i] > lim.maxGrid[i] {
			return fmt.Errorf("cuda: %s: grid %s dimension %d exceeds the device's %d", kernel, axis, l.grid[i], lim.maxGrid[i])
		}
		threads *= l.block[i]
	}
	if threads > lim.maxThreads {
		return fmt.Errorf("cuda: %s: %d threads a block exceed the %d this kernel can launch with", kernel, threads, lim.maxThreads)
	}
	if l.smem+lim.staticSmem > lim.maxSmem {
		return fmt.Errorf("cuda: %s: %d bytes of shared memory a block exceed the device's %d", kernel, l.smem+lim.staticSmem, lim.maxSmem)
	}
	return nil
}

// Block sizes of the kernel families (the family files
// cuda/gpu/kernels/<family>.cuh assume them where they say so).
const (
	elemBlock  = 256     // elementwise kernels, grid-stride loops
	rowBlock   = 256     // a block per row (layer norm, cross-entropy)
	warpsBlock = 256     // a warp per item (token gradients, softmax backward)
	maxBlocks  = 1 << 20 // grid-stride kernels never launch more blocks than this
	apRows     = 32      // attention_probs: query rows a block
	gemmTile   = 64      // gemm_generic: a block's tile of C
	csRows     = 32      // column_sums: row groups a block (block 32×32)
)

// gridStride is the launch of a grid-stride kernel over n items, each
// thread one item, blocks of block threads, at most maxBlocks blocks.
func gridStride(n int64, block int) launch {
	g := (n + int64(block) - 1) / int64(block)
	g = max(1, min(g, maxBlocks))
	return launch{grid: [3]int{int(g), 1, 1}, block: [3]int{block, 1, 1}}
}

// perRow is the launch of a kernel with a block per row (grid-stride over
// rows beyond maxBlocks).
func perRow(rows int64, block int) launch {
	return launch{grid: [3]int{int(max(1, min(rows, maxBlocks))), 1, 1}, block: [3]int{block, 1, 1}}
}

// perWarp is the launch of a kernel with a warp per item.
func perWarp(items int64) launch { return gridStride(items*32, warpsBlock) }

// attentionLaunch is attention_probs' launch: a block per 32 query rows of
// one head of one batch element.
func attentionLaunch(B, T, NH int) launch {
	return launch{grid: [3]int{(T + apRows - 1) / apRows, NH, B}, block: [3]int{256, 1, 1}}
}

// gemmLaunch is gemm_generic's launch: a block per 64×64 tile of C, the
// batch on z.
func gemmLaunch(M, N, batch int) launch {
	return launch{grid: [3]int{(N + gemmTile - 1) / gemmTile, (M + gemmTile - 1) / gemmTile, batch}, block: [3]int{256, 1, 1}}
}

// columnSumsLaunch is column_sums' launch: a block of 32 channels × 32 row
// groups per 32 channels.
func columnSumsLaunch(C int) launch {
	return launch{grid: [3]int{(C + 31) / 32, 1, 1}, block: [3]int{32, csRows, 1}}
}

// blasCall is one cuBLAS GEMM in cuBLAS's column-major terms. A row-major
// matrix X (r×c, row stride ld) is, read column-major, Xᵀ (c×r, leading
// dimension ld). So C = op(A)·op(B) in row-major is Cᵀ = op(B)ᵀ·op(A)ᵀ in
// column-major: cuBLAS computes C' (N×M) = op(B')·op(A') with A' = our B,
// B' = our A, the transposes kept, m = N, n = M, and the leading
// dimensions and strides swapped with the operands.
type blasCall struct {
	transA, transB            bool // cuBLAS's transa, transb
	m, n, k                   int
	a, b, c                   *cuda.Buffer // cuBLAS's A, B, C (A is MatMul.B, B is MatMul.A)
	lda, ldb, ldc             int
	strideA, strideB, strideC int64
	batch                     int
	alpha, beta               float32
}

// columnMajor maps a checked, normalized MatMul (what cuda.MatMul.Checked
// returns) to its cuBLAS call.
func columnMajor(n cuda.MatMul) blasCall {
	return blasCall{
		transA: n.TransB, transB: n.TransA,
		m: n.N, n: n.M, k: n.K,
		a: n.B, b: n.A, c: n.C,
		lda: n.LDB, ldb: n.LDA, ldc: n.LDC,
		strideA: int64(n.StrideB), strideB: int64(n.StrideA), strideC: int64(n.StrideC),
		batch: n.Batch, alpha: n.Alpha, beta: n.Beta,
	}
}

// check verifies what cuBLAS requires of the call: 32-bit sizes, and
// leading dimensions at least the rows of each column-major operand.
func (c blasCall) check() error {
	for _, v := range []struct {
		name string
		v    int
	}{{"m", c.m}, {"n", c.n}, {"k", c.k}, {"lda", c.lda}, {"ldb", c.ldb}, {"ldc", c.ldc}, {"batch", c.batch}} {
		if v.v < 1 || v.v > math.MaxInt32 {
			return fmt.Errorf("cuda: MatMul: cuBLAS's %s would be %d, outside [1, 2³¹)", v.name, v.v)
		}
	}
	rowsA, rowsB := c.m, c.k
	if c.transA {
		rowsA = c.k
	}
	if c.transB {
		rowsB = c.n
	}
	switch {
	case c.lda < rowsA:
		return fmt.Errorf("cuda: MatMul: cuBLAS's lda %d is below the %d rows of its A", c.lda, rowsA)
	case c.ldb < rowsB:
		return fmt.Errorf("cuda: MatMul: cuBLAS's ldb %d is below the %d rows of its B", c.ldb, rowsB)
	case c.ldc < c.m:
		return fmt.Errorf("cuda: MatMul: cuBLAS's ldc %d is below the %d rows of its C", c.ldc, c.m)
	}
	return nil
}

// cuBLAS's type codes (library_types.h, cublas_api.h), as our own header
// (blas.go) declares them.
const (
	cudaR32F        = 0
	cudaR64F        = 1
	cudaR16F        = 2
	cudaR16BF       = 14
	cublasCompute32 = 68 // CUBLAS_COMPUTE_32F
	cublasCompute64 = 70 // CUBLAS_COMPUTE_64F
)

// blasTypes returns cuBLAS's data types for a product of a and b into c,
// and ok = false for combinations cublasGemmEx does not take (A and B of
// different types, a 16-bit product into the other 16-bit type, fp64 with
// anything else), which go to gemm_generic instead. 16-bit products
// accumulate in fp32 (CUBLAS_COMPUTE_32F); fp32 products are plain fp32
// (no TF32), fp64 ones fp64.
func blasTypes(a, b, c cuda.DType) (ab, ct, compute int, ok bool) {
	if a != b {
		return 0, 0, 0, false
	}
	switch {
	case a == cuda.F16 && (c == cuda.F16 || c == cuda.F32):
		return cudaR16F, cudaCode(c), cublasCompute32, true
	case a == cuda.BF16 && (c == cuda.BF16 || c == cuda.F32):
		return cudaR16BF, cudaCode(c), cublasCompute32, true
	case a == cuda.F32 && c == cuda.F32:
		return cudaR32F, cudaR32F, cublasCompute32, true
	case a == cuda.F64 && c == cuda.F64:
		return cudaR64F, cudaR64F, cublasCompute64, true
	}
	return 0, 0, 0, false
}

func cudaCode(d cuda.DType) int {
	switch d {
	case cuda.F16:
		return cudaR16F
	case cuda.BF16:
		return cudaR16BF
	case cuda.F64:
		return cudaR64F
	}
	return cudaR32F
}

// cublasMajors are the cuBLAS majors trainmem loads, newest first.
var cublasMajors = []string{"13", "12", "11"}

// cublasCandidates lists the cuBLAS libraries to try, in order: the file
// TRAINMEM_CUBLAS names, alone, when it is set; else libcublas.so.13, .12
// and .11 by the dynamic loader's own search (LD_LIBRARY_PATH, ldconfig's
// cache), then each major in the NVIDIA wheels that pip installs with
// PyTorch (site-packages/nvidia/cublas/lib) under $VIRTUAL_ENV,
// $CONDA_PREFIX, ~/.local and the system's Python directories, then in
// $CONDA_PREFIX/lib and /usr/local/cuda*/lib64.
func cublasCandidates(getenv func(string) string, glob func(string) ([]string, error)) []string {
	if p := getenv("TRAINMEM_CUBLAS"); p != "" {
		return []string{p}
	}
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, m := range cublasMajors {
		add("libcublas.so." + m)
	}
	var roots []string
	for _, env := range []string{"VIRTUAL_ENV", "CONDA_PREFIX"} {
		if v := getenv(env); v != "" {
			roots = append(roots, v+"/lib/python3*/site-packages")
		}
	}
	if home := getenv("HOME"); home != "" {
		roots = append(roots, home+"/.local/lib/python3*/site-packages")
	}
	roots = append(roots, "/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
		"/usr/lib/python3/dist-packages", "/usr/lib/python3*/site-packages", "/opt/conda/lib/python3*/site-packages")
	var dirs []string
	for _, r := range roots {
		dirs = append(dirs, r+"/nvidia/cublas/lib")
	}
	if v := getenv("CONDA_PREFIX"); v != "" {
		dirs = append(dirs, v+"/lib")
	}
	dirs = append(dirs, "/usr/local/cuda/lib64", "/usr/local/cuda-*/lib64")
	for _, m := range cublasMajors {
		for _, d := range dirs {
			found, _ := glob(d + "/libcublas.so." + m)
			for _, f := range found {
				add(f)
			}
		}
	}
	return out
}

// cublasWorkspaceBytes is the workspace cuBLAS is given (cublasSetWorkspace)
// from the caching allocator, tagged workspace: NVIDIA's recommendation,
// 32 MiB for Hopper and newer, 4 MiB before.
func cublasWorkspaceBytes(major int) int64 {
	if major >= 9 {
		return 32 << 20
	}
	return 4 << 20
}

// gpuPeak is a card's dense peak in FLOP/s for products stored as dt:
// tensor-core fp16/bf16 for 16-bit storage, the fp32 units (no TF32, which
// cuBLAS is not allowed) for fp32. Datasheet numbers, without sparsity.
// TRAINMEM_PEAK_GFLOPS overrides them. how says which entry was used.
func gpuPeak(name string, major, minor int, dt cuda.DType) (flops float64, how string) {
	switch v, ok, err := cuda.PeakOverride(); {
	case err != nil:
		return 0, err.Error()
	case ok:
		return v * 1e9, cuda.PeakEnv + "=" + os.Getenv(cuda.PeakEnv)
	}
	if g, ok := cuda.GPUByName(name); ok {
		if f := g.PeakFLOPS(dt); f > 0 {
			kind := "dense fp16/bf16 tensor-core peak"
			if dt == cuda.F32 {
				kind = "fp32 peak without TF32"
			}
			return f, fmt.Sprintf("%s %s, %g TFLOP/s (%s)", g.Name, kind, f/1e12, g.Source)
		}
		return 0, fmt.Sprintf("%s: no %s peak in the table", g.Name, dt)
	}
	return 0, fmt.Sprintf("unknown peak for %q (compute capability %d.%d); set TRAINMEM_PEAK_GFLOPS", name, major, minor)
}
