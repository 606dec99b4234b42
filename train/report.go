package train

import (
	"fmt"
	"io"

	"trainmem/cuda"
	"trainmem/model"
)

// WriteMemoryTable prints where the memory went: each category's bytes at
// the end of the last step, its own peak, and what it held at the moment of
// the overall peak; then the allocator's totals. Categories that never held
// a byte are left out.
func WriteMemoryTable(w io.Writer, s cuda.Stats) error {
	row := func(name, now, peak, atPeak string) {
		fmt.Fprintf(w, "  %-44s %12s %12s %12s\n", name, now, peak, atPeak)
	}
	row("category", "now", "peak", "at the peak")
	for _, c := range cuda.Categories() {
		a := s.CategoryAllocated[c]
		if a.Peak == 0 && a.Allocated == 0 {
			continue
		}
		row(c.String(), model.GiB(a.Current), model.GiB(a.Peak), model.GiB(s.AtPeak[c]))
	}
	row("allocated", model.GiB(s.AllocatedBytes.Current), model.GiB(s.AllocatedBytes.Peak), model.GiB(s.AllocatedBytes.Peak))
	row("reserved", model.GiB(s.ReservedBytes.Current), model.GiB(s.ReservedBytes.Peak), "")
	row("reserved - allocated (cache, fragmentation)", model.GiB(s.ReservedBytes.Current-s.AllocatedBytes.Current), "", "")
	row("inactive split (fragmentation)", model.GiB(s.InactiveSplitBytes.Current), model.GiB(s.InactiveSplitBytes.Peak), "")
	_, err := fmt.Fprintf(w, "  %s allocations, %s frees, %d segments, %d allocation retries, %d out-of-memory errors\n",
		model.Comma(s.NumAllocs), model.Comma(s.NumFrees), s.Segment.Current, s.NumAllocRetries, s.NumOOMs)
	return err
}
