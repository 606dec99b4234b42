package bench

// The stage table: one setup over N ranks under every data-parallel
// setting (the parameter server and ZeRO-0 to 3), each rank's memory and
// traffic side by side, so what each stage saves and what it costs shows
// at a glance.

import (
	"fmt"
	"io"
	"time"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/zero"
)

// StageRow is one setting's simulation: the largest of every simulated
// rank's peaks and bytes sent (the rank a card must be sized for), and the
// ZeRO paper's model states and communication volume (nil for the
// parameter server, which the paper does not count).
type StageRow struct {
	Setting        string `json:"setting"`
	ModelStates    int64  `json:"model_states_bytes"`
	PeakAllocated  int64  `json:"peak_allocated_bytes"`
	PeakReserved   int64  `json:"peak_reserved_bytes"`
	SentBytes      int64  `json:"sent_bytes"`
	PaperStates    *int64 `json:"zero_paper_model_states_bytes,omitempty"`
	PaperRingBytes *int64 `json:"zero_paper_ring_bytes,omitempty"`

	Peaks map[cuda.Category]int64 `json:"peak_requested"`
	// Timing is rank 0's step replayed in time, when the sweep ran under a
	// network on devices with a modelled clock (nil otherwise).
	Timing *zero.Timing `json:"-"`
}

// StagesReport is the stage table of a setup.
type StagesReport struct {
	Setup   model.Setup
	Rows    []StageRow
	Elapsed time.Duration
}

// SweepStages simulates o.Setup over its ranks, each on a device
// newDevice makes, o.Steps steps, under the parameter server and ZeRO-0
// to 3, DDP's and ZeRO-2's gradient buckets of o.Setting.BucketBytes (0:
// the default); o.Setting's stage is the sweep's. With o.Setting.Network
// (and devices with a modelled clock) each row keeps rank 0's step
// replayed in time.
func SweepStages(newDevice func() cuda.Device, o Options) (*StagesReport, error) {
	if err := o.Setup.Err(); err != nil {
		return nil, err
	}
	s, steps, bucketBytes := o.Setup.Setup(), o.Steps, o.Setting.BucketBytes
	start := time.Now()
	rep := &StagesReport{Setup: s}
	for _, set := range []zero.Setting{{PS: true}, {Stage: 0}, {Stage: 1}, {Stage: 2}, {Stage: 3}} {
		t := s
		t.ZeRO = set.Stage
		if set.Stage == 0 && !set.PS || set.Stage == 2 {
			set.BucketBytes = bucketBytes
		}
		set.Network = o.Setting.Network
		tc, err := t.Check()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", set, err)
		}
		res, err := zero.Simulate(newDevice, tc, set, steps, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", set, err)
		}
		row := StageRow{Setting: set.String(), Peaks: map[cuda.Category]int64{}, Timing: res[0].Timing}
		for _, rr := range res {
			st := rr.Stats
			row.ModelStates = max(row.ModelStates, requestedStates(st))
			for _, c := range rankCategories {
				row.Peaks[c] = max(row.Peaks[c], st.CategoryRequested[c].Peak)
			}
			row.PeakAllocated = max(row.PeakAllocated, st.AllocatedBytes.Peak)
			row.PeakReserved = max(row.PeakReserved, st.ReservedBytes.Peak)
			sent := int64(0)
			for _, tr := range rr.Traffic {
				sent += tr.SentBytes
			}
			row.SentBytes = max(row.SentBytes, sent)
		}
		if !set.PS {
			if e, err := t.Estimate(); err == nil {
				st, ring := e.States.Total(), e.Comm.RingBytes
				row.PaperStates, row.PaperRingBytes = &st, &ring
			}
		}
		rep.Rows = append(rep.Rows, row)
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// WriteText writes the table, each setting's memory and traffic beside
// DDP's.
func (r *StagesReport) WriteText(w io.Writer) error {
	s := r.Setup
	WriteHeader(w, s, fmt.Sprintf("%s × shape (simulated)", model.Comma(int64(s.Ranks))))
	fmt.Fprintf(w, "every data-parallel setting over %s, simulated in %v; per setting the largest rank's peaks and bytes sent in a step:\n\n", plural(s.Ranks, "rank"), r.Elapsed.Round(time.Millisecond))
	var ddp StageRow
	for _, row := range r.Rows {
		if row.Setting == (zero.Setting{Stage: 0}).String() {
			ddp = row
		}
	}
	var t Table
	t.Add("setting", "model states", "zero_paper", "activations", "gathered", "comm", "peak allocated", "vs DDP", "sent a step", "zero_paper ring", "vs DDP")
	for _, row := range r.Rows {
		paperStates, paperRing := "-", "-"
		if row.PaperStates != nil {
			paperStates, paperRing = model.GiB(*row.PaperStates), model.Bytes(*row.PaperRingBytes)
		}
		t.Add(row.Setting, model.GiB(row.ModelStates), paperStates, model.GiB(row.Peaks[cuda.Activations]), model.GiB(row.Peaks[cuda.Gathered]), model.GiB(row.Peaks[cuda.Comm]),
			model.GiB(row.PeakAllocated), Percent(row.PeakAllocated, ddp.PeakAllocated), model.Bytes(row.SentBytes), paperRing, Percent(row.SentBytes, ddp.SentBytes))
	}
	if err := t.Write(w); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nmodel states: the sum of each state category's peak (under ZeRO-2 and 3 the grads peak holds the bucket or unit in flight)")
	fmt.Fprintln(w, "vs DDP: against ZeRO-0's, in percent; zero_paper: Rajbhandari et al. 2020, Section 3.1 and Table 1 (model states) and Section 7 (communication: 2Φ, or 3Φ under ZeRO-3, a ring sending (N-1)/N of each pass)")
	return nil
}

// WriteJSON writes every setting's row with exact bytes.
func (r *StagesReport) WriteJSON(w io.Writer) error {
	return writeJSON(w, struct {
		Model modelDoc   `json:"model"`
		Setup setupDoc   `json:"setup"`
		Rows  []StageRow `json:"settings"`
	}{modelDocOf(r.Setup), setupDocOf(r.Setup), r.Rows})
}
