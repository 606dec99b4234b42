package cuda

import "fmt"

// Buffer is a range of device memory holding Len elements of DType. A buffer
// from Device.Alloc owns an allocator block; a View shares its parent's
// memory and must not be freed.
type Buffer struct {
	DType DType    // storage type
	Len   int      // elements
	Cat   Category // the category the owning allocation is tagged with

	addr  uintptr // device address of element 0 (virtual on Shape)
	host  []byte  // the bytes on the host device (nil elsewhere)
	block *Block  // owning allocator block; nil for views
}

// Bytes is the buffer's size in bytes (Len·DType.Size()), before rounding.
func (b *Buffer) Bytes() int64 { return int64(b.Len) * int64(b.DType.Size()) }

// Addr is the device address of the first element.
func (b *Buffer) Addr() uintptr { return b.addr }

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
func (b *Buffer) IsView() bool { return b.block == nil }

func (b *Buffer) String() string {
	return fmt.Sprintf("%s[%d] %s @%#x", b.DType, b.Len, b.Cat, b.addr)
}
