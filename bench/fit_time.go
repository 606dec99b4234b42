package bench

// The layout fit for time: of the layouts of a GPU count and the
// micro-batches of a global batch, those whose every rank fits a card by
// the simulation, ranked by the formula's step time (zero.StepTimeOf),
// with why the slower ones lose.

import (
	"encoding/csv"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"
	"time"

	"trainmem/model"
	"trainmem/zero"
)

// timeCell is a layout at its fastest micro-batch that fits.
type timeCell struct {
	layoutCell
	// micro is the fastest micro-batch that fits (0: none fits), m the
	// micro-batches a step then runs, largest the largest that fits.
	micro, m, largest int
	st                zero.StepTime
}

// TimeFitReport ranks the layouts of GPUs GPUs for a global batch of
// GlobalBatch sequences by the formula's step time on a card, among the
// micro-batches whose every rank fits Memory by the simulation.
type TimeFitReport struct {
	Setup       model.Setup
	GPUs        int
	GlobalBatch int
	Memory      int64
	Card        string
	Network     string
	cells       []timeCell // the fastest first; those that do not fit last
}

// FitTime tries every layout of gpus GPUs (as FitLayouts) and every
// micro-batch b that divides its replicas' share of the global batch:
// the largest b whose every rank fits a card of memory bytes is found by
// simulation (a rank's memory grows with b; pipelines at M = pp, where a
// stage's peak is that of any larger M), and of the fitting ones the
// fastest by the formula (M = global/(dp·b) micro-batches a step). The
// layouts run side by side on the machine's cores; progress, when set,
// gets a line a layout.
func FitTime(c model.Checked, gpus, global int, memory int64, opts zero.TimeOptions, progress io.Writer) (*TimeFitReport, error) {
	s, err := layoutSetup(c, gpus)
	if err != nil {
		return nil, err
	}
	if global < 1 || global > model.MaxFitRanks*1024 {
		return nil, fmt.Errorf("bench: global batch %d: out of range (valid: 1 to %d)", global, model.MaxFitRanks*1024)
	}
	var cells []timeCell
	for _, l := range layoutsOf(gpus) {
		cells = append(cells, timeCell{layoutCell: l})
	}
	var mu sync.Mutex
	err = onCores(len(cells), func(i int) error {
		cell := &cells[i]
		if err := cell.fit(s, global, memory, opts); err != nil {
			return err
		}
		if progress != nil {
			mu.Lock()
			defer mu.Unlock()
			if cell.why != "" {
				fmt.Fprintf(progress, "fit: tp %d × pp %d × dp %d: %s\n", cell.tp, cell.pp, cell.dp, cell.why)
			} else {
				fmt.Fprintf(progress, "fit: tp %d × pp %d × dp %d: micro-batch %d fits (largest %d), step %s\n", cell.tp, cell.pp, cell.dp, cell.micro, cell.largest, msText(ms(cell.st.Step)))
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(cells, func(i, j int) bool {
		a, b := cells[i], cells[j]
		if (a.micro > 0) != (b.micro > 0) {
			return a.micro > 0
		}
		return a.micro > 0 && a.st.Step < b.st.Step
	})
	return &TimeFitReport{Setup: s, GPUs: gpus, GlobalBatch: global, Memory: memory, Card: opts.Card.Name, Network: opts.Network.Name, cells: cells}, nil
}

// fit finds the cell's fastest fitting micro-batch, or says why none.
func (cell *timeCell) fit(s model.Setup, global int, memory int64, opts zero.TimeOptions) error {
	if global%cell.dp != 0 {
		cell.why = fmt.Sprintf("the global batch %d is not a multiple of dp %d", global, cell.dp)
		return nil
	}
	per := global / cell.dp
	var bs, big []int // the divisors of per up to its square root, and their pairs
	for b := 1; b*b <= per; b++ {
		if per%b == 0 {
			bs = append(bs, b)
			if b*b != per {
				big = append(big, per/b)
			}
		}
	}
	for i := len(big) - 1; i >= 0; i-- {
		bs = append(bs, big[i])
	}
	setup := func(b, m int) model.Setup {
		t := s
		t.TP, t.PP, t.Ranks, t.Batch, t.MicroBatches, t.Pipeline = cell.tp, cell.pp, cell.dp, b, m, model.OneFOneB
		return t
	}
	if _, err := setup(1, per).Check(); err != nil {
		cell.why = err.Error()
		return nil
	}
	// The largest b that fits, by bisection over the divisors: the
	// simulation at M = pp (1 without a pipeline).
	fits := func(b int) (bool, error) {
		tc, err := setup(b, max(1, min(cell.pp, per/b))).Check()
		if err != nil {
			return false, nil // a shape too large for its counts: does not fit
		}
		probe := cell.layoutCell
		if err := probe.simulate(tc, memory); err != nil {
			return false, err
		}
		if probe.simFits {
			cell.layoutCell = probe
		} else if cell.largest == 0 {
			cell.layoutCell.heaviest, cell.outOfMemory = probe.heaviest, probe.outOfMemory
		}
		return probe.simFits, nil
	}
	lo, hi := 0, len(bs) // bs[:lo] fit; bs[hi:] do not
	for lo < hi {
		mid := (lo + hi) / 2
		ok, err := fits(bs[mid])
		if err != nil {
			return fmt.Errorf("tp %d × pp %d × dp %d, micro-batch %d: %w", cell.tp, cell.pp, cell.dp, bs[mid], err)
		}
		if ok {
			lo = mid + 1
			cell.largest = bs[mid]
		} else {
			hi = mid
		}
	}
	if cell.largest == 0 {
		cell.why = fmt.Sprintf("micro-batch 1 does not fit: rank %d runs out of memory (it would reserve %s)", cell.outOfMemory, model.GiB(cell.heaviest.Stats.ReservedBytes.Peak))
		return nil
	}
	// The fastest of the micro-batches that fit.
	for _, b := range bs[:lo] {
		tc, err := setup(b, per/b).Check()
		if err != nil {
			continue
		}
		st, err := zero.StepTimeOf(tc, opts)
		if err != nil {
			return err
		}
		if cell.micro == 0 || st.Step < cell.st.Step {
			cell.micro, cell.m, cell.st = b, per/b, st
		}
	}
	if cell.micro != cell.largest {
		// The headroom is the fastest micro-batch's: simulate it.
		tc, err := setup(cell.micro, max(1, min(cell.pp, cell.m))).Check()
		if err != nil {
			return err
		}
		if err := cell.simulate(tc, memory); err != nil {
			return err
		}
	}
	return nil
}

// losses are a step's parts that are not its kernels' work, by name.
func losses(st zero.StepTime) []struct {
	name string
	d    time.Duration
} {
	m := time.Duration(max(1, st.Setup.MicroBatches))
	return []struct {
		name string
		d    time.Duration
	}{
		{"tensor-parallel collectives", m * st.TensorComm},
		{"pipeline sends", m * st.PipelineComm},
		{"the pipeline's bubble", st.Bubble},
		{"data-parallel collectives not hidden", st.DataExposed},
		{"recomputation", m * st.Recompute},
		{"the kernels' work", m * (st.Forward + st.Backward)},
		{"the optimizer step", st.Optimizer},
		{"offload's copies", st.Offload},
	}
}

// commShare is the step's share lost to communication and the bubble.
func commShare(st zero.StepTime) float64 {
	if st.Step <= 0 {
		return 0
	}
	l := losses(st)
	return float64(l[0].d+l[1].d+l[2].d+l[3].d) / float64(st.Step)
}

// whyLoses names the part of a layout's step that exceeds the fastest's
// most.
func whyLoses(c, best zero.StepTime) string {
	lc, lb := losses(c), losses(best)
	k := 0
	for i := range lc {
		if lc[i].d-lb[i].d > lc[k].d-lb[k].d {
			k = i
		}
	}
	return fmt.Sprintf("%s: %s against %s", lc[k].name, msText(ms(lc[k].d)), msText(ms(lb[k].d)))
}

// WriteText writes the fastest layouts, then why the others lose.
func (r *TimeFitReport) WriteText(w io.Writer) error {
	s := r.Setup
	fmt.Fprintln(w, modelLine(s))
	fmt.Fprintf(w, "setup: global batch %d sequences of %d, %s, %s, checkpoint %s, ZeRO-%d on the data axis; 1F1B pipelines\n", r.GlobalBatch, s.Seq, s.Precision, s.Optimizer, s.Checkpoint, s.ZeRO)
	fmt.Fprintf(w, "fastest layouts of %s, each at its fastest micro-batch whose every rank fits %s by simulation, timed by formula on %s over %s:\n",
		plural(r.GPUs, "GPU"), model.Bytes(r.Memory), r.Card, r.Network)
	var t Table
	t.Add("  tp", "pp", "dp", "micro-batch", "M", "step", "tokens/s", "MFU", "headroom", "comm + bubble")
	var fast []timeCell
	for _, c := range r.cells {
		if c.micro > 0 {
			fast = append(fast, c)
		}
	}
	if len(fast) == 0 {
		fmt.Fprintln(w, "  none: no layout fits at micro-batch 1")
	}
	for i, c := range fast {
		if i == 5 {
			break
		}
		t.Add("  "+strconv.Itoa(c.tp), strconv.Itoa(c.pp), strconv.Itoa(c.dp), strconv.Itoa(c.micro), strconv.Itoa(c.m), msText(ms(c.st.Step)),
			fmt.Sprintf("%.0f", c.st.TokensPerSecond), fmt.Sprintf("%.1f%%", 100*c.st.MFU), model.GiB(r.Memory-c.heaviest.Stats.ReservedBytes.Peak),
			fmt.Sprintf("%.1f%%", 100*commShare(c.st)))
	}
	if len(fast) > 0 {
		t.Write(w)
	}
	if len(r.cells) > 1 {
		fmt.Fprintln(w, "\nwhy the others lose:")
		for i, c := range r.cells {
			if i == 0 && c.micro > 0 {
				continue
			}
			what := c.why
			if c.micro > 0 {
				what = fmt.Sprintf("%s slower (micro-batch %d); most lost to %s", msText(ms(c.st.Step-fast[0].st.Step)), c.micro, whyLoses(c.st, fast[0].st))
			}
			fmt.Fprintf(w, "  tp %d × pp %d × dp %d: %s\n", c.tp, c.pp, c.dp, what)
		}
	}
	fmt.Fprintln(w, "\nheadroom: the card's memory less the heaviest simulated rank's peak reserved; the time is the formula's (trainmem estimate --gpu), not a measurement.")
	return nil
}

type timeFitDoc struct {
	TP            int          `json:"tp"`
	PP            int          `json:"pp"`
	DP            int          `json:"dp"`
	NotFit        string       `json:"not_fit,omitempty"`
	MicroBatch    int          `json:"micro_batch,omitempty"`
	MicroBatches  int          `json:"micro_batches,omitempty"`
	LargestMicro  int          `json:"largest_micro_batch,omitempty"`
	PeakReserved  int64        `json:"simulated_peak_reserved_bytes,omitempty"`
	HeadroomBytes int64        `json:"headroom_bytes,omitempty"`
	CommShare     float64      `json:"comm_and_bubble_share,omitempty"`
	StepTime      *stepTimeDoc `json:"step_time,omitempty"`
}

func (r *TimeFitReport) docs() []timeFitDoc {
	var out []timeFitDoc
	for _, c := range r.cells {
		d := timeFitDoc{TP: c.tp, PP: c.pp, DP: c.dp, NotFit: c.why}
		if c.micro > 0 {
			d.MicroBatch, d.MicroBatches, d.LargestMicro = c.micro, c.m, c.largest
			d.PeakReserved = c.heaviest.Stats.ReservedBytes.Peak
			d.HeadroomBytes = r.Memory - d.PeakReserved
			d.CommShare = commShare(c.st)
			d.StepTime = stepTimeDocOf(c.st)
		}
		out = append(out, d)
	}
	return out
}

// WriteJSON writes every layout, the fastest first.
func (r *TimeFitReport) WriteJSON(w io.Writer) error {
	return writeJSON(w, struct {
		fitHead
		GPUs        int          `json:"gpus"`
		GlobalBatch int          `json:"global_batch"`
		Card        string       `json:"card"`
		Network     string       `json:"network"`
		Layouts     []timeFitDoc `json:"layouts"`
	}{fitHeadOf(r.Setup, r.Memory, model.Korthikanti, "fastest_layout"), r.GPUs, r.GlobalBatch, r.Card, r.Network, r.docs()})
}

// WriteCSV writes one row a layout, the fastest first.
func (r *TimeFitReport) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"tp", "pp", "dp", "micro_batch", "micro_batches", "step_ms", "tokens_per_second", "mfu", "headroom_bytes", "comm_and_bubble_share", "not_fit"})
	for _, d := range r.docs() {
		var stepMs, tps, mfu float64
		if d.StepTime != nil {
			stepMs, tps, mfu = d.StepTime.StepMs, d.StepTime.TokensPerSecond, d.StepTime.MFU
		}
		f := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
		cw.Write([]string{strconv.Itoa(d.TP), strconv.Itoa(d.PP), strconv.Itoa(d.DP), strconv.Itoa(d.MicroBatch), strconv.Itoa(d.MicroBatches),
			f(stepMs), f(tps), f(mfu), strconv.FormatInt(d.HeadroomBytes, 10), f(d.CommShare), d.NotFit})
	}
	cw.Flush()
	return cw.Error()
}
