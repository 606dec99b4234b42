package bench

// The simulate report: the real training schedule on shape-only devices,
// one a simulated rank: one device's allocator peaks per category, or over
// ranks each rank's memory per category beside the ZeRO paper's model
// states, and the bytes each rank sends and receives in a step.

import (
	"errors"
	"fmt"
	"io"
	"time"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/train"
	"trainmem/zero"
)

// SimulateReport is the last simulated step of a setup over its ranks,
// each simulated rank (zero.SimulatedRanks) on a shape-only device of its
// own. One rank is one device: its record and allocator statistics and,
// on a modelled clock, its predicted time. Over ranks: each rank's peaks
// beside the ZeRO paper's model states, and its traffic.
type SimulateReport struct {
	Setup    model.Setup
	Setting  zero.Setting
	Device   string // each rank's device
	Capacity int64  // each rank's device capacity in bytes; 0: unlimited
	Steps    int
	// Ranks are the simulated ranks' last steps, one for one rank.
	Ranks []zero.RankResult
	// Record and Stats are the first simulated rank's (rank 0's).
	Record train.Record
	Stats  cuda.Stats
	// States is the ZeRO paper's model states a rank (Section 3.1, Table
	// 1) over ranks; nil for one rank and for the parameter server, which
	// the paper does not count.
	States  *model.States
	Elapsed time.Duration
	// Roofline is the devices' modelled clock (cuda.TimeModel), nil
	// without one: the records' times are then a roofline estimate.
	Roofline *cuda.Roofline
}

// Simulate runs o.Steps steps (0: 2) of o.Setup over its ranks under
// o.Setting (one rank: one device's trainer, whatever the setting), each
// simulated rank on a shape-only device from newDevice, of capacity bytes
// (0: unlimited). A setup that does not fit fails with the allocator's
// *cuda.OutOfMemoryError, saying so. traces, when set, records each
// simulated rank's last step (or the one that ran out of memory, up to the
// failed request).
func Simulate(newDevice func() cuda.Device, capacity int64, o Options, traces RankTraces) (*SimulateReport, error) {
	c, set := o.Setup, o.Setting
	if err := c.Err(); err != nil {
		return nil, err
	}
	if o.Trace != nil {
		return nil, errors.New("bench: Simulate records each simulated rank's trace in its traces, not in Options.Trace")
	}
	s, steps := c.Setup(), o.Steps
	if steps <= 0 {
		steps = 2
	}
	var name string
	var roofline *cuda.Roofline
	devs := func() cuda.Device {
		d := newDevice()
		name = d.Name()
		if tm, ok := d.(cuda.TimeModel); ok && tm.Roofline().Bandwidth > 0 {
			r := tm.Roofline()
			roofline = &r
		}
		return d
	}
	var trace func(int) cuda.Tracer
	if traces != nil {
		trace = traces.Tracer
	}
	if o.Profile != nil && zero.LayoutOf(s).Size() > 1 {
		return nil, errors.New("bench: a simulated profile times one device's steps: give it one rank")
	}
	start := time.Now()
	res, err := zero.SimulateWith(devs, c, set, steps, trace, train.Options{Profile: o.Profile})
	elapsed := time.Since(start)
	var oom *cuda.OutOfMemoryError
	lay := zero.LayoutOf(s)
	switch {
	case lay.Size() == 1 && errors.As(err, &oom):
		return nil, fmt.Errorf("%s does not fit: %w", s.Model.Name, unwrapRank(err))
	case lay.Size() == 1 && err != nil:
		return nil, unwrapRank(err)
	case err != nil:
		return nil, fmt.Errorf("%s, %s over %s: %w", s.Model.Name, set, ranksText(s), err)
	}
	if traces != nil {
		for _, rr := range res {
			if tr := traces[rr.Rank]; tr != nil && rr.Timing != nil {
				tr.Timing = rr.Timing
			}
		}
	}
	r := &SimulateReport{Setup: s, Setting: set, Device: name, Capacity: capacity, Steps: steps, Ranks: res,
		Record: res[0].Record, Stats: res[0].Stats, Elapsed: elapsed, Roofline: roofline}
	if lay.Size() > 1 && !set.PS {
		st, err := s.RankStates(rankParams(s), set.Stage)
		if err != nil {
			return nil, err
		}
		r.States = &st
	}
	return r, nil
}

// rankParams is the parameters a data-parallel rank's model states are
// of: the whole model's, or the part of tensor rank 0 of the first
// pipeline stage (the split divides the heads evenly, so every tensor
// rank's part of a stage is about as large; the first stage holds the
// embeddings).
func rankParams(s model.Setup) int64 {
	part, err := s.Model.TensorRank(s.TP, 0)
	if err == nil {
		part, err = part.PipelineStage(s.PP, 0)
	}
	if err != nil {
		return s.Model.NumParams()
	}
	return part.NumParams()
}

// ranksText is a setup's ranks in words: "4 ranks", or its layout with
// its count.
func ranksText(s model.Setup) string {
	lay := zero.LayoutOf(s)
	if lay.TP == 1 && lay.PP == 1 {
		return plural(s.Ranks, "rank")
	}
	return fmt.Sprintf("%s (%s)", plural(lay.Size(), "rank"), lay)
}

// unwrapRank is a one-rank run's error as one device's: without the rank
// the group names.
func unwrapRank(err error) error {
	var re *zero.RankError
	if errors.As(err, &re) {
		return re.Err
	}
	return err
}

// WriteText writes the setup and, for one rank, the memory table of the
// last step and with a roofline its predicted time; over ranks one row a
// rank (ranks alike folded into one row), the ZeRO paper's model states
// beside them, and each rank's traffic.
func (r *SimulateReport) WriteText(w io.Writer) error {
	if zero.LayoutOf(r.Setup).Size() > 1 {
		return r.writeRanks(w)
	}
	WriteHeader(w, r.Setup, r.Device)
	fmt.Fprintf(w, "simulated %d steps in %v; peak of the last step:\n\n", r.Steps, r.Elapsed.Round(time.Millisecond))
	if err := train.WriteMemoryTable(w, r.Stats); err != nil {
		return err
	}
	writeOffload(w, r.Setup, "simulated", r.Record.Offload, nil)
	if rf := r.Roofline; rf != nil {
		rec := r.Record
		fmt.Fprintf(w, "\npredicted step on %s: %s (forward %s, recompute %s, backward %s, optimizer %s), MFU %.0f%%\n",
			rf.Name, msText(rec.StepMs), msText(rec.ForwardMs), msText(rec.RecomputeMs), msText(rec.BackwardMs), msText(rec.OptimizerMs), 100*rec.MFU)
		dt := train.WorkingDType(r.Setup.Precision)
		if rf.Eff == (cuda.Efficiency{}) {
			fmt.Fprintf(w, "  a roofline estimate, not a measurement: each op takes the longer of its FLOPs at %.0f TFLOP/s (%s products) and its bytes read and written at %.2f TB/s, one after another; no kernel overheads, launches or overlap (source: %s)\n",
				rf.PeakFLOPS(dt)/1e12, dt, rf.Bandwidth/1e12, rf.Source)
		} else {
			products := fmt.Sprintf("in 256×128 tiles over %d SMs at %.1f%%", rf.Eff.SMs, 100*rf.Eff.Matmul)
			if rf.Eff.SMs == 0 {
				products = fmt.Sprintf("at %.1f%%", 100*rf.Eff.Matmul)
				if rf.Eff.Ladder[0] > 0 {
					products = fmt.Sprintf("at %.1f%% (a side of %d) to %.1f%% (%d and more)", 100*rf.Eff.Ladder[0], cuda.LadderSides[0], 100*rf.Eff.Matmul, cuda.LadderSides[len(cuda.LadderSides)-1])
				}
			}
			fmt.Fprintf(w, "  a model, not a measurement: each op one kernel after another, its products %s of %.1f GFLOP/s (%s), memory-bound kernels at %.0f%% of %.1f GB/s, special functions at %.3g a second, %v a launch (sources: %s; %s)\n",
				products, rf.PeakFLOPS(dt)/1e9, dt, 100*rf.Eff.Memory, rf.Bandwidth/1e9, rf.Eff.Special, rf.Eff.Launch, rf.Source, rf.Eff.Source)
		}
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

// WriteJSON writes the last step's memory with exact bytes: one rank's
// record, or every simulated rank's peaks and traffic.
func (r *SimulateReport) WriteJSON(w io.Writer) error {
	if zero.LayoutOf(r.Setup).Size() > 1 {
		return r.writeRanksJSON(w)
	}
	s, rec := r.Setup, r.Record
	return writeJSON(w, simulateDoc{
		Model: modelDocOf(s), Setup: setupDocOf(s), Capacity: r.Capacity, Steps: r.Steps,
		Memory: rec.Memory, AllocatedBytes: rec.AllocatedBytes, PeakRequestedBytes: rec.PeakRequestedBytes, PeakAllocatedBytes: rec.PeakAllocatedBytes,
		ReservedBytes: rec.ReservedBytes, PeakReservedBytes: rec.PeakReservedBytes,
		InactiveSplitBytes: rec.InactiveSplitBytes, NumAllocs: rec.NumAllocs, NumFrees: rec.NumFrees,
		Seconds: r.Elapsed.Seconds(), Predicted: predictedOf(r), Offload: rec.Offload,
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
	PeakRequestedBytes int64        `json:"peak_requested_bytes"`
	PeakAllocatedBytes int64        `json:"peak_allocated_bytes"`
	ReservedBytes      int64        `json:"reserved_bytes"`
	PeakReservedBytes  int64        `json:"peak_reserved_bytes"`
	InactiveSplitBytes int64        `json:"inactive_split_bytes"`
	NumAllocs          int64        `json:"num_allocs"`
	NumFrees           int64        `json:"num_frees"`
	Seconds            float64      `json:"seconds"`
	// Predicted is the step's roofline estimate (--gpu), absent without one.
	Predicted *predictedDoc `json:"predicted,omitempty"`
	// Offload is the offload device's side under optimizer offload.
	Offload *train.OffloadRecord `json:"offload,omitempty"`
}
