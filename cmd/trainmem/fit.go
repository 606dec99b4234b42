package main

// trainmem fit: what fits in a card of a given size. Without --batch: the
// largest micro-batch per rank for each checkpoint policy and ZeRO stage.
// With --batch (or --params, which has no activations): the fewest
// data-parallel ranks per policy and stage, and the lowest stage that fits
// at --ranks. Every answer is a search over the estimate itself.

import (
	"context"
	"encoding/csv"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"trainmem/bench"
	"trainmem/model"
)

func init() {
	register(command{
		name:    "fit",
		summary: "the largest micro-batch, fewest ranks or lowest ZeRO stage that fit in --memory",
		run:     runFit,
	})
}

const fitSynopsis = `Searches the estimate for what fits in --memory bytes a rank. Without
--batch: the largest micro-batch per rank for each checkpoint policy (none,
selective, sqrt, full, and --checkpoint if it is another) and each ZeRO
stage, at --ranks data-parallel ranks. With --batch: the fewest
data-parallel ranks for each policy and stage, and the lowest ZeRO stage
that fits at --ranks. With --params (model states only): the fewest ranks
per stage. 0 or "-" means nothing fits, and the notes say what alone is
already too large.

example: trainmem fit --preset gpt2-xl --seq 1024 --precision bf16 --ranks 8 --memory 80GiB`

// fitCell is one answer of the search.
type fitCell struct {
	policy model.Checkpoint
	zero   int
	answer int // micro-batch or ranks; 0: none fits
	est    model.Estimate
}

func runFit(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fit", flag.ContinueOnError)
	sf := addSetupFlags(fs, setupOptions{parallel: true, batch: 1})
	memory := int64(-1)
	fs.Func("memory", "memory a rank has, e.g. 80GiB, 24GB, 1.5e10 (required)", func(s string) error {
		n, err := parseMemory(s)
		memory = n
		return err
	})
	formula := model.Korthikanti
	fs.Func("formula", "activation formula to fit by: zero_paper or korthikanti (default korthikanti)", func(s string) error {
		f, err := model.ParseFormula(s)
		formula = f
		return err
	})
	format := newFormatFlag(fs, "text", "json", "csv")
	if err := parseFlags(fs, args, stderr, fitSynopsis); err != nil {
		if err == errHelp {
			return nil
		}
		return err
	}
	if memory < 0 {
		return usagef("--memory is required (e.g. --memory 80GiB, --memory 24GB)")
	}
	s, err := sf.setup()
	if err != nil {
		return err
	}
	sf.noteIgnored(stderr)
	byRanks := sf.set("batch") || s.ParamsOnly()
	if byRanks {
		// A shape too large to count is refused, not answered with zeros
		// (without --batch, MaxBatch refuses it at batch 1).
		if _, err := s.EstimateBy(formula); err != nil {
			return badSetup(err)
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
				return badSetup(err)
			}
			cells = append(cells, c)
		}
		if byRanks {
			t := s
			t.Checkpoint = p
			z, e, err := t.LowestStage(memory, formula)
			if err != nil {
				return badSetup(err)
			}
			lowest[p] = fitCell{policy: p, zero: z, answer: s.Ranks, est: e}
		}
	}
	switch format.v {
	case "json":
		return fitJSON(stdout, s, memory, formula, byRanks, cells, lowest)
	case "csv":
		return fitCSV(stdout, byRanks, formula, cells, lowest)
	}
	return fitText(stdout, s, memory, formula, byRanks, policies, cells, lowest)
}

// policyName is the policy as the tables show it: sqrt with its K.
func policyName(p model.Checkpoint, s model.Setup) string {
	if s.ParamsOnly() {
		return "model states"
	}
	if p.Kind == model.CheckpointSqrt {
		return fmt.Sprintf("sqrt (every:%d)", p.Segment(s.Model.Layers/s.PP))
	}
	return p.String()
}

func fitText(w io.Writer, s model.Setup, memory int64, formula string, byRanks bool, policies []model.Checkpoint, cells []fitCell, lowest map[model.Checkpoint]fitCell) error {
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
	what := "activations by " + formula
	if s.ParamsOnly() {
		what = "model states only"
	}
	if byRanks {
		fmt.Fprintf(w, "fewest data-parallel ranks that fit in %s a rank (%s)\n\n", model.Bytes(memory), what)
	} else {
		fmt.Fprintf(w, "largest micro-batch per rank that fits in %s (%s)\n\n", model.Bytes(memory), what)
	}

	var t bench.Table
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

func fitRow(c fitCell, byRanks bool, formula string) fitRowDoc {
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

func fitJSON(w io.Writer, s model.Setup, memory int64, formula string, byRanks bool, cells []fitCell, lowest map[model.Checkpoint]fitCell) error {
	doc := struct {
		Model       modelDoc    `json:"model"`
		Setup       setupDoc    `json:"setup"`
		MemoryBytes int64       `json:"memory_bytes"`
		Formula     string      `json:"formula"`
		Question    string      `json:"question"`
		Results     []fitRowDoc `json:"results"`
		LowestStage []fitRowDoc `json:"lowest_stage,omitempty"`
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

func fitCSV(w io.Writer, byRanks bool, formula string, cells []fitCell, lowest map[model.Checkpoint]fitCell) error {
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

// plural is "1 rank", "8 ranks".
func plural(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%s %ss", model.Comma(int64(n)), thing)
}
