package conformance

import (
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

// exactCopy uploads random values into b, an int32 or uint8 buffer, and
// downloads them: the same values on a device that computes, dst left
// alone on one that does not.
func exactCopy[E int32 | uint8](t *testing.T, e *env, b *cuda.Buffer, rnd func() E, computes bool) {
	t.Helper()
	src := make([]E, b.Len)
	for i := range src {
		src[i] = rnd()
	}
	e.must(e.d.Upload(b, src))
	got := make([]E, b.Len)
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
			t.Fatalf("%s element %d: got %d, want %d", b.DType, i, got[i], want)
		}
	}
}

// testCopy checks Upload and Download: conversions on devices that
// compute, dst left alone on those that do not, argument errors on both.
func testCopy(t *testing.T, nd NewDevice, computes bool) {
	for _, dt := range append(floatTypes, cuda.I32, cuda.U8) {
		t.Run(dt.String(), func(t *testing.T) {
			e := newEnv(t, nd)
			n := 1000
			b, err := e.d.Alloc(cuda.Temporaries, dt, n)
			e.must(err)
			if dt == cuda.U8 {
				exactCopy(t, e, b, func() uint8 { return uint8(e.rng.Uint32()) }, computes)
				if err := e.d.Upload(b, make([]float32, n)); err == nil {
					t.Error("Upload of []float32 into a uint8 buffer: no error")
				}
				return
			}
			if dt == cuda.I32 {
				exactCopy(t, e, b, func() int32 { return int32(e.rng.Uint32()) }, computes)
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
// and the argument, on every device alike: every family's invalid calls.
func testValidation(t *testing.T, nd NewDevice, computes bool) {
	f := &fixture{env: newEnv(t, nd), computes: computes}
	for _, fam := range families {
		if fam.invalid == nil {
			t.Errorf("family %s has no validation cases", fam.name)
			continue
		}
		for _, c := range fam.invalid(f) {
			checkErr(t, c.name, c.err, c.want...)
		}
	}
}

// idsOf uploads token ids (on devices that compute).
func idsOf(e *env, ids []int32) *cuda.Buffer { return e.ids(ids) }

// testValidCalls runs every family's kernels with good arguments on a
// device that does not compute: each must succeed and allocate nothing.
func testValidCalls(t *testing.T, nd NewDevice) {
	for _, dt := range floatTypes {
		t.Run(dt.String(), func(t *testing.T) {
			f := &fixture{env: newEnv(t, nd)}
			for _, fam := range families {
				if fam.valid == nil {
					t.Errorf("family %s has no valid calls", fam.name)
					continue
				}
				calls := fam.valid(f, dt)
				before := f.d.Stats()
				for _, c := range calls {
					if err := c.run(); err != nil {
						t.Errorf("%s: %v", c.name, err)
					}
				}
				if n := f.d.Stats().NumAllocs - before.NumAllocs; n != 0 {
					t.Errorf("%s: the kernels allocated %d times, want none", fam.name, n)
				}
			}
		})
	}
}
