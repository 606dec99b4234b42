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
	"sync/atomic"
	"time"

	"trainmem/cuda"
	"trainmem/cuda/alloc"
)

// Device is the shape-only device.
type Device struct {
	alloc.Pool
	cuda.Checks
	space *alloc.VirtualSpace
	// roofline, when set (Model), models the device's time: the clock
	// (nanoseconds) advances by what each piece of work the trainer
	// reports (Spend) takes at the roofline.
	roofline *cuda.Roofline
	clock    atomic.Int64
}

var (
	_ cuda.Device       = (*Device)(nil)
	_ cuda.TimeModel    = (*Device)(nil)
	_ cuda.PeakReporter = (*Device)(nil)
)

// New returns a shape-only device of capacity bytes; 0 means unlimited:
// alloc.MaxVirtualSpace, the most any capacity can be.
func New(capacity int64) *Device {
	s := &Device{space: alloc.NewVirtualSpace(capacity)}
	s.Pool = alloc.NewPool(s.Name(), s.space)
	return s
}

// Model gives the device a modelled clock at roofline r (cuda.TimeModel):
// its marks, its step records' times and its allocator's trace read it.
// Without one, no time passes on the device.
func (s *Device) Model(r cuda.Roofline) error {
	if err := r.Check(); err != nil {
		return err
	}
	s.roofline = &r
	s.Allocator().SetClock(func() time.Duration { return time.Duration(s.clock.Load()) })
	return nil
}

// Spend implements cuda.TimeModel: the clock advances by the work's time
// on the card (cuda.Roofline.Kernel; nothing without a roofline).
func (s *Device) Spend(dt cuda.DType, w cuda.Work) {
	if s.roofline != nil {
		s.clock.Add(int64(s.roofline.Kernel(dt, w)))
	}
}

// Now implements cuda.TimeModel: the modelled clock's reading.
func (s *Device) Now() time.Duration { return time.Duration(s.clock.Load()) }

// Roofline implements cuda.TimeModel: the device's, or the zero Roofline.
func (s *Device) Roofline() cuda.Roofline {
	if s.roofline == nil {
		return cuda.Roofline{}
	}
	return *s.roofline
}

// PeakFLOPS implements cuda.PeakReporter with the roofline's peak, so a
// modelled step has an MFU (0 without a roofline).
func (s *Device) PeakFLOPS(dt cuda.DType) (float64, string) {
	if s.roofline == nil {
		return 0, "the shape-only device computes nothing"
	}
	return s.roofline.PeakFLOPS(dt), s.roofline.Name + " (" + s.roofline.Source + ")"
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

type mark struct{ t time.Duration }

// Mark returns a mark of the modelled clock (always 0 without a roofline).
func (s *Device) Mark() (cuda.Mark, error) { return mark{time.Duration(s.clock.Load())}, nil }

// Elapsed is the modelled time between two marks: zero without a
// roofline.
func (s *Device) Elapsed(from, to cuda.Mark) (time.Duration, error) {
	f, t, err := cuda.MarksOf[mark](from, to, "this device")
	if err != nil {
		return 0, err
	}
	return t.t - f.t, nil
}

// Synchronize has nothing to wait for.
func (s *Device) Synchronize() error { return nil }

// Close releases every segment; the device takes no further allocations.
func (s *Device) Close() error { return s.Allocator().Close() }
