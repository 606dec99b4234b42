package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// replay is what the snapshot says of its step: every segment's blocks
// tile it; replaying device_traces from the state they began in (the
// segments less the trace's net effect) gives the peak allocated and
// reserved bytes and each category's bytes at the peak.
func replay(t *testing.T, doc snapshotDoc) (peakAlloc, peakRes int64, atPeak map[string]int64) {
	t.Helper()
	cats := map[string]int64{}
	var alloc, res int64
	for i, s := range doc.segments {
		addr, total := num(t, s, "address"), num(t, s, "total_size")
		res += total
		at := addr
		bl, _ := s.Get("blocks")
		for _, b := range *bl.(*types.List) {
			b := b.(*types.Dict)
			if num(t, b, "address") != at {
				t.Fatalf("segment %d: a block at %#x, want %#x: the blocks do not tile it", i, num(t, b, "address"), at)
			}
			at += num(t, b, "size")
			if str(b, "state") == "active_allocated" {
				fr, _ := b.Get("frames")
				cat := str((*fr.(*types.List))[1].(*types.Dict), "name")
				cats[cat] += num(t, b, "size")
				alloc += num(t, b, "size")
			}
		}
		if at != addr+total {
			t.Fatalf("segment %d: blocks end at %#x, the segment at %#x", i, at, addr+total)
		}
	}
	for _, e := range doc.trace { // undo the trace: the state it began in
		switch str(e, "action") {
		case "alloc":
			alloc -= num(t, e, "size")
			cats[str(e, "category")] -= num(t, e, "size")
		case "free_completed":
			alloc += num(t, e, "size")
			cats[str(e, "category")] += num(t, e, "size")
		case "segment_alloc":
			res -= num(t, e, "size")
		case "segment_free":
			res += num(t, e, "size")
		}
	}
	peakAlloc, peakRes = alloc, res
	atPeak = map[string]int64{}
	for k, v := range cats {
		atPeak[k] = v
	}
	for _, e := range doc.trace {
		switch str(e, "action") {
		case "alloc":
			alloc += num(t, e, "size")
			cats[str(e, "category")] += num(t, e, "size")
		case "free_completed":
			alloc -= num(t, e, "size")
			cats[str(e, "category")] -= num(t, e, "size")
		case "segment_alloc":
			res += num(t, e, "size")
		case "segment_free":
			res -= num(t, e, "size")
		}
		if alloc > peakAlloc {
			peakAlloc = alloc
			for k, v := range cats {
				atPeak[k] = v
			}
		}
		peakRes = max(peakRes, res)
	}
	return peakAlloc, peakRes, atPeak
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
		tr := &MemoryTrace{}
		o := Options{Steps: 2, Trace: tr}
		var dev cuda.Device
		if c.measure {
			h, err := host.New(host.Options{Threads: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			dev = h
		}
		rep, err := Validate(context.Background(), s, dev, o)
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
		pa, pr, at := replay(t, doc)
		if pa != rec.PeakAllocatedBytes || pr != rec.PeakReservedBytes {
			t.Errorf("%s: the trace replays to peak allocated %d and reserved %d; the step's record says %d and %d", c.name, pa, pr, rec.PeakAllocatedBytes, rec.PeakReservedBytes)
		}
		for cat, want := range rec.Memory.AtPeak {
			if at[cat.String()] != want {
				t.Errorf("%s: %s at the peak: %d replayed, %d in the record", c.name, cat, at[cat.String()], want)
			}
		}
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
		first, _ := (*func() *types.List { fr, _ := doc.trace[0].Get("frames"); return fr.(*types.List) }())[0].(*types.Dict).Get("filename")
		if !strings.Contains(first.(string), "/ forward") {
			t.Errorf("%s: the first event's frame is %q, want its op / forward", c.name, first)
		}

		var chrome bytes.Buffer
		if err := tr.WriteChrome(&chrome); err != nil {
			t.Fatal(err)
		}
		var ct struct {
			TraceEvents []struct {
				Name string         `json:"name"`
				Ph   string         `json:"ph"`
				Ts   *float64       `json:"ts"`
				Pid  *int           `json:"pid"`
				Tid  *int           `json:"tid"`
				Dur  *float64       `json:"dur"`
				Args map[string]any `json:"args"`
			} `json:"traceEvents"`
		}
		dec := json.NewDecoder(&chrome)
		dec.UseNumber() // bytes exactly
		if err := dec.Decode(&ct); err != nil {
			t.Fatal(err)
		}
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

// A simulation that runs out of memory keeps its trace up to the failed
// request: the oom event last, naming the request and its site, and the
// segments as they were then (what filled the card).
func TestMemoryTraceOOM(t *testing.T) {
	s := setup(t, "tiny", 8, 64, model.FP32, model.AdamW, "none")
	dev := shape.New(3 << 20)
	tr := &MemoryTrace{}
	_, err := Simulate(dev, 3<<20, s, 2, tr)
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
		rep, err := Validate(context.Background(), s, nil, Options{Steps: 2, Trace: tr})
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
	rep, err := SimulateRanks(0, s, zero.Setting{Stage: 3}, 2, traces)
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
		pa, pr, at := replay(t, decodeSnapshot(t, snap.Bytes()))
		if pa != res.Stats.AllocatedBytes.Peak || pr != res.Stats.ReservedBytes.Peak || at["gathered"] != res.Stats.AtPeak[cuda.Gathered] {
			t.Errorf("rank %d: replayed %d/%d (gathered %d), the rank's peaks %d/%d (%d)", res.Rank, pa, pr, at["gathered"], res.Stats.AllocatedBytes.Peak, res.Stats.ReservedBytes.Peak, res.Stats.AtPeak[cuda.Gathered])
		}
	}
}
