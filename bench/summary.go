package bench

// The memory summary box, in the layout of PyTorch's
// torch.cuda.memory_summary(), for users who read that layout daily: each
// metric's current, peak, total allocated and total freed, for every pool
// and the large and small pools apart.

import (
	"fmt"
	"io"
	"strings"

	"trainmem/cuda"
)

// summaryWidth is the box's inner width, PyTorch's.
const summaryWidth = 75

// formatSize is a byte count in the unit pref (the row's every-pool value)
// calls for: the largest binary unit that leaves pref at least 768 of it,
// in whole units, as memory_summary prints them.
func formatSize(n, pref int64) string {
	units := []string{"B  ", "KiB", "MiB", "GiB", "TiB", "PiB"}
	u := 0
	for u+1 < len(units) && pref >= 768<<10 {
		n, pref, u = n>>10, pref>>10, u+1
	}
	return fmt.Sprintf("%6d %s", n, units[u])
}

// formatCount is a count in thousands (K) or millions (M) past 750 000 of
// pref, as memory_summary prints them.
func formatCount(n, pref int64) string {
	units := []string{" ", "K", "M"}
	u := 0
	for u+1 < len(units) && pref >= 750_000 {
		n, pref, u = n/1000, pref/1000, u+1
	}
	return fmt.Sprintf("%7d %s ", n, units[u])
}

// WriteMemorySummary writes st, the statistics of device, as
// torch.cuda.memory_summary() lays them out.
func WriteMemorySummary(w io.Writer, device string, st cuda.Stats) error {
	rule := func(c string) string { return "|" + strings.Repeat(c, summaryWidth) + "|\n" }
	var b strings.Builder
	center := func(s string) {
		if len(s) > summaryWidth-2 {
			s = s[:summaryWidth-2]
		}
		pad := summaryWidth - len(s)
		fmt.Fprintf(&b, "|%s%s%s|\n", strings.Repeat(" ", pad/2), s, strings.Repeat(" ", pad-pad/2))
	}
	b.WriteString(rule("="))
	center("trainmem memory summary, " + device)
	b.WriteString(rule("-"))
	center(fmt.Sprintf("OOMs: %-12d |   segment allocation retries: %-8d", st.NumOOMs, st.NumAllocRetries))
	b.WriteString(rule("="))
	fmt.Fprintf(&b, "|%-23s| Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |\n", "        Metric")
	type metric struct {
		name   string
		get    func(cuda.PoolStats) cuda.Stat
		format func(n, pref int64) string
	}
	for _, m := range []metric{
		{"Allocated memory", func(p cuda.PoolStats) cuda.Stat { return p.AllocatedBytes }, formatSize},
		{"Active memory", func(p cuda.PoolStats) cuda.Stat { return p.ActiveBytes }, formatSize},
		{"Requested memory", func(p cuda.PoolStats) cuda.Stat { return p.RequestedBytes }, formatSize},
		{"Reserved memory", func(p cuda.PoolStats) cuda.Stat { return p.ReservedBytes }, formatSize},
		{"Non-releasable memory", func(p cuda.PoolStats) cuda.Stat { return p.InactiveSplitBytes }, formatSize},
		{"Allocations", func(p cuda.PoolStats) cuda.Stat { return p.Allocation }, formatCount},
		{"Active allocs", func(p cuda.PoolStats) cuda.Stat { return p.Active }, formatCount},
		{"Reserved segments", func(p cuda.PoolStats) cuda.Stat { return p.Segment }, formatCount},
		{"Non-releasable allocs", func(p cuda.PoolStats) cuda.Stat { return p.InactiveSplit }, formatCount},
	} {
		b.WriteString(rule("-"))
		all := m.get(st.PoolStats)
		for _, row := range []struct {
			name string
			s    cuda.Stat
		}{{m.name, all}, {"      from large pool", m.get(st.Pools[cuda.LargePool])}, {"      from small pool", m.get(st.Pools[cuda.SmallPool])}} {
			fmt.Fprintf(&b, "| %-21s | %s | %s | %s | %s |\n", row.name,
				m.format(row.s.Current, all.Current), m.format(row.s.Peak, all.Peak), m.format(row.s.Allocated, all.Allocated), m.format(row.s.Freed, all.Freed))
		}
	}
	// trainmem splits no block beyond a maximum size (PyTorch's
	// max_split_size_mb, unset by default): it has no oversize blocks.
	for _, name := range []string{"Oversize allocations", "Oversize segments"} {
		b.WriteString(rule("-"))
		z := formatCount(0, 0)
		fmt.Fprintf(&b, "| %-21s | %s | %s | %s | %s |\n", name, z, z, z, z)
	}
	b.WriteString(rule("="))
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteSummary implements SummaryReport: the device's statistics after the
// run, the last step's peaks.
func (r *SimulateReport) WriteSummary(w io.Writer) error {
	return WriteMemorySummary(w, r.Device, r.Stats)
}

// WriteSummary implements SummaryReport.
func (r *TrainReport) WriteSummary(w io.Writer) error {
	return WriteMemorySummary(w, r.Device, r.Result.Stats)
}

// SummaryReport is a report that writes the memory summary box.
type SummaryReport interface {
	WriteSummary(w io.Writer) error
}
