package bench

import (
	"strings"
	"testing"

	"trainmem/cuda"
)

// The summary box's units follow memory_summary's rules: a size in the
// largest binary unit that leaves the row's every-pool value at least 768
// of it (8 MiB shows as 8192 KiB), a count in K or M past 750 000.
func TestSummaryUnits(t *testing.T) {
	for _, c := range []struct {
		n, pref int64
		want    string
	}{
		{0, 0, "     0 B  "}, {1000, 1000, "  1000 B  "}, {786431, 786431, "786431 B  "}, {786432, 786432, "   768 KiB"},
		{8 << 20, 8 << 20, "  8192 KiB"}, {2 << 20, 8 << 30, "     2 MiB"}, {5 << 30, 5 << 30, "  5120 MiB"},
	} {
		if got := formatSize(c.n, c.pref); got != c.want {
			t.Errorf("formatSize(%d, %d) = %q, want %q", c.n, c.pref, got, c.want)
		}
	}
	for _, c := range []struct {
		n, pref int64
		want    string
	}{{4, 4, "      4   "}, {749_999, 749_999, " 749999   "}, {750_000, 750_000, "    750 K "}, {2_000_000_000, 2_000_000_000, "   2000 M "}} {
		if got := formatCount(c.n, c.pref); got != c.want {
			t.Errorf("formatCount(%d, %d) = %q, want %q", c.n, c.pref, got, c.want)
		}
	}
}

// The box is memory_summary's: 77 characters a line, the nine metrics
// each with its large and small pool, the two oversize rows; its numbers
// are the statistics'.
func TestMemorySummary(t *testing.T) {
	var st cuda.Stats
	st.AllocatedBytes = cuda.Stat{Current: 3 << 20, Peak: 9 << 20, Allocated: 40 << 20, Freed: 37 << 20}
	st.Pools[cuda.LargePool].AllocatedBytes = cuda.Stat{Current: 2 << 20, Peak: 8 << 20, Allocated: 30 << 20, Freed: 28 << 20}
	st.Pools[cuda.SmallPool].AllocatedBytes = cuda.Stat{Current: 1 << 20, Peak: 1 << 20, Allocated: 10 << 20, Freed: 9 << 20}
	st.Allocation = cuda.Stat{Current: 12, Peak: 40, Allocated: 900, Freed: 888}
	st.NumOOMs, st.NumAllocRetries = 2, 5
	var b strings.Builder
	if err := WriteMemorySummary(&b, "host (2 threads)", st); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	for i, l := range lines {
		if n := len([]rune(l)); n != 77 {
			t.Errorf("line %d is %d characters: %q", i, n, l)
		}
	}
	if len(lines) != 6+9*4+2*2+1 {
		t.Errorf("%d lines, want %d:\n%s", len(lines), 6+9*4+2*2+1, b.String())
	}
	for _, want := range []string{
		"| Allocated memory      |   3072 KiB |   9216 KiB |  40960 KiB |  37888 KiB |",
		"|       from large pool |   2048 KiB |   8192 KiB |  30720 KiB |  28672 KiB |",
		"|       from small pool |   1024 KiB |   1024 KiB |  10240 KiB |   9216 KiB |",
		"| Allocations           |      12    |      40    |     900    |     888    |",
		"OOMs: 2 ", "retries: 5 ", "trainmem memory summary, host (2 threads)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the box lacks %q:\n%s", want, b.String())
		}
	}
}
