package host

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"trainmem/cuda"
	"trainmem/cuda/alloc"
	"trainmem/cuda/shape"
)

// backends lists the GEMM backends this machine has: gonum always,
// OpenBLAS when it loads.
func backends(t testing.TB) []string {
	bs := []string{BLASGo}
	if err := OpenBLASAvailable(); err == nil {
		bs = append(bs, BLASOpenBLAS)
	} else {
		t.Logf("OpenBLAS not available: %v", err)
	}
	return bs
}

func newTestHost(t testing.TB, opts Options) *Device {
	t.Helper()
	h, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// TestGemmBackends checks each backend's sgemm and dgemm against a float64
// triple loop, for every transpose combination, padded leading dimensions,
// and alpha/beta, on shapes up to ones the backends split over threads.
func TestGemmBackends(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, name := range backends(t) {
		be, _, err := chooseBLAS(name, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, sz := range [][3]int{{1, 1, 1}, {5, 7, 3}, {130, 257, 300}} {
			for _, tA := range []bool{false, true} {
				for _, tB := range []bool{false, true} {
					m, n, k := sz[0], sz[1], sz[2]
					ar, ac, br, bc := m, k, k, n
					if tA {
						ar, ac = k, m
					}
					if tB {
						br, bc = n, k
					}
					lda, ldb, ldc := ac+2, bc+1, n+3
					a := make([]float64, (ar-1)*lda+ac)
					b := make([]float64, (br-1)*ldb+bc)
					c := make([]float64, (m-1)*ldc+n)
					for _, s := range [][]float64{a, b, c} {
						for i := range s {
							s[i] = rng.NormFloat64()
						}
					}
					alpha, beta := 0.75, -1.5
					want := append([]float64(nil), c...)
					for i := 0; i < m; i++ {
						for j := 0; j < n; j++ {
							s := 0.0
							for p := 0; p < k; p++ {
								var av, bv float64
								if tA {
									av = a[p*lda+i]
								} else {
									av = a[i*lda+p]
								}
								if tB {
									bv = b[j*ldb+p]
								} else {
									bv = b[p*ldb+j]
								}
								s += av * bv
							}
							want[i*ldc+j] = alpha*s + beta*c[i*ldc+j]
						}
					}
					c64 := append([]float64(nil), c...)
					be.dgemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c64, ldc)
					a32, b32, c32 := to32(a), to32(b), to32(c)
					be.sgemm(tA, tB, m, n, k, float32(alpha), a32, lda, b32, ldb, float32(beta), c32, ldc)
					what := fmt.Sprintf("%s %dx%dx%d tA=%t tB=%t", be.name(), m, n, k, tA, tB)
					checkClose(t, what+" dgemm", c64, want, 1e-12)
					checkClose(t, what+" sgemm", from32(c32), want, 1e-5)
				}
			}
		}
	}
}

func to32(s []float64) []float32 {
	o := make([]float32, len(s))
	for i, v := range s {
		o[i] = float32(v)
	}
	return o
}

func from32(s []float32) []float64 {
	o := make([]float64, len(s))
	for i, v := range s {
		o[i] = float64(v)
	}
	return o
}

// checkClose wants |got-want| ≤ tol·max|want| elementwise (the fp32 inputs
// were rounded, so the error is relative to the magnitude of the sums).
func checkClose(t *testing.T, what string, got, want []float64, tol float64) {
	t.Helper()
	scale := 0.0
	for _, w := range want {
		scale = math.Max(scale, math.Abs(w))
	}
	worst := 0.0
	for i := range want {
		worst = math.Max(worst, math.Abs(got[i]-want[i]))
	}
	if worst > tol*scale || math.IsNaN(worst) {
		t.Errorf("%s: max |diff| %.3g > %.3g·%.3g", what, worst, tol, scale)
	}
}

// kernelRun runs a training-like sequence of kernels on a host device and
// returns every output's bits.
func kernelRun(t *testing.T, opts Options, dt cuda.DType) [][]uint64 {
	h := newTestHost(t, opts)
	rng := rand.New(rand.NewPCG(11, 12))
	B, T, C, NH, V := 2, 48, 96, 4, 700
	N := B * T
	st := cuda.F32
	if dt == cuda.F64 {
		st = cuda.F64
	}
	buf := func(dt cuda.DType, n int, random bool) *cuda.Buffer {
		b, err := h.Alloc(cuda.Temporaries, dt, n)
		if err != nil {
			t.Fatal(err)
		}
		v := make([]float64, n)
		if random {
			for i := range v {
				v[i] = rng.NormFloat64()
			}
		}
		if err := h.Upload(b, v); err != nil {
			t.Fatal(err)
		}
		return b
	}
	ids := func(n, V int) *cuda.Buffer {
		b, _ := h.Alloc(cuda.Temporaries, cuda.I32, n)
		v := make([]int32, n)
		for i := range v {
			v[i] = int32(rng.IntN(V))
		}
		h.Upload(b, v)
		return b
	}
	tokens, targets := ids(N, V), ids(N, V)
	wte, wpe := buf(dt, V*C, true), buf(dt, T*C, true)
	x, stats, y := buf(dt, N*C, false), buf(st, 2*N, false), buf(dt, N*C, false)
	w, bias := buf(dt, C, true), buf(dt, C, true)
	qkvW, qkv := buf(dt, 3*C*C, true), buf(dt, N*3*C, false)
	p, att := buf(dt, B*NH*T*T, false), buf(dt, N*C, false)
	logits, loss := buf(dt, N*V, false), buf(st, 1, false)
	dlogits, dloss := buf(dt, N*V, false), buf(st, 1, false)
	dx, dqkv := buf(dt, N*C, false), buf(dt, N*3*C, false)
	dw, dwte := buf(dt, C, false), buf(dt, V*C, false)
	g := buf(dt, N*C, false)
	ascratch, cscratch := buf(cuda.F32, cuda.AttentionScratchLen(T, C, NH, NH), false), buf(cuda.F32, cuda.CrossEntropyScratchLen(N), false)
	master, m, v := buf(st, V*C, true), buf(st, V*C, false), buf(st, V*C, false)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.Fill(dloss, 1))
	must(h.Embedding(x, tokens, wte, wpe, B, T, C, cuda.VocabPart{}))
	must(h.NormStats(cuda.NormLayer, stats, x, N, C, 1e-5))
	must(h.Norm(cuda.NormLayer, y, x, stats, w, bias, N, C))
	must(h.MatMul(cuda.MatMul{TransB: true, M: N, N: 3 * C, K: C, A: y, B: qkvW, C: qkv, Alpha: 1}))
	must(h.AttentionProbs(p, qkv, B, T, C, NH, NH))
	must(h.AttentionOut(att, qkv, p, B, T, C, NH, NH))
	must(h.GELU(g, att))
	must(h.MatMul(cuda.MatMul{TransB: true, M: N, N: V, K: C, A: g, B: wte, C: logits, Alpha: 1}))
	must(h.CrossEntropy(loss, logits, targets, cscratch, N, V))
	must(h.CrossEntropyBackward(dlogits, dloss, logits, targets, N, V))
	must(h.MatMul(cuda.MatMul{M: N, N: C, K: V, A: dlogits, B: wte, C: dx, Alpha: 1}))
	must(h.GELUBackward(dx, dx, att))
	must(h.AttentionBackward(dqkv, dx, qkv, p, ascratch, B, T, C, NH, NH))
	must(h.NormBackwardX(cuda.NormLayer, dx, dx, x, stats, w, N, C))
	must(h.NormBackwardW(cuda.NormLayer, dw, y, x, stats, N, C))
	must(h.EmbeddingBackwardTokens(dwte, dx, tokens, B, T, C, cuda.VocabPart{}, false))
	must(h.Adam(wte, dwte, master, m, v, cuda.AdamArgs{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1, GradScale: 1}))
	var out [][]uint64
	for _, b := range []*cuda.Buffer{x, stats, y, qkv, p, att, g, logits, loss, dlogits, dx, dqkv, dw, dwte, wte, master, m, v} {
		vals := make([]float64, b.Len)
		must(h.Download(vals, b))
		bits := make([]uint64, len(vals))
		for i, f := range vals {
			bits[i] = math.Float64bits(f)
		}
		out = append(out, bits)
	}
	return out
}

func sameBits(a, b [][]uint64) (int, int, bool) {
	for i := range a {
		for j := range a[i] {
			if a[i][j] != b[i][j] {
				return i, j, false
			}
		}
	}
	return 0, 0, true
}

// TestHostDeterministic runs the same kernels twice and wants the same
// bits; and, with the pure-Go BLAS, the same bits for any thread count
// (every output element is made by one goroutine in a fixed order).
func TestHostDeterministic(t *testing.T) {
	for _, be := range backends(t) {
		for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.F64} {
			t.Run(be+"/"+dt.String(), func(t *testing.T) {
				a := kernelRun(t, Options{Threads: 2, BLAS: be}, dt)
				b := kernelRun(t, Options{Threads: 2, BLAS: be}, dt)
				if i, j, ok := sameBits(a, b); !ok {
					t.Fatalf("two runs differ in output %d element %d", i, j)
				}
				if be != BLASGo {
					return
				}
				for _, threads := range []int{1, 3} {
					c := kernelRun(t, Options{Threads: threads, BLAS: be}, dt)
					if i, j, ok := sameBits(a, c); !ok {
						t.Errorf("%d threads differ from 2 in output %d element %d", threads, i, j)
					}
				}
			})
		}
	}
}

// TestShapeMatchesHost runs one allocation schedule on Shape and on Host:
// the statistics must be identical, field for field.
func TestShapeMatchesHost(t *testing.T) {
	s := shape.New(0)
	h := newTestHost(t, Options{BLAS: BLASGo})
	rng := rand.New(rand.NewPCG(5, 6))
	devs := []cuda.Device{s, h}
	live := make([][]*cuda.Buffer, len(devs))
	for step := 0; step < 2000; step++ {
		if len(live[0]) > 0 && rng.IntN(100) < 45 {
			i := rng.IntN(len(live[0]))
			for d := range devs {
				devs[d].Free(live[d][i])
				live[d] = append(live[d][:i], live[d][i+1:]...)
			}
			continue
		}
		cat := cuda.Category(rng.IntN(int(cuda.NumCategories)))
		dt := cuda.DType(rng.IntN(5))
		n := rng.IntN(1 << uint(rng.IntN(23)))
		for d := range devs {
			b, err := devs[d].Alloc(cat, dt, n)
			if err != nil {
				t.Fatal(err)
			}
			live[d] = append(live[d], b)
		}
		if step%500 == 499 {
			for _, d := range devs {
				d.ResetPeakStats()
				if err := d.EmptyCache(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if ss, hs := s.Stats(), h.Stats(); ss != hs {
		t.Errorf("stats differ:\nshape %+v\nhost  %+v", ss, hs)
	}
	// The same segments, split the same way, at different addresses.
	layout := func(snap []alloc.SegmentInfo) string {
		var sb strings.Builder
		for _, s := range snap {
			fmt.Fprintf(&sb, "segment %d (%d bytes, small %t):", s.Seq, s.Size, s.Small)
			for _, b := range s.Blocks {
				fmt.Fprintf(&sb, " +%d %d %t %s;", b.Addr-s.Base, b.Size, b.Allocated, b.Cat)
			}
			sb.WriteByte('\n')
		}
		return sb.String()
	}
	if sl, hl := layout(s.Allocator().Snapshot()), layout(h.Allocator().Snapshot()); sl != hl {
		t.Errorf("segment layouts differ:\nshape\n%s\nhost\n%s", sl, hl)
	}
}

func TestShapeOutOfMemory(t *testing.T) {
	s := shape.New(100 << 20)
	if !strings.Contains(s.Name(), "100.00 MiB") || s.Computes() {
		t.Errorf("Name %q, Computes %t", s.Name(), s.Computes())
	}
	a, err := s.Alloc(cuda.Params, cuda.F32, 15<<20) // 60 MiB
	if err != nil {
		t.Fatal(err)
	}
	free, total, err := s.MemInfo()
	if err != nil || total != 100<<20 || free != 40<<20 {
		t.Errorf("MemInfo = %d, %d, %v; want 40 MiB of 100 MiB", free, total, err)
	}
	_, err = s.Alloc(cuda.Activations, cuda.F16, 25<<20) // 50 MiB
	var oom *cuda.OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, cuda.ErrNoMemory) {
		t.Fatalf("Alloc beyond capacity: %v, want an *OutOfMemoryError", err)
	}
	for _, want := range []string{"shape (100.00 MiB)", "50.00 MiB", "activations", "total capacity of 100.00 MiB",
		"40.00 MiB is free", "params 60.00 MiB"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	// 70 MiB after freeing the 60: the cached segment does not fit it, a
	// new one does not fit the card beside it; the retry gives the cached
	// one back and succeeds.
	s.Free(a)
	if _, err := s.Alloc(cuda.Activations, cuda.F16, 35<<20); err != nil {
		t.Errorf("after freeing: %v", err)
	}
	if st := s.Stats(); st.NumAllocRetries != 2 || st.NumOOMs != 1 {
		t.Errorf("retries %d, OOMs %d; want 2, 1", st.NumAllocRetries, st.NumOOMs)
	}
}

func TestHostCapacityAndClose(t *testing.T) {
	h := newTestHost(t, Options{Capacity: 64 << 20, BLAS: BLASGo})
	b, err := h.Alloc(cuda.Params, cuda.F32, 10<<20) // 40 MiB
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Alloc(cuda.Grads, cuda.F32, 10<<20); !errors.Is(err, cuda.ErrNoMemory) {
		t.Errorf("second 40 MiB on a 64 MiB host: %v, want out of memory", err)
	}
	if free, total, _ := h.MemInfo(); total != 64<<20 || free != 24<<20 {
		t.Errorf("MemInfo = %d, %d; want 24 MiB free of 64 MiB", free, total)
	}
	// A buffer of another device is not host memory.
	sb, _ := shape.New(0).Alloc(cuda.Params, cuda.F32, 10)
	if err := h.Fill(sb, 1); err == nil || !strings.Contains(err.Error(), "not host memory") {
		t.Errorf("Fill of a shape buffer on the host: %v", err)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if err := h.Fill(b.View(0, 4), 1); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Fill after Close: %v, want a closed-device error", err)
	}
	if _, err := h.Alloc(cuda.Params, cuda.F32, 1); err == nil {
		t.Error("Alloc after Close succeeded")
	}
}

func TestHostOptions(t *testing.T) {
	h := newTestHost(t, Options{Threads: 3, BLAS: BLASGo})
	if h.Name() != "host (3 threads, gonum)" || h.Threads() != 3 {
		t.Errorf("Name %q", h.Name())
	}
	t.Setenv("TRAINMEM_BLAS", "go")
	if h := newTestHost(t, Options{Threads: 1}); h.Name() != "host (1 thread, gonum)" {
		t.Errorf("TRAINMEM_BLAS=go: Name %q", h.Name())
	}
	t.Setenv("TRAINMEM_BLAS", "fortran")
	if _, err := New(Options{}); err == nil || !strings.Contains(err.Error(), "fortran") {
		t.Errorf("TRAINMEM_BLAS=fortran: %v, want an error naming it", err)
	}
	if _, err := New(Options{Threads: -1}); err == nil {
		t.Error("Threads -1 accepted")
	}
	if OpenBLASAvailable() == nil {
		t.Setenv("TRAINMEM_BLAS", "")
		h := newTestHost(t, Options{Threads: 2})
		if !strings.HasPrefix(h.Name(), "host (2 threads, OpenBLAS 0.") {
			t.Errorf("automatic choice with OpenBLAS installed: %q", h.Name())
		}
	}
}

func TestParseOpenBLASConfig(t *testing.T) {
	v, core := parseOpenBLASConfig("OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64")
	if v != "OpenBLAS 0.3.21" || core != "Haswell" {
		t.Errorf("got %q, %q", v, core)
	}
}

func TestParseMeminfo(t *testing.T) {
	free, total, err := parseMeminfo([]byte("MemTotal:       131900000 kB\nMemFree:  1000 kB\nMemAvailable:   120000000 kB\n"))
	if err != nil || total != 131900000*1024 || free != 120000000*1024 {
		t.Errorf("got %d, %d, %v", free, total, err)
	}
	if _, _, err := parseMeminfo([]byte("nothing\n")); err == nil {
		t.Error("empty meminfo accepted")
	}
}

func TestPeakFromCPUInfo(t *testing.T) {
	zen4 := `processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 17
model name	: AMD EPYC
cpu MHz		: 2596.138
physical id	: 0
core id		: 0
flags		: fpu fma avx avx2 avx512f

processor	: 1
vendor_id	: AuthenticAMD
cpu family	: 25
model		: 17
cpu MHz		: 2596.138
physical id	: 0
core id		: 1
flags		: fpu fma avx avx2 avx512f
`
	// An Intel with hyperthreading: 4 logical processors on 2 cores.
	var intel strings.Builder
	for i := 0; i < 4; i++ {
		fmt.Fprintf(&intel, "processor\t: %d\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\ncpu MHz\t\t: 3000.000\nphysical id\t: 0\ncore id\t\t: %d\nflags\t\t: fma avx avx2 avx512f\n\n", i, i%2)
	}
	for _, tc := range []struct {
		name   string
		text   string
		numCPU int
		want   float64
		how    []string
	}{
		// 2 × 2 × 8 × 2 × 2.596138 GHz
		{"zen4", zen4, 2, 2 * 2 * 8 * 2 * 2.596138, []string{"2 cores", "Zen 4", "two 256-bit halves", "2.596 GHz"}},
		{"intel smt", intel.String(), 4, 2 * 2 * 16 * 2 * 3.0, []string{"2 cores", "AVX-512"}},
		{"intel restricted", intel.String(), 2, 1 * 2 * 16 * 2 * 3.0, []string{"1 cores"}},
		{"no clock", "processor : 0\nvendor_id : X\n", 1, 0, []string{"unknown"}},
	} {
		g, how := peakFromCPUInfo(tc.text, tc.numCPU, 0)
		if math.Abs(g-tc.want) > 1e-9*tc.want {
			t.Errorf("%s: %g GFLOP/s, want %g (%s)", tc.name, g, tc.want, how)
		}
		for _, w := range tc.how {
			if !strings.Contains(how, w) {
				t.Errorf("%s: %q lacks %q", tc.name, how, w)
			}
		}
	}
	// A timed clock above cpuinfo's wins; one below it does not.
	if g, how := peakFromCPUInfo(zen4, 2, 3.694); math.Abs(g-2*2*8*2*3.694) > 1e-9 || !strings.Contains(how, "timed") {
		t.Errorf("timed 3.694 GHz: %g, %q", g, how)
	}
	if g, _ := peakFromCPUInfo(zen4, 2, 1.0); math.Abs(g-2*2*8*2*2.596138) > 1e-9 {
		t.Errorf("timed 1 GHz: %g, want cpuinfo's clock", g)
	}
	t.Setenv("TRAINMEM_PEAK_GFLOPS", "123.5")
	if g, how := PeakGFLOPS(); g != 123.5 || !strings.Contains(how, "TRAINMEM_PEAK_GFLOPS") {
		t.Errorf("override: %g, %q", g, how)
	}
}

// Asked for pure Go, the device has no fallback to report; found or not,
// OpenBLAS's absence is reported only when it was looked for.
func TestPureGoFallback(t *testing.T) {
	d, err := New(Options{BLAS: BLASGo})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.PureGoFallback(); err != nil {
		t.Errorf("asked for pure Go: fallback %v", err)
	}
	a, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if (OpenBLASAvailable() == nil) != (a.PureGoFallback() == nil) {
		t.Errorf("OpenBLAS available: %v, the automatic device's fallback: %v", OpenBLASAvailable(), a.PureGoFallback())
	}
}

// TestAnyExponentAllOnes checks the branch-free scan against the plain
// predicate: every 16-bit pattern as F16 and BF16, and float32 and float64
// words around the largest finite value, at every position of the unrolled
// loop and of the tail.
func TestAnyExponentAllOnes(t *testing.T) {
	for _, exp := range []uint16{0x7c00, 0x7f80} {
		for v := 0; v < 1<<16; v++ {
			w := uint16(v)
			want := w&exp == exp
			for at := range 7 {
				ws := make([]uint16, 7)
				ws[at] = w
				if got := anyExponentAllOnes(ws, exp); got != want {
					t.Fatalf("exp %#x: word %#04x at %d of 7: got %t, want %t", exp, w, at, got, want)
				}
			}
		}
	}
	for _, f := range []float32{0, -0.0, 1, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN())} {
		w := math.Float32bits(f)
		for at := range 6 {
			ws := make([]uint32, 6)
			ws[at] = w
			if got, want := anyExponentAllOnes(ws, 0x7f800000), math.IsInf(float64(f), 0) || f != f; got != want {
				t.Errorf("float32 %v at %d: got %t, want %t", f, at, got, want)
			}
		}
	}
	for _, f := range []float64{0, 1, math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, math.Inf(1), math.Inf(-1), math.NaN(), -math.NaN()} {
		ws := []uint64{0, 0, 0, 0, math.Float64bits(f)}
		if got, want := anyExponentAllOnes(ws, 0x7ff0000000000000), math.IsInf(f, 0) || f != f; got != want {
			t.Errorf("float64 %v: got %t, want %t", f, got, want)
		}
	}
}

// The host as a card: every limit measured and in range, its products'
// fractions of the peak each at most 1, the largest the card's matmul
// fraction, the sources saying it was timed here; a kernel model of no
// SMs times each square product of the ladder at its own measured rate
// plus the launch, a product of sides between two rungs between their
// times, and an activation's special functions at the measured rate.
func TestHostCard(t *testing.T) {
	h, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	r, err := h.Card()
	if err != nil {
		t.Fatal(err)
	}
	l := r.Eff.Ladder
	if err := r.Check(); err != nil || !(r.Eff.Matmul > 0 && r.Eff.Matmul <= 1) || r.Eff.Matmul != l[len(l)-1] || r.Eff.Memory != 1 || r.Eff.Launch <= 0 || r.Eff.SMs != 0 ||
		!(r.Eff.Special > 0) || r.HalfFLOPS != r.FP32FLOPS || !strings.Contains(r.Source, "timed on this host") {
		t.Fatalf("host card %+v (%v)", r, err)
	}
	at := func(n int64, frac float64) time.Duration {
		return time.Duration(math.Ceil(2*float64(n*n*n)/(r.FP32FLOPS*frac)*1e9)) + r.Eff.Launch
	}
	for i, side := range cuda.LadderSides {
		if !(l[i] > 0 && l[i] <= 1) {
			t.Errorf("ladder rung %d (side %d): fraction %v", i, side, l[i])
		}
		n := int64(side)
		if got, want := r.Matmul(cuda.F32, 1, n, n, n), at(n, l[i]); got < want-time.Microsecond || got > want+time.Microsecond {
			t.Errorf("the ladder's product of side %d: %v, want %v", side, got, want)
		}
	}
	// 181 ≈ 128·√2, half way up from 128 to 256 in the logarithm.
	mid := r.Matmul(cuda.F32, 1, 181, 181, 181)
	lo, hi := at(181, max(l[1], l[2])), at(181, min(l[1], l[2]))
	if mid < lo-time.Microsecond || mid > hi+time.Microsecond {
		t.Errorf("a product of side 181: %v, want between %v and %v", mid, lo, hi)
	}
	w := cuda.Work{Specials: 1e6, Bytes: 1}
	if got, want := r.Kernel(cuda.F32, w), time.Duration(math.Ceil(1e6/r.Eff.Special*1e9))+r.Eff.Launch; got != want {
		t.Errorf("a million special functions: %v, want %v", got, want)
	}
	t.Logf("%s: %s", r.Name, r.Source)
}
