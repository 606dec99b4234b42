package train

import (
	"trainmem/cuda"
)

// Record is what one training step leaves behind: one JSON line of
// `trainmem train --out`. Byte counts are the allocator's (rounded to its
// 512-byte blocks), keyed by memory category.
type Record struct {
	Step        int     `json:"step"`
	Loss        float64 `json:"loss"`
	StepMs      float64 `json:"step_ms"`
	ForwardMs   float64 `json:"forward_ms"`
	BackwardMs  float64 `json:"backward_ms"`
	RecomputeMs float64 `json:"recompute_ms"`
	OptimizerMs float64 `json:"optimizer_ms"`
	TokensPerS  float64 `json:"tokens_per_s"`
	LossScale   float64 `json:"loss_scale"` // the scale of this step's gradients (1 without fp16 loss scaling)
	Skipped     bool    `json:"skipped"`    // the update was skipped on an fp16 overflow

	Memory             Memory `json:"memory"`
	AllocatedBytes     int64  `json:"allocated_bytes"`
	PeakAllocatedBytes int64  `json:"peak_allocated_bytes"`
	ReservedBytes      int64  `json:"reserved_bytes"`
	PeakReservedBytes  int64  `json:"peak_reserved_bytes"`
	ActiveBytes        int64  `json:"active_bytes"`
	InactiveSplitBytes int64  `json:"inactive_split_bytes"`
	NumAllocs          int64  `json:"num_allocs"`
	NumFrees           int64  `json:"num_frees"`
}

// Memory splits allocator bytes by category: what is allocated at the end
// of the step, each category's own peak during the step, and what each held
// at the moment of the step's overall peak, all in the allocator's block
// sizes; and each category's peak in requested bytes (the tensors' own
// sizes, before rounding), which the closed-form formulas predict.
type Memory struct {
	Allocated     map[string]int64 `json:"allocated"`
	Peak          map[string]int64 `json:"peak"`
	AtPeak        map[string]int64 `json:"at_peak"`
	PeakRequested map[string]int64 `json:"peak_requested"`
}

// MemoryOf reads the per-category split of allocator statistics.
func MemoryOf(s cuda.Stats) Memory {
	m := Memory{Allocated: map[string]int64{}, Peak: map[string]int64{}, AtPeak: map[string]int64{}, PeakRequested: map[string]int64{}}
	for _, c := range cuda.Categories() {
		m.Allocated[c.String()] = s.CategoryAllocated[c].Current
		m.Peak[c.String()] = s.CategoryAllocated[c].Peak
		m.AtPeak[c.String()] = s.AtPeak[c]
		m.PeakRequested[c.String()] = s.CategoryRequested[c].Peak
	}
	return m
}

// finish fills the step's totals and memory from the trainer's device.
func (r *Record) finish(t *Trainer) {
	r.Step = t.steps
	r.StepMs = r.ForwardMs + r.RecomputeMs + r.BackwardMs + r.OptimizerMs
	if r.StepMs > 0 {
		r.TokensPerS = float64(t.B*t.T) / (r.StepMs / 1000)
	}
	s := t.dev.Stats()
	r.Memory = MemoryOf(s)
	r.AllocatedBytes = s.AllocatedBytes.Current
	r.PeakAllocatedBytes = s.AllocatedBytes.Peak
	r.ReservedBytes = s.ReservedBytes.Current
	r.PeakReservedBytes = s.ReservedBytes.Peak
	r.ActiveBytes = s.ActiveBytes.Current
	r.InactiveSplitBytes = s.InactiveSplitBytes.Current
	r.NumAllocs = s.NumAllocs
	r.NumFrees = s.NumFrees
}
