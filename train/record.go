package train

import (
	"encoding/json"
	"math"

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
	MFU         float64 `json:"mfu"`        // model FLOPs utilization, 0 to 1 (see mfu); 0 when the device's peak is unknown
	LossScale   float64 `json:"loss_scale"` // the scale of this step's gradients (1 without fp16 loss scaling)
	Skipped     bool    `json:"skipped"`    // no update was applied: an fp16 overflow, or a diverged step
	// Diverged says why the run ended at this step, its loss or gradients
	// not finite (see DivergedError); empty otherwise.
	Diverged string `json:"diverged,omitempty"`
	// MicroBatches is the step's micro-batches (M) when it ran more than
	// one or on a pipeline stage; InFlight the most whose forward pass had
	// run and backward pass had not, at once (the activations the stage
	// held together), and BubbleMs the time the stage waited for its
	// neighbours in its sends and receives.
	MicroBatches int     `json:"micro_batches,omitempty"`
	InFlight     int     `json:"in_flight,omitempty"`
	BubbleMs     float64 `json:"bubble_ms,omitempty"`

	Memory             Memory `json:"memory"`
	AllocatedBytes     int64  `json:"allocated_bytes"`
	PeakAllocatedBytes int64  `json:"peak_allocated_bytes"`
	// PeakRequestedBytes is the peak of the bytes the tensors asked for
	// (before the allocator's rounding): what PyTorch's memory viewer's
	// Active Memory Timeline peaks at for the step's trace.
	PeakRequestedBytes int64 `json:"peak_requested_bytes"`
	ReservedBytes      int64 `json:"reserved_bytes"`
	PeakReservedBytes  int64 `json:"peak_reserved_bytes"`
	ActiveBytes        int64 `json:"active_bytes"`
	InactiveSplitBytes int64 `json:"inactive_split_bytes"`
	NumAllocs          int64 `json:"num_allocs"`
	NumFrees           int64 `json:"num_frees"`
	// Offload is the offload device's memory and the step's copies to and
	// from it, under optimizer offload; nil otherwise.
	Offload *OffloadRecord `json:"offload,omitempty"`
}

// OffloadRecord is a step's offload device (host memory under
// model.OffloadOptimizer): its allocator's split by category, its peak,
// and the bytes the step copied to it (the gradients) and from it (the
// updated working weights).
type OffloadRecord struct {
	Device             string `json:"device"`
	Memory             Memory `json:"memory"`
	AllocatedBytes     int64  `json:"allocated_bytes"`
	PeakAllocatedBytes int64  `json:"peak_allocated_bytes"`
	ToHostBytes        int64  `json:"to_host_bytes"`
	ToDeviceBytes      int64  `json:"to_device_bytes"`
}

// MarshalJSON writes the record as one JSON object. JSON has no NaN or
// infinity: a loss that is not finite is written as null, so that such a
// step's record is written like any other's. Such a step applied no update
// ("skipped": an fp16 overflow, whose loss scale backs off), or ended the run
// ("diverged" says why, e.g. "the loss is NaN").
func (r Record) MarshalJSON() ([]byte, error) {
	type plain Record // the fields, without this method
	var loss *float64
	if !math.IsNaN(r.Loss) && !math.IsInf(r.Loss, 0) {
		loss = &r.Loss
	}
	return json.Marshal(struct {
		Step int      `json:"step"`
		Loss *float64 `json:"loss"`
		plain
	}{r.Step, loss, plain(r)})
}

// Memory splits allocator bytes by category: what is allocated at the end
// of the step, each category's own peak during the step, and what each held
// at the moment of the step's overall peak, all in the allocator's block
// sizes; and each category's peak in requested bytes (the tensors' own
// sizes, before rounding), which the closed-form formulas predict.
// (In JSON each map is an object keyed by the categories' names.)
type Memory struct {
	Allocated     map[cuda.Category]int64 `json:"allocated"`
	Peak          map[cuda.Category]int64 `json:"peak"`
	AtPeak        map[cuda.Category]int64 `json:"at_peak"`
	PeakRequested map[cuda.Category]int64 `json:"peak_requested"`
}

// MemoryOf reads the per-category split of allocator statistics.
func MemoryOf(s cuda.Stats) Memory {
	m := Memory{Allocated: map[cuda.Category]int64{}, Peak: map[cuda.Category]int64{}, AtPeak: map[cuda.Category]int64{}, PeakRequested: map[cuda.Category]int64{}}
	for _, c := range cuda.Categories() {
		m.Allocated[c] = s.CategoryAllocated[c].Current
		m.Peak[c] = s.CategoryAllocated[c].Peak
		m.AtPeak[c] = s.AtPeak[c]
		m.PeakRequested[c] = s.CategoryRequested[c].Peak
	}
	return m
}

// finish fills the step's totals and memory from the trainer's device.
func (r *Record) finish(t *Trainer) {
	r.Step = t.steps
	r.StepMs = r.ForwardMs + r.RecomputeMs + r.BackwardMs + r.OptimizerMs
	if r.StepMs > 0 {
		r.TokensPerS = float64(t.setup.Batch*t.setup.Seq) / (r.StepMs / 1000)
	}
	r.MFU = mfu(t, r.StepMs)
	s := t.dev.Stats()
	r.Memory = MemoryOf(s)
	r.AllocatedBytes = s.AllocatedBytes.Current
	r.PeakAllocatedBytes = s.AllocatedBytes.Peak
	r.PeakRequestedBytes = s.RequestedBytes.Peak
	r.ReservedBytes = s.ReservedBytes.Current
	r.PeakReservedBytes = s.ReservedBytes.Peak
	r.ActiveBytes = s.ActiveBytes.Current
	r.InactiveSplitBytes = s.InactiveSplitBytes.Current
	r.NumAllocs = s.NumAllocs
	r.NumFrees = s.NumFrees
	if d := t.offloaded.dev; d != nil {
		st := d.Stats()
		r.Offload = &OffloadRecord{Device: d.Name(), Memory: MemoryOf(st), AllocatedBytes: st.AllocatedBytes.Current, PeakAllocatedBytes: st.AllocatedBytes.Peak,
			ToHostBytes: t.offloaded.pcie.ToHost, ToDeviceBytes: t.offloaded.pcie.ToDevice}
	}
}

// mfu is model FLOPs utilization (Chowdhery et al. 2022, "PaLM", Appendix
// B): the step's model FLOPs — three forward passes, model.Recompute.Step;
// recomputation is not counted — over the step time, as a fraction of the
// device's peak for the run's storage type (cuda.PeakReporter: the host's
// fp32 peak, a GPU's tensor-core peak for fp16 and bf16). 0 when the
// device does not know its peak (Shape, an unknown card).
func mfu(t *Trainer, stepMs float64) float64 {
	pr, ok := t.dev.(cuda.PeakReporter)
	if !ok || stepMs <= 0 {
		return 0
	}
	peak, _ := pr.PeakFLOPS(t.dtypes.param)
	if peak <= 0 {
		return 0
	}
	if !t.stepFLOPsMade {
		t.stepFLOPsMade = true
		if e, err := t.checked.Estimate(); err == nil {
			t.stepFLOPs = e.Recompute.Step
		}
	}
	if m := t.stepFLOPs / (stepMs / 1000) / peak; !math.IsNaN(m) && !math.IsInf(m, 0) {
		return m
	}
	return 0 // no ratio to report: a record is JSON, which has no Inf

}
