package cuda

import (
	"fmt"
	"math"
)

// allocDevice is the part every device shares: allocation through the
// caching allocator and its statistics.
type allocDevice struct {
	alloc *Allocator
}

// Alloc implements Device.Alloc. A request for 0 elements still takes a
// block of MinBlockSize bytes (requested 0), so that every buffer has an
// address of its own and a Free.
func (d *allocDevice) Alloc(cat Category, dt DType, n int) (*Buffer, error) {
	if dt > I32 {
		return nil, fmt.Errorf("cuda: Alloc: unknown dtype %d", uint8(dt))
	}
	if n < 0 || int64(n) > math.MaxInt64/8 {
		return nil, fmt.Errorf("cuda: Alloc: %d elements of %s: out of range (valid: 0 to 2^60)", n, dt)
	}
	bytes := int64(n) * int64(dt.Size())
	blk, err := d.alloc.Alloc(cat, bytes)
	if err != nil {
		return nil, err
	}
	b := &Buffer{DType: dt, Len: n, Cat: cat, addr: blk.addr, block: blk}
	if h := blk.Host(); h != nil {
		b.host = h[:bytes:bytes]
	}
	return b, nil
}

// Free implements Device.Free. Freeing nil does nothing; freeing a view or
// a buffer twice is a programming error and panics.
func (d *allocDevice) Free(b *Buffer) {
	switch {
	case b == nil:
		return
	case b.block == freedBlock:
		panic(fmt.Sprintf("cuda: Free: %s was already freed", b))
	case b.block == nil:
		panic(fmt.Sprintf("cuda: Free: %s is a view; free the buffer it views", b))
	}
	d.alloc.Free(b.block)
	b.block = freedBlock
	b.host = nil
}

// Stats implements Device.Stats.
func (d *allocDevice) Stats() Stats { return d.alloc.Stats() }

// ResetPeakStats implements Device.ResetPeakStats.
func (d *allocDevice) ResetPeakStats() { d.alloc.ResetPeaks() }

// EmptyCache implements Device.EmptyCache.
func (d *allocDevice) EmptyCache() error { return d.alloc.EmptyCache() }

// Allocator returns the device's caching allocator, for snapshots and
// largest-free-block queries.
func (d *allocDevice) Allocator() *Allocator { return d.alloc }
