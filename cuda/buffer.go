package cuda

import "fmt"

// Buffer is a range of device memory holding Len elements of DType. A buffer
// from Device.Alloc owns an allocation; a View shares its parent's memory
// and must not be freed.
type Buffer struct {
	DType DType    // storage type
	Len   int      // elements
	Cat   Category // the category the owning allocation is tagged with

	addr  uintptr    // device address of element 0 (virtual on Shape)
	host  []byte     // the bytes on the host device (nil elsewhere)
	owner Allocation // what Device.Alloc took; nil for views
	freed bool       // Device.Free gave it back
}

// Allocation is the memory a buffer from Device.Alloc owns: a block of the
// device's caching allocator.
type Allocation interface {
	Size() int64 // bytes, after rounding
}

// NewBuffer is for device implementations: n elements of dt at addr, tagged
// cat, owning owner (nil for memory no allocator hands out, such as a
// staging copy). host is the memory's bytes when the host can address it
// (the host device, staging copies), else nil; it must hold at least
// n·dt.Size() bytes and is cut to that length.
func NewBuffer(dt DType, n int, cat Category, addr uintptr, host []byte, owner Allocation) *Buffer {
	b := &Buffer{DType: dt, Len: n, Cat: cat, addr: addr, owner: owner}
	if host != nil {
		sz := int(b.Bytes())
		b.host = host[:sz:sz]
	}
	return b
}

// Bytes is the buffer's size in bytes (Len·DType.Size()), before rounding.
func (b *Buffer) Bytes() int64 { return int64(b.Len) * int64(b.DType.Size()) }

// Addr is the device address of the first element.
func (b *Buffer) Addr() uintptr { return b.addr }

// Host is the buffer's memory when the host can address it (the host
// device's buffers and their views), else nil.
func (b *Buffer) Host() []byte { return b.host }

// Owner is the allocation the buffer owns: nil for views and for buffers
// already freed.
func (b *Buffer) Owner() Allocation {
	if b.freed {
		return nil
	}
	return b.owner
}

// Release is Device.Free's part on the buffer: it marks b freed, so that
// kernels refuse it, and returns the allocation to give back. Releasing a
// view or a buffer twice is a programming error and panics.
func (b *Buffer) Release() Allocation {
	switch {
	case b.freed:
		panic(fmt.Sprintf("cuda: Free: %s was already freed", b))
	case b.owner == nil:
		panic(fmt.Sprintf("cuda: Free: %s is a view; free the buffer it views", b))
	}
	a := b.owner
	b.freed, b.owner, b.host = true, nil, nil
	return a
}

// View returns the n elements starting at element off, sharing b's memory.
// A range outside b is a programming error and panics.
func (b *Buffer) View(off, n int) *Buffer {
	if off < 0 || n < 0 || off+n > b.Len {
		panic(fmt.Sprintf("cuda: view [%d, %d) outside a buffer of %d elements", off, off+n, b.Len))
	}
	sz := b.DType.Size()
	v := &Buffer{DType: b.DType, Len: n, Cat: b.Cat, addr: b.addr + uintptr(off*sz)}
	if b.host != nil {
		v.host = b.host[off*sz : (off+n)*sz : (off+n)*sz]
	}
	return v
}

// IsView reports whether b shares another buffer's memory.
func (b *Buffer) IsView() bool { return b.owner == nil && !b.freed }

func (b *Buffer) String() string {
	return fmt.Sprintf("%s[%d] %s @%#x", b.DType, b.Len, b.Cat, b.addr)
}
