package cuda

import (
	"errors"
	"fmt"
	"strings"
)

// ErrNoMemory is what a segment source returns (possibly wrapped) when the
// device has no room for a segment; the caching allocator then empties its
// cache and retries once. An *OutOfMemoryError, and a GPU's
// CUDA_ERROR_OUT_OF_MEMORY, also match ErrNoMemory with errors.Is.
var ErrNoMemory = errors.New("cuda: out of memory")

// OutOfMemoryError is the allocator's report when a request does not fit,
// shaped like the message of a real card.
type OutOfMemoryError struct {
	Device    string   // the device's name
	Requested int64    // bytes asked for
	Rounded   int64    // the block size the request needed
	Segment   int64    // the segment size the allocator asked the device for
	Category  Category // the request's tag
	Capacity  int64    // the device's total memory (0 when unknown or unlimited)
	Free      int64    // the device's free memory as it reported it
	Reserved  int64    // bytes in segments the allocator holds
	Allocated [NumCategories]int64
	// LargestFree is the largest cached free block: with fragmentation it
	// is smaller than Reserved minus allocated.
	LargestFree int64
}

// AllocatedTotal is the sum of the allocated bytes over every category.
func (e *OutOfMemoryError) AllocatedTotal() int64 {
	var n int64
	for _, v := range e.Allocated {
		n += v
	}
	return n
}

// Error reads like a real card's out-of-memory message: what was asked
// for, the device's capacity, and where the reserved memory went.
func (e *OutOfMemoryError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "cuda: out of memory on %s: tried to allocate %s (%d bytes, %s; block %s, new segment %s).",
		e.Device, FormatBytes(e.Requested), e.Requested, e.Category, FormatBytes(e.Rounded), FormatBytes(e.Segment))
	if e.Capacity > 0 {
		fmt.Fprintf(&b, " The device has a total capacity of %s of which %s is free.", FormatBytes(e.Capacity), FormatBytes(e.Free))
	}
	alloc := e.AllocatedTotal()
	fmt.Fprintf(&b, " The allocator has %s reserved: %s allocated", FormatBytes(e.Reserved), FormatBytes(alloc))
	var parts []string
	for c, v := range e.Allocated {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", Category(c), FormatBytes(v)))
		}
	}
	if len(parts) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(parts, ", "))
	}
	fmt.Fprintf(&b, " and %s reserved but unallocated; the largest free block is %s.",
		FormatBytes(e.Reserved-alloc), FormatBytes(e.LargestFree))
	return b.String()
}

// Is makes an out-of-memory report match ErrNoMemory.
func (e *OutOfMemoryError) Is(target error) bool { return target == ErrNoMemory }

// FormatBytes writes n in binary units as PyTorch's messages do
// ("20.00 MiB").
func FormatBytes(n int64) string {
	neg := n < 0
	if neg {
		n = -n
	}
	units := []string{"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	s := fmt.Sprintf("%.2f %s", v, units[u])
	if u == 0 {
		s = fmt.Sprintf("%d bytes", n)
	}
	if neg {
		return "-" + s
	}
	return s
}
