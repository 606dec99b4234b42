package gpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"trainmem/cuda"
	"trainmem/cuda/host"
)

func TestChoosePTX(t *testing.T) {
	for _, tc := range []struct {
		major, minor, want int
		err                string
	}{
		{8, 0, 80, ""}, {8, 6, 80, ""}, {8, 9, 80, ""}, // A100, RTX 30xx, L4/L40S
		{9, 0, 90, ""},                   // H100, H200
		{10, 0, 90, ""}, {12, 0, 90, ""}, // Blackwell: JIT from compute_90
		{7, 5, 0, "below 8.0"}, {6, 1, 0, "bf16"},
	} {
		got, err := choosePTX(tc.major, tc.minor, PTXTargets)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("choosePTX(%d.%d) = %d, %v; want an error mentioning %q", tc.major, tc.minor, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("choosePTX(%d.%d) = %d, %v; want %d", tc.major, tc.minor, got, err, tc.want)
		}
	}
}

// h100 are an H100's launch limits (cuDeviceGetAttribute) for a kernel
// that can use 1024 threads.
var h100 = launchLimits{maxThreads: 1024, maxBlock: [3]int{1024, 1024, 64},
	maxGrid: [3]int{math.MaxInt32, 65535, 65535}, maxSmem: 48 << 10}

func TestLaunchGeometry(t *testing.T) {
	// Grid-stride launches cover n with at most maxBlocks blocks.
	for _, n := range []int64{0, 1, 255, 256, 257, 1 << 20, 50257 * 16384, 1 << 40} {
		l := gridStride(n, elemBlock)
		if err := l.check("elem", h100); err != nil {
			t.Errorf("gridStride(%d): %v", n, err)
		}
		if got := int64(l.grid[0]) * int64(l.block[0]); n > 0 && got < min(n, maxBlocks*elemBlock) {
			t.Errorf("gridStride(%d) launches %d threads", n, got)
		}
	}
	// GPT-2 XL at B = 32, T = 1024 fits every launch.
	B, T, C, NH, V := 32, 1024, 1600, 25, 50257
	for name, l := range map[string]launch{
		"attention_probs": attentionLaunch(B, T, NH),
		"gemm_generic":    gemmLaunch(T, C/NH, NH),
		"column_sums":     columnSumsLaunch(4 * C),
		"rows":            perRow(int64(B*T), rowBlock),
		"warps":           perWarp(int64(B * T)),
		"logits":          gridStride(int64(B*T)*int64(V), elemBlock),
	} {
		if err := l.check(name, h100); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Limits are enforced, each with its reason.
	for _, tc := range []struct {
		l    launch
		lim  launchLimits
		want string
	}{
		{attentionLaunch(70000, 64, 12), h100, "grid z dimension 70000"},
		{gemmLaunch(65536*64+1, 64, 1), h100, "grid y dimension 65537"},
		{launch{grid: [3]int{1, 1, 1}, block: [3]int{1024, 1, 1}}, launchLimits{maxThreads: 512, maxBlock: h100.maxBlock, maxGrid: h100.maxGrid, maxSmem: h100.maxSmem}, "1024 threads"},
		{launch{grid: [3]int{1, 1, 1}, block: [3]int{32, 32, 1}, smem: 40 << 10}, launchLimits{maxThreads: 1024, maxBlock: h100.maxBlock, maxGrid: h100.maxGrid, maxSmem: 48 << 10, staticSmem: 10 << 10}, "shared memory"},
		{launch{grid: [3]int{0, 1, 1}, block: [3]int{1, 1, 1}}, h100, "at least 1"},
	} {
		err := tc.l.check("k", tc.lim)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("check(%+v) = %v, want an error mentioning %q", tc.l, err, tc.want)
		}
	}
}

// colMajorGemm is cuBLAS's definition, on float64 slices:
// C = alpha·op(A)·op(B) + beta·C, column-major, element (i, j) of X at
// X[i + j·ld], op(X) = Xᵀ when trans.
func colMajorGemm(c blasCall, a, b, cm []float64) {
	at := func(x []float64, off int64, ld int, trans bool, i, j int) float64 {
		if trans {
			i, j = j, i
		}
		return x[off+int64(i)+int64(j)*int64(ld)]
	}
	for z := 0; z < c.batch; z++ {
		oa, ob, oc := int64(z)*c.strideA, int64(z)*c.strideB, int64(z)*c.strideC
		for i := 0; i < c.m; i++ {
			for j := 0; j < c.n; j++ {
				s := 0.0
				for p := 0; p < c.k; p++ {
					s += at(a, oa, c.lda, c.transA, i, p) * at(b, ob, c.ldb, c.transB, p, j)
				}
				idx := oc + int64(i) + int64(j)*int64(c.ldc)
				v := float64(c.alpha) * s
				if c.beta != 0 {
					v += float64(c.beta) * cm[idx]
				}
				cm[idx] = v
			}
		}
	}
}

// rowMajorMatMul is MatMul's definition (device.go), on float64 slices.
func rowMajorMatMul(n cuda.MatMul, a, b, c []float64) {
	for z := 0; z < n.Batch; z++ {
		for i := 0; i < n.M; i++ {
			for j := 0; j < n.N; j++ {
				s := 0.0
				for p := 0; p < n.K; p++ {
					ai, bi := z*n.StrideA+i*n.LDA+p, z*n.StrideB+p*n.LDB+j
					if n.TransA {
						ai = z*n.StrideA + p*n.LDA + i
					}
					if n.TransB {
						bi = z*n.StrideB + j*n.LDB + p
					}
					av, bv := a[ai], b[bi]
					s += av * bv
				}
				idx := z*n.StrideC + i*n.LDC + j
				v := float64(n.Alpha) * s
				if n.Beta != 0 {
					v += float64(n.Beta) * c[idx]
				}
				c[idx] = v
			}
		}
	}
}

// TestColumnMajorMapping checks that the cuBLAS call columnMajor makes
// computes exactly what MatMul means, for every transpose combination,
// padded leading dimensions, strided batches and scalings (the shapes of
// the conformance suite and of the executor's linear layers).
func TestColumnMajorMapping(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	h, err := host.New(host.Options{BLAS: host.BLASGo})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	type shape struct{ M, N, K, lda, ldb, ldc, sA, sB, sC, batch int }
	shapes := []shape{
		{13, 17, 19, 0, 0, 0, 0, 0, 0, 1},
		{9, 11, 7, 3, 5, 2, 0, 0, 0, 1},
		{6, 5, 8, 1, 2, 3, 7, 9, 11, 3},
		{64, 1, 32, 0, 0, 0, 0, 0, 0, 2},
	}
	for _, tA := range []bool{false, true} {
		for _, tB := range []bool{false, true} {
			for _, s := range shapes {
				for _, ab := range [][2]float32{{1, 0}, {0.5, -0.75}} {
					m := cuda.MatMul{TransA: tA, TransB: tB, M: s.M, N: s.N, K: s.K, Batch: s.batch, Alpha: ab[0], Beta: ab[1]}
					ar, ac, br, bc := m.Dims()
					m.LDA, m.LDB, m.LDC = ac+s.lda, bc+s.ldb, s.N+s.ldc
					m.StrideA, m.StrideB, m.StrideC = ar*m.LDA+s.sA, br*m.LDB+s.sB, s.M*m.LDC+s.sC
					na := cuda.MatMulSpan(m.Batch, m.StrideA, ar, m.LDA, ac)
					nb := cuda.MatMulSpan(m.Batch, m.StrideB, br, m.LDB, bc)
					nc := cuda.MatMulSpan(m.Batch, m.StrideC, m.M, m.LDC, m.N)
					a, b, c := randSlice(rng, na), randSlice(rng, nb), randSlice(rng, nc)
					want := append([]float64(nil), c...)
					rowMajorMatMul(m, a, b, want)
					call := columnMajor(m)
					if err := call.check(); err != nil {
						t.Fatalf("%+v: %v", m, err)
					}
					got := append([]float64(nil), c...)
					colMajorGemm(call, b, a, got) // cuBLAS's A is our B
					for i := range want {
						if math.Abs(got[i]-want[i]) > 1e-12*(1+math.Abs(want[i])) {
							t.Fatalf("%s: element %d: cuBLAS mapping gives %g, MatMul means %g", describe(m), i, got[i], want[i])
						}
					}
					// And the host device's own MatMul agrees.
					host := hostMatMul(t, h, m, a, b, c)
					for i := range want {
						if math.Abs(host[i]-got[i]) > 1e-12*(1+math.Abs(got[i])) {
							t.Fatalf("%s: element %d: cuBLAS mapping gives %g, Host.MatMul %g", describe(m), i, got[i], host[i])
						}
					}
				}
			}
		}
	}
}

// hostMatMul runs m on the host device in float64 and returns C.
func hostMatMul(t *testing.T, h *host.Device, m cuda.MatMul, a, b, c []float64) []float64 {
	t.Helper()
	up := func(v []float64) *cuda.Buffer {
		buf, err := h.Alloc(cuda.Temporaries, cuda.F64, len(v))
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Upload(buf, v); err != nil {
			t.Fatal(err)
		}
		return buf
	}
	m.A, m.B, m.C = up(a), up(b), up(c)
	defer h.Free(m.A)
	defer h.Free(m.B)
	defer h.Free(m.C)
	if err := h.MatMul(m); err != nil {
		t.Fatal(err)
	}
	out := make([]float64, len(c))
	if err := h.Download(out, m.C); err != nil {
		t.Fatal(err)
	}
	return out
}

func describe(m cuda.MatMul) string {
	return fmt.Sprintf("tA=%t tB=%t %dx%dx%d lds %d,%d,%d strides %d,%d,%d batch %d", m.TransA, m.TransB, m.M, m.N, m.K,
		m.LDA, m.LDB, m.LDC, m.StrideA, m.StrideB, m.StrideC, m.Batch)
}

func randSlice(rng *rand.Rand, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64()
	}
	return v
}

func TestColumnMajorLinearLayer(t *testing.T) {
	// The executor's forward linear layer, y = x·Wᵀ: x (N×In), W (Out×In).
	N, In, Out := 4096, 768, 2304
	m, err := cuda.MatMul{TransB: true, M: N, N: Out, K: In,
		A: cuda.NewBuffer(cuda.BF16, N*In, 0, 0, nil, nil), B: cuda.NewBuffer(cuda.BF16, Out*In, 0, 1<<30, nil, nil),
		C: cuda.NewBuffer(cuda.BF16, N*Out, 0, 2<<30, nil, nil), Alpha: 1}.Checked()
	if err != nil {
		t.Fatal(err)
	}
	c := columnMajor(m)
	// cuBLAS: C' (Out×N) = op(W stored, read column-major: In×Out)ᵀ · x' (In×N).
	if !c.transA || c.transB || c.m != Out || c.n != N || c.k != In || c.lda != In || c.ldb != In || c.ldc != Out || c.a != m.B || c.b != m.A {
		t.Errorf("columnMajor(linear) = %+v", c)
	}
	if err := c.check(); err != nil {
		t.Error(err)
	}
	c.lda = 10
	if err := c.check(); err == nil || !strings.Contains(err.Error(), "lda 10") {
		t.Errorf("a short lda passed: %v", err)
	}
}

func TestBLASTypes(t *testing.T) {
	for _, tc := range []struct {
		a, b, c     cuda.DType
		ok          bool
		ab, ct, cmp int
	}{
		{cuda.F16, cuda.F16, cuda.F16, true, cudaR16F, cudaR16F, cublasCompute32},
		{cuda.F16, cuda.F16, cuda.F32, true, cudaR16F, cudaR32F, cublasCompute32},
		{cuda.BF16, cuda.BF16, cuda.BF16, true, cudaR16BF, cudaR16BF, cublasCompute32},
		{cuda.BF16, cuda.BF16, cuda.F32, true, cudaR16BF, cudaR32F, cublasCompute32},
		{cuda.F32, cuda.F32, cuda.F32, true, cudaR32F, cudaR32F, cublasCompute32},
		{cuda.F64, cuda.F64, cuda.F64, true, cudaR64F, cudaR64F, cublasCompute64},
		{cuda.F32, cuda.BF16, cuda.BF16, false, 0, 0, 0}, // attention's dS·K: gemm_generic
		{cuda.F16, cuda.F16, cuda.BF16, false, 0, 0, 0},
		{cuda.F32, cuda.F32, cuda.F16, false, 0, 0, 0},
		{cuda.F64, cuda.F64, cuda.F32, false, 0, 0, 0},
	} {
		ab, ct, cmp, ok := blasTypes(tc.a, tc.b, tc.c)
		if ok != tc.ok || ab != tc.ab || ct != tc.ct || cmp != tc.cmp {
			t.Errorf("blasTypes(%s, %s, %s) = %d, %d, %d, %t; want %d, %d, %d, %t", tc.a, tc.b, tc.c, ab, ct, cmp, ok, tc.ab, tc.ct, tc.cmp, tc.ok)
		}
	}
}

func TestGPUPeak(t *testing.T) {
	t.Setenv("TRAINMEM_PEAK_GFLOPS", "")
	for _, tc := range []struct {
		name string
		dt   cuda.DType
		want float64
	}{
		{"NVIDIA H200", cuda.BF16, 989e12},
		{"NVIDIA H100 80GB HBM3", cuda.F16, 989e12},
		{"NVIDIA H100 80GB HBM3", cuda.F32, 67e12},
		{"NVIDIA H100 PCIe", cuda.BF16, 756e12},
		{"NVIDIA A100-SXM4-80GB", cuda.BF16, 312e12},
		{"NVIDIA A100-PCIE-40GB", cuda.F32, 19.5e12},
		{"NVIDIA L4", cuda.BF16, 121e12},
		{"NVIDIA GeForce RTX 4090", cuda.BF16, 0},
	} {
		got, how := gpuPeak(tc.name, 9, 0, tc.dt)
		if got != tc.want || how == "" {
			t.Errorf("gpuPeak(%q, %s) = %g (%s), want %g", tc.name, tc.dt, got, how, tc.want)
		}
	}
	t.Setenv("TRAINMEM_PEAK_GFLOPS", "1000")
	if got, _ := gpuPeak("NVIDIA GeForce RTX 4090", 8, 9, cuda.BF16); got != 1e12 {
		t.Errorf("TRAINMEM_PEAK_GFLOPS=1000 gives %g", got)
	}
}

func TestCUBLASWorkspace(t *testing.T) {
	if cublasWorkspaceBytes(9) != 32<<20 || cublasWorkspaceBytes(8) != 4<<20 || cublasWorkspaceBytes(10) != 32<<20 {
		t.Error("cuBLAS workspace: want 32 MiB from Hopper on, 4 MiB before")
	}
}

// cuBLAS is looked for by the loader's path first, then in the NVIDIA
// wheels pip installs with PyTorch and in CUDA's own directories, newest
// major first; TRAINMEM_CUBLAS alone replaces the search.
func TestCUBLASCandidates(t *testing.T) {
	env := map[string]string{"HOME": "/home/u", "VIRTUAL_ENV": "/venv"}
	files := map[string][]string{
		"/venv/lib/python3*/site-packages/nvidia/cublas/lib/libcublas.so.12": {"/venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.12"},
		"/usr/local/cuda-*/lib64/libcublas.so.13":                            {"/usr/local/cuda-13.0/lib64/libcublas.so.13"},
	}
	glob := func(p string) ([]string, error) { return files[p], nil }
	got := cublasCandidates(func(k string) string { return env[k] }, glob)
	want := []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so.11",
		"/usr/local/cuda-13.0/lib64/libcublas.so.13", "/venv/lib/python3.11/site-packages/nvidia/cublas/lib/libcublas.so.12"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("candidates\n got  %v\n want %v", got, want)
	}
	env["TRAINMEM_CUBLAS"] = "/opt/x/libcublas.so"
	if got := cublasCandidates(func(k string) string { return env[k] }, glob); fmt.Sprint(got) != "[/opt/x/libcublas.so]" {
		t.Errorf("with TRAINMEM_CUBLAS: %v", got)
	}
}
