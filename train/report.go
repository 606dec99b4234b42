package train

import (
	"fmt"
	"io"
	"text/tabwriter"

	"trainmem/cuda"
	"trainmem/model"
)

// WriteMemoryTable prints where the memory went: each category's bytes at
// the end of the last step, its own peak, and what it held at the moment of
// the overall peak; then the allocator's totals. Categories that never held
// a byte are left out.
func WriteMemoryTable(w io.Writer, s cuda.Stats) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "category\tnow\tpeak\tat the peak\t")
	for _, c := range cuda.Categories() {
		a := s.CategoryAllocated[c]
		if a.Peak == 0 && a.Allocated == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t\n", c, model.GiB(a.Current), model.GiB(a.Peak), model.GiB(s.AtPeak[c]))
	}
	fmt.Fprintf(tw, "allocated\t%s\t%s\t%s\t\n", model.GiB(s.AllocatedBytes.Current), model.GiB(s.AllocatedBytes.Peak), model.GiB(s.AllocatedBytes.Peak))
	fmt.Fprintf(tw, "reserved\t%s\t%s\t\t\n", model.GiB(s.ReservedBytes.Current), model.GiB(s.ReservedBytes.Peak))
	fmt.Fprintf(tw, "reserved - allocated (cache, fragmentation)\t%s\t\t\t\n", model.GiB(s.ReservedBytes.Current-s.AllocatedBytes.Current))
	fmt.Fprintf(tw, "inactive split (fragmentation)\t%s\t%s\t\t\n", model.GiB(s.InactiveSplitBytes.Current), model.GiB(s.InactiveSplitBytes.Peak))
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s allocations, %s frees, %d segments, %d allocation retries, %d out-of-memory errors\n",
		model.Comma(s.NumAllocs), model.Comma(s.NumFrees), s.Segment.Current, s.NumAllocRetries, s.NumOOMs)
	return err
}
