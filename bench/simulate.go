package bench

// The simulate report: the real training schedule on the shape-only
// device, its allocator's peak per category.

import (
	"errors"
	"fmt"
	"io"
	"time"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/train"
)

// SimulateReport is what steps of a setup on a shape-only device leave:
// the last step's record and the allocator statistics.
type SimulateReport struct {
	Setup    model.Setup
	Device   string
	Capacity int64 // the device's capacity in bytes; 0: unlimited
	Steps    int
	Record   train.Record
	Stats    cuda.Stats
	Elapsed  time.Duration
	// Roofline is the device's modelled clock (cuda.TimeModel), nil
	// without one: the record's times are then a roofline estimate.
	Roofline *cuda.Roofline
}

// Simulate runs o.Steps steps (0: 2) of o.Setup, one rank, on dev, a
// shape-only device of capacity bytes (0: unlimited). A setup that does not
// fit fails with the allocator's *cuda.OutOfMemoryError, saying so.
// o.Trace, when set, records the last step (or the one that ran out of
// memory, up to the failed request).
func Simulate(dev cuda.Device, capacity int64, o Options) (*SimulateReport, error) {
	c := o.Setup
	if err := c.Err(); err != nil {
		return nil, err
	}
	s, steps := c.Setup(), o.Steps
	if steps <= 0 {
		steps = 2
	}
	start := time.Now()
	rec, st, err := train.Simulate(dev, c, steps, o.Trace)
	elapsed := time.Since(start)
	var oom *cuda.OutOfMemoryError
	if errors.As(err, &oom) {
		return nil, fmt.Errorf("%s does not fit: %w", s.Model.Name, err)
	}
	if err != nil {
		return nil, err
	}
	rep := &SimulateReport{Setup: s, Device: dev.Name(), Capacity: capacity, Steps: steps, Record: rec, Stats: st, Elapsed: elapsed}
	if tm, ok := dev.(cuda.TimeModel); ok && tm.Roofline().Bandwidth > 0 {
		r := tm.Roofline()
		rep.Roofline = &r
	}
	return rep, nil
}

// WriteText writes the setup and the memory table of the last step, and
// with a roofline its predicted time.
func (r *SimulateReport) WriteText(w io.Writer) error {
	WriteHeader(w, r.Setup, r.Device)
	fmt.Fprintf(w, "simulated %d steps in %v; peak of the last step:\n\n", r.Steps, r.Elapsed.Round(time.Millisecond))
	if err := train.WriteMemoryTable(w, r.Stats); err != nil {
		return err
	}
	if rf := r.Roofline; rf != nil {
		rec := r.Record
		fmt.Fprintf(w, "\npredicted step on %s: %s (forward %s, recompute %s, backward %s, optimizer %s), MFU %.0f%%\n",
			rf.Name, msText(rec.StepMs), msText(rec.ForwardMs), msText(rec.RecomputeMs), msText(rec.BackwardMs), msText(rec.OptimizerMs), 100*rec.MFU)
		fmt.Fprintf(w, "  a roofline estimate, not a measurement: each op takes the longer of its FLOPs at %.0f TFLOP/s (%s products) and its bytes read and written at %.2f TB/s, one after another; no kernel overheads, launches or overlap (source: %s)\n",
			rf.PeakFLOPS(train.WorkingDType(r.Setup.Precision))/1e12, train.WorkingDType(r.Setup.Precision), rf.Bandwidth/1e12, rf.Source)
	}
	return nil
}

// msText is a time in milliseconds, to three significant digits.
func msText(ms float64) string {
	switch {
	case ms == 0:
		return "0"
	case ms >= 1000:
		return fmt.Sprintf("%.2f s", ms/1000)
	case ms >= 1:
		return fmt.Sprintf("%.3g ms", ms)
	}
	return fmt.Sprintf("%.3g µs", ms*1000)
}

// WriteJSON writes the last step's memory with exact bytes.
func (r *SimulateReport) WriteJSON(w io.Writer) error {
	s, rec := r.Setup, r.Record
	return writeJSON(w, simulateDoc{
		Model: modelDocOf(s), Setup: setupDocOf(s), Capacity: r.Capacity, Steps: r.Steps,
		Memory: rec.Memory, AllocatedBytes: rec.AllocatedBytes, PeakAllocatedBytes: rec.PeakAllocatedBytes,
		ReservedBytes: rec.ReservedBytes, PeakReservedBytes: rec.PeakReservedBytes,
		InactiveSplitBytes: rec.InactiveSplitBytes, NumAllocs: rec.NumAllocs, NumFrees: rec.NumFrees,
		Seconds: r.Elapsed.Seconds(), Predicted: predictedOf(r),
	})
}

// predictedDoc is a simulated step's roofline estimate, in JSON.
type predictedDoc struct {
	GPU         string  `json:"gpu"`
	PeakFLOPS   float64 `json:"peak_flops"`
	Bandwidth   float64 `json:"bandwidth_bytes_per_s"`
	Source      string  `json:"source"`
	StepMs      float64 `json:"step_ms"`
	ForwardMs   float64 `json:"forward_ms"`
	RecomputeMs float64 `json:"recompute_ms"`
	BackwardMs  float64 `json:"backward_ms"`
	OptimizerMs float64 `json:"optimizer_ms"`
	MFU         float64 `json:"mfu"`
}

func predictedOf(r *SimulateReport) *predictedDoc {
	rf := r.Roofline
	if rf == nil {
		return nil
	}
	rec := r.Record
	return &predictedDoc{GPU: rf.Name, PeakFLOPS: rf.PeakFLOPS(train.WorkingDType(r.Setup.Precision)), Bandwidth: rf.Bandwidth, Source: rf.Source,
		StepMs: rec.StepMs, ForwardMs: rec.ForwardMs, RecomputeMs: rec.RecomputeMs, BackwardMs: rec.BackwardMs, OptimizerMs: rec.OptimizerMs, MFU: rec.MFU}
}

type simulateDoc struct {
	Model              modelDoc     `json:"model"`
	Setup              setupDoc     `json:"setup"`
	Capacity           int64        `json:"capacity_bytes"` // 0: unlimited
	Steps              int          `json:"steps"`
	Memory             train.Memory `json:"memory"`
	AllocatedBytes     int64        `json:"allocated_bytes"`
	PeakAllocatedBytes int64        `json:"peak_allocated_bytes"`
	ReservedBytes      int64        `json:"reserved_bytes"`
	PeakReservedBytes  int64        `json:"peak_reserved_bytes"`
	InactiveSplitBytes int64        `json:"inactive_split_bytes"`
	NumAllocs          int64        `json:"num_allocs"`
	NumFrees           int64        `json:"num_frees"`
	Seconds            float64      `json:"seconds"`
	// Predicted is the step's roofline estimate (--gpu), absent without one.
	Predicted *predictedDoc `json:"predicted,omitempty"`
}
