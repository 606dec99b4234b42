package bench

// The profile report: where each millisecond of the profiled steps went.

import (
	"fmt"
	"io"

	"trainmem/model"
	"trainmem/train"
)

// ProfileReport is a run's profile.
type ProfileReport struct{ P *Profile }

// Profile collects a run's per-op timings (train.Profile: the command line
// reaches package train through bench only).
type Profile = train.Profile

// WriteText writes one row per op family and phase, the longest first:
// calls, total and mean time, share of the profiled time, arithmetic and
// GFLOP/s against the device's peak (ops that multiply matrices), bytes
// moved and GB/s.
func (r ProfileReport) WriteText(w io.Writer) error {
	p := r.P
	total := p.StepTime()
	fmt.Fprintf(w, "profile of %s over %d step(s) (the first, which fills the caches, left out when there are more), %.1f ms a step:\n",
		p.Device, p.Steps(), float64(total.Microseconds())/1000/float64(p.Steps()))
	var t Table
	t.Add("op", "phase", "calls", "total ms", "mean µs", "share", "GFLOP", "GFLOP/s", "of peak", "MB moved", "GB/s")
	for _, row := range p.Rows() {
		secs := row.Time.Seconds()
		share := "-"
		if total > 0 {
			share = fmt.Sprintf("%.1f%%", 100*float64(row.Time)/float64(total))
		}
		gf, gfs, ofPeak := "-", "-", "-"
		if row.FLOPs > 0 {
			gf = fmt.Sprintf("%.2f", row.FLOPs/1e9)
			if secs > 0 {
				gfs = fmt.Sprintf("%.1f", row.FLOPs/secs/1e9)
				if p.PeakFLOPS > 0 {
					ofPeak = fmt.Sprintf("%.0f%%", 100*row.FLOPs/secs/p.PeakFLOPS)
				}
			}
		}
		gbs := "-"
		if secs > 0 {
			gbs = fmt.Sprintf("%.1f", float64(row.Bytes)/secs/1e9)
		}
		t.Add(row.Op, row.Phase, model.Comma(int64(row.Calls)), fmt.Sprintf("%.1f", secs*1000), fmt.Sprintf("%.0f", secs*1e6/float64(row.Calls)),
			share, gf, gfs, ofPeak, fmt.Sprintf("%.1f", float64(row.Bytes)/1e6), gbs)
	}
	if err := t.Write(w); err != nil {
		return err
	}
	if p.PeakFLOPS > 0 {
		fmt.Fprintf(w, "of peak: against the device's %.0f GFLOP/s; GFLOP counts a multiply-add as 2; MB moved: each call's inputs read and output written\n", p.PeakFLOPS/1e9)
	}
	return nil
}

// WriteJSON writes the rows with exact nanoseconds, FLOPs and bytes.
func (r ProfileReport) WriteJSON(w io.Writer) error {
	p := r.P
	return writeJSON(w, struct {
		Device    string             `json:"device"`
		Steps     int                `json:"steps"`
		TimeNs    int64              `json:"time_ns"`
		PeakFLOPS float64            `json:"peak_flops"`
		Rows      []train.ProfileRow `json:"rows"`
	}{p.Device, p.Steps(), p.StepTime().Nanoseconds(), p.PeakFLOPS, p.Rows()})
}
