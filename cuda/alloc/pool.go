package alloc

import (
	"fmt"
	"math"

	"trainmem/cuda"
)

// Pool is the part of a cuda.Device every implementation shares: Alloc,
// Free and the statistics, through one caching Allocator. Devices embed
// it.
type Pool struct {
	alloc *Allocator
}

// NewPool returns a pool over a new allocator named name that takes its
// segments from src.
func NewPool(name string, src SegmentSource) Pool {
	return Pool{alloc: NewAllocator(name, src)}
}

// Alloc implements cuda.Device.Alloc. A request for 0 elements still takes
// a block of MinBlockSize bytes (requested 0), so that every buffer has an
// address of its own and a Free.
func (p *Pool) Alloc(cat cuda.Category, dt cuda.DType, n int) (*cuda.Buffer, error) {
	if dt > cuda.U8 {
		return nil, fmt.Errorf("cuda: Alloc: unknown dtype %d", uint8(dt))
	}
	if n < 0 || int64(n) > math.MaxInt64/8 {
		return nil, fmt.Errorf("cuda: Alloc: %d elements of %s: out of range (valid: 0 to 2^60)", n, dt)
	}
	blk, err := p.alloc.Alloc(cat, int64(n)*int64(dt.Size()))
	if err != nil {
		return nil, err
	}
	return cuda.NewBuffer(dt, n, cat, blk.addr, blk.Host(), blk), nil
}

// Free implements cuda.Device.Free. Freeing nil does nothing; freeing a
// view or a buffer twice is a programming error and panics.
func (p *Pool) Free(b *cuda.Buffer) {
	if b == nil {
		return
	}
	p.alloc.Free(b.Release().(*Block))
}

// Stats implements cuda.Device.Stats.
func (p *Pool) Stats() cuda.Stats { return p.alloc.Stats() }

// ResetPeakStats implements cuda.Device.ResetPeakStats.
func (p *Pool) ResetPeakStats() { p.alloc.ResetPeaks() }

// EmptyCache implements cuda.Device.EmptyCache.
func (p *Pool) EmptyCache() error { return p.alloc.EmptyCache() }

// SetTracer implements cuda.Traceable.
func (p *Pool) SetTracer(tr cuda.Tracer) { p.alloc.SetTracer(tr) }

// SetSite implements cuda.Traceable.
func (p *Pool) SetSite(s cuda.Site) { p.alloc.SetSite(s) }

// Allocator returns the device's caching allocator, for snapshots,
// largest-free-block queries and Close.
func (p *Pool) Allocator() *Allocator { return p.alloc }
