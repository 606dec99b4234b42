package conformance

import (
	"math"
	"strings"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/alloc"
)

// testAllocator checks what every device shares through the caching
// allocator: rounding, tagging, caching and reuse, views, statistics.
func testAllocator(t *testing.T, nd NewDevice) {
	e := newEnv(t, nd)
	d := e.d
	st0 := d.Stats()
	if st0.AllocatedBytes.Current != 0 || st0.ReservedBytes.Current != 0 {
		t.Fatalf("a fresh device has %d allocated and %d reserved", st0.AllocatedBytes.Current, st0.ReservedBytes.Current)
	}
	type req struct {
		cat cuda.Category
		dt  cuda.DType
		n   int
	}
	reqs := []req{
		{cuda.Params, cuda.F32, 1000},        // 4000 bytes → 4096
		{cuda.Grads, cuda.F16, 3},            // 6 → 512
		{cuda.Activations, cuda.BF16, 0},     // 0 → 512
		{cuda.AdamM, cuda.F64, 1 << 17},      // 1 MiB exactly: small pool
		{cuda.Workspace, cuda.I32, 3 << 20},  // 12 MiB: a segment of its own
		{cuda.Temporaries, cuda.F32, 300000}, // 1.2 MB: large pool, 20 MiB segment
	}
	var live []*cuda.Buffer
	var wantAlloc, wantReq int64
	var wantCat [cuda.NumCategories]int64
	for _, r := range reqs {
		b, err := d.Alloc(r.cat, r.dt, r.n)
		if err != nil {
			t.Fatalf("Alloc(%s, %s, %d): %v", r.cat, r.dt, r.n, err)
		}
		if b.Len != r.n || b.DType != r.dt || b.Cat != r.cat || b.IsView() {
			t.Errorf("Alloc(%s, %s, %d) = %v", r.cat, r.dt, r.n, b)
		}
		bytes := int64(r.n) * int64(r.dt.Size())
		if b.Bytes() != bytes {
			t.Errorf("%v: Bytes() = %d, want %d", b, b.Bytes(), bytes)
		}
		if b.Addr()%alloc.MinBlockSize != 0 {
			t.Errorf("%v: address not aligned to %d", b, alloc.MinBlockSize)
		}
		wantAlloc += alloc.RoundSize(bytes)
		wantReq += bytes
		wantCat[r.cat] += alloc.RoundSize(bytes)
		live = append(live, b)
	}
	for i, a := range live {
		for _, b := range live[i+1:] {
			a0, a1 := a.Addr(), a.Addr()+uintptr(alloc.RoundSize(a.Bytes()))
			b0, b1 := b.Addr(), b.Addr()+uintptr(alloc.RoundSize(b.Bytes()))
			if a0 < b1 && b0 < a1 {
				t.Errorf("live buffers overlap: %v and %v", a, b)
			}
		}
	}
	st := d.Stats()
	if st.AllocatedBytes.Current != wantAlloc || st.RequestedBytes.Current != wantReq {
		t.Errorf("allocated %d, requested %d; want %d, %d", st.AllocatedBytes.Current, st.RequestedBytes.Current, wantAlloc, wantReq)
	}
	for c := range wantCat {
		if st.CategoryAllocated[c].Current != wantCat[c] || st.AtPeak[c] != wantCat[c] {
			t.Errorf("%s: allocated %d, at peak %d; want %d", cuda.Category(c), st.CategoryAllocated[c].Current, st.AtPeak[c], wantCat[c])
		}
	}
	// 2 MiB small segment, 12 MiB own segment, 20 MiB large segment.
	if want := int64(2+12+20) << 20; st.ReservedBytes.Current != want || st.Segment.Current != 3 {
		t.Errorf("reserved %d in %d segments, want %d in 3", st.ReservedBytes.Current, st.Segment.Current, want)
	}
	if st.NumAllocs != int64(len(reqs)) || st.Allocation.Current != int64(len(reqs)) {
		t.Errorf("NumAllocs %d, Allocation %d; want %d", st.NumAllocs, st.Allocation.Current, len(reqs))
	}

	// Views share memory and cannot be freed.
	v := live[0].View(10, 20)
	if !v.IsView() || v.Addr() != live[0].Addr()+40 || v.Len != 20 || v.Cat != cuda.Params {
		t.Errorf("View(10, 20) of %v = %v", live[0], v)
	}
	expectPanic(t, "Free of a view", func() { d.Free(v) })

	// Freed memory stays cached and is handed out again.
	addr := live[0].Addr()
	d.Free(live[0])
	expectPanic(t, "double Free", func() { d.Free(live[0]) })
	st = d.Stats()
	if st.AllocatedBytes.Current != wantAlloc-4096 || st.ReservedBytes.Current != int64(34)<<20 || st.NumFrees != 1 {
		t.Errorf("after one free: allocated %d reserved %d frees %d", st.AllocatedBytes.Current, st.ReservedBytes.Current, st.NumFrees)
	}
	again, err := d.Alloc(cuda.Params, cuda.F32, 1000)
	e.must(err)
	if again.Addr() != addr {
		t.Errorf("re-allocating the freed size gave %#x, want the cached block %#x", again.Addr(), addr)
	}
	live[0] = again

	d.ResetPeakStats()
	if st := d.Stats(); st.AllocatedBytes.Peak != st.AllocatedBytes.Current {
		t.Errorf("after ResetPeakStats: peak %d, current %d", st.AllocatedBytes.Peak, st.AllocatedBytes.Current)
	}
	for _, b := range live {
		d.Free(b)
	}
	if st := d.Stats(); st.AllocatedBytes.Current != 0 || st.ReservedBytes.Current != int64(34)<<20 {
		t.Errorf("all freed: allocated %d, reserved %d (the cache should keep the segments)", st.AllocatedBytes.Current, st.ReservedBytes.Current)
	}
	e.must(d.EmptyCache())
	if st := d.Stats(); st.ReservedBytes.Current != 0 || st.Segment.Current != 0 {
		t.Errorf("after EmptyCache: reserved %d in %d segments", st.ReservedBytes.Current, st.Segment.Current)
	}
	d.Free(nil) // a no-op

	free, total, err := d.MemInfo()
	if err != nil || total <= 0 || free < 0 || free > total {
		t.Errorf("MemInfo = %d, %d, %v", free, total, err)
	}
	m0, err := d.Mark()
	e.must(err)
	e.must(d.Synchronize())
	m1, err := d.Mark()
	e.must(err)
	if el, err := d.Elapsed(m0, m1); err != nil || el < 0 {
		t.Errorf("Elapsed = %v, %v", el, err)
	}
	if _, err := d.Elapsed(m0, "not a mark"); err == nil {
		t.Error("Elapsed accepted a foreign mark")
	}
	if d.Name() == "" {
		t.Error("empty Name")
	}
	if _, err := d.Alloc(cuda.Params, cuda.F32, -1); err == nil {
		t.Error("Alloc of -1 elements succeeded")
	}
}

func expectPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}

// testCopy checks Upload and Download: conversions on devices that
// compute, dst left alone on those that do not, argument errors on both.
func testCopy(t *testing.T, nd NewDevice, computes bool) {
	for _, dt := range append(floatTypes, cuda.I32) {
		t.Run(dt.String(), func(t *testing.T) {
			e := newEnv(t, nd)
			n := 1000
			b, err := e.d.Alloc(cuda.Temporaries, dt, n)
			e.must(err)
			if dt == cuda.I32 {
				src := make([]int32, n)
				for i := range src {
					src[i] = int32(e.rng.Uint32())
				}
				e.must(e.d.Upload(b, src))
				got := make([]int32, n)
				for i := range got {
					got[i] = 7
				}
				e.must(e.d.Download(got, b))
				for i := range got {
					want := src[i]
					if !computes {
						want = 7 // a device without data leaves dst alone
					}
					if got[i] != want {
						t.Fatalf("int32 element %d: got %d, want %d", i, got[i], want)
					}
				}
				return
			}
			vals := e.randn(n)
			e.must(e.d.Upload(b, vals))
			got64 := make([]float64, n)
			got32 := make([]float32, n)
			for i := range got64 {
				got64[i], got32[i] = 42, 42
			}
			e.must(e.d.Download(got64, b))
			e.must(e.d.Download(got32, b))
			if !computes {
				if got64[0] != 42 || got32[n-1] != 42 {
					t.Fatal("Download on a device without data changed dst")
				}
				return
			}
			compare(t, "Upload/Download []float64", got64, vals, tol{rel: tolFor(dt).rel, floor: tolFor(dt).floor})
			for i := range got32 {
				if float32(got64[i]) != got32[i] {
					t.Fatalf("element %d: []float32 download %g, []float64 download %g", i, got32[i], got64[i])
				}
			}
			// float32 values in, same values out, for every type holding them.
			e.must(e.d.Upload(b, got32))
			e.must(e.d.Download(got64, b))
			for i := range got64 {
				if got64[i] != float64(got32[i]) {
					t.Fatalf("element %d: uploaded %g as float32, read back %g", i, got32[i], got64[i])
				}
			}
		})
	}
	t.Run("errors", func(t *testing.T) {
		e := newEnv(t, nd)
		f, err := e.d.Alloc(cuda.Temporaries, cuda.F32, 4)
		e.must(err)
		ids, err := e.d.Alloc(cuda.Temporaries, cuda.I32, 4)
		e.must(err)
		for _, tc := range []struct {
			name string
			err  error
			want []string
		}{
			{"Upload short", e.d.Upload(f, []float32{1, 2, 3}), []string{"Upload", "3 elements", "4"}},
			{"Upload ints into fp32", e.d.Upload(f, []int32{1, 2, 3, 4}), []string{"Upload", "[]int32", "fp32"}},
			{"Upload floats into int32", e.d.Upload(ids, []float64{1, 2, 3, 4}), []string{"Upload", "int32"}},
			{"Upload []int", e.d.Upload(f, []int{1, 2, 3, 4}), []string{"Upload", "[]int"}},
			{"Download long", e.d.Download(make([]float64, 5), f), []string{"Download", "5 elements"}},
			{"Download into []float32 from int32", e.d.Download(make([]float32, 4), ids), []string{"Download", "int32"}},
			{"Upload to nil", e.d.Upload(nil, []float32{1}), []string{"Upload", "nil"}},
		} {
			checkErr(t, tc.name, tc.err, tc.want...)
		}
	})
}

// checkErr wants an error containing every one of want.
func checkErr(t *testing.T, name string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: no error, want one mentioning %q", name, want)
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%s: error %q does not mention %q", name, err, w)
		}
	}
}

// testValidation checks that bad arguments give errors naming the kernel
// and the argument, on every device alike.
func testValidation(t *testing.T, nd NewDevice, computes bool) {
	e := newEnv(t, nd)
	d := e.d
	alloc := func(dt cuda.DType, n int) *cuda.Buffer {
		b, err := d.Alloc(cuda.Temporaries, dt, n)
		e.must(err)
		return b
	}
	f32 := func(n int) *cuda.Buffer { return alloc(cuda.F32, n) }
	B, T, C, V, NH, N := 2, 3, 8, 11, 2, 6
	x := f32(N * C)
	stats := f32(2 * N)
	w, bias := f32(C), f32(C)
	tokens := alloc(cuda.I32, B*T)
	e.must(d.Upload(tokens, []int32{0, 1, 2, 3, 4, 5}))
	wte, wpe := f32(V*C), f32(T*C)
	qkv, p, y := f32(B*T*3*C), f32(B*NH*T*T), f32(B*T*C)
	scratch := f32(cuda.AttentionScratchLen(T, NH))
	logits, targets := f32(N*V), alloc(cuda.I32, N)
	e.must(d.Upload(targets, []int32{0, 1, 2, 3, 4, 10}))
	loss, ceScratch := f32(1), f32(N)
	param, grad, m, v := f32(10), f32(10), f32(10), f32(10)
	half := alloc(cuda.F16, 10)
	freed := f32(4)
	d.Free(freed)
	adam := cuda.AdamArgs{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1, GradScale: 1}

	type tc struct {
		name string
		err  error
		want []string
	}
	cases := []tc{
		{"LayerNorm short x", d.LayerNorm(y.View(0, N*C), f32(100), stats, w, bias, N, C),
			[]string{"cuda: LayerNorm: x has 100 elements, want N·C = 48"}},
		{"LayerNormStats fp16 stats", d.LayerNormStats(alloc(cuda.F16, 2*N), x, N, C, 1e-5), []string{"LayerNormStats", "stats is fp16"}},
		{"LayerNormStats negative eps", d.LayerNormStats(stats, x, N, C, -1), []string{"LayerNormStats", "eps"}},
		{"LayerNormBackwardX nil w", d.LayerNormBackwardX(f32(N*C), f32(N*C), x, stats, nil, N, C), []string{"LayerNormBackwardX", "w is nil"}},
		{"LayerNormBackwardW short dw", d.LayerNormBackwardW(f32(C-1), f32(N*C), x, stats, N, C), []string{"LayerNormBackwardW", "dw has 7 elements, want C = 8"}},
		{"Embedding fp32 tokens", d.Embedding(y, f32(B*T), wte, wpe, B, T, C), []string{"Embedding", "tokens is fp32, want int32"}},
		{"Embedding short wpe", d.Embedding(y, tokens, wte, f32((T-1)*C), B, T, C), []string{"Embedding", "wpe", "at least T = 3"}},
		{"Embedding ragged wte", d.Embedding(y, tokens, f32(V*C+1), wpe, B, T, C), []string{"Embedding", "wte", "rows of C = 8"}},
		{"Embedding zero B", d.Embedding(y, tokens, wte, wpe, 0, T, C), []string{"Embedding", "B is 0"}},
		{"EmbeddingBackwardTokens int dwte", d.EmbeddingBackwardTokens(alloc(cuda.I32, V*C), y, tokens, B, T, C), []string{"EmbeddingBackwardTokens", "dwte is int32"}},
		{"EmbeddingBackwardPositions short dout", d.EmbeddingBackwardPositions(wpe, f32(3), B, T, C), []string{"EmbeddingBackwardPositions", "dout has 3 elements, want B·T·C = 48"}},
		{"SumRows short dst", d.SumRows(f32(3), x, N, C), []string{"SumRows", "dst has 3 elements"}},
		{"AddBias short b", d.AddBias(f32(N*C), f32(3), N, C), []string{"AddBias", "b has 3 elements"}},
		{"Add length mismatch", d.Add(f32(5), f32(5), f32(6)), []string{"Add", "b has 6 elements"}},
		{"Cast int32", d.Cast(f32(6), alloc(cuda.I32, 6)), []string{"Cast", "src is int32"}},
		{"Cast overlapping views", d.Cast(y.View(1, 4), y.View(0, 4)), []string{"Cast", "dst", "overlaps src"}},
		{"Fill freed", d.Fill(freed, 0), []string{"Fill", "dst", "was freed"}},
		{"GELU length", d.GELU(f32(4), f32(5)), []string{"GELU", "x has 5 elements"}},
		{"GELUBackward nil dy", d.GELUBackward(f32(4), nil, f32(4)), []string{"GELUBackward", "dy is nil"}},
		{"AttentionProbs C % NH", d.AttentionProbs(f32(B*3*T*T), f32(B*T*3*9), B, T, 9, 3+1), []string{"AttentionProbs", "C = 9 is not a multiple of NH = 4"}},
		{"AttentionProbs short p", d.AttentionProbs(f32(5), qkv, B, T, C, NH), []string{"AttentionProbs", "p has 5 elements, want B·NH·T·T = 36"}},
		{"AttentionOut y overlaps qkv", d.AttentionOut(qkv.View(0, B*T*C), qkv, p, B, T, C, NH), []string{"AttentionOut", "overlaps"}},
		{"AttentionBackward short scratch", d.AttentionBackward(f32(B*T*3*C), y, qkv, p, f32(5), B, T, C, NH), []string{"AttentionBackward", "scratch has 5 elements, want at least NH·T·T = 18"}},
		{"AttentionBackward dqkv is qkv", d.AttentionBackward(qkv, y, qkv, p, scratch, B, T, C, NH), []string{"AttentionBackward", "dqkv", "overlaps qkv"}},
		{"AttentionBackward fp16 scratch", d.AttentionBackward(f32(B*T*3*C), y, qkv, p, alloc(cuda.F16, 18), B, T, C, NH), []string{"AttentionBackward", "scratch is fp16"}},
		{"CrossEntropy fp16 loss", d.CrossEntropy(alloc(cuda.F16, 1), logits, targets, ceScratch, N, V), []string{"CrossEntropy", "loss is fp16"}},
		{"CrossEntropy short scratch", d.CrossEntropy(loss, logits, targets, f32(N-1), N, V), []string{"CrossEntropy", "scratch has 5 elements, want at least N = 6"}},
		{"CrossEntropyBackward two-element dloss", d.CrossEntropyBackward(f32(N*V), f32(2), logits, targets, N, V), []string{"CrossEntropyBackward", "dloss has 2 elements, want 1"}},
		{"MatMul short A", d.MatMul(cuda.MatMul{M: 4, N: 4, K: 4, A: f32(15), B: f32(16), C: f32(16), Alpha: 1}), []string{"MatMul", "A has 15 elements"}},
		{"MatMul small LDA", d.MatMul(cuda.MatMul{M: 4, N: 4, K: 4, LDA: 3, A: f32(16), B: f32(16), C: f32(16), Alpha: 1}), []string{"MatMul", "LDA is 3"}},
		{"MatMul overlapping batch outputs", d.MatMul(cuda.MatMul{M: 2, N: 2, K: 2, Batch: 2, StrideC: 2, A: f32(8), B: f32(8), C: f32(8), Alpha: 1}), []string{"MatMul", "StrideC is 2"}},
		{"MatMul C overlaps A", d.MatMul(cuda.MatMul{M: 2, N: 2, K: 2, A: x.View(0, 4), B: f32(4), C: x.View(2, 4), Alpha: 1}), []string{"MatMul", "C", "overlaps A"}},
		{"MatMul zero K", d.MatMul(cuda.MatMul{M: 2, N: 2, K: 0, A: f32(4), B: f32(4), C: f32(4), Alpha: 1}), []string{"MatMul", "K is 0"}},
		{"MatMul NaN alpha", d.MatMul(cuda.MatMul{M: 2, N: 2, K: 2, A: f32(4), B: f32(4), C: f32(4), Alpha: float32(math.NaN())}), []string{"MatMul", "Alpha"}},
		{"Adam step 0", d.Adam(param, grad, nil, m, v, cuda.AdamArgs{Beta1: 0.9, Beta2: 0.999, GradScale: 1}), []string{"Adam", "Step is 0"}},
		{"Adam GradScale 0", d.Adam(param, grad, nil, m, v, cuda.AdamArgs{Beta1: 0.9, Beta2: 0.999, Step: 1}), []string{"Adam", "GradScale is 0"}},
		{"Adam beta1 1", d.Adam(param, grad, nil, m, v, cuda.AdamArgs{Beta1: 1, Beta2: 0.999, Step: 1, GradScale: 1}), []string{"Adam", "Beta1"}},
		{"Adam fp16 param without master", d.Adam(half, grad, nil, m, v, adam), []string{"Adam", "param is fp16", "master"}},
		{"Adam short v", d.Adam(param, grad, nil, m, f32(9), adam), []string{"Adam", "v has 9 elements, want param's 10"}},
		{"Adam fp16 m", d.Adam(param, grad, nil, half, v, adam), []string{"Adam", "m is fp16"}},
		{"SGD momentum without buffer", d.SGD(param, grad, nil, nil, cuda.SGDArgs{LR: 1, Momentum: 0.9, GradScale: 1}), []string{"SGD", "mom is nil"}},
		{"SGD negative momentum", d.SGD(param, grad, nil, nil, cuda.SGDArgs{LR: 1, Momentum: -1, GradScale: 1}), []string{"SGD", "Momentum"}},
		{"NonFinite int32", nonFiniteErr(d, tokens), []string{"NonFinite", "x is int32"}},
	}
	if computes {
		cases = append(cases,
			tc{"Embedding token out of range", d.Embedding(y, idsOf(e, []int32{0, 1, 2, 3, 11, 5}), wte, wpe, B, T, C),
				[]string{"Embedding", "token id 11", "position 4 (b=1, t=1)", "V = 11"}},
			tc{"Embedding negative token", d.Embedding(y, idsOf(e, []int32{-1, 1, 2, 3, 4, 5}), wte, wpe, B, T, C),
				[]string{"Embedding", "token id -1", "position 0"}},
			tc{"EmbeddingBackwardTokens token out of range", d.EmbeddingBackwardTokens(wte, y, idsOf(e, []int32{0, 1, 2, 30, 4, 5}), B, T, C),
				[]string{"EmbeddingBackwardTokens", "token id 30", "V = 11"}},
			tc{"CrossEntropy target out of range", d.CrossEntropy(loss, logits, idsOf(e, []int32{0, 1, 2, 3, 4, 11}), ceScratch, N, V),
				[]string{"CrossEntropy", "target 11", "row 5", "V = 11"}},
			tc{"CrossEntropyBackward negative target", d.CrossEntropyBackward(f32(N*V), loss, logits, idsOf(e, []int32{0, -3, 2, 3, 4, 5}), N, V),
				[]string{"CrossEntropyBackward", "target -3", "row 1"}},
		)
	}
	for _, c := range cases {
		checkErr(t, c.name, c.err, c.want...)
	}
}

func nonFiniteErr(d cuda.Device, b *cuda.Buffer) error {
	_, err := d.NonFinite(b)
	return err
}

func idsOf(e *env, ids []int32) *cuda.Buffer { return e.ids(ids) }

// testValidCalls runs every kernel with good arguments on a device that
// does not compute: each must succeed.
func testValidCalls(t *testing.T, nd NewDevice) {
	for _, dt := range floatTypes {
		t.Run(dt.String(), func(t *testing.T) {
			e := newEnv(t, nd)
			d := e.d
			st := stateType(dt)
			alloc := func(dt cuda.DType, n int) *cuda.Buffer {
				b, err := d.Alloc(cuda.Temporaries, dt, n)
				e.must(err)
				return b
			}
			B, T, C, V, NH := 2, 16, 64, 300, 4
			N := B * T
			x, y, dy, dx := alloc(dt, N*C), alloc(dt, N*C), alloc(dt, N*C), alloc(dt, N*C)
			stats, w, b := alloc(st, 2*N), alloc(dt, C), alloc(dt, C)
			tokens, targets := alloc(cuda.I32, N), alloc(cuda.I32, N)
			wte, wpe := alloc(dt, V*C), alloc(dt, 2*T*C)
			qkv, dqkv, p := alloc(dt, N*3*C), alloc(dt, N*3*C), alloc(dt, B*NH*T*T)
			logits, loss := alloc(dt, N*V), alloc(st, 1)
			master, m, v := alloc(st, 100), alloc(st, 100), alloc(st, 100)
			param, grad := alloc(dt, 100), alloc(dt, 100)
			before := d.Stats()
			calls := []struct {
				name string
				err  error
			}{
				{"Fill", d.Fill(x, 1)},
				{"Cast", d.Cast(y, x)},
				{"Add", d.Add(y, x, y)},
				{"Embedding", d.Embedding(x, tokens, wte, wpe, B, T, C)},
				{"EmbeddingBackwardTokens", d.EmbeddingBackwardTokens(wte, dy, tokens, B, T, C)},
				{"EmbeddingBackwardPositions", d.EmbeddingBackwardPositions(wpe, dy, B, T, C)},
				{"LayerNormStats", d.LayerNormStats(stats, x, N, C, 1e-5)},
				{"LayerNorm", d.LayerNorm(y, x, stats, w, b, N, C)},
				{"LayerNormBackwardX", d.LayerNormBackwardX(dx, dy, x, stats, w, N, C)},
				{"LayerNormBackwardW", d.LayerNormBackwardW(w, dy, x, stats, N, C)},
				{"SumRows", d.SumRows(b, dy, N, C)},
				{"AddBias", d.AddBias(y, b, N, C)},
				{"MatMul", d.MatMul(cuda.MatMul{TransB: true, M: N, N: V, K: C, A: x, B: wte, C: logits, Alpha: 1})},
				{"GELU", d.GELU(y, x)},
				{"GELUBackward", d.GELUBackward(dx, dy, x)},
				{"AttentionProbs", d.AttentionProbs(p, qkv, B, T, C, NH)},
				{"AttentionOut", d.AttentionOut(y, qkv, p, B, T, C, NH)},
				{"AttentionBackward", d.AttentionBackward(dqkv, dy, qkv, p, alloc(cuda.F32, cuda.AttentionScratchLen(T, NH)), B, T, C, NH)},
				{"CrossEntropy", d.CrossEntropy(loss, logits, targets, alloc(cuda.F32, cuda.CrossEntropyScratchLen(N)), N, V)},
				{"CrossEntropyBackward", d.CrossEntropyBackward(logits, loss, logits, targets, N, V)},
				{"Adam", d.Adam(param, grad, master, m, v, cuda.AdamArgs{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Step: 1, GradScale: 1})},
				{"SGD", d.SGD(param, grad, master, m, cuda.SGDArgs{LR: 1e-3, Momentum: 0.9, GradScale: 1})},
			}
			for _, c := range calls {
				if c.err != nil {
					t.Errorf("%s: %v", c.name, c.err)
				}
			}
			if bad, err := d.NonFinite(x); bad || err != nil {
				t.Errorf("NonFinite = %t, %v; want false, nil", bad, err)
			}
			after := d.Stats()
			if after.NumAllocs-before.NumAllocs != 2 { // the two scratch buffers above
				t.Errorf("kernels allocated: %d allocations, want only the 2 scratch buffers", after.NumAllocs-before.NumAllocs)
			}
		})
	}
}
