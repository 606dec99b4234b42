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
}

// Simulate runs steps of s on dev, a shape-only device of capacity bytes
// (0: unlimited). A setup that does not fit fails with the allocator's
// *cuda.OutOfMemoryError, saying so. trace, when set, records the last step
// (or the one that ran out of memory, up to the failed request).
func Simulate(dev cuda.Device, capacity int64, s model.Setup, steps int, trace *MemoryTrace) (*SimulateReport, error) {
	start := time.Now()
	var tr cuda.Tracer
	if trace != nil {
		tr = trace
	}
	rec, st, err := train.Simulate(dev, s, steps, tr)
	elapsed := time.Since(start)
	var oom *cuda.OutOfMemoryError
	if errors.As(err, &oom) {
		return nil, fmt.Errorf("%s does not fit: %w", s.Model.Name, err)
	}
	if err != nil {
		return nil, err
	}
	return &SimulateReport{Setup: s, Device: dev.Name(), Capacity: capacity, Steps: steps, Record: rec, Stats: st, Elapsed: elapsed}, nil
}

// WriteText writes the setup and the memory table of the last step.
func (r *SimulateReport) WriteText(w io.Writer) error {
	WriteHeader(w, r.Setup, r.Device)
	fmt.Fprintf(w, "simulated %d steps in %v; peak of the last step:\n\n", r.Steps, r.Elapsed.Round(time.Millisecond))
	return train.WriteMemoryTable(w, r.Stats)
}

// WriteJSON writes the last step's memory with exact bytes.
func (r *SimulateReport) WriteJSON(w io.Writer) error {
	s, rec := r.Setup, r.Record
	return writeJSON(w, simulateDoc{
		Model: modelDocOf(s), Setup: setupDocOf(s), Capacity: r.Capacity, Steps: r.Steps,
		Memory: rec.Memory, AllocatedBytes: rec.AllocatedBytes, PeakAllocatedBytes: rec.PeakAllocatedBytes,
		ReservedBytes: rec.ReservedBytes, PeakReservedBytes: rec.PeakReservedBytes,
		InactiveSplitBytes: rec.InactiveSplitBytes, NumAllocs: rec.NumAllocs, NumFrees: rec.NumFrees,
		Seconds: r.Elapsed.Seconds(),
	})
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
}
