package shape

import (
	"errors"
	"math"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/alloc"
	"trainmem/cuda/conformance"
)

// The shape device never reserves past MaxVirtualSpace, whatever its
// capacity or the requests, so no statistic can wrap around: a request
// beyond it is an out-of-memory error with finite numbers.
func TestShapeAddressSpaceBound(t *testing.T) {
	for _, capacity := range []int64{0, math.MaxInt64} {
		s := New(capacity)
		if _, total, _ := s.MemInfo(); total != alloc.MaxVirtualSpace {
			t.Errorf("capacity %d: total %d, want MaxVirtualSpace", capacity, total)
		}
		var held []*cuda.Buffer
		for range 3 {
			b, err := s.Alloc(cuda.Activations, cuda.F32, 1<<59)
			if err != nil {
				if !errors.Is(err, cuda.ErrNoMemory) {
					t.Fatalf("capacity %d: %v", capacity, err)
				}
				break
			}
			held = append(held, b)
		}
		if len(held) != 2 {
			t.Errorf("capacity %d: %d blocks of 2^61 bytes fit in a 2^62 space, want 2", capacity, len(held))
		}
		st := s.Stats()
		if st.ReservedBytes.Peak <= 0 || st.ReservedBytes.Peak > alloc.MaxVirtualSpace || st.AllocatedBytes.Peak > st.ReservedBytes.Peak {
			t.Errorf("capacity %d: reserved peak %d, allocated peak %d", capacity, st.ReservedBytes.Peak, st.AllocatedBytes.Peak)
		}
		if _, err := s.Alloc(cuda.Activations, cuda.F64, math.MaxInt64/4); err == nil {
			t.Errorf("capacity %d: 2^64 bytes allocated", capacity)
		}
	}
}

func TestConformance(t *testing.T) {
	conformance.RunAll(t, func(t *testing.T) cuda.Device { return New(0) })
}
