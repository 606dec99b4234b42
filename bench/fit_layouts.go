package bench

// The layout fit: of the ways to lay a GPU count out as tensor × pipeline
// × data parallel ranks, the smallest tensor × pipeline degree whose every
// rank fits a card, by the simulation of every distinct rank beside the
// formula's answer.

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"sync"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/zero"
)

// layoutCell is one layout of the GPUs.
type layoutCell struct {
	tp, pp, dp int
	// why is the reason the layout is not a setup ("" when it is one).
	why string
	est model.Estimate
	// formulaFits: the formula's total (its reported stage, the first) is
	// at most the memory.
	formulaFits bool
	// The simulation: the heaviest rank (by peak reserved) of every
	// distinct rank, its stats, and whether every rank fits the card
	// (outOfMemory: the rank whose allocation failed on it).
	heaviest    zero.RankResult
	simFits     bool
	outOfMemory int
}

func (c layoutCell) degree() int { return c.tp * c.pp }

// LayoutFitReport answers, for a setup (its micro-batch, checkpoint
// policy and ZeRO stage) and a GPU count, which tensor × pipeline × data
// layouts fit a card of memory bytes, and the smallest tensor × pipeline
// degree that does, by simulation and by the formula.
type LayoutFitReport struct {
	Setup   model.Setup
	GPUs    int
	Memory  int64
	Formula model.Formula
	cells   []layoutCell
}

// FitLayouts tries every layout of gpus GPUs: tp dividing the heads, pp at
// most the layers, dp the GPUs left, each with s's micro-batch, policy and
// stage (1F1B with micro-batches M = pp: under 1F1B a stage's peak is the
// same at any M ≥ pp, the estimate's assumption). Each layout is simulated
// whole, every distinct rank on a shape-only card of memory bytes (the
// simulation's answer: does every rank fit), the layouts side by side on
// the machine's cores; progress, when set, gets a line a layout.
func FitLayouts(c model.Checked, gpus int, memory int64, formula model.Formula, progress io.Writer) (*LayoutFitReport, error) {
	s, err := layoutSetup(c, gpus)
	if err != nil {
		return nil, err
	}
	cells := layoutsOf(gpus)
	var mu sync.Mutex
	err = onCores(len(cells), func(i int) error {
		cell := &cells[i]
		t := s
		t.TP, t.PP, t.Ranks, t.MicroBatches, t.Pipeline = cell.tp, cell.pp, cell.dp, 0, model.OneFOneB
		tc, err := t.Check()
		if err != nil {
			cell.why = err.Error()
			return nil
		}
		if cell.est, err = tc.EstimateBy(formula); err != nil && !errors.Is(err, model.ErrOverflow) {
			return err
		}
		cell.formulaFits = err == nil && cell.est.Total(formula) <= memory
		if cell.pp > 1 {
			t.MicroBatches = cell.pp
		}
		if tc, err = t.Check(); err != nil {
			return err
		}
		if err := cell.simulate(tc, memory); err != nil {
			return err
		}
		if progress != nil {
			mu.Lock()
			fmt.Fprintf(progress, "fit: simulated tp %d × pp %d × dp %d: %s\n", cell.tp, cell.pp, cell.dp, cell.simText(memory))
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &LayoutFitReport{Setup: s, GPUs: gpus, Memory: memory, Formula: formula, cells: cells}, nil
}

// layoutSetup is c's setup for a search over the layouts of gpus GPUs,
// or why there is none.
func layoutSetup(c model.Checked, gpus int) (model.Setup, error) {
	if err := c.Err(); err != nil {
		return model.Setup{}, err
	}
	s := c.Setup()
	if s.ParamsOnly() {
		return s, errors.New("bench: a layout needs a model's shape (--preset or --layers...), not --params")
	}
	if gpus < 1 || gpus > model.MaxFitRanks {
		return s, fmt.Errorf("bench: %d GPUs: out of range (valid: 1 to %d)", gpus, model.MaxFitRanks)
	}
	return s, nil
}

// layoutsOf is every layout tp × pp × dp of gpus GPUs, the smallest
// tp × pp first, then the fewest stages (no bubble).
func layoutsOf(gpus int) []layoutCell {
	var cells []layoutCell
	for tp := 1; tp <= gpus; tp++ {
		if gpus%tp != 0 {
			continue
		}
		for pp := 1; pp <= gpus/tp; pp++ {
			if (gpus/tp)%pp != 0 {
				continue
			}
			cells = append(cells, layoutCell{tp: tp, pp: pp, dp: gpus / (tp * pp), outOfMemory: -1})
		}
	}
	sort.SliceStable(cells, func(i, j int) bool {
		if a, b := cells[i].degree(), cells[j].degree(); a != b {
			return a < b
		}
		return cells[i].pp < cells[j].pp
	})
	return cells
}

// simulate runs every distinct rank of the layout on cards of memory
// bytes; a rank that runs out of memory is run again on unbounded cards,
// so that the report says what the heaviest rank would need.
func (cell *layoutCell) simulate(c model.Checked, memory int64) error {
	set := zero.Setting{Stage: c.Setup().ZeRO}
	rs, err := zero.Simulate(func() cuda.Device { return shape.New(memory) }, c, set, 2, nil)
	var oom *cuda.OutOfMemoryError
	cell.simFits = false
	if errors.As(err, &oom) {
		cell.outOfMemory = 0
		var re *zero.RankError
		if errors.As(err, &re) {
			cell.outOfMemory = re.Rank
		}
		rs, err = zero.Simulate(func() cuda.Device { return shape.New(0) }, c, set, 2, nil)
	} else {
		cell.simFits = err == nil
	}
	if err != nil {
		return fmt.Errorf("tp %d × pp %d × dp %d: %w", cell.tp, cell.pp, cell.dp, err)
	}
	for i, r := range rs {
		if i == 0 || r.Stats.ReservedBytes.Peak > cell.heaviest.Stats.ReservedBytes.Peak {
			cell.heaviest = r
		}
	}
	return nil
}

// simText is the simulation's answer in words.
func (cell layoutCell) simText(memory int64) string {
	peak := model.GiB(cell.heaviest.Stats.ReservedBytes.Peak)
	if cell.simFits {
		return fmt.Sprintf("fits (heaviest rank %d reserves %s of %s)", cell.heaviest.Rank, peak, model.GiB(memory))
	}
	return fmt.Sprintf("rank %d runs out of memory (the heaviest, rank %d, would reserve %s)", cell.outOfMemory, cell.heaviest.Rank, peak)
}

// smallest is the first layout (the smallest tp × pp, then the fewest
// stages) that fits by the simulation, or by the formula; nil for none.
func (r *LayoutFitReport) smallest(bySim bool) *layoutCell {
	for i := range r.cells {
		c := &r.cells[i]
		if c.why == "" && ((bySim && c.simFits) || (!bySim && c.formulaFits)) {
			return c
		}
	}
	return nil
}

func layoutText(c *layoutCell) string {
	if c == nil {
		return "none"
	}
	return fmt.Sprintf("tp %d × pp %d (dp %d)", c.tp, c.pp, c.dp)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// WriteText writes the layouts as a table under the two answers.
func (r *LayoutFitReport) WriteText(w io.Writer) error {
	s := r.Setup
	fmt.Fprintln(w, modelLine(s))
	prec := s.Precision.String()
	if s.Precision.Mixed() {
		prec += " mixed precision"
	}
	fmt.Fprintf(w, "setup: micro-batch %d, sequence %d, %s, %s, checkpoint %s, ZeRO-%d on the data axis; pipelines 1F1B at M = pp micro-batches (a stage's peak at any M ≥ pp)\n",
		s.Batch, s.Seq, prec, s.Optimizer, s.Checkpoint, s.ZeRO)
	fmt.Fprintf(w, "smallest tensor × pipeline parallel layout of %s that fits in %s a GPU:\n", plural(r.GPUs, "GPU"), model.Bytes(r.Memory))
	fmt.Fprintf(w, "  simulated:   %s\n", layoutText(r.smallest(true)))
	fmt.Fprintf(w, "  the formula: %s (%s, its first pipeline stage)\n\n", layoutText(r.smallest(false)), r.Formula)
	var t Table
	t.Add("tp", "pp", "dp", "formula", "fits", "simulated: heaviest rank", "peak reserved", "fits")
	var refused []string
	for _, c := range r.cells {
		if c.why != "" {
			refused = append(refused, fmt.Sprintf("tp %d × pp %d × dp %d: %s", c.tp, c.pp, c.dp, c.why))
			continue
		}
		total := "past int64"
		if e := c.est.Total(r.Formula); e > 0 {
			total = model.GiB(e)
		}
		sim := yesNo(c.simFits)
		if !c.simFits {
			sim = fmt.Sprintf("no: rank %d out of memory", c.outOfMemory)
		}
		stage := zero.Layout{DP: c.dp, TP: c.tp, PP: c.pp}.Coord(c.heaviest.Rank)[zero.PipelineAxis]
		t.Add(strconv.Itoa(c.tp), strconv.Itoa(c.pp), strconv.Itoa(c.dp), total, yesNo(c.formulaFits),
			fmt.Sprintf("rank %d (stage %d)", c.heaviest.Rank, stage), model.GiB(c.heaviest.Stats.ReservedBytes.Peak), sim)
	}
	t.Write(w)
	if len(refused) > 0 {
		fmt.Fprintln(w, "\nnot layouts of this model:")
		for _, why := range refused {
			fmt.Fprintln(w, "  "+why)
		}
	}
	fmt.Fprintln(w, "\nsimulated: every distinct rank's step on a card of the memory, every allocation (peak reserved: what the card must hold); the formula's total counts no temporaries, workspace or allocator rounding.")
	return nil
}

type layoutFitDoc struct {
	TP               int    `json:"tp"`
	PP               int    `json:"pp"`
	DP               int    `json:"dp"`
	NotALayout       string `json:"not_a_layout,omitempty"`
	FormulaBytes     int64  `json:"formula_bytes,omitempty"`
	FormulaFits      bool   `json:"formula_fits"`
	HeaviestRank     int    `json:"simulated_heaviest_rank"`
	PeakReserved     int64  `json:"simulated_peak_reserved_bytes,omitempty"`
	PeakAllocated    int64  `json:"simulated_peak_allocated_bytes,omitempty"`
	SimulatedFits    bool   `json:"simulated_fits"`
	OutOfMemoryRank  *int   `json:"simulated_out_of_memory_rank,omitempty"`
	ModelParallelism int    `json:"tp_times_pp"`
}

func (r *LayoutFitReport) docs() []layoutFitDoc {
	var out []layoutFitDoc
	for _, c := range r.cells {
		d := layoutFitDoc{TP: c.tp, PP: c.pp, DP: c.dp, NotALayout: c.why, ModelParallelism: c.degree(), HeaviestRank: c.heaviest.Rank}
		if c.why == "" {
			d.FormulaBytes, d.FormulaFits = c.est.Total(r.Formula), c.formulaFits
			d.PeakReserved, d.PeakAllocated, d.SimulatedFits = c.heaviest.Stats.ReservedBytes.Peak, c.heaviest.Stats.AllocatedBytes.Peak, c.simFits
			if !c.simFits {
				oom := c.outOfMemory
				d.OutOfMemoryRank = &oom
			}
		}
		out = append(out, d)
	}
	return out
}

// WriteJSON writes the layouts with exact bytes.
func (r *LayoutFitReport) WriteJSON(w io.Writer) error {
	pick := func(c *layoutCell) *layoutFitDoc {
		if c == nil {
			return nil
		}
		return &layoutFitDoc{TP: c.tp, PP: c.pp, DP: c.dp, ModelParallelism: c.degree()}
	}
	return writeJSON(w, struct {
		fitHead
		GPUs            int            `json:"gpus"`
		SmallestSim     *layoutFitDoc  `json:"simulated_smallest"`
		SmallestFormula *layoutFitDoc  `json:"formula_smallest"`
		Layouts         []layoutFitDoc `json:"layouts"`
	}{fitHeadOf(r.Setup, r.Memory, r.Formula, "smallest_layout"), r.GPUs, pick(r.smallest(true)), pick(r.smallest(false)), r.docs()})
}

// WriteCSV writes one row a layout.
func (r *LayoutFitReport) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"tp", "pp", "dp", "formula_bytes", "formula_fits", "simulated_heaviest_rank", "simulated_peak_reserved_bytes", "simulated_fits", "not_a_layout"})
	for _, d := range r.docs() {
		cw.Write([]string{strconv.Itoa(d.TP), strconv.Itoa(d.PP), strconv.Itoa(d.DP), strconv.FormatInt(d.FormulaBytes, 10), strconv.FormatBool(d.FormulaFits),
			strconv.Itoa(d.HeaviestRank), strconv.FormatInt(d.PeakReserved, 10), strconv.FormatBool(d.SimulatedFits), d.NotALayout})
	}
	cw.Flush()
	return cw.Error()
}
