// Package alloc is trainmem's caching allocator, the one every device
// allocates through; it reaches a device's memory only through a
// SegmentSource, and Pool puts it behind the cuda.Device methods that
// allocate.
//
// The caching allocator follows PyTorch's CUDACachingAllocator
// (c10/cuda/CUDACachingAllocator.cpp), reduced to what trainmem needs: one
// stream, no expandable segments, no max_split_size, no graph pools. What it
// keeps is everything that decides where memory goes:
//
//   - every request is rounded up to a multiple of 512 bytes (minimum 512);
//   - blocks of at most 1 MiB come from the small pool, whose segments are
//     2 MiB; larger blocks come from the large pool, whose segments are
//     20 MiB for requests under 10 MiB and the request rounded up to 2 MiB
//     otherwise;
//   - a request takes the smallest cached free block of its pool that fits,
//     and only when none fits a new segment. Ties go to the block of the
//     oldest segment, then the lowest address in it. (PyTorch breaks ties
//     by address alone; segment age makes every decision a function of the
//     requests only, so that Shape's virtual addresses and the host's mmap
//     addresses, which the kernel hands out top-down, give the same
//     statistics. On a GPU, whose addresses grow, the two orders agree.)
//   - a block larger than the request is split, the request taking the low
//     addresses, when the remainder is at least 512 bytes (small pool) or
//     more than 1 MiB (large pool);
//   - a freed block merges with its free neighbours in the same segment and
//     stays cached; segments go back to the device only on EmptyCache, on
//     Close, or when a segment allocation fails (then every cached unsplit
//     segment is released and the allocation retried once before the
//     allocator reports out of memory).
//
// The statistics follow PyTorch's memory_stats() accounting step for step,
// inactive-split bookkeeping included, so that the numbers read the same.
package alloc

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
	"trainmem/cuda"
)

// Allocator constants, named and valued as in PyTorch's caching allocator.
const (
	MinBlockSize  = 512       // kMinBlockSize: every block is a multiple of this
	SmallSize     = 1 << 20   // kSmallSize: largest request served by the small pool
	SmallBuffer   = 2 << 20   // kSmallBuffer: small-pool segment size
	LargeBuffer   = 20 << 20  // kLargeBuffer: large-pool segment for requests under MinLargeAlloc
	MinLargeAlloc = 10 << 20  // kMinLargeAlloc: from here segments are sized to the request
	RoundLarge    = 2 << 20   // kRoundLarge: large segments are multiples of this
	largeSplitMin = SmallSize // a large block splits only when more than this remains
)

// Segment is one contiguous range of device memory as a SegmentSource hands
// it out: cudaMalloc's result on a GPU, an anonymous mapping on the host, an
// address range and nothing else on Shape.
type Segment struct {
	Base uintptr // device address of the first byte (virtual on Shape)
	Size int64   // bytes
	Host []byte  // the memory itself, on the host device only (len Size)
}

// SegmentSource is where an Allocator takes segments from: the device
// beneath it.
type SegmentSource interface {
	// AllocSegment returns a new segment of exactly size bytes. An error
	// that matches ErrNoMemory (errors.Is) means the device is full; any
	// other error is passed to the caller unchanged.
	AllocSegment(size int64) (Segment, error)
	// FreeSegment gives a segment from AllocSegment back to the device.
	FreeSegment(Segment) error
	// MemInfo returns the device's free and total bytes, for
	// out-of-memory reports.
	MemInfo() (free, total int64, err error)
}

// Block is a range of a segment as the allocator tracks it: handed out
// (allocated) or cached (free). Buffers from Device.Alloc own one block.
type Block struct {
	addr      uintptr
	size      int64 // rounded size, a multiple of MinBlockSize
	requested int64 // bytes asked for (allocated blocks only)
	cat       cuda.Category
	site      cuda.Site // what allocated it (kept while a tracer is set)
	allocated bool
	seg       *segment
	pool      *blockPool
	prev      *Block // neighbours in the same segment, by address
	next      *Block
}

// Addr is the block's device address.
func (b *Block) Addr() uintptr { return b.addr }

// Size is the block's size in bytes, a multiple of MinBlockSize.
func (b *Block) Size() int64 { return b.size }

// Requested is the size that was asked for, before rounding.
func (b *Block) Requested() int64 { return b.requested }

// Category is the category the allocation is tagged with.
func (b *Block) Category() cuda.Category { return b.cat }

// Host returns the block's bytes (length Size) on the host device, nil
// elsewhere.
func (b *Block) Host() []byte {
	if b.seg.Host == nil {
		return nil
	}
	off := int64(b.addr - b.seg.Base)
	return b.seg.Host[off : off+b.size : off+b.size]
}

func (b *Block) isSplit() bool { return b.prev != nil || b.next != nil }

type segment struct {
	Segment
	seq  uint64 // the order in which segments were taken: ties in best fit go to older ones
	pool *blockPool
	// cat and site are the request the segment was first carved for (its
	// category colours it in a memory viewer's segment timeline).
	cat  cuda.Category
	site cuda.Site
	head *Block // the block at Base
}

// blockPool holds the free blocks of one pool ordered by (size, segment
// age, address),
// so that the first block not smaller than a request is the best fit. A
// sorted slice is fast for the few hundred free blocks a training run keeps.
type blockPool struct {
	name  string
	small bool
	free  []*Block
}

func blockLess(a, b *Block) bool {
	if a.size != b.size {
		return a.size < b.size
	}
	if a.seg.seq != b.seg.seq {
		return a.seg.seq < b.seg.seq
	}
	return a.addr < b.addr
}

func (p *blockPool) search(b *Block) int {
	return sort.Search(len(p.free), func(i int) bool { return !blockLess(p.free[i], b) })
}

func (p *blockPool) insert(b *Block) {
	i := p.search(b)
	p.free = append(p.free, nil)
	copy(p.free[i+1:], p.free[i:])
	p.free[i] = b
}

func (p *blockPool) remove(b *Block) {
	i := p.search(b)
	if i == len(p.free) || p.free[i] != b {
		panic(fmt.Sprintf("cuda: allocator: free block %#x (%d bytes) missing from the %s pool", b.addr, b.size, p.name))
	}
	copy(p.free[i:], p.free[i+1:])
	p.free[len(p.free)-1] = nil
	p.free = p.free[:len(p.free)-1]
}

// bestFit returns the smallest free block of at least size bytes (the
// first in pool order among equals), or nil.
func (p *blockPool) bestFit(size int64) *Block {
	i := sort.Search(len(p.free), func(i int) bool { return p.free[i].size >= size })
	if i == len(p.free) {
		return nil
	}
	return p.free[i]
}

// Allocator is the caching allocator every device allocates through. It is
// safe for concurrent use.
type Allocator struct {
	mu     sync.Mutex
	src    SegmentSource
	name   string // the device, for error messages
	small  blockPool
	large  blockPool
	segs   map[uintptr]*segment
	nseg   uint64 // segments taken so far
	stats  cuda.Stats
	closed bool

	tracer cuda.Tracer // receives every event while set
	site   cuda.Site   // the site of the events that follow
	t0     time.Time   // when the tracer was set
	// clock, when set, is the device's modelled clock (cuda.TimeModel),
	// which the events' times read instead of the host's; c0 is its
	// reading when the tracer was set.
	clock func() time.Duration
	c0    time.Duration
}

// SetClock makes the events' times read clock, a device's modelled clock
// (nil: the host's). clock must not call the allocator.
func (a *Allocator) SetClock(clock func() time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.clock = clock
	if clock != nil {
		a.c0 = clock()
	}
}

// SetTracer makes tr receive every event from now on (nil: none).
func (a *Allocator) SetTracer(tr cuda.Tracer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tracer, a.t0 = tr, time.Now()
	if a.clock != nil {
		a.c0 = a.clock()
	}
}

// SetSite is the site of the events that follow.
func (a *Allocator) SetSite(s cuda.Site) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.site = s
}

// trace sends e to the tracer, if one is set; a.mu is held.
func (a *Allocator) trace(e cuda.TraceEvent) {
	if a.tracer != nil {
		if a.clock != nil {
			e.Time = a.clock() - a.c0
		} else {
			e.Time = time.Since(a.t0)
		}
		a.tracer.Event(e)
	}
}

// NewAllocator returns an empty allocator over src. name says which device
// it serves, for out-of-memory reports.
func NewAllocator(name string, src SegmentSource) *Allocator {
	return &Allocator{
		src:   src,
		name:  name,
		small: blockPool{name: "small", small: true},
		large: blockPool{name: "large"},
		segs:  make(map[uintptr]*segment),
	}
}

// RoundSize is the block size a request of n bytes gets: n rounded up to a
// multiple of MinBlockSize, at least MinBlockSize.
func RoundSize(n int64) int64 {
	if n < MinBlockSize {
		return MinBlockSize
	}
	return (n + MinBlockSize - 1) / MinBlockSize * MinBlockSize
}

// SegmentSize is the size of the segment the allocator takes from the
// device when no cached block fits a block of size bytes (already rounded).
func SegmentSize(size int64) int64 {
	switch {
	case size <= SmallSize:
		return SmallBuffer
	case size < MinLargeAlloc:
		return LargeBuffer
	default:
		return (size + RoundLarge - 1) / RoundLarge * RoundLarge
	}
}

func (a *Allocator) poolFor(size int64) *blockPool {
	if size <= SmallSize {
		return &a.small
	}
	return &a.large
}

func shouldSplit(b *Block, size int64) bool {
	rem := b.size - size
	if b.pool.small {
		return rem >= MinBlockSize
	}
	return rem > largeSplitMin
}

// Alloc hands out a block of at least n bytes tagged cat. It fails with an
// *OutOfMemoryError when the device has no room even after the cache was
// emptied.
func (a *Allocator) Alloc(cat cuda.Category, n int64) (*Block, error) {
	if n < 0 {
		return nil, fmt.Errorf("cuda: Alloc: %d bytes requested", n)
	}
	if cat >= cuda.NumCategories {
		return nil, fmt.Errorf("cuda: Alloc: unknown category %d", uint8(cat))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil, fmt.Errorf("cuda: Alloc: %s is closed", a.name)
	}
	size := RoundSize(n)
	pool := a.poolFor(size)
	b := pool.bestFit(size)
	if b == nil {
		var err error
		b, err = a.newSegment(pool, size, cat, false)
		if errors.Is(err, cuda.ErrNoMemory) {
			// As PyTorch: give every cached unsplit segment back and retry.
			if err = a.releaseCached(); err == nil {
				b, err = a.newSegment(pool, size, cat, true)
			}
			if errors.Is(err, cuda.ErrNoMemory) {
				a.stats.NumOOMs++
				oom := a.oomError(cat, n, size)
				if a.tracer != nil {
					a.trace(cuda.TraceEvent{Action: cuda.TraceOOM, Size: size, Requested: n, Category: cat, Site: a.site,
						DeviceFree: oom.(*cuda.OutOfMemoryError).Free, State: a.snapshot()})
				}
				return nil, oom
			}
		}
		if err != nil {
			return nil, err
		}
	} else {
		pool.remove(b)
	}
	a.take(b, size, n, cat)
	a.trace(cuda.TraceEvent{Action: cuda.TraceAlloc, Addr: b.addr, Size: b.size, Requested: n, Category: cat, Site: a.site})
	return b, nil
}

// newSegment takes a segment for a block of size bytes, a request of
// category cat, and returns it as one free block, not yet in the pool.
func (a *Allocator) newSegment(pool *blockPool, size int64, cat cuda.Category, retry bool) (*Block, error) {
	if retry {
		a.stats.NumAllocRetries++
	}
	s, err := a.src.AllocSegment(SegmentSize(size))
	if err != nil {
		return nil, err
	}
	a.nseg++
	seg := &segment{Segment: s, seq: a.nseg, pool: pool, cat: cat, site: a.site}
	a.segs[s.Base] = seg
	a.both(pool, func(st *cuda.PoolStats) {
		st.Segment.Add(1)
		st.ReservedBytes.Add(s.Size)
	})
	a.trace(cuda.TraceEvent{Action: cuda.TraceSegmentAlloc, Addr: s.Base, Size: s.Size, Category: cat, Site: a.site})
	seg.head = &Block{addr: s.Base, size: s.Size, seg: seg, pool: pool}
	return seg.head, nil
}

// take marks the free block b (out of its pool) allocated for a request of
// n bytes rounded to size, splitting off the remainder when the pool's rule
// says so.
func (a *Allocator) take(b *Block, size, n int64, cat cuda.Category) {
	alreadySplit := b.isSplit()
	if shouldSplit(b, size) {
		rest := &Block{addr: b.addr + uintptr(size), size: b.size - size, seg: b.seg, pool: b.pool,
			prev: b, next: b.next}
		if b.next != nil {
			b.next.prev = rest
		}
		b.next = rest
		b.size = size
		b.pool.insert(rest)
		a.both(b.pool, func(st *cuda.PoolStats) {
			if alreadySplit {
				// An inactive split block shrinks by size bytes.
				st.InactiveSplitBytes.Sub(size)
			} else {
				// An unsplit block becomes split: its remainder is inactive.
				st.InactiveSplitBytes.Add(rest.size)
				st.InactiveSplit.Add(1)
			}
		})
	} else if alreadySplit {
		// An inactive split block becomes active whole.
		a.both(b.pool, func(st *cuda.PoolStats) {
			st.InactiveSplitBytes.Sub(b.size)
			st.InactiveSplit.Sub(1)
		})
	}
	b.allocated = true
	b.requested = n
	b.cat = cat
	b.site = a.site

	st := &a.stats
	st.NumAllocs++
	st.CategoryAllocated[cat].Add(b.size)
	st.CategoryRequested[cat].Add(n)
	peak := st.AllocatedBytes.Peak
	a.both(b.pool, func(ps *cuda.PoolStats) {
		ps.Allocation.Add(1)
		ps.Active.Add(1)
		ps.ActiveBytes.Add(b.size)
		ps.RequestedBytes.Add(n)
		ps.AllocatedBytes.Add(b.size)
	})
	if st.AllocatedBytes.Current > peak {
		for c := range st.AtPeak {
			st.AtPeak[c] = st.CategoryAllocated[c].Current
		}
	}
}

// both applies f to the statistics of every pool and to those of p.
func (a *Allocator) both(p *blockPool, f func(*cuda.PoolStats)) {
	f(&a.stats.PoolStats)
	if p.small {
		f(&a.stats.Pools[cuda.SmallPool])
	} else {
		f(&a.stats.Pools[cuda.LargePool])
	}
}

// Free returns b to the cache, merging it with free neighbours. Freeing a
// block twice is a programming error and panics; freeing one after Close
// does nothing (Close gave everything back already).
func (a *Allocator) Free(b *Block) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		b.allocated = false
		return
	}
	if b.seg == nil || a.segs[b.seg.Base] != b.seg {
		panic(fmt.Sprintf("cuda: Free: block %#x (%d bytes) does not belong to %s", b.addr, b.size, a.name))
	}
	if !b.allocated {
		panic(fmt.Sprintf("cuda: Free: block %#x (%d bytes) is not allocated (double free?)", b.addr, b.size))
	}
	a.trace(cuda.TraceEvent{Action: cuda.TraceFree, Addr: b.addr, Size: b.size, Requested: b.requested, Category: b.cat, Site: a.site})
	st := &a.stats
	st.NumFrees++
	st.CategoryAllocated[b.cat].Sub(b.size)
	st.CategoryRequested[b.cat].Sub(b.requested)
	a.both(b.pool, func(ps *cuda.PoolStats) {
		ps.Allocation.Sub(1)
		ps.AllocatedBytes.Sub(b.size)
		ps.RequestedBytes.Sub(b.requested)
		ps.Active.Sub(1)
		ps.ActiveBytes.Sub(b.size)
	})
	b.allocated = false
	b.requested = 0

	var dBlocks, dBytes int64
	for _, nb := range [2]*Block{b.prev, b.next} {
		if n := a.merge(b, nb); n > 0 {
			dBlocks--
			dBytes -= n
		}
	}
	b.pool.insert(b)
	if b.isSplit() {
		dBlocks++
		dBytes += b.size
	}
	a.both(b.pool, func(ps *cuda.PoolStats) {
		ps.InactiveSplit.Change(dBlocks)
		ps.InactiveSplitBytes.Change(dBytes)
	})
}

// merge folds the free neighbour nb into b and returns the bytes it
// subsumed (0 when nb is nil or allocated).
func (a *Allocator) merge(b, nb *Block) int64 {
	if nb == nil || nb.allocated {
		return 0
	}
	b.pool.remove(nb)
	if nb == b.prev {
		b.addr = nb.addr
		b.prev = nb.prev
		if b.prev != nil {
			b.prev.next = b
		} else {
			b.seg.head = b
		}
	} else {
		b.next = nb.next
		if b.next != nil {
			b.next.prev = b
		}
	}
	b.size += nb.size
	return nb.size
}

// releaseCached gives every cached free block that is a whole segment back
// to the device (PyTorch's release_cached_blocks).
func (a *Allocator) releaseCached() error {
	for _, p := range [2]*blockPool{&a.small, &a.large} {
		var keep []*Block
		var firstErr error
		for _, b := range p.free {
			if b.isSplit() {
				keep = append(keep, b)
				continue
			}
			if err := a.src.FreeSegment(b.seg.Segment); err != nil {
				keep = append(keep, b)
				if firstErr == nil {
					firstErr = err
				}
				continue
			}
			delete(a.segs, b.seg.Base)
			a.both(p, func(ps *cuda.PoolStats) {
				ps.Segment.Sub(1)
				ps.ReservedBytes.Sub(b.size)
			})
			a.trace(cuda.TraceEvent{Action: cuda.TraceSegmentFree, Addr: b.seg.Base, Size: b.size, Category: b.seg.cat, Site: a.site})
		}
		p.free = keep
		if firstErr != nil {
			return fmt.Errorf("cuda: releasing cached segments of %s: %w", a.name, firstErr)
		}
	}
	return nil
}

// EmptyCache gives every cached segment with no allocated block back to the
// device.
func (a *Allocator) EmptyCache() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.releaseCached()
}

// Close gives every segment back to the device, live blocks included; the
// allocator takes no further requests. Buffers still alive become invalid.
func (a *Allocator) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	var firstErr error
	for _, s := range a.segs {
		if err := a.src.FreeSegment(s.Segment); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	a.segs = nil
	a.small.free, a.large.free = nil, nil
	return firstErr
}

// Stats returns a copy of the statistics.
func (a *Allocator) Stats() cuda.Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

// ResetPeaks sets every peak to its current value, AtPeak included.
func (a *Allocator) ResetPeaks() {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := &a.stats
	for _, ps := range []*cuda.PoolStats{&st.PoolStats, &st.Pools[cuda.SmallPool], &st.Pools[cuda.LargePool]} {
		for _, s := range []*cuda.Stat{&ps.AllocatedBytes, &ps.RequestedBytes, &ps.ReservedBytes, &ps.ActiveBytes,
			&ps.InactiveSplitBytes, &ps.Allocation, &ps.Segment, &ps.Active, &ps.InactiveSplit} {
			s.ResetPeak()
		}
	}
	for c := range st.CategoryAllocated {
		st.CategoryAllocated[c].ResetPeak()
		st.CategoryRequested[c].ResetPeak()
		st.AtPeak[c] = st.CategoryAllocated[c].Current
	}
}

// LargestFreeBlock is the largest cached free block, in bytes.
func (a *Allocator) LargestFreeBlock() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.largestFree()
}

func (a *Allocator) largestFree() int64 {
	var m int64
	for _, p := range [2]*blockPool{&a.small, &a.large} {
		if n := len(p.free); n > 0 && p.free[n-1].size > m {
			m = p.free[n-1].size
		}
	}
	return m
}

// BlockInfo describes one block of a segment in a Snapshot.
type BlockInfo struct {
	Addr      uintptr
	Size      int64
	Requested int64 // 0 for free blocks
	Allocated bool
	Cat       cuda.Category // meaningful for allocated blocks
	Site      cuda.Site     // what allocated it, while a tracer was set
}

// SegmentInfo describes one segment and its blocks, in address order, as
// torch.cuda.memory_snapshot() does.
type SegmentInfo struct {
	Base  uintptr
	Size  int64
	Seq   uint64 // the segment's age: 1 for the first one the allocator took
	Small bool   // from the small pool
	// Cat and Site are the request the segment was first carved for.
	Cat    cuda.Category
	Site   cuda.Site
	Blocks []BlockInfo
}

// Snapshot lists every segment the allocator holds, oldest first.
func (a *Allocator) Snapshot() []SegmentInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.snapshot()
}

func (a *Allocator) snapshot() []SegmentInfo {
	out := make([]SegmentInfo, 0, len(a.segs))
	for _, s := range a.segs {
		si := SegmentInfo{Base: s.Base, Size: s.Size, Seq: s.seq, Small: s.pool.small, Cat: s.cat, Site: s.site}
		for b := s.head; b != nil; b = b.next {
			si.Blocks = append(si.Blocks, BlockInfo{Addr: b.addr, Size: b.size, Requested: b.requested,
				Allocated: b.allocated, Cat: b.cat, Site: b.site})
		}
		out = append(out, si)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

func (a *Allocator) oomError(cat cuda.Category, n, size int64) error {
	e := &cuda.OutOfMemoryError{Device: a.name, Requested: n, Rounded: size, Segment: SegmentSize(size), Category: cat,
		Reserved: a.stats.ReservedBytes.Current, LargestFree: a.largestFree()}
	for c := range e.Allocated {
		e.Allocated[c] = a.stats.CategoryAllocated[c].Current
	}
	if free, total, err := a.src.MemInfo(); err == nil {
		e.Free, e.Capacity = free, total
	}
	return e
}
