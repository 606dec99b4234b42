package alloc

import (
	"fmt"
	"math/bits"
	"sync"
	"trainmem/cuda"
)

// virtualBase is where the shape device's address space starts: 1 TiB on
// 64-bit machines, far from zero so that a stray zero address stands out.
const virtualBase uintptr = 1 << (bits.UintSize - 24)

// MaxVirtualSpace is the shape device's address space, the most it can
// reserve however large its capacity: 2^62 bytes (4 EiB), so that every
// sum of the allocator's statistics stays inside int64.
const MaxVirtualSpace int64 = 1 << 62

// VirtualSpace is the shape device's SegmentSource: segments are address
// ranges with nothing behind them, taken from a bump pointer and never
// reused, and a segment fails when it would take the reserved bytes past
// the capacity, as cudaMalloc fails on a card of that size.
type VirtualSpace struct {
	mu       sync.Mutex
	capacity int64 // 0: unlimited
	reserved int64
	next     uintptr
	live     map[uintptr]int64
}

// NewVirtualSpace returns a space of capacity bytes (0: unlimited).
func NewVirtualSpace(capacity int64) *VirtualSpace {
	if capacity > MaxVirtualSpace {
		capacity = MaxVirtualSpace
	}
	return &VirtualSpace{capacity: capacity, next: virtualBase, live: make(map[uintptr]int64)}
}

// Capacity is the space's capacity as given (0: unlimited), at most
// MaxVirtualSpace.
func (v *VirtualSpace) Capacity() int64 { return v.capacity }

// limit is the most the space reserves: the capacity, or MaxVirtualSpace.
func (v *VirtualSpace) limit() int64 {
	if v.capacity > 0 {
		return v.capacity
	}
	return MaxVirtualSpace
}

// AllocSegment implements SegmentSource.
func (v *VirtualSpace) AllocSegment(size int64) (Segment, error) {
	if size <= 0 {
		return Segment{}, fmt.Errorf("cuda: shape: segment of %d bytes", size)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if size > v.limit()-v.reserved { // reserved ≤ limit: no overflow
		return Segment{}, fmt.Errorf("%w: a segment of %s does not fit (%s of %s reserved)",
			cuda.ErrNoMemory, cuda.FormatBytes(size), cuda.FormatBytes(v.reserved), cuda.FormatBytes(v.limit()))
	}
	s := Segment{Base: v.next, Size: size}
	// Keep segments aligned to 2 MiB, as the CUDA driver does.
	v.next += uintptr((size + RoundLarge - 1) / RoundLarge * RoundLarge)
	v.reserved += size
	v.live[s.Base] = size
	return s, nil
}

// FreeSegment implements SegmentSource.
func (v *VirtualSpace) FreeSegment(s Segment) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if n, ok := v.live[s.Base]; !ok || n != s.Size {
		return fmt.Errorf("cuda: shape: freeing unknown segment %#x (%d bytes)", s.Base, s.Size)
	}
	delete(v.live, s.Base)
	v.reserved -= s.Size
	return nil
}

// MemInfo reports capacity minus reserved and the capacity; an unlimited
// space reports a total of MaxVirtualSpace.
func (v *VirtualSpace) MemInfo() (free, total int64, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.limit() - v.reserved, v.limit(), nil
}
