// Package shape is the shape-only device: the caching allocator runs on a
// virtual address space with nothing behind it, and kernels check their
// arguments (cuda.Checks, the checks every device runs) and compute
// nothing.
//
// A training schedule run on it makes exactly the allocations, in the same
// order and sizes, as on a computing device, so its statistics are the real
// ones at any model size, in well under a second. With a capacity it runs
// out of memory exactly where a card of that size would (as far as the
// allocator is concerned: a real card also holds the CUDA context and
// library workspaces outside it).
package shape

import (
	"fmt"
	"time"

	"trainmem/cuda"
	"trainmem/cuda/alloc"
)

// Device is the shape-only device.
type Device struct {
	alloc.Pool
	cuda.Checks
	space *alloc.VirtualSpace
}

var _ cuda.Device = (*Device)(nil)

// New returns a shape-only device of capacity bytes; 0 means unlimited:
// alloc.MaxVirtualSpace, the most any capacity can be.
func New(capacity int64) *Device {
	s := &Device{space: alloc.NewVirtualSpace(capacity)}
	s.Pool = alloc.NewPool(s.Name(), s.space)
	return s
}

// Name says "shape" and the capacity.
func (s *Device) Name() string {
	if s.space.Capacity() == 0 {
		return "shape (unlimited)"
	}
	return fmt.Sprintf("shape (%s)", cuda.FormatBytes(s.space.Capacity()))
}

// Computes is false: the shape device keeps books only.
func (s *Device) Computes() bool { return false }

// MemInfo returns capacity minus reserved bytes and the capacity
// (alloc.MaxVirtualSpace when unlimited).
func (s *Device) MemInfo() (free, total int64, err error) { return s.space.MemInfo() }

// Upload checks its arguments and stores nothing.
func (s *Device) Upload(dst *cuda.Buffer, src any) error {
	return cuda.CheckHostValues("Upload", "src", src, dst)
}

// Download checks its arguments and leaves dst unchanged.
func (s *Device) Download(dst any, src *cuda.Buffer) error {
	return cuda.CheckHostValues("Download", "dst", dst, src)
}

type mark struct{}

// Mark returns a mark that carries no time.
func (s *Device) Mark() (cuda.Mark, error) { return mark{}, nil }

// Elapsed is always zero on the shape device.
func (s *Device) Elapsed(from, to cuda.Mark) (time.Duration, error) {
	if _, ok := from.(mark); !ok {
		return 0, fmt.Errorf("cuda: Elapsed: from is %T, not a mark of this device", from)
	}
	if _, ok := to.(mark); !ok {
		return 0, fmt.Errorf("cuda: Elapsed: to is %T, not a mark of this device", to)
	}
	return 0, nil
}

// Synchronize has nothing to wait for.
func (s *Device) Synchronize() error { return nil }

// Close releases every segment; the device takes no further allocations.
func (s *Device) Close() error { return s.Allocator().Close() }
