package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"

	"trainmem/model"
)

// barWidth is the longest bar of the text charts, in characters.
const barWidth = 40

// bar draws v of max as a bar of up to barWidth cells, in eighths.
func bar(v, maxV float64) string {
	if maxV <= 0 || v <= 0 {
		return ""
	}
	eighths := int(math.Round(v / maxV * barWidth * 8))
	full, rest := eighths/8, eighths%8
	s := strings.Repeat("█", full)
	if rest > 0 {
		s += string([]rune("▏▎▍▌▋▊▉")[rest-1])
	}
	if s == "" {
		s = "▏" // a value too small for an eighth still shows
	}
	return s
}

func pct(f float64) string { return strings.Replace(fmt.Sprintf("%+.1f%%", f*100), "-", "−", 1) }

// WriteText writes the sweep for people: the table, then bar charts of
// activation memory and step time per policy.
func (r *SweepReport) WriteText(w io.Writer) error {
	s := r.Setup
	fmt.Fprintf(w, "model     %s\nsetup     %s; checkpoint: each policy below\n", s.Model, describeRun(s))
	measured := r.Device != ""
	if measured {
		fmt.Fprintf(w, "measured  %s, %d steps a policy on %s, interleaved; times are medians of steps 2..%d\n", r.Data, r.Steps, r.Device, r.Steps)
	} else {
		fmt.Fprintf(w, "measured  nothing (--no-measure): no times\n")
	}
	fmt.Fprintln(w, "\nactivations: the category's peak in requested bytes; total peak: peak allocated")
	var t Table
	head := []string{"policy", "K"}
	for _, f := range r.Formulas {
		head = append(head, f.String())
	}
	head = append(head, "simulated")
	if measured {
		head = append(head, "measured")
	}
	head = append(head, "total peak")
	if measured {
		head = append(head, "step ms", "recompute ms", "overhead")
	}
	head = append(head, "recompute FLOPs")
	t.Add(head...)
	for _, row := range r.Rows {
		k := "-"
		if row.SegmentLayers > 0 {
			k = fmt.Sprint(row.SegmentLayers)
		}
		cells := []string{row.Policy, k}
		for _, f := range r.Formulas {
			cells = append(cells, model.GiB(row.Estimate[f]))
		}
		cells = append(cells, model.GiB(row.Simulated))
		peak := row.SimulatedPeak
		if measured {
			cells = append(cells, cell(row.Measured))
			peak = *row.MeasuredPeak
		}
		cells = append(cells, model.GiB(peak))
		if measured {
			ov := "-"
			if row.Overhead != nil {
				ov = pct(*row.Overhead)
			}
			cells = append(cells, fmt.Sprintf("%.1f", *row.StepMs), fmt.Sprintf("%.1f", *row.RecomputeMs), ov)
		}
		cells = append(cells, pct(row.RecomputeFraction))
		t.Add(cells...)
	}
	if err := t.Write(w); err != nil {
		return err
	}
	if measured {
		fmt.Fprintln(w, "\noverhead: step time against none's in the same round (median); recompute FLOPs: the estimate's extra forward work over a step's 3 forward passes")
	} else {
		fmt.Fprintln(w, "\nrecompute FLOPs: the estimate's extra forward work over a step's 3 forward passes")
	}

	name := 0
	for _, row := range r.Rows {
		name = max(name, utf8.RuneCountInString(row.Policy))
	}
	chart := func(title string, vals []float64, labels, notes []string) {
		fmt.Fprintf(w, "\n%s\n", title)
		var top float64
		lw := 0
		for i, v := range vals {
			top = max(top, v)
			lw = max(lw, utf8.RuneCountInString(labels[i]))
		}
		for i, row := range r.Rows {
			b := bar(vals[i], top)
			line := fmt.Sprintf("  %s%s  %s%s  %s%s  %s", row.Policy, strings.Repeat(" ", name-utf8.RuneCountInString(row.Policy)),
				b, strings.Repeat(" ", barWidth-utf8.RuneCountInString(b)),
				strings.Repeat(" ", lw-utf8.RuneCountInString(labels[i])), labels[i], notes[i])
			fmt.Fprintln(w, strings.TrimRight(line, " "))
		}
	}
	var mem, ms []float64
	var memL, memN, msL, msN []string
	what := "simulated"
	if measured {
		what = "measured"
	}
	base := r.Rows[0]
	for _, row := range r.Rows {
		v := row.Simulated
		if measured {
			v = *row.Measured
		}
		mem = append(mem, float64(v))
		memL = append(memL, model.GiB(v))
		note := ""
		if base.Policy == "none" && row.Policy != "none" {
			bv := base.Simulated
			if measured {
				bv = *base.Measured
			}
			note = Percent(v, bv)
		}
		memN = append(memN, note)
		if measured {
			ms = append(ms, *row.StepMs)
			msL = append(msL, fmt.Sprintf("%.1f ms", *row.StepMs))
			note := ""
			if row.Overhead != nil && row.Policy != "none" {
				note = fmt.Sprintf("%s (FLOPs %s)", pct(*row.Overhead), pct(row.RecomputeFraction))
			}
			msN = append(msN, note)
		}
	}
	chart(fmt.Sprintf("activation memory (%s peak)", what), mem, memL, memN)
	if measured {
		chart("step time (median)", ms, msL, msN)
	}
	return nil
}
