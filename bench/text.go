package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"trainmem/model"
	"trainmem/train"
	"trainmem/zero"
)

// Table lays out text columns for people: the first left-aligned (names),
// the others right-aligned (numbers), two spaces apart. Rows may be shorter
// than the widest; a row of one cell is a note that spans the table.
type Table struct{ rows [][]string }

// Add appends a row.
func (t *Table) Add(cells ...string) { t.rows = append(t.rows, cells) }

// Write prints the table, trailing spaces trimmed.
func (t *Table) Write(w io.Writer) error {
	var width []int
	for _, r := range t.rows {
		if len(r) == 1 {
			continue
		}
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	for _, r := range t.rows {
		var line strings.Builder
		for i, c := range r {
			pad := 0
			if len(r) > 1 {
				pad = width[i] - utf8.RuneCountInString(c)
			}
			if i == 0 {
				line.WriteString(c + strings.Repeat(" ", pad))
				continue
			}
			line.WriteString("  " + strings.Repeat(" ", pad) + c)
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Describe is a setup in one line.
func Describe(s model.Setup) string {
	return fmt.Sprintf("%s, checkpoint %s", describeRun(s), s.Checkpoint)
}

// microBatches is "1 micro-batch", "8 micro-batches".
func microBatches(m int) string {
	if m == 1 {
		return "1 micro-batch"
	}
	return model.Comma(int64(m)) + " micro-batches"
}

// describeRun is the setup but for the checkpoint policy.
func describeRun(s model.Setup) string {
	prec := precisionPhrase(s)
	micro := ""
	if s.MicroBatches > 1 || s.PP > 1 {
		micro = " × " + microBatches(max(s.MicroBatches, 1))
		if s.PP > 1 {
			micro += fmt.Sprintf(" (%s)", s.Pipeline)
		}
	}
	return fmt.Sprintf("micro-batch %d%s, sequence %d, %s, %s", s.Batch, micro, s.Seq, prec, s.Optimizer)
}

func cell(v *int64) string {
	if v == nil {
		return "-"
	}
	return model.GiB(*v)
}

func diffCell(a, b *int64) string {
	if a == nil || b == nil {
		return ""
	}
	return Percent(*a, *b)
}

// WriteText writes the report for people: the setup, the table (sizes in
// binary units; exact bytes are in the JSON) and the explanations; over
// ranks, for each run of alike ranks, the categories with the paper's
// model states, the simulation and the measurement, then the traffic
// beside the paper's volume.
func (r *ValidateReport) WriteText(w io.Writer) error {
	if zero.LayoutOf(r.Setup).Size() > 1 {
		return r.writeRanks(w)
	}
	s := r.Setup
	fmt.Fprintf(w, "model     %s\nsetup     %s\n", s.Model, Describe(s))
	if r.Device != "" {
		fmt.Fprintf(w, "measured  %s, %d steps on %s, the last one reported (its allocator cache warm)\n", r.Data, r.Steps, r.Device)
	} else {
		fmt.Fprintf(w, "measured  nothing (--no-measure); simulated %d steps on the shape-only device\n", r.Steps)
	}
	fmt.Fprintln(w, "\nbytes: categories at their own peak in requested bytes (tensor sizes); the totals in the allocator's blocks")
	measured := r.MeasuredStats != nil
	var t Table
	head := []string{"category"}
	for _, f := range r.Formulas {
		head = append(head, f.String(), "Δ")
	}
	head = append(head, "simulated")
	if measured {
		head = append(head, "measured", "Δ")
	}
	t.Add(head...)
	for _, row := range r.Rows {
		cells := []string{Label(row.Category)}
		for _, f := range r.Formulas {
			cells = append(cells, cell(row.Estimate[f]), diffCell(row.Estimate[f], row.Simulated))
		}
		cells = append(cells, cell(row.Simulated))
		if measured {
			cells = append(cells, cell(row.Measured), diffCell(row.Measured, row.Simulated))
		}
		t.Add(cells...)
	}
	if err := t.Write(w); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nΔ: the column to its left against simulated, in percent of the simulated bytes (0: equal to the byte)")
	var meas *train.OffloadRecord
	if r.Measured != nil {
		meas = r.Measured.Offload
	}
	writeOffload(w, s, "simulated", r.Simulated.Offload, meas)
	fmt.Fprintln(w, "\nwhy they differ:")
	for _, x := range r.Explanations {
		if _, err := fmt.Fprintf(w, "  %s\n", x); err != nil {
			return err
		}
	}
	r.Time.writeText(w)
	return nil
}

// writeText writes the measured step's time beside the model's, and the
// op families' (nothing for a nil check).
func (tc *TimeCheck) writeText(w io.Writer) {
	if tc == nil {
		return
	}
	fmt.Fprintf(w, "\ntime a step: measured %s (the median of the steps after the first), predicted %s on %s (%+.0f%%)\n", msText(tc.MeasuredMs), msText(tc.PredictedMs), tc.Card, 100*(tc.PredictedMs/tc.MeasuredMs-1))
	if len(tc.Ranks) > 0 {
		fmt.Fprintf(w, "  the slowest rank's; the collectives on %s\n", tc.Network)
		var t Table
		t.Add("  rank", "measured", "predicted", "Δ", "kernels", "collectives", "waited")
		for _, r := range tc.Ranks {
			t.Add("  "+strconv.Itoa(r.Rank), msText(r.MeasuredMs), msText(r.PredictedMs), fmt.Sprintf("%+.0f%%", 100*(r.PredictedMs/r.MeasuredMs-1)),
				msText(r.ComputeMs), msText(r.CommMs), msText(r.WaitMs))
		}
		t.Write(w)
	}
	if len(tc.Ops) == 0 {
		return
	}
	rank := tc.predictedRanks()
	fmt.Fprintf(w, "  the ops' ranks by predicted time against the measured: Spearman's ρ %.2f over %d op families\n", tc.RankCorrelation, len(tc.Ops))
	var t Table
	t.Add("  op", "phase", "measured", "predicted", "Δ", "rank measured", "predicted")
	for i, o := range tc.Ops {
		d := "-"
		if o.MeasuredMs > 0 {
			d = fmt.Sprintf("%+.0f%%", 100*(o.PredictedMs/o.MeasuredMs-1))
		}
		t.Add("  "+o.Op, o.Phase, msText(o.MeasuredMs), msText(o.PredictedMs), d, strconv.Itoa(i+1), strconv.Itoa(rank[i]))
	}
	t.Write(w)
}
