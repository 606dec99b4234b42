package bench

// Memory traces: every allocator event of a step, for the viewers people
// already use: PyTorch's memory snapshot (pytorch.org/memory_viz, and
// python -m torch.cuda._memory_viz) and a Chrome trace (Perfetto,
// chrome://tracing).

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"trainmem/bench/pickle"
	"trainmem/cuda"
	"trainmem/cuda/alloc"
	"trainmem/model"
	"trainmem/model/files"
	"trainmem/zero"
)

// MemoryTrace records one device's allocator events of a step: the last
// step of a run, or the step that ran out of memory, up to the failed
// request and its oom event (each cuda.TraceStep event starts the record
// afresh). When tracing stops (EndTrace) it takes the allocator's
// segments, the state the events end in.
type MemoryTrace struct {
	mu     sync.Mutex
	Device string
	// Rank is the rank whose device the trace records (its Chrome trace's
	// process id, so that merged ranks' traces do not collide).
	Rank int
	Step int // the recorded step, from 1
	// Began is the wall-clock time the recorded step began (the snapshot's
	// time_us count from it, in Unix microseconds, as PyTorch's do).
	Began    time.Time
	Events   []cuda.TraceEvent
	Segments []alloc.SegmentInfo // at the end of the recorded events
	oom      bool                // the events end at an oom (Segments are the allocator's then)
	err      error
	// Timing, when set, is the recorded step replayed in time (a
	// simulated rank's, zero/clock.go): the Chrome trace then runs on the
	// replayed step's clock, with its collectives and waits beside the
	// kernels.
	Timing *zero.Timing
}

// Event implements cuda.Tracer.
func (m *MemoryTrace) Event(e cuda.TraceEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.oom:
		return // what filled the device is kept as it was at the failed request
	case e.Action == cuda.TraceStep:
		m.Events, m.Step, m.Began = m.Events[:0], e.Step, time.Now()
		return
	case e.Action == cuda.TraceOOM:
		m.oom = true
		m.Segments, _ = e.State.([]alloc.SegmentInfo)
		e.State = nil
	}
	m.Events = append(m.Events, e)
}

// allocatorOf is a device's caching allocator (every device embeds
// alloc.Pool).
type allocatorOf interface{ Allocator() *alloc.Allocator }

// EndTrace implements cuda.TraceEnder: it takes dev's segments, the state
// the events end in.
func (m *MemoryTrace) EndTrace(dev cuda.Device) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Device = dev.Name()
	if m.oom {
		return
	}
	a, ok := dev.(allocatorOf)
	if !ok {
		m.err = fmt.Errorf("bench: %s has no caching allocator to snapshot", dev.Name())
		return
	}
	m.Segments = a.Allocator().Snapshot()
}

// TraceFiles are the files of a memory trace written at base: the
// snapshot (base.pickle) and the Chrome trace (base.json).
func TraceFiles(base string) (snapshot, chrome string) { return base + ".pickle", base + ".json" }

// Write writes the snapshot and the Chrome trace at base (TraceFiles),
// each atomically.
func (m *MemoryTrace) Write(base string) error {
	if m.err != nil {
		return m.err
	}
	if m.Segments == nil && m.Events == nil {
		return fmt.Errorf("bench: the memory trace recorded nothing (no step ran)")
	}
	snap, chrome := TraceFiles(base)
	if err := files.WriteAtomic(snap, m.WriteSnapshot); err != nil {
		return err
	}
	return files.WriteAtomic(chrome, m.WriteChrome)
}

// frames is a site as the snapshot's stack panel shows it, innermost
// first, each frame "filename:line:name": the value and the block, op and
// phase that made it, then the category. (The browser viewer drops frames
// whose name holds "_start" or "PyEval_", or whose file holds "ceval.c" and
// the like: trainmem's names hold none.)
func frames(s cuda.Site, c cuda.Category) pickle.List {
	return siteFrames(s, c.String(), "allocated before the traced step")
}

// segmentFrames are a segment's frames: what it was first carved for
// (its request's site, as frames gives a block's) and the pool.
func segmentFrames(s cuda.Site, c cuda.Category, small bool) pickle.List {
	pool := "large"
	if small {
		pool = "small"
	}
	return siteFrames(s, fmt.Sprintf("segment (%s pool) first carved for %s", pool, c), "reserved before the traced step")
}

// siteFrames are a site's frames, innermost first, with outer as the last
// frame's name; before names a site outside the traced step.
func siteFrames(s cuda.Site, outer, before string) pickle.List {
	inner := pickle.D("filename", "trainer", "line", int64(0), "name", before)
	if s.Phase != "" {
		where := s.Op + " / " + s.Phase
		if s.Block >= 0 {
			where = fmt.Sprintf("block %d / %s", s.Block, where)
		}
		inner = pickle.D("filename", where, "line", int64(max(s.Block, 0)), "name", s.Value)
	}
	return pickle.List{inner, pickle.D("filename", "trainmem", "line", int64(0), "name", outer)}
}

// markerFrames is the one frame of a snapshot marker of the trace.
func markerFrames(what string) pickle.List {
	return pickle.List{pickle.D("filename", "trainmem", "line", int64(0), "name", what)}
}

// WriteSnapshot writes the dictionary torch.cuda.memory._snapshot()
// returns, pickled: segments (each with its blocks, which tile it in
// address order, their state and requested sizes, and the frames of what
// allocated them) and device_traces (one list, device 0: alloc,
// free_requested and free_completed, segment_alloc, segment_free and oom,
// each with addr, size, stream, time_us, frames and a category to colour
// by), ended by a snapshot event, as PyTorch's traces end.
//
// What PyTorch's allocator writes, trainmem writes: an alloc or free
// entry's size is the bytes requested (CUDACachingAllocator.cpp records
// the request, orig_size, where the block's size is rounded), a segment
// entry's the segment's size, and a block's size rounded beside its
// requested_size. So MemoryViz's views, which draw the blocks alive before
// the trace at their requested size and the trace's at their entries'
// size, sum one kind of byte: its Active Memory Timeline peaks at the
// step's peak requested bytes, its segment timeline at the peak reserved,
// and its Allocator State History agrees with the timeline at every event.
//
// The trace opens with what the allocator held when the recorded step
// began (the segments, then the blocks: the model states first), as
// allocations of their own with their categories, as PyTorch records them
// when _record_memory_history is enabled before the model is built; so the
// viewer colours the model states by category instead of drawing them as
// blocks of no category ("unknown").
func (m *MemoryTrace) WriteSnapshot(w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var segs pickle.List
	for _, s := range m.Segments {
		var blocks pickle.List
		var allocated, requested int64
		for _, b := range s.Blocks {
			state := "inactive"
			fr := pickle.List{}
			if b.Allocated {
				state = "active_allocated"
				allocated += b.Size
				requested += b.Requested
				fr = frames(b.Site, b.Cat)
			}
			blocks = append(blocks, pickle.D("address", int64(b.Addr), "size", b.Size, "requested_size", b.Requested, "state", state, "frames", fr))
		}
		kind := "large"
		if s.Small {
			kind = "small"
		}
		segs = append(segs, pickle.D(
			"device", int64(0), "address", int64(s.Base), "total_size", s.Size,
			"allocated_size", allocated, "active_size", allocated, "requested_size", requested,
			"stream", int64(0), "segment_type", kind, "segment_pool_id", pickle.Tuple{int64(0), int64(0)},
			"is_expandable", false, "frames", segmentFrames(s.Site, s.Cat, s.Small), "blocks", blocks))
	}
	var trace pickle.List
	// time_us is the wall clock in Unix microseconds, as PyTorch's
	// allocator writes it (the viewer shows it as a date): the step's
	// beginning, then the events' times from it (the modelled clock's, for
	// a simulation).
	var t0 time.Duration
	if len(m.Events) > 0 {
		t0 = m.Events[0].Time
	}
	began := m.Began
	if began.IsZero() {
		began = time.Now()
	}
	clock := func(t time.Duration) int64 { return began.UnixMicro() + (t - t0).Microseconds() }
	entry := func(action string, e cuda.TraceEvent, size int64) pickle.Dict {
		fr := frames(e.Site, e.Category)
		if e.Action == cuda.TraceSegmentAlloc || e.Action == cuda.TraceSegmentFree {
			fr = segmentFrames(e.Site, e.Category, e.Size == alloc.SmallBuffer) // the small pool's segments alone are this size
		}
		d := pickle.D("action", action, "addr", int64(e.Addr), "size", size, "stream", int64(0),
			"time_us", clock(e.Time), "frames", fr, "category", e.Category.String())
		if e.Action == cuda.TraceOOM {
			d = append(d, pickle.Item{Key: "device_free", Value: e.DeviceFree})
		}
		return d
	}
	// The viewer colours by a category's place in the order the trace
	// first names them (MemoryViz.js's annotate_snapshot), with Tableau
	// 10: the trace opens with a marker a category, in cuda.Categories
	// order, so that a category has the same colour in every file and in
	// trainmem's own plots, each saying what the category held when the
	// step began. "unknown" comes last: the viewer before PyTorch 2.6
	// throws when a trace has categories and none is "unknown" (it pushes
	// it onto a misspelt list), and trainmem gives every block a category.
	held, _ := m.start()
	marker := func(cat, what string) pickle.Dict {
		return pickle.D("action", "snapshot", "addr", int64(0), "size", int64(0), "stream", int64(0),
			"time_us", clock(t0), "frames", markerFrames(what), "category", cat)
	}
	for _, c := range cuda.Categories() {
		trace = append(trace, marker(c.String(), fmt.Sprintf("%s holds %s when the traced step begins", c, model.Bytes(held[c]))))
	}
	trace = append(trace, marker("unknown", "unknown: no block of trainmem's (every block has a category)"))
	for _, e := range m.before() {
		switch e.Action {
		case cuda.TraceSegmentAlloc:
			trace = append(trace, entry("segment_alloc", e, e.Size))
		case cuda.TraceAlloc:
			trace = append(trace, entry("alloc", e, e.Requested))
		}
	}
	for _, e := range m.Events {
		switch e.Action {
		case cuda.TraceAlloc:
			trace = append(trace, entry("alloc", e, e.Requested))
		case cuda.TraceFree:
			trace = append(trace, entry("free_requested", e, e.Requested), entry("free_completed", e, e.Requested))
		case cuda.TraceSegmentAlloc, cuda.TraceSegmentFree:
			trace = append(trace, entry(e.Action.String(), e, e.Size))
		case cuda.TraceOOM:
			// PyTorch's oom entry carries the rounded request (its
			// params.size()) and the device's free bytes.
			trace = append(trace, entry("oom", e, e.Size))
		}
	}
	// The snapshot that ends the trace, as PyTorch's do: the viewer's
	// Allocator State History opens on it.
	last := t0
	end := fmt.Sprintf("end of step %d: the allocator's segments as listed here", m.Step)
	if n := len(m.Events); n > 0 {
		last = m.Events[n-1].Time
		if m.Events[n-1].Action == cuda.TraceOOM {
			end = fmt.Sprintf("step %d at its out-of-memory request: the allocator's segments as they were then", m.Step)
		}
	}
	trace = append(trace, pickle.D("action", "snapshot", "addr", int64(0), "size", int64(0), "stream", int64(0),
		"time_us", clock(last), "frames", markerFrames(end)))
	return pickle.Write(w, pickle.D(
		"segments", segs,
		"device_traces", pickle.List{trace},
		"allocator_settings", pickle.D("trainmem_device", m.Device, "trainmem_step", int64(m.Step))))
}

// ViewerPeak is the peak MemoryViz's Active Memory Timeline shows for the
// snapshot: the tensors' requested bytes (what PyTorch's allocator records
// in its trace), from the state the events began in; and the peak of
// allocated bytes (the allocator's 512-byte blocks) beside it.
func (m *MemoryTrace) ViewerPeak() (requested, allocated int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var req, all int64
	for _, e := range m.before() {
		if e.Action == cuda.TraceAlloc {
			req, all = req+e.Requested, all+e.Size
		}
	}
	requested, allocated = req, all
	for _, e := range m.Events {
		switch e.Action {
		case cuda.TraceAlloc:
			req, all = req+e.Requested, all+e.Size
		case cuda.TraceFree:
			req, all = req-e.Requested, all-e.Size
		}
		requested, allocated = max(requested, req), max(allocated, all)
	}
	return requested, allocated
}

// before is what the allocator held when the recorded events began, as
// the events that made it: a segment_alloc for each segment, in address
// order, then an alloc for each live block, by category (the model states
// first) and address, each at the first event's time. A block is live
// then when the events free it without allocating it first, or when it is
// allocated at their end without the events allocating it; a segment
// likewise.
func (m *MemoryTrace) before() []cuda.TraceEvent {
	var t0 time.Duration
	if len(m.Events) > 0 {
		t0 = m.Events[0].Time
	}
	blocks, segs := map[uintptr]bool{}, map[uintptr]bool{} // made by the events, and live
	var out []cuda.TraceEvent
	for _, e := range m.Events {
		switch e.Action {
		case cuda.TraceAlloc:
			blocks[e.Addr] = true
		case cuda.TraceFree:
			if !blocks[e.Addr] {
				out = append(out, cuda.TraceEvent{Action: cuda.TraceAlloc, Time: t0, Addr: e.Addr, Size: e.Size, Requested: e.Requested, Category: e.Category})
			}
			delete(blocks, e.Addr)
		case cuda.TraceSegmentAlloc:
			segs[e.Addr] = true
		case cuda.TraceSegmentFree:
			if !segs[e.Addr] {
				out = append(out, cuda.TraceEvent{Action: cuda.TraceSegmentAlloc, Time: t0, Addr: e.Addr, Size: e.Size, Category: e.Category})
			}
			delete(segs, e.Addr)
		}
	}
	for _, s := range m.Segments {
		if !segs[s.Base] {
			out = append(out, cuda.TraceEvent{Action: cuda.TraceSegmentAlloc, Time: t0, Addr: s.Base, Size: s.Size, Category: s.Cat, Site: s.Site})
		}
		for _, b := range s.Blocks {
			if b.Allocated && !blocks[b.Addr] {
				out = append(out, cuda.TraceEvent{Action: cuda.TraceAlloc, Time: t0, Addr: b.Addr, Size: b.Size, Requested: b.Requested, Category: b.Cat, Site: b.Site})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Action != b.Action {
			return a.Action == cuda.TraceSegmentAlloc
		}
		if a.Category != b.Category {
			return a.Category < b.Category
		}
		return a.Addr < b.Addr
	})
	return out
}

// start is what the allocator held when the recorded events began, per
// category (allocated bytes) and reserved: the sums of before's events.
func (m *MemoryTrace) start() (cats [cuda.NumCategories]int64, reserved int64) {
	for _, e := range m.before() {
		switch e.Action {
		case cuda.TraceAlloc:
			cats[e.Category] += e.Size
		case cuda.TraceSegmentAlloc:
			reserved += e.Size
		}
	}
	return cats, reserved
}

// WriteChrome writes the events as a Chrome trace (the JSON object format
// Perfetto and chrome://tracing open): one counter track per category
// (allocated bytes, rounded) and one of reserved bytes, updated at every
// event; slices for the phases (thread 1) and for each instruction's op
// (thread 2), from its first event to the next one's. Times are the
// allocator events': the host's clock for a measured run, the modelled
// one (a roofline, cuda.TimeModel) for a simulated one, on the replayed
// step's clock with Timing, whose collectives holding the kernels and
// waits are thread 3 and whose communication stream is thread 4.
func (m *MemoryTrace) WriteChrome(w io.Writer) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	type event struct {
		Name string         `json:"name"`
		Cat  string         `json:"cat,omitempty"`
		Ph   string         `json:"ph"`
		Ts   float64        `json:"ts"`
		Dur  *float64       `json:"dur,omitempty"`
		Pid  int            `json:"pid"`
		Tid  int            `json:"tid"`
		Args map[string]any `json:"args,omitempty"`
	}
	evs := []event{
		{Name: "process_name", Ph: "M", Args: map[string]any{"name": fmt.Sprintf("trainmem rank %d: %s", m.Rank, m.Device)}},
		{Name: "process_sort_index", Ph: "M", Args: map[string]any{"sort_index": m.Rank}},
		{Name: "thread_name", Ph: "M", Tid: 1, Args: map[string]any{"name": "phases"}},
		{Name: "thread_name", Ph: "M", Tid: 2, Args: map[string]any{"name": "ops"}},
	}
	at := func(d time.Duration) time.Duration { return d }
	if tm := m.Timing; tm != nil {
		at = tm.Map
		evs = append(evs, event{Name: "thread_name", Ph: "M", Tid: 3, Args: map[string]any{"name": "collectives and waits (compute stream)"}},
			event{Name: "thread_name", Ph: "M", Tid: 4, Args: map[string]any{"name": "communication stream"}})
		for _, iv := range tm.Intervals {
			tid := 3
			if iv.Stream == "communication" {
				tid = 4
			}
			d := float64((iv.End - iv.Start).Nanoseconds()) / 1e3
			evs = append(evs, event{Name: iv.Name, Cat: iv.Stream, Ph: "X", Ts: float64(iv.Start.Nanoseconds()) / 1e3, Dur: &d, Tid: tid})
		}
	}
	cats, reserved := m.start()
	counters := func(ts float64) {
		args := map[string]any{}
		for _, c := range cuda.Categories() {
			args[c.String()] = cats[c]
		}
		evs = append(evs, event{Name: "allocated by category (bytes)", Ph: "C", Ts: ts, Args: args},
			event{Name: "reserved (bytes)", Ph: "C", Ts: ts, Args: map[string]any{"reserved": reserved}})
	}
	// slice closes the open slice of thread tid at ts.
	type open struct {
		name string
		ts   float64
		args map[string]any
	}
	var opened [3]*open
	slice := func(tid int, ts float64) {
		if o := opened[tid]; o != nil {
			d := ts - o.ts
			evs = append(evs, event{Name: o.name, Cat: []string{"", "phase", "op"}[tid], Ph: "X", Ts: o.ts, Dur: &d, Tid: tid, Args: o.args})
			opened[tid] = nil
		}
	}
	// Times in microseconds to the nanosecond, strictly increasing: events
	// of one instant are a nanosecond apart, so that a viewer that keeps
	// one counter value per timestamp shows every value, the peak's too.
	var ts float64
	if len(m.Events) > 0 {
		ts = max(float64(at(m.Events[0].Time).Nanoseconds())/1e3-1e-3, 0) // no negative time
	}
	counters(ts)
	for _, e := range m.Events {
		ts = max(float64(at(e.Time).Nanoseconds())/1e3, ts+1e-3)
		if s := e.Site; s.Phase != "" {
			if o := opened[1]; o == nil || o.name != s.Phase {
				slice(1, ts)
				opened[1] = &open{name: s.Phase, ts: ts}
			}
			if o := opened[2]; o == nil || o.args["value"] != s.Value {
				slice(2, ts)
				opened[2] = &open{name: s.Op, ts: ts, args: map[string]any{"value": s.Value, "block": s.Block}}
			}
		}
		switch e.Action {
		case cuda.TraceAlloc:
			cats[e.Category] += e.Size
		case cuda.TraceFree:
			cats[e.Category] -= e.Size
		case cuda.TraceSegmentAlloc:
			reserved += e.Size
		case cuda.TraceSegmentFree:
			reserved -= e.Size
		case cuda.TraceOOM:
			evs = append(evs, event{Name: "out of memory", Ph: "i", Ts: ts, Tid: 1, Args: map[string]any{
				"requested": e.Requested, "rounded": e.Size, "category": e.Category.String(), "device_free": e.DeviceFree}})
		}
		counters(ts)
	}
	// The trace ends a tick after its last event: the last op's slice,
	// opened by that event (its frees, when it allocated nothing), lasts.
	ts += 1e-3
	slice(1, ts)
	slice(2, ts)
	for i := range evs {
		evs[i].Pid = m.Rank
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].Ph == "M" && evs[j].Ph != "M" })
	enc := json.NewEncoder(w)
	return enc.Encode(map[string]any{"traceEvents": evs, "displayTimeUnit": "ms",
		"otherData": map[string]any{"trainmem_device": m.Device, "trainmem_step": m.Step, "categories": strings.Join(categoryNames(), " ")}})
}

func categoryNames() []string {
	var out []string
	for _, c := range cuda.Categories() {
		out = append(out, c.String())
	}
	return out
}

// RankTraces are the memory traces of a run's ranks, one a rank, by rank.
type RankTraces map[int]*MemoryTrace

// Tracer is rank's tracer, made on first use (zero.Group.TraceRanks).
func (rt RankTraces) Tracer(rank int) cuda.Tracer {
	t, ok := rt[rank]
	if !ok {
		t = &MemoryTrace{Rank: rank}
		rt[rank] = t
	}
	return t
}

// RankBase is the base of rank r's trace files: base.rank<r>.
func RankBase(base string, rank int) string { return fmt.Sprintf("%s.rank%d", base, rank) }

// Ranks are the traced ranks, in order.
func (rt RankTraces) Ranks() []int {
	var out []int
	for r := range rt {
		out = append(out, r)
	}
	sort.Ints(out)
	return out
}

// Write writes each rank's trace at RankBase(base, rank).
func (rt RankTraces) Write(base string) error {
	for _, r := range rt.Ranks() {
		if err := rt[r].Write(RankBase(base, r)); err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// Panels are the ranks' timeline panels, one a rank.
func (rt RankTraces) Panels() []TimelinePanel {
	var out []TimelinePanel
	for _, r := range rt.Ranks() {
		out = append(out, TimelinePanel{Title: fmt.Sprintf("rank %d, step %d", r, rt[r].Step), Trace: rt[r]})
	}
	return out
}
