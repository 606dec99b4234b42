package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	gp "github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"

	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/zero"
)

// snapshotDoc is a decoded snapshot, read back by gopickle, an
// independent pickle reader.
type snapshotDoc struct {
	segments []*types.Dict
	trace    []*types.Dict
}

func decodeSnapshot(t *testing.T, b []byte) snapshotDoc {
	t.Helper()
	v, err := gp.Loads(string(b))
	if err != nil {
		t.Fatal(err)
	}
	d := v.(*types.Dict)
	var doc snapshotDoc
	segs, _ := d.Get("segments")
	for _, s := range *segs.(*types.List) {
		doc.segments = append(doc.segments, s.(*types.Dict))
	}
	traces, _ := d.Get("device_traces")
	for _, e := range *(*traces.(*types.List))[0].(*types.List) {
		doc.trace = append(doc.trace, e.(*types.Dict))
	}
	return doc
}

func num(t *testing.T, d *types.Dict, k string) int64 {
	t.Helper()
	v, ok := d.Get(k)
	if !ok {
		t.Fatalf("no %q in %v", k, d)
	}
	switch x := v.(type) {
	case int:
		return int64(x)
	case interface{ Int64() int64 }:
		return x.Int64()
	}
	t.Fatalf("%q is a %T", k, v)
	return 0
}

func str(d *types.Dict, k string) string {
	v, _ := d.Get(k)
	s, _ := v.(string)
	return s
}

// tiles checks that every segment's blocks tile it, as the viewer
// computes block addresses from the segment's.
func tiles(t *testing.T, doc snapshotDoc) {
	t.Helper()
	for i, s := range doc.segments {
		addr, total := num(t, s, "address"), num(t, s, "total_size")
		at := addr
		bl, _ := s.Get("blocks")
		for _, b := range *bl.(*types.List) {
			b := b.(*types.Dict)
			if num(t, b, "address") != at {
				t.Fatalf("segment %d: a block at %#x, want %#x: the blocks do not tile it", i, num(t, b, "address"), at)
			}
			at += num(t, b, "size")
		}
		if at != addr+total {
			t.Fatalf("segment %d: blocks end at %#x, the segment at %#x", i, at, addr+total)
		}
	}
}

// vizEntry is a trace entry after MemoryViz's annotate_snapshot: a
// free_completed right after a free_requested of the same address is
// dropped and the free_requested becomes "free".
type vizEntry struct {
	action, category string
	addr, size       int64
}

func annotate(t *testing.T, doc snapshotDoc) []vizEntry {
	t.Helper()
	var out []vizEntry
	for _, e := range doc.trace {
		v := vizEntry{action: str(e, "action"), category: str(e, "category"), addr: num(t, e, "addr"), size: num(t, e, "size")}
		if n := len(out); v.action == "free_completed" && n > 0 && out[n-1].action == "free_requested" && out[n-1].addr == v.addr {
			out[n-1].action = "free"
			continue
		}
		out = append(out, v)
	}
	return out
}

// memoryViz replays the browser viewer's own rules (pytorch
// torch/utils/viz/MemoryViz.js, read for the 2.x versions: its
// process_alloc_data and simulate_memory) on a snapshot and returns what
// its views show:
//
//   - the Active Memory Timeline (process_alloc_data, plot_segments
//     false): an element per alloc; a free of an address it has not seen
//     allocated is an element alive from the start at the free's size, and
//     so is every active_allocated block of the segments whose address no
//     unfreed alloc holds, at its requested_size; the total starts at their
//     sum and moves by each action's element; timeline[i] is the total
//     after entry i, peak its maximum, unknown the bytes it draws without a
//     category;
//   - the Active Cached Segment Timeline (plot_segments true): the same
//     over segment_alloc and segment_free, the segments not allocated in
//     the trace alive from the start at their total_size; segPeak its
//     maximum;
//   - the Allocator State History (simulate_memory): the snapshot's blocks
//     at their requested_size, the trace undone from its end (a free
//     re-adds a block of the entry's size, an alloc removes its block);
//     history[i] is the allocated bytes it shows after entry i.
func memoryViz(t *testing.T, doc snapshotDoc) (peak, segPeak, unknown int64, timeline, history []int64) {
	t.Helper()
	trace := annotate(t, doc)
	view := func(alloc, free string, initial func(seen map[int64]bool) []int64) (int64, []int64) {
		live := map[int64]int64{} // address -> size, allocated in the trace and not freed
		var total int64
		var after []int64
		var start []int64
		for _, e := range trace {
			switch e.action {
			case alloc:
				live[e.addr] = e.size
				total += e.size
			case free:
				if sz, ok := live[e.addr]; ok {
					delete(live, e.addr)
					total -= sz
				} else {
					start = append(start, e.size) // alive from the start
					total -= e.size
				}
			}
			after = append(after, total)
		}
		seen := map[int64]bool{}
		for a := range live {
			seen[a] = true
		}
		start = append(start, initial(seen)...)
		var base int64
		for _, sz := range start {
			base += sz
		}
		peak := base
		for i := range after {
			after[i] += base
			peak = max(peak, after[i])
		}
		return peak, after
	}
	peak, timeline = view("alloc", "free", func(seen map[int64]bool) []int64 {
		var out []int64
		for _, s := range doc.segments {
			at := num(t, s, "address")
			bl, _ := s.Get("blocks")
			for _, b := range *bl.(*types.List) {
				b := b.(*types.Dict)
				if str(b, "state") == "active_allocated" && !seen[at] {
					out = append(out, num(t, b, "requested_size"))
					unknown += num(t, b, "requested_size")
				}
				at += num(t, b, "size")
			}
		}
		return out
	})
	segPeak, _ = view("segment_alloc", "segment_free", func(seen map[int64]bool) []int64 {
		var out []int64
		for _, s := range doc.segments {
			if !seen[num(t, s, "address")] {
				out = append(out, num(t, s, "total_size"))
			}
		}
		return out
	})
	// simulate_memory: backwards from the snapshot.
	blocks := map[int64]int64{}
	for _, s := range doc.segments {
		at := num(t, s, "address")
		bl, _ := s.Get("blocks")
		for _, b := range *bl.(*types.List) {
			b := b.(*types.Dict)
			if st := str(b, "state"); st == "active_allocated" || st == "active_pending_free" {
				blocks[at] = num(t, b, "requested_size")
			}
			at += num(t, b, "size")
		}
	}
	var sum int64
	for _, sz := range blocks {
		sum += sz
	}
	history = make([]int64, len(trace))
	for i := len(trace) - 1; i >= 0; i-- {
		history[i] = sum
		switch e := trace[i]; e.action {
		case "free":
			if _, ok := blocks[e.addr]; ok {
				t.Fatalf("entry %d frees %#x, which the state after it still holds", i, e.addr)
			}
			blocks[e.addr] = e.size
			sum += e.size
		case "alloc":
			sz, ok := blocks[e.addr]
			if !ok {
				t.Fatalf("entry %d allocates %#x, which the state after it lacks", i, e.addr)
			}
			delete(blocks, e.addr)
			sum -= sz
		}
	}
	return peak, segPeak, unknown, timeline, history
}

// chromeTrace is a decoded Chrome trace, its byte counters exact.
type chromeTrace struct {
	TraceEvents []struct {
		Name string         `json:"name"`
		Ph   string         `json:"ph"`
		Cat  string         `json:"cat"`
		Ts   *float64       `json:"ts"`
		Pid  *int           `json:"pid"`
		Tid  *int           `json:"tid"`
		Dur  *float64       `json:"dur"`
		Args map[string]any `json:"args"`
	} `json:"traceEvents"`
}

func decodeChrome(t *testing.T, tr *MemoryTrace) chromeTrace {
	t.Helper()
	var chrome bytes.Buffer
	if err := tr.WriteChrome(&chrome); err != nil {
		t.Fatal(err)
	}
	var ct chromeTrace
	dec := json.NewDecoder(&chrome)
	dec.UseNumber() // bytes exactly
	if err := dec.Decode(&ct); err != nil {
		t.Fatal(err)
	}
	return ct
}

// checkViews checks what MemoryViz's views show of a snapshot against
// trainmem's peaks: the Active Memory Timeline peaks at the peak requested
// bytes and the segment timeline at the peak reserved, to the byte; the
// Allocator State History shows at every entry what the timeline does
// (before, the entries' rounded sizes beside the blocks' requested ones
// made the two views of the out-of-memory example disagree by 113,827,840
// bytes and the timeline peak below trainmem's); and nothing is drawn
// without a category (the model states, allocated before the step, are in
// the trace as PyTorch records them when its history starts first).
func checkViews(t *testing.T, what string, doc snapshotDoc, peakRequested, peakReserved int64) {
	t.Helper()
	peak, segPeak, unknown, timeline, history := memoryViz(t, doc)
	if peak != peakRequested || segPeak != peakReserved {
		t.Errorf("%s: MemoryViz's timeline peaks at %d and its segments at %d; trainmem's peak requested is %d, reserved %d", what, peak, segPeak, peakRequested, peakReserved)
	}
	for i := range timeline {
		if timeline[i] != history[i] {
			t.Errorf("%s: after entry %d the Active Memory Timeline shows %d, the Allocator State History %d", what, i, timeline[i], history[i])
			break
		}
	}
	if unknown != 0 {
		t.Errorf("%s: %d bytes drawn without a category", what, unknown)
	}
	cats := map[string]bool{}
	for _, e := range doc.trace {
		if str(e, "action") == "alloc" {
			cats[str(e, "category")] = true
		}
	}
	for _, c := range []cuda.Category{cuda.Params, cuda.Grads, cuda.AdamM, cuda.AdamV} {
		if !cats[c.String()] {
			t.Errorf("%s: no allocation of %s in the trace: the viewer cannot colour it", what, c)
		}
	}
}

// The snapshot of a step, decoded by an independent reader, tiles every
// segment with its blocks, and its trace replays to the step's peak
// allocated and reserved bytes and each category's bytes at the peak, byte
// for byte; every event names its op's site in its frames; the Chrome
// trace parses, with the fields Perfetto needs, and its counters at the
// peak are the record's. For the simulation, a measured run on the host
// and a checkpointed fp16 step.
func TestMemoryTraceReplays(t *testing.T) {
	for _, c := range []struct {
		name    string
		measure bool
		prec    model.Precision
		ckpt    string
	}{{"simulated", false, model.FP32, "none"}, {"measured", true, model.FP32, "none"}, {"simulated fp16 full", false, model.FP16, "full"}} {
		s := setup(t, "tiny", 2, 32, c.prec, model.AdamW, c.ckpt)
		began := time.Now()
		tr := &MemoryTrace{}
		o := runOf(checked(t, s), 2, tr, zero.Setting{})
		var where *Where
		if c.measure {
			h, err := host.New(host.Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			where, o.Trace = on(h), nil
			where.Traces = RankTraces{0: tr}
		}
		rep, err := Validate(context.Background(), where, o)
		if err != nil {
			t.Fatal(err)
		}
		rec := rep.Simulated
		if c.measure {
			rec = *rep.Measured
		}
		if tr.Step != 2 || len(tr.Events) == 0 {
			t.Fatalf("%s: recorded step %d, %d events", c.name, tr.Step, len(tr.Events))
		}
		var snap bytes.Buffer
		if err := tr.WriteSnapshot(&snap); err != nil {
			t.Fatal(err)
		}
		doc := decodeSnapshot(t, snap.Bytes())
		tiles(t, doc)
		checkViews(t, c.name, doc, rec.PeakRequestedBytes, rec.PeakReservedBytes)
		unknown := 0
		for i, e := range doc.trace {
			fr, _ := e.Get("frames")
			if str(e, "category") == "unknown" {
				unknown++
			}
			if a := str(e, "action"); a == "alloc" && len(*fr.(*types.List)) != 2 {
				t.Fatalf("%s: event %d has frames %v", c.name, i, fr)
			}
		}
		if unknown == 0 {
			t.Errorf("%s: no event of category unknown: the browser viewer would throw", c.name)
		}
		// The states held before the step come first, then the step's
		// events, each naming its op: the first of them is the forward's.
		var first string
		for _, e := range doc.trace {
			if a := str(e, "action"); a == "snapshot" || strings.HasPrefix(a, "segment") {
				continue // markers, and segments named by what they were first carved for
			}
			fr, _ := e.Get("frames")
			if l := *fr.(*types.List); len(l) > 0 {
				if f, _ := l[0].(*types.Dict).Get("filename"); f != "trainer" {
					first = f.(string)
					break
				}
			}
		}
		if !strings.Contains(first, "/ forward") {
			t.Errorf("%s: the step's first event's frame is %q, want its op / forward", c.name, first)
		}
		checkViewerFidelity(t, c.name, doc, began)

		ct := decodeChrome(t, tr)
		var best map[string]int64
		var bestSum int64 = -1
		slices := 0
		for i, e := range ct.TraceEvents {
			if e.Name == "" || e.Ph == "" || e.Ts == nil || e.Pid == nil || e.Tid == nil {
				t.Fatalf("%s: chrome event %d lacks a field Perfetto needs: %+v", c.name, i, e)
			}
			if e.Ph == "X" {
				slices++
				if e.Dur == nil || *e.Dur < 0 {
					t.Fatalf("%s: slice %d has duration %v", c.name, i, e.Dur)
				}
			}
			if e.Ph == "C" && e.Name == "allocated by category (bytes)" {
				var sum int64
				args := map[string]int64{}
				for k, v := range e.Args {
					n, err := v.(json.Number).Int64()
					if err != nil {
						t.Fatalf("%s: counter %s = %v", c.name, k, v)
					}
					args[k] = n
					sum += n
				}
				if sum > bestSum {
					bestSum, best = sum, args
				}
			}
		}
		if bestSum != rec.PeakAllocatedBytes || slices == 0 {
			t.Errorf("%s: the chrome counters peak at %d, the record at %d (%d slices)", c.name, bestSum, rec.PeakAllocatedBytes, slices)
		}
		for cat, want := range rec.Memory.AtPeak {
			if best[cat.String()] != want {
				t.Errorf("%s: chrome counter %s at the peak %d, record %d", c.name, cat, best[cat.String()], want)
			}
		}
	}
}

// checkViewerFidelity holds a snapshot to what MemoryViz.js makes of it
// (torch/utils/viz/MemoryViz.js and process_alloc_data.js): the viewer's
// category order (the order entries first name them, annotate_snapshot)
// is cuda.Categories then "unknown", in every file, so that a category
// has one colour everywhere and trainmem's plots' (categoryColors);
// every segment entry carries the category it was first carved for and
// frames that say so, never a default's; every entry has frames (the
// Allocator State History opens on the last, the snapshot marker, and an
// empty list reads "This block has no frames"); time_us is the wall
// clock in Unix microseconds (the viewer's hover shows it as a date), not
// before the run began and never decreasing.
func checkViewerFidelity(t *testing.T, name string, doc snapshotDoc, began time.Time) {
	t.Helper()
	var order []string
	seen := map[string]bool{}
	var last int64
	for i, e := range doc.trace {
		if c := str(e, "category"); c != "" && !seen[c] {
			seen[c] = true
			order = append(order, c)
		}
		fr, _ := e.Get("frames")
		if len(*fr.(*types.List)) == 0 {
			t.Errorf("%s: entry %d (%s) has no frames", name, i, str(e, "action"))
		}
		a := str(e, "action")
		if strings.HasPrefix(a, "segment") {
			l := *fr.(*types.List)
			outer, _ := l[len(l)-1].(*types.Dict).Get("name")
			if want := "first carved for " + str(e, "category"); !strings.Contains(outer.(string), want) {
				t.Errorf("%s: %s entry %d says %q, want %q", name, a, i, outer, want)
			}
		}
		us := num(t, e, "time_us")
		if us < began.UnixMicro() || us < last {
			t.Errorf("%s: entry %d at time_us %d, after %d and the run's start %d", name, i, us, last, began.UnixMicro())
		}
		last = us
	}
	want := append(categoryNames(), "unknown")
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("%s: the viewer's categories are %v, want %v", name, order, want)
	}
	if a := str(doc.trace[len(doc.trace)-1], "action"); a != "snapshot" {
		t.Errorf("%s: the trace ends with %s, want the snapshot marker", name, a)
	}
	for i, c := range cuda.Categories() {
		// d3's ordinal scale reuses its range past its tenth value.
		if categoryColors[i%len(categoryColors)] != tableau10[i%len(tableau10)] {
			t.Errorf("%s: trainmem's plots colour %s %v, the viewer %v", name, c, categoryColors[i%len(categoryColors)], tableau10[i%len(tableau10)])
		}
	}
}

// tableau10 is d3's schemeTableau10, the palette MemoryViz.js draws with
// (d3-scale-chromatic's src/categorical/Tableau10.js:
// "4e79a7f28e2ce1575976b7b259a14fedc949af7aa1ff9da79c755fbab0ab").
var tableau10 = func() []color.Color {
	const hex = "4e79a7f28e2ce1575976b7b259a14fedc949af7aa1ff9da79c755fbab0ab"
	var out []color.Color
	for i := 0; i < len(hex); i += 6 {
		var r, g, b uint8
		fmt.Sscanf(hex[i:i+6], "%02x%02x%02x", &r, &g, &b)
		out = append(out, color.RGBA{r, g, b, 0xff})
	}
	return out
}()

// A simulation that runs out of memory keeps its trace up to the failed
// request: the oom event last, naming the request and its site, and the
// segments as they were then (what filled the card).
func TestMemoryTraceOOM(t *testing.T) {
	s := setup(t, "tiny", 8, 64, model.FP32, model.AdamW, "none")
	dev := shape.New(3 << 20)
	tr := &MemoryTrace{}
	_, err := Simulate(func() cuda.Device { return dev }, 3<<20, runOf(checked(t, s), 2, nil, zero.Setting{}), RankTraces{0: tr})
	var oom *cuda.OutOfMemoryError
	if !errors.As(err, &oom) {
		t.Fatalf("got %v, want an out-of-memory error", err)
	}
	last := tr.Events[len(tr.Events)-1]
	if last.Action != cuda.TraceOOM || last.Requested != oom.Requested || last.Site.Phase == "" {
		t.Fatalf("the last event is %+v, want the oom of %d bytes with its site", last, oom.Requested)
	}
	var snap bytes.Buffer
	if err := tr.WriteSnapshot(&snap); err != nil {
		t.Fatal(err)
	}
	doc := decodeSnapshot(t, snap.Bytes())
	var held int64
	for _, s := range doc.segments {
		held += num(t, s, "allocated_size")
	}
	var want int64
	for _, v := range oom.Allocated {
		want += v
	}
	if held != want {
		t.Errorf("the snapshot's segments hold %d bytes, the oom error says %v", held, oom.Allocated)
	}
	if a := str(doc.trace[len(doc.trace)-2], "action"); a != "oom" {
		t.Errorf("the trace ends with %q before its snapshot event, want oom", a)
	}
}

// The timeline replays to the record's peak, and its plot draws every
// category held, the phases and the peak's label, as SVG and PNG, one
// panel a trace.
func TestTimelinePlot(t *testing.T) {
	dir := t.TempDir()
	var panels []TimelinePanel
	for _, ck := range []string{"none", "full"} {
		s := setup(t, "tiny", 2, 32, model.FP32, model.AdamW, ck)
		tr := &MemoryTrace{}
		rep, err := Validate(context.Background(), nil, runOf(checked(t, s), 2, tr, zero.Setting{}))
		if err != nil {
			t.Fatal(err)
		}
		tl := tr.Timeline()
		if tl.PeakBytes != rep.Simulated.PeakAllocatedBytes {
			t.Errorf("checkpoint %s: the timeline peaks at %d, the record at %d", ck, tl.PeakBytes, rep.Simulated.PeakAllocatedBytes)
		}
		panels = append(panels, TimelinePanel{Title: "checkpoint " + ck, Trace: tr})
	}
	svg := filepath.Join(dir, "t.svg")
	if err := PlotTimeline(svg, panels); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"checkpoint none", "checkpoint full", "activations", "forward", "backward", "recompute", "peak " + model.GiB(panels[0].Trace.Timeline().PeakBytes)} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("the SVG lacks %q", want)
		}
	}
	png := filepath.Join(dir, "t.png")
	if err := PlotTimeline(png, panels[:1]); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(png); err != nil || st.Size() < 10000 {
		t.Errorf("the PNG: %v, %v", st, err)
	}
	if err := PlotTimeline(filepath.Join(dir, "t.gif"), panels); err == nil {
		t.Error("a .gif was written")
	}
}

// Each simulated rank's trace replays to that rank's peaks.
func TestRankTracesReplay(t *testing.T) {
	s := setup(t, "tiny", 2, 32, model.BF16, model.AdamW, "none")
	s.Ranks, s.ZeRO = 3, 3
	traces := RankTraces{}
	rep, err := Simulate(func() cuda.Device { return shape.New(0) }, 0, runOf(checked(t, s), 2, nil, zero.Setting{Stage: 3}), traces)
	if err != nil {
		t.Fatal(err)
	}
	if len(traces) != 3 {
		t.Fatalf("%d traces, want 3", len(traces))
	}
	for _, res := range rep.Ranks {
		var snap bytes.Buffer
		if err := traces[res.Rank].WriteSnapshot(&snap); err != nil {
			t.Fatal(err)
		}
		checkViews(t, fmt.Sprintf("rank %d", res.Rank), decodeSnapshot(t, snap.Bytes()), res.Stats.RequestedBytes.Peak, res.Stats.ReservedBytes.Peak)
	}
}

// MemoryViz shows trainmem's peaks for the cases users found wrong:
// gpt2-xl at batch 32, sequence 1000, fp16, full checkpointing (its
// timeline peaked 581,632 bytes below the reported peak), and README's
// out-of-memory example (gpt2-xl, batch 8, sequence 1024, bf16, a 40 GB
// card), whose trace ends at the failed request: the timeline's peak is
// the allocator's peak requested bytes then, and its two views agree at
// every entry (they disagreed by 113,827,840 bytes).
func TestMemoryVizPeaksXL(t *testing.T) {
	s := setup(t, "gpt2-xl", 32, 1000, model.FP16, model.AdamW, "full")
	tr := &MemoryTrace{}
	rep, err := Simulate(func() cuda.Device { return shape.New(0) }, 0, runOf(checked(t, s), 2, nil, zero.Setting{}), RankTraces{0: tr})
	if err != nil {
		t.Fatal(err)
	}
	var snap bytes.Buffer
	if err := tr.WriteSnapshot(&snap); err != nil {
		t.Fatal(err)
	}
	checkViews(t, "gpt2-xl full", decodeSnapshot(t, snap.Bytes()), rep.Record.PeakRequestedBytes, rep.Record.PeakReservedBytes)

	s = setup(t, "gpt2-xl", 8, 1024, model.BF16, model.AdamW, "none")
	dev := shape.New(40e9)
	tr = &MemoryTrace{}
	if _, err := Simulate(func() cuda.Device { return dev }, 40e9, runOf(checked(t, s), 2, nil, zero.Setting{}), RankTraces{0: tr}); err == nil {
		t.Fatal("gpt2-xl at batch 8 fits in 40 GB")
	}
	snap.Reset()
	if err := tr.WriteSnapshot(&snap); err != nil {
		t.Fatal(err)
	}
	st := dev.Stats()
	checkViews(t, "gpt2-xl out of memory", decodeSnapshot(t, snap.Bytes()), st.RequestedBytes.Peak, st.ReservedBytes.Peak)
}

// A simulated step on a modelled clock (an H100's roofline): the step has
// a predicted time, its model FLOPs at the peak a lower bound of it and
// its MFU their ratio; the Chrome trace's timestamps strictly increase and
// every op slice lasts, so a viewer that keeps one counter value per
// timestamp still shows the record's peak (before, on the host's clock, a
// whole gpt2 step spanned under a millisecond, gpt2's peak showed as
// 2,958,364,672 instead of 3,164,221,952, and 224 of 410 op slices had
// zero duration).
func TestModelledClock(t *testing.T) {
	s := setup(t, "gpt2", 4, 1024, model.BF16, model.AdamW, "none")
	h100, _ := cuda.GPUByKey("h100")
	dev := shape.New(0)
	if err := dev.Model(h100.Roofline); err != nil {
		t.Fatal(err)
	}
	tr := &MemoryTrace{}
	rep, err := Simulate(func() cuda.Device { return dev }, 0, runOf(checked(t, s), 2, nil, zero.Setting{}), RankTraces{0: tr})
	if err != nil {
		t.Fatal(err)
	}
	rec := rep.Record
	e, err := s.Estimate()
	if err != nil {
		t.Fatal(err)
	}
	modelFLOPs := float64(e.Recompute.Step)
	lower := modelFLOPs / h100.HalfFLOPS * 1e3 // ms
	if rep.Roofline == nil || !(rec.StepMs >= lower) || rec.StepMs > 10*lower {
		t.Errorf("predicted step %.3f ms; its model FLOPs at the peak take %.3f ms", rec.StepMs, lower)
	}
	if want := lower / rec.StepMs; math.Abs(rec.MFU-want) > 1e-9*want {
		t.Errorf("MFU %.6f, want %.6f", rec.MFU, want)
	}
	var text bytes.Buffer
	if err := rep.WriteText(&text); err != nil || !strings.Contains(text.String(), "predicted step on H100 SXM") || !strings.Contains(text.String(), "a model, not a measurement") {
		t.Errorf("the report does not state its roofline estimate (%v):\n%s", err, text.String())
	}

	ct := decodeChrome(t, tr)
	last := math.Inf(-1)
	perTs := map[float64]int64{} // a viewer that keeps one value per timestamp: the last
	var span, first float64 = 0, math.NaN()
	zero, ops := 0, 0
	for _, ev := range ct.TraceEvents {
		switch {
		case ev.Ph == "C" && ev.Name == "allocated by category (bytes)":
			if *ev.Ts <= last {
				t.Fatalf("counter at %v after one at %v", *ev.Ts, last)
			}
			last = *ev.Ts
			var sum int64
			for _, v := range ev.Args {
				n, _ := v.(json.Number).Int64()
				sum += n
			}
			perTs[*ev.Ts] = sum
			if math.IsNaN(first) {
				first = *ev.Ts
			}
			span = *ev.Ts - first
		case ev.Ph == "X" && ev.Cat == "op":
			ops++
			if *ev.Dur == 0 {
				zero++
			}
		}
	}
	var peak int64
	for _, v := range perTs {
		peak = max(peak, v)
	}
	if peak != rec.PeakAllocatedBytes {
		t.Errorf("one value per timestamp peaks at %d, the record at %d", peak, rec.PeakAllocatedBytes)
	}
	if zero > 0 || ops == 0 {
		t.Errorf("%d of %d op slices last no time", zero, ops)
	}
	if stepUs := rec.StepMs * 1e3; span < 0.5*stepUs || span > stepUs {
		t.Errorf("the trace spans %.1f µs of a %.1f µs step", span, stepUs)
	}
}

// validate without a measurement traces its simulated step on the default
// card's modelled clock, as simulate does: the step's events have times
// of a card (before, the host's clock put a whole step in microseconds of
// bookkeeping).
func TestValidateTraceModelled(t *testing.T) {
	s := setup(t, "gpt2", 2, 128, model.BF16, model.AdamW, "none")
	tr := &MemoryTrace{}
	rep, err := Validate(context.Background(), nil, runOf(checked(t, s), 2, tr, zero.Setting{}))
	if err != nil {
		t.Fatal(err)
	}
	g, _ := cuda.GPUByKey(cuda.DefaultGPU)
	e, _ := s.Estimate()
	floor := time.Duration(float64(e.Recompute.Step) / g.HalfFLOPS * 1e9)
	span := tr.Events[len(tr.Events)-1].Time - tr.Events[0].Time
	if rep.Simulated.StepMs <= 0 || span < floor/2 {
		t.Errorf("the simulated step spans %v of its trace (step %.3f ms); its FLOPs alone take %v on %s", span, rep.Simulated.StepMs, floor, g.Name)
	}
}
