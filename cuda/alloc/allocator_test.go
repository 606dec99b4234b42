package alloc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"trainmem/cuda"
)

const (
	kib = int64(1) << 10
	mib = int64(1) << 20
)

func newTestAllocator(capacity int64) (*Allocator, *VirtualSpace) {
	vs := NewVirtualSpace(capacity)
	return NewAllocator("test device", vs), vs
}

func mustAlloc(t *testing.T, a *Allocator, cat cuda.Category, n int64) *Block {
	t.Helper()
	b, err := a.Alloc(cat, n)
	if err != nil {
		t.Fatalf("Alloc(%s, %d): %v", cat, n, err)
	}
	return b
}

func TestRoundSize(t *testing.T) {
	for _, tc := range []struct{ n, want int64 }{
		{0, 512}, {1, 512}, {511, 512}, {512, 512}, {513, 1024}, {1000, 1024},
		{1 << 20, 1 << 20}, {1<<20 + 1, 1<<20 + 512}, {124_439_808 * 4, 124_439_808 * 4},
	} {
		if got := RoundSize(tc.n); got != tc.want {
			t.Errorf("RoundSize(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

func TestSegmentSize(t *testing.T) {
	for _, tc := range []struct{ size, want int64 }{
		{512, 2 * mib},           // small pool
		{mib, 2 * mib},           // the largest small block
		{mib + 512, 20 * mib},    // the smallest large block
		{10*mib - 512, 20 * mib}, // just under kMinLargeAlloc
		{10 * mib, 10 * mib},     // from here, rounded to 2 MiB
		{10*mib + 512, 12 * mib}, // ...up
		{100*mib + 3*512, 102 * mib},
		{497_759_232, 238 * 2 * mib}, // GPT-2 124M's fp32 parameters: 237.4 units of 2 MiB
	} {
		if got := SegmentSize(tc.size); got != tc.want {
			t.Errorf("SegmentSize(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
}

// snapshotBlock finds the block at addr in a snapshot.
func snapshotBlock(t *testing.T, snap []SegmentInfo, addr uintptr) (SegmentInfo, BlockInfo) {
	t.Helper()
	for _, s := range snap {
		for _, b := range s.Blocks {
			if b.Addr == addr {
				return s, b
			}
		}
	}
	t.Fatalf("no block at %#x in the snapshot", addr)
	return SegmentInfo{}, BlockInfo{}
}

func TestPoolAndSplit(t *testing.T) {
	// Each request on a fresh allocator: which pool serves it, the segment
	// it takes, and the blocks that segment ends up split into.
	for _, tc := range []struct {
		name      string
		n         int64
		small     bool
		segment   int64
		blocks    []int64 // sizes in address order; the first is the allocation
		allocated int64   // AllocatedBytes: the block, not the request
	}{
		{"tiny", 1, true, 2 * mib, []int64{512, 2*mib - 512}, 512},
		{"small", 1000, true, 2 * mib, []int64{1024, 2*mib - 1024}, 1024},
		{"small max", mib, true, 2 * mib, []int64{mib, mib}, mib},
		{"small remainder 512 splits", 2*mib - 512, false, 20 * mib, []int64{2*mib - 512, 18*mib + 512}, 2*mib - 512},
		{"large", mib + 1, false, 20 * mib, []int64{mib + 512, 19*mib - 512}, mib + 512},
		{"large remainder over 1 MiB splits", 19*mib - 512, false, 20 * mib, []int64{19*mib - 512, mib + 512}, 19*mib - 512},
		{"large remainder 1 MiB stays", 19 * mib, false, 20 * mib, []int64{20 * mib}, 20 * mib},
		{"big segment to 2 MiB, split", 10*mib + 1, false, 12 * mib, []int64{10*mib + 512, 2*mib - 512}, 10*mib + 512},
		{"big remainder 1 MiB stays", 11 * mib, false, 12 * mib, []int64{12 * mib}, 12 * mib},
		{"big remainder over 1 MiB", 16*mib + 512, false, 18 * mib, []int64{16*mib + 512, 2*mib - 512}, 16*mib + 512},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := newTestAllocator(0)
			b := mustAlloc(t, a, cuda.Params, tc.n)
			snap := a.Snapshot()
			if len(snap) != 1 {
				t.Fatalf("%d segments, want 1", len(snap))
			}
			s := snap[0]
			if s.Small != tc.small || s.Size != tc.segment {
				t.Errorf("segment small=%v size=%d, want small=%v size=%d", s.Small, s.Size, tc.small, tc.segment)
			}
			var sizes []int64
			for _, bl := range s.Blocks {
				sizes = append(sizes, bl.Size)
			}
			if fmt.Sprint(sizes) != fmt.Sprint(tc.blocks) {
				t.Errorf("blocks %v, want %v", sizes, tc.blocks)
			}
			if b.Addr() != s.Base || b.Size() != tc.blocks[0] || b.Requested() != tc.n {
				t.Errorf("block @%#x size %d requested %d, want @%#x size %d requested %d",
					b.Addr(), b.Size(), b.Requested(), s.Base, tc.blocks[0], tc.n)
			}
			st := a.Stats()
			if st.AllocatedBytes.Current != tc.allocated || st.RequestedBytes.Current != tc.n || st.ReservedBytes.Current != tc.segment {
				t.Errorf("allocated %d requested %d reserved %d, want %d %d %d", st.AllocatedBytes.Current,
					st.RequestedBytes.Current, st.ReservedBytes.Current, tc.allocated, tc.n, tc.segment)
			}
			wantISB := int64(0)
			if len(tc.blocks) > 1 {
				wantISB = tc.blocks[1]
			}
			if st.InactiveSplitBytes.Current != wantISB {
				t.Errorf("inactive split bytes %d, want %d", st.InactiveSplitBytes.Current, wantISB)
			}
		})
	}
}

func TestReuseBestFit(t *testing.T) {
	a, _ := newTestAllocator(0)
	// Five blocks in one small segment, separated by live spacers so that
	// freeing them leaves free blocks of 3, 1 and 2 KiB that cannot merge.
	x3 := mustAlloc(t, a, cuda.Activations, 3*kib)
	s1 := mustAlloc(t, a, cuda.Activations, 512)
	x1 := mustAlloc(t, a, cuda.Activations, 1*kib)
	s2 := mustAlloc(t, a, cuda.Activations, 512)
	x2 := mustAlloc(t, a, cuda.Activations, 2*kib)
	s3 := mustAlloc(t, a, cuda.Activations, 512)
	_, _, _ = s1, s2, s3
	addr := map[string]uintptr{"3k": x3.Addr(), "1k": x1.Addr(), "2k": x2.Addr()}
	a.Free(x3)
	a.Free(x1)
	a.Free(x2)
	reserved := a.Stats().ReservedBytes.Current

	// 1.5 KiB: the 2 KiB block is the best fit (not the first freed, not
	// the lowest address); the remainder of 512 bytes splits off.
	b := mustAlloc(t, a, cuda.Temporaries, 1536)
	if b.Addr() != addr["2k"] || b.Size() != 1536 {
		t.Errorf("1.5 KiB took %#x (%d bytes), want the 2 KiB block %#x", b.Addr(), b.Size(), addr["2k"])
	}
	// 1 KiB: exactly the 1 KiB block.
	c := mustAlloc(t, a, cuda.Temporaries, kib)
	if c.Addr() != addr["1k"] {
		t.Errorf("1 KiB took %#x, want %#x", c.Addr(), addr["1k"])
	}
	// 512: the 512-byte remainder of the 2 KiB block (smallest fit).
	d := mustAlloc(t, a, cuda.Temporaries, 100)
	if d.Addr() != addr["2k"]+1536 {
		t.Errorf("512 took %#x, want the remainder at %#x", d.Addr(), addr["2k"]+1536)
	}
	if r := a.Stats().ReservedBytes.Current; r != reserved {
		t.Errorf("reserved went from %d to %d: cached blocks were not reused", reserved, r)
	}
	// Same size freed and asked again: the same address.
	a.Free(c)
	if e := mustAlloc(t, a, cuda.Temporaries, kib); e.Addr() != addr["1k"] {
		t.Errorf("re-allocating 1 KiB gave %#x, want %#x", e.Addr(), addr["1k"])
	}
}

func TestMergeAndInactiveSplit(t *testing.T) {
	a, _ := newTestAllocator(0)
	seg := 2 * mib
	x := mustAlloc(t, a, cuda.Activations, 512)
	y := mustAlloc(t, a, cuda.Activations, 1024)
	z := mustAlloc(t, a, cuda.Activations, 2048)
	type want struct{ isb, is int64 }
	check := func(step string, w want) {
		t.Helper()
		st := a.Stats()
		if st.InactiveSplitBytes.Current != w.isb || st.InactiveSplit.Current != w.is {
			t.Errorf("%s: inactive split %d bytes in %d blocks, want %d in %d", step,
				st.InactiveSplitBytes.Current, st.InactiveSplit.Current, w.isb, w.is)
		}
	}
	check("x,y,z live", want{seg - 3584, 1})
	a.Free(x) // x cannot merge: y is live
	check("x freed", want{seg - 3584 + 512, 2})
	a.Free(z) // z merges with the tail
	check("z freed", want{seg - 1024, 2})
	if got := len(a.Snapshot()[0].Blocks); got != 3 {
		t.Errorf("after freeing x and z: %d blocks, want 3 (x, y, z+tail)", got)
	}
	a.Free(y) // y merges with both: the segment is whole and free again
	check("all freed", want{0, 0})
	snap := a.Snapshot()
	if len(snap) != 1 || len(snap[0].Blocks) != 1 || snap[0].Blocks[0].Size != seg || snap[0].Blocks[0].Allocated {
		t.Fatalf("after freeing everything: %+v, want one free block of the whole segment", snap)
	}
	st := a.Stats()
	// The byte peak came first, when x split the segment: all but x was
	// inactive.
	if st.InactiveSplitBytes.Peak != seg-512 || st.InactiveSplit.Peak != 2 {
		t.Errorf("inactive split peaks %d bytes, %d blocks; want %d, 2", st.InactiveSplitBytes.Peak, st.InactiveSplit.Peak, seg-512)
	}
	if st.ReservedBytes.Current != seg {
		t.Errorf("reserved %d, want the segment cached (%d)", st.ReservedBytes.Current, seg)
	}
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.ReservedBytes.Current != 0 || st.Segment.Current != 0 || len(a.Snapshot()) != 0 {
		t.Errorf("after EmptyCache: reserved %d in %d segments, want none", st.ReservedBytes.Current, st.Segment.Current)
	}
}

func TestEmptyCacheKeepsSplitSegments(t *testing.T) {
	a, vs := newTestAllocator(0)
	live := mustAlloc(t, a, cuda.Params, 512) // keeps a small segment split
	big := mustAlloc(t, a, cuda.Params, 30*mib)
	a.Free(big)
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if r := a.Stats().ReservedBytes.Current; r != 2*mib || vs.reserved != 2*mib {
		t.Errorf("reserved %d (source %d), want only the small segment (2 MiB)", r, vs.reserved)
	}
	a.Free(live)
}

func TestOutOfMemoryRetry(t *testing.T) {
	a, _ := newTestAllocator(21 * mib)
	// A small segment, cached after its block is freed.
	a.Free(mustAlloc(t, a, cuda.Temporaries, 512))
	// A 2 MiB request needs a 20 MiB segment: 22 MiB > 21 MiB, so the cache
	// is emptied (the small segment goes back) and the retry succeeds.
	p := mustAlloc(t, a, cuda.Params, 2*mib)
	st := a.Stats()
	if st.NumAllocRetries != 1 || st.NumOOMs != 0 || st.ReservedBytes.Current != 20*mib {
		t.Errorf("after the retry: retries %d, ooms %d, reserved %d; want 1, 0, 20 MiB",
			st.NumAllocRetries, st.NumOOMs, st.ReservedBytes.Current)
	}
	// 19 MiB does not fit the 18 MiB left in the segment, and a second
	// segment does not fit the card: retry, then out of memory.
	_, err := a.Alloc(cuda.Activations, 19*mib)
	if !errors.Is(err, cuda.ErrNoMemory) {
		t.Fatalf("Alloc(19 MiB) = %v, want an out-of-memory error", err)
	}
	var oom *cuda.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("error %T is not an *OutOfMemoryError", err)
	}
	st = a.Stats()
	if st.NumAllocRetries != 2 || st.NumOOMs != 1 {
		t.Errorf("retries %d, ooms %d; want 2, 1", st.NumAllocRetries, st.NumOOMs)
	}
	want := cuda.OutOfMemoryError{Device: "test device", Requested: 19 * mib, Rounded: 19 * mib, Segment: 20 * mib,
		Category: cuda.Activations, Capacity: 21 * mib, Free: mib, Reserved: 20 * mib, LargestFree: 18 * mib}
	want.Allocated[cuda.Params] = 2 * mib
	if *oom != want {
		t.Errorf("report\n%+v\nwant\n%+v", *oom, want)
	}
	msg := err.Error()
	for _, s := range []string{"tried to allocate 19.00 MiB", "activations", "total capacity of 21.00 MiB",
		"1.00 MiB is free", "20.00 MiB reserved", "2.00 MiB allocated (params 2.00 MiB)",
		"18.00 MiB reserved but unallocated", "largest free block is 18.00 MiB"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message %q lacks %q", msg, s)
		}
	}
	// The failure changed nothing: the 18 MiB are still there.
	if b := mustAlloc(t, a, cuda.Activations, 18*mib); b.Addr() != p.Addr()+uintptr(2*mib) {
		t.Errorf("18 MiB at %#x, want the remainder at %#x", b.Addr(), p.Addr()+uintptr(2*mib))
	}
}

func TestStatsCategoriesAndPeaks(t *testing.T) {
	a, _ := newTestAllocator(0)
	p := mustAlloc(t, a, cuda.Params, 1000)     // 1024
	g := mustAlloc(t, a, cuda.Grads, 1000)      // 1024
	x := mustAlloc(t, a, cuda.Activations, 3e6) // 5860 blocks of 512 = 3000320 (large pool)
	a.Free(x)
	y := mustAlloc(t, a, cuda.Temporaries, 100) // 512
	st := a.Stats()
	if st.AllocatedBytes.Peak != 1024+1024+3000320 {
		t.Errorf("peak %d, want %d", st.AllocatedBytes.Peak, 1024+1024+3000320)
	}
	wantAtPeak := [cuda.NumCategories]int64{cuda.Params: 1024, cuda.Grads: 1024, cuda.Activations: 3000320}
	if st.AtPeak != wantAtPeak {
		t.Errorf("AtPeak %v, want %v", st.AtPeak, wantAtPeak)
	}
	if c := st.CategoryAllocated[cuda.Activations]; c.Current != 0 || c.Peak != 3000320 || c.Allocated != 3000320 || c.Freed != 3000320 {
		t.Errorf("activations %+v", c)
	}
	if c := st.CategoryRequested[cuda.Temporaries]; c.Current != 100 || c.Peak != 100 {
		t.Errorf("temporaries requested %+v, want 100", c)
	}
	if st.RequestedBytes.Current != 2100 || st.RequestedBytes.Peak != 3002000 {
		t.Errorf("requested %+v", st.RequestedBytes)
	}
	if st.NumAllocs != 4 || st.NumFrees != 1 || st.Allocation.Current != 3 || st.Active.Current != 3 ||
		st.ActiveBytes != st.AllocatedBytes {
		t.Errorf("counts: allocs %d frees %d allocation %d active %d, active bytes %+v vs allocated %+v",
			st.NumAllocs, st.NumFrees, st.Allocation.Current, st.Active.Current, st.ActiveBytes, st.AllocatedBytes)
	}
	a.ResetPeaks()
	st = a.Stats()
	if st.AllocatedBytes.Peak != 2560 || st.CategoryAllocated[cuda.Activations].Peak != 0 || st.ReservedBytes.Peak != st.ReservedBytes.Current {
		t.Errorf("after ResetPeaks: %+v", st.AllocatedBytes)
	}
	if want := ([cuda.NumCategories]int64{cuda.Params: 1024, cuda.Grads: 1024, cuda.Temporaries: 512}); st.AtPeak != want {
		t.Errorf("AtPeak after reset %v, want %v", st.AtPeak, want)
	}
	// A new peak after the reset moves AtPeak; a lower high does not.
	a.Free(y)
	z := mustAlloc(t, a, cuda.Workspace, 4096)
	if want := ([cuda.NumCategories]int64{cuda.Params: 1024, cuda.Grads: 1024, cuda.Workspace: 4096}); a.Stats().AtPeak != want {
		t.Errorf("AtPeak %v, want %v", a.Stats().AtPeak, want)
	}
	a.Free(z)
	a.Free(mustAlloc(t, a, cuda.Comm, 2048))
	if want := ([cuda.NumCategories]int64{cuda.Params: 1024, cuda.Grads: 1024, cuda.Workspace: 4096}); a.Stats().AtPeak != want {
		t.Errorf("AtPeak %v, want %v (unchanged below the peak)", a.Stats().AtPeak, want)
	}
	a.Free(p)
	a.Free(g)
}

func TestAllocErrors(t *testing.T) {
	a, _ := newTestAllocator(0)
	if _, err := a.Alloc(cuda.Params, -1); err == nil {
		t.Error("negative size accepted")
	}
	if _, err := a.Alloc(cuda.NumCategories, 8); err == nil {
		t.Error("unknown category accepted")
	}
	b := mustAlloc(t, a, cuda.Params, 8)
	a.Free(b)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("double free did not panic")
			}
		}()
		a.Free(b)
	}()
	live := mustAlloc(t, a, cuda.Params, 8)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a.Free(live) // after Close: nothing to do, no panic
	if _, err := a.Alloc(cuda.Params, 8); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Alloc after Close: %v, want a closed error", err)
	}
}

func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{{0, "0 bytes"}, {512, "512 bytes"}, {1024, "1.00 KiB"}, {20 << 20, "20.00 MiB"}, {3 << 29, "1.50 GiB"}, {-2048, "-2.00 KiB"}} {
		if got := cuda.FormatBytes(tc.n); got != tc.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestAllocatorRandom runs random allocations and frees against a plain
// model of what must hold after every operation.
func TestAllocatorRandom(t *testing.T) {
	for seed := uint64(1); seed <= 6; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			capacity := int64(0)
			if seed%2 == 0 {
				capacity = 96 * mib // small enough to hit retries and OOMs
			}
			testAllocatorRandom(t, seed, capacity, 3000)
		})
	}
}

type liveBlock struct {
	b         *Block
	size, req int64
	cat       cuda.Category
}

func testAllocatorRandom(t *testing.T, seed uint64, capacity int64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 42))
	a, vs := newTestAllocator(capacity)
	var live []liveBlock
	var peak int64
	var ooms, retries int64
	randSize := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return rng.Int64N(2048) // tiny
		case 1:
			return rng.Int64N(SmallSize) + 1 // small pool
		case 2:
			return SmallSize + 1 + rng.Int64N(MinLargeAlloc) // large, 20 MiB segments
		default:
			return MinLargeAlloc + rng.Int64N(30*mib) // large, own segments
		}
	}
	for step := 0; step < steps; step++ {
		switch op := rng.IntN(100); {
		case op < 55 || len(live) == 0:
			n := randSize()
			cat := cuda.Category(rng.IntN(int(cuda.NumCategories)))
			size := RoundSize(n)
			// The model's choice: the best-fitting cached block of the pool.
			// Ties go to the oldest segment (the snapshot lists them
			// oldest first), then the lowest address.
			var want *BlockInfo
			for _, s := range a.Snapshot() {
				if s.Small != (size <= SmallSize) {
					continue
				}
				for _, bl := range s.Blocks {
					if !bl.Allocated && bl.Size >= size && (want == nil || bl.Size < want.Size) {
						want = &bl
					}
				}
			}
			before := a.Stats()
			b, err := a.Alloc(cat, n)
			after := a.Stats()
			retries += after.NumAllocRetries - before.NumAllocRetries
			if err != nil {
				if capacity == 0 || !errors.Is(err, cuda.ErrNoMemory) {
					t.Fatalf("step %d: Alloc(%d): %v", step, n, err)
				}
				if want != nil {
					t.Fatalf("step %d: out of memory with a fitting cached block %+v", step, *want)
				}
				if vs.reserved+SegmentSize(size) <= capacity {
					t.Fatalf("step %d: out of memory although %d + %d fits %d", step, vs.reserved, SegmentSize(size), capacity)
				}
				ooms++
				break
			}
			if want != nil && b.Addr() != want.Addr {
				t.Fatalf("step %d: %d bytes at %#x, want the best fit %+v", step, size, b.Addr(), *want)
			}
			if want == nil && after.Segment.Allocated == before.Segment.Allocated {
				t.Fatalf("step %d: no fitting cached block, yet no new segment", step)
			}
			live = append(live, liveBlock{b, b.Size(), n, cat})
		case op < 95:
			i := rng.IntN(len(live))
			a.Free(live[i].b)
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		case op < 98:
			if err := a.EmptyCache(); err != nil {
				t.Fatal(err)
			}
		default:
			a.ResetPeaks()
			peak = 0
		}
		checkAllocatorInvariants(t, step, a, vs, live, &peak, ooms, retries)
	}
	for _, l := range live {
		a.Free(l.b)
	}
	if err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	if st := a.Stats(); st.AllocatedBytes.Current != 0 || st.ReservedBytes.Current != 0 || vs.reserved != 0 {
		t.Errorf("after freeing everything and emptying the cache: allocated %d reserved %d (source %d)",
			st.AllocatedBytes.Current, st.ReservedBytes.Current, vs.reserved)
	}
	if ooms == 0 && capacity > 0 {
		t.Errorf("capacity %d never ran out: the test did not exercise out-of-memory", capacity)
	}
	t.Logf("seed %d: %d steps, %d live at the end, %d OOMs, %d retries, peak allocated %s",
		seed, steps, len(live), ooms, retries, cuda.FormatBytes(a.Stats().AllocatedBytes.Peak))
}

func checkAllocatorInvariants(t *testing.T, step int, a *Allocator, vs *VirtualSpace, live []liveBlock, peak *int64, ooms, retries int64) {
	t.Helper()
	st := a.Stats()
	snap := a.Snapshot()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("step %d: "+format, append([]any{step}, args...)...)
	}
	var alloc, req int64
	var catAlloc, catReq [cuda.NumCategories]int64
	liveAt := make(map[uintptr]liveBlock)
	for _, l := range live {
		alloc += l.size
		req += l.req
		catAlloc[l.cat] += l.size
		catReq[l.cat] += l.req
		liveAt[l.b.Addr()] = l
	}
	if alloc > *peak {
		*peak = alloc
	}
	if st.AllocatedBytes.Current != alloc || st.RequestedBytes.Current != req {
		fail("allocated %d requested %d, want the live sums %d %d", st.AllocatedBytes.Current, st.RequestedBytes.Current, alloc, req)
	}
	if st.AllocatedBytes.Peak != *peak {
		fail("peak %d, want %d", st.AllocatedBytes.Peak, *peak)
	}
	var atPeak int64
	for c := range catAlloc {
		if st.CategoryAllocated[c].Current != catAlloc[c] || st.CategoryRequested[c].Current != catReq[c] {
			fail("%s: %d/%d, want %d/%d", cuda.Category(c), st.CategoryAllocated[c].Current, st.CategoryRequested[c].Current, catAlloc[c], catReq[c])
		}
		if st.AtPeak[c] > st.CategoryAllocated[c].Peak {
			fail("%s: at peak %d above its own peak %d", cuda.Category(c), st.AtPeak[c], st.CategoryAllocated[c].Peak)
		}
		atPeak += st.AtPeak[c]
	}
	if atPeak != st.AllocatedBytes.Peak {
		fail("AtPeak sums to %d, want the peak %d", atPeak, st.AllocatedBytes.Peak)
	}
	if st.Allocation.Current != int64(len(live)) || st.Active.Current != int64(len(live)) || st.ActiveBytes != st.AllocatedBytes {
		fail("allocation %d active %d, want %d live", st.Allocation.Current, st.Active.Current, len(live))
	}
	var reserved, isb, is, seen int64
	for _, s := range snap {
		reserved += s.Size
		if s.Small != (s.Size == SmallBuffer) {
			fail("segment %#x: small %v with size %d", s.Base, s.Small, s.Size)
		}
		at := s.Base
		for i, b := range s.Blocks {
			if b.Addr != at {
				fail("segment %#x: block %d at %#x, want %#x (blocks must tile the segment)", s.Base, i, b.Addr, at)
			}
			if b.Size <= 0 || b.Size%MinBlockSize != 0 {
				fail("block %#x has size %d", b.Addr, b.Size)
			}
			at += uintptr(b.Size)
			if b.Allocated {
				l, ok := liveAt[b.Addr]
				if !ok || l.size != b.Size || l.cat != b.Cat || l.req != b.Requested {
					fail("allocated block %+v is not a live allocation (%+v)", b, l)
				}
				if s.Small != (l.size <= SmallSize) {
					fail("a %d-byte block in a segment with small=%v", l.size, s.Small)
				}
				seen++
				continue
			}
			if i > 0 && !s.Blocks[i-1].Allocated {
				fail("segment %#x: adjacent free blocks at %#x not merged", s.Base, b.Addr)
			}
			if len(s.Blocks) > 1 {
				isb += b.Size
				is++
			}
		}
		if at != s.Base+uintptr(s.Size) {
			fail("segment %#x: blocks end at %#x, want %#x", s.Base, at, s.Base+uintptr(s.Size))
		}
	}
	if seen != int64(len(live)) {
		fail("%d allocated blocks in segments, want %d", seen, len(live))
	}
	if st.ReservedBytes.Current != reserved || vs.reserved != reserved || st.Segment.Current != int64(len(snap)) {
		fail("reserved %d (source %d) in %d segments, want %d in %d", st.ReservedBytes.Current, vs.reserved, st.Segment.Current, reserved, len(snap))
	}
	if st.InactiveSplitBytes.Current != isb || st.InactiveSplit.Current != is {
		fail("inactive split %d bytes in %d blocks, want %d in %d", st.InactiveSplitBytes.Current, st.InactiveSplit.Current, isb, is)
	}
	if st.NumOOMs != ooms || st.NumAllocRetries != retries || st.NumAllocRetries < st.NumOOMs {
		fail("ooms %d retries %d, want %d %d", st.NumOOMs, st.NumAllocRetries, ooms, retries)
	}
	for _, s := range []cuda.Stat{st.AllocatedBytes, st.RequestedBytes, st.ReservedBytes, st.ActiveBytes, st.InactiveSplitBytes,
		st.Allocation, st.Segment, st.Active, st.InactiveSplit} {
		if s.Allocated-s.Freed != s.Current || s.Current > s.Peak || s.Current < 0 {
			fail("inconsistent stat %+v", s)
		}
	}
}

func BenchmarkAllocFree(b *testing.B) {
	// The mix of a training step: parameters stay, activations of a few
	// sizes come and go.
	a, _ := newTestAllocator(0)
	sizes := []int64{768 * 4, 256 * 768 * 4, 256 * 3072 * 4, 256 * 2304 * 4, 256 * 50257 * 4}
	live := make([]*Block, 0, 64)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		blk, err := a.Alloc(cuda.Activations, sizes[i%len(sizes)])
		if err != nil {
			b.Fatal(err)
		}
		live = append(live, blk)
		if len(live) == cap(live) {
			for j := len(live) - 1; j >= 0; j -= 2 {
				a.Free(live[j])
			}
			for j := 0; j < len(live); j += 2 {
				a.Free(live[j])
			}
			live = live[:0]
		}
	}
}

// events is a tracer that keeps every event.
type events []cuda.TraceEvent

func (e *events) Event(ev cuda.TraceEvent) { *e = append(*e, ev) }

// The trace tells everything the statistics count: replaying a random
// workload's events (with retries, out-of-memory and cache releases)
// gives the allocated, requested and reserved bytes, each category's bytes
// and their peaks, byte for byte; every oom event is a failed request; and
// each event carries the site set when it happened.
func TestTraceReplaysTheStats(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 42))
	a, _ := newTestAllocator(96 * mib)
	var tr events
	a.SetTracer(&tr)
	var live []*Block
	ooms := 0
	for step := range 3000 {
		a.SetSite(cuda.Site{Phase: "forward", Op: "op", Block: step % 5, Value: fmt.Sprint("v", step)})
		switch op := rng.IntN(100); {
		case op < 55 || len(live) == 0:
			n := []int64{rng.Int64N(2048), rng.Int64N(SmallSize) + 1, SmallSize + 1 + rng.Int64N(MinLargeAlloc), MinLargeAlloc + rng.Int64N(30*mib)}[rng.IntN(4)]
			b, err := a.Alloc(cuda.Category(rng.IntN(int(cuda.NumCategories))), n)
			if err != nil {
				ooms++
				continue
			}
			live = append(live, b)
		case op < 97:
			i := rng.IntN(len(live))
			a.Free(live[i])
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		default:
			if err := a.EmptyCache(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var alloc, req, res, peakAlloc, peakRes int64
	var cat [cuda.NumCategories]int64
	var catPeak [cuda.NumCategories]int64
	seenOOM := 0
	for i, e := range tr {
		switch e.Action {
		case cuda.TraceAlloc:
			alloc, req, cat[e.Category] = alloc+e.Size, req+e.Requested, cat[e.Category]+e.Size
		case cuda.TraceFree:
			alloc, req, cat[e.Category] = alloc-e.Size, req-e.Requested, cat[e.Category]-e.Size
		case cuda.TraceSegmentAlloc:
			res += e.Size
		case cuda.TraceSegmentFree:
			res -= e.Size
		case cuda.TraceOOM:
			seenOOM++
		}
		peakAlloc, peakRes = max(peakAlloc, alloc), max(peakRes, res)
		catPeak[e.Category] = max(catPeak[e.Category], cat[e.Category])
		if e.Site.Value == "" || i > 0 && e.Time < tr[i-1].Time {
			t.Fatalf("event %d (%s): no site or time going back: %+v", i, e.Action, e)
		}
	}
	st := a.Stats()
	if alloc != st.AllocatedBytes.Current || req != st.RequestedBytes.Current || res != st.ReservedBytes.Current ||
		peakAlloc != st.AllocatedBytes.Peak || peakRes != st.ReservedBytes.Peak {
		t.Errorf("replayed allocated %d (peak %d), requested %d, reserved %d (peak %d); stats %d (%d), %d, %d (%d)",
			alloc, peakAlloc, req, res, peakRes, st.AllocatedBytes.Current, st.AllocatedBytes.Peak, st.RequestedBytes.Current, st.ReservedBytes.Current, st.ReservedBytes.Peak)
	}
	for c := range cat {
		if cat[c] != st.CategoryAllocated[c].Current || catPeak[c] != st.CategoryAllocated[c].Peak {
			t.Errorf("%s: replayed %d (peak %d), stats %d (%d)", cuda.Category(c), cat[c], catPeak[c], st.CategoryAllocated[c].Current, st.CategoryAllocated[c].Peak)
		}
	}
	// The pools' statistics add up to every pool's.
	for name, f := range map[string]func(cuda.PoolStats) cuda.Stat{
		"allocated": func(p cuda.PoolStats) cuda.Stat { return p.AllocatedBytes }, "requested": func(p cuda.PoolStats) cuda.Stat { return p.RequestedBytes },
		"reserved": func(p cuda.PoolStats) cuda.Stat { return p.ReservedBytes }, "active": func(p cuda.PoolStats) cuda.Stat { return p.ActiveBytes },
		"inactive split": func(p cuda.PoolStats) cuda.Stat { return p.InactiveSplitBytes }, "allocations": func(p cuda.PoolStats) cuda.Stat { return p.Allocation },
		"segments": func(p cuda.PoolStats) cuda.Stat { return p.Segment }, "split blocks": func(p cuda.PoolStats) cuda.Stat { return p.InactiveSplit },
	} {
		all, sm, lg := f(st.PoolStats), f(st.Pools[cuda.SmallPool]), f(st.Pools[cuda.LargePool])
		if sm.Current+lg.Current != all.Current || sm.Allocated+lg.Allocated != all.Allocated || sm.Freed+lg.Freed != all.Freed ||
			sm.Peak > all.Peak || lg.Peak > all.Peak || all.Peak > sm.Peak+lg.Peak || sm.Allocated == 0 || lg.Allocated == 0 {
			t.Errorf("%s: small %+v and large %+v do not add up to %+v", name, sm, lg, all)
		}
	}
	if seenOOM != ooms || ooms == 0 || int64(ooms) != st.NumOOMs {
		t.Errorf("%d oom events, %d failed requests, %d counted", seenOOM, ooms, st.NumOOMs)
	}
	for _, s := range a.Snapshot() {
		for _, b := range s.Blocks {
			if b.Allocated && b.Site.Value == "" {
				t.Errorf("block %#x: allocated with no site", b.Addr)
			}
		}
	}
}
