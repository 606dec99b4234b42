package cuda

import (
	"time"
	"trainmem/cuda/enum"
)

// TraceAction is the kind of an allocator event, as PyTorch's memory
// snapshot names them in device_traces (TraceStep is trainmem's: a step
// begins).
type TraceAction uint8

const (
	TraceAlloc        TraceAction = iota // "alloc": a block handed out
	TraceFree                            // "free_requested" and "free_completed": one stream, so both at once
	TraceSegmentAlloc                    // "segment_alloc": a segment taken from the device
	TraceSegmentFree                     // "segment_free": a cached segment given back
	TraceOOM                             // "oom": a request that did not fit, after the cache was emptied
	TraceStep                            // a training step begins (not an allocator event)
	numTraceActions
)

var traceActionNames = enum.New[TraceAction]("cuda", "TraceAction", "trace action", "alloc", "free", "segment_alloc", "segment_free", "oom", "step")

func (a TraceAction) String() string { return traceActionNames.String(a) }

// Site says what in a training step made an allocation: the phase
// (forward, recompute, backward, optimizer), the op, the transformer block
// (-1 for none: the embeddings, the head, the optimizer) and the value the
// op computes.
type Site struct {
	Phase string
	Op    string
	Block int
	Value string
}

// TraceEvent is one allocator event of a device.
type TraceEvent struct {
	Action    TraceAction
	Time      time.Duration // since the device's tracer was set
	Addr      uintptr       // the block's or segment's address (0 for oom)
	Size      int64         // the block's size (rounded), the segment's, or an oom's rounded request
	Requested int64         // the bytes asked for (alloc, free, oom)
	Category  Category      // the block's (alloc, free, oom), or what the segment was first carved for (segment_alloc, segment_free)
	Site      Site          // what made the allocation (alloc, oom, segment_alloc), or freed it (free, segment_free)
	// DeviceFree is the device's free memory at an oom.
	DeviceFree int64
	// Step is the step's number (TraceStep).
	Step int
	// State, at an oom, is the allocator's segments at the failed request
	// (its own type: cuda/alloc's []SegmentInfo), so that a tracer can keep
	// what filled the device before anything is given back.
	State any
}

// Tracer receives every event of a device's allocator, in order, while it
// is set. Events arrive with the allocator's lock held: a tracer records
// and returns.
type Tracer interface {
	Event(TraceEvent)
}

// Traceable is implemented by devices whose allocator records its events
// (every device, through alloc.Pool).
type Traceable interface {
	// SetTracer makes tr receive the events from now on (nil: none).
	SetTracer(tr Tracer)
	// SetSite is the site of the allocations and frees that follow.
	SetSite(s Site)
}

// TraceEnder is a Tracer told when tracing stops, with the device still in
// the state its events end in (trainmem's trainers stop before they free
// the model states), so that it can take the allocator's segments.
type TraceEnder interface {
	EndTrace(dev Device)
}
