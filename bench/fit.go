package bench

// The fit report: the largest micro-batch, or the fewest ranks, that fit
// in a memory, for every checkpoint policy and ZeRO stage.

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"

	"trainmem/model"
)

// fitCell is one answer of the search.
type fitCell struct {
	policy model.Checkpoint
	zero   int
	answer int // micro-batch or ranks; 0: none fits
	est    model.Estimate
}

// FitReport answers, for a setup and a memory a rank has, the largest
// micro-batch that fits (or, with ByRanks, the fewest data-parallel ranks)
// under every checkpoint policy and ZeRO stage.
type FitReport struct {
	Setup    model.Setup
	Memory   int64
	Formula  model.Formula
	ByRanks  bool
	policies []model.Checkpoint
	cells    []fitCell
	lowest   map[model.Checkpoint]fitCell
}

// Fit searches the answers; byRanks asks for ranks (a parameter-only
// setup always does). The error is the model's (a shape too large to
// count).
func Fit(s model.Setup, memory int64, formula model.Formula, byRanks bool) (*FitReport, error) {
	byRanks = byRanks || s.ParamsOnly()
	var err error
	if byRanks {
		// A shape too large to count is refused, not answered with zeros
		// (without --batch, MaxBatch refuses it at batch 1).
		if _, err := s.EstimateBy(formula); err != nil {
			return nil, err
		}
	}
	policies := []model.Checkpoint{s.Checkpoint}
	if !s.ParamsOnly() {
		policies = model.FitPolicies(s.Checkpoint)
	}

	var cells []fitCell
	lowest := map[model.Checkpoint]fitCell{}
	for _, p := range policies {
		for z := 0; z <= 3; z++ {
			t := s
			t.Checkpoint, t.ZeRO = p, z
			c := fitCell{policy: p, zero: z}
			if byRanks {
				c.answer, c.est, err = t.MinRanks(memory, formula)
			} else {
				c.answer, c.est, err = t.MaxBatch(memory, formula)
			}
			if err != nil {
				return nil, err
			}
			cells = append(cells, c)
		}
		if byRanks {
			t := s
			t.Checkpoint = p
			z, e, err := t.LowestStage(memory, formula)
			if err != nil {
				return nil, err
			}
			lowest[p] = fitCell{policy: p, zero: z, answer: s.Ranks, est: e}
		}
	}
	return &FitReport{Setup: s, Memory: memory, Formula: formula, ByRanks: byRanks, policies: policies, cells: cells, lowest: lowest}, nil
}

// WriteText writes the answers as a table, with notes on what does not fit.
func (r *FitReport) WriteText(w io.Writer) error {
	s, memory, formula, byRanks, policies, cells, lowest := r.Setup, r.Memory, r.Formula, r.ByRanks, r.policies, r.cells, r.lowest
	fmt.Fprintln(w, modelLine(s))
	var b strings.Builder
	if !s.ParamsOnly() {
		if byRanks {
			fmt.Fprintf(&b, "micro-batch %d, ", s.Batch)
		}
		fmt.Fprintf(&b, "sequence %d, ", s.Seq)
	}
	prec := s.Precision.String()
	if s.Precision.Mixed() {
		prec += " mixed precision"
	}
	fmt.Fprintf(&b, "%s, %s", prec, s.Optimizer)
	if !byRanks {
		fmt.Fprintf(&b, "; %s", plural(s.Ranks, "data-parallel rank"))
	}
	if !s.ParamsOnly() {
		fmt.Fprintf(&b, ", tp %d, pp %d", s.TP, s.PP)
	}
	fmt.Fprintf(w, "setup: %s\n", b.String())
	what := "activations by " + formula.String()
	if s.ParamsOnly() {
		what = "model states only"
	}
	if byRanks {
		fmt.Fprintf(w, "fewest data-parallel ranks that fit in %s a rank (%s)\n\n", model.Bytes(memory), what)
	} else {
		fmt.Fprintf(w, "largest micro-batch per rank that fits in %s (%s)\n\n", model.Bytes(memory), what)
	}

	var t Table
	head := []string{"checkpoint", "ZeRO-0", "ZeRO-1", "ZeRO-2", "ZeRO-3"}
	if byRanks {
		head = append(head, fmt.Sprintf("lowest stage at %d ranks", s.Ranks))
	}
	if !s.ParamsOnly() {
		head = append(head, "recompute")
	}
	t.Add(head...)
	var notes []string
	noted := map[string]bool{}
	note := func(n string) {
		if !noted[n] {
			noted[n] = true
			notes = append(notes, n)
		}
	}
	for _, p := range policies {
		r := []string{policyName(p, s)}
		var rec float64
		for _, c := range cells {
			if c.policy != p {
				continue
			}
			rec = c.est.Recompute.Fraction
			if c.answer > 0 {
				r = append(r, model.Comma(int64(c.answer)))
				continue
			}
			states := c.est.States.Total() + c.est.Gathered
			switch {
			case byRanks && c.zero == 0:
				r = append(r, "-")
				note(fmt.Sprintf("ZeRO-0: every rank holds all the model states, %s; more ranks do not help", model.Bytes(states)))
			case byRanks:
				r = append(r, "-")
				note(fmt.Sprintf("%s: activations alone need %s a rank, and ranks do not shrink them (try checkpointing, a smaller micro-batch, --tp or --pp)",
					policyName(p, s), model.Bytes(c.est.ActivationBytes(formula))))
			case states > memory:
				r = append(r, "0")
				note(fmt.Sprintf("ZeRO-%d: 0, nothing fits: the model states alone need %s a rank", c.zero, model.Bytes(states)))
			default:
				r = append(r, "0")
				note(fmt.Sprintf("%s, ZeRO-%d: 0, nothing fits: micro-batch 1 needs %s", policyName(p, s), c.zero, model.Bytes(c.est.Total(formula))))
			}
		}
		if byRanks {
			if l := lowest[p]; l.zero >= 0 {
				r = append(r, fmt.Sprintf("ZeRO-%d (%s)", l.zero, model.GB(l.est.Total(formula))))
			} else {
				r = append(r, "none")
			}
		}
		if !s.ParamsOnly() {
			r = append(r, fmt.Sprintf("%.1f%%", 100*rec))
		}
		t.Add(r...)
	}
	t.Write(w)
	if len(notes) > 0 {
		fmt.Fprintln(w)
		if byRanks {
			fmt.Fprintf(w, "\"-\": no rank count up to %s fits.\n", model.Comma(model.MaxFitRanks))
		}
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
	fmt.Fprintln(w)
	if !s.ParamsOnly() {
		fmt.Fprintln(w, "recompute: the policy's extra FLOPs as a share of a training step.")
	}
	fmt.Fprintln(w, "Not counted: temporaries, kernel workspaces, allocator caching and fragmentation, the CUDA context.")
	return nil
}

type fitRowDoc struct {
	Checkpoint    string `json:"checkpoint"`
	ZeRO          int    `json:"zero"`
	MaxMicroBatch *int   `json:"max_micro_batch,omitempty"`
	MinRanks      *int   `json:"min_ranks,omitempty"`
	Ranks         *int   `json:"ranks,omitempty"`
	Fits          bool   `json:"fits"`
	// TotalBytes is the total at the answer (at micro-batch 1, or at the
	// largest rank count tried, when nothing fits).
	TotalBytes       int64   `json:"total_bytes"`
	ModelStatesBytes int64   `json:"model_states_bytes"`
	RecomputeShare   float64 `json:"recompute_fraction"`
}

func fitRow(c fitCell, byRanks bool, formula model.Formula) fitRowDoc {
	ans := c.answer
	r := fitRowDoc{Checkpoint: c.policy.String(), ZeRO: c.zero, Fits: ans > 0, TotalBytes: c.est.Total(formula),
		ModelStatesBytes: c.est.States.Total(), RecomputeShare: c.est.Recompute.Fraction}
	if byRanks {
		r.MinRanks = &ans
	} else {
		r.MaxMicroBatch = &ans
	}
	return r
}

// WriteJSON writes the answers with exact bytes.
func (r *FitReport) WriteJSON(w io.Writer) error {
	s, memory, formula, byRanks, cells, lowest := r.Setup, r.Memory, r.Formula, r.ByRanks, r.cells, r.lowest
	doc := struct {
		Model       modelDoc      `json:"model"`
		Setup       setupDoc      `json:"setup"`
		MemoryBytes int64         `json:"memory_bytes"`
		Formula     model.Formula `json:"formula"`
		Question    string        `json:"question"`
		Results     []fitRowDoc   `json:"results"`
		LowestStage []fitRowDoc   `json:"lowest_stage,omitempty"`
	}{Model: modelDocOf(s), Setup: setupDocOf(s), MemoryBytes: memory, Formula: formula, Question: "max_micro_batch"}
	if byRanks {
		doc.Question = "min_ranks"
	}
	for i, c := range cells {
		doc.Results = append(doc.Results, fitRow(c, byRanks, formula))
		if byRanks && (i == len(cells)-1 || cells[i+1].policy != c.policy) {
			l := lowest[c.policy]
			ranks := s.Ranks
			doc.LowestStage = append(doc.LowestStage, fitRowDoc{Checkpoint: c.policy.String(), ZeRO: l.zero, Ranks: &ranks, Fits: l.zero >= 0,
				TotalBytes: l.est.Total(formula), ModelStatesBytes: l.est.States.Total(), RecomputeShare: l.est.Recompute.Fraction})
		}
	}
	return writeJSON(w, doc)
}

// WriteCSV writes one row per policy and stage.
func (r *FitReport) WriteCSV(w io.Writer) error {
	byRanks, formula, cells := r.ByRanks, r.Formula, r.cells
	cw := csv.NewWriter(w)
	col := "max_micro_batch"
	if byRanks {
		col = "min_ranks"
	}
	cw.Write([]string{"checkpoint", "zero", col, "total_bytes"})
	for _, c := range cells {
		cw.Write([]string{c.policy.String(), strconv.Itoa(c.zero), strconv.Itoa(c.answer), strconv.FormatInt(c.est.Total(formula), 10)})
	}
	cw.Flush()
	return cw.Error()
}
