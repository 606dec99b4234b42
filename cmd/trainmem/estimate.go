package main

// trainmem estimate: the closed-form memory of one rank, per category, with
// every formula of the literature side by side and each figure's source.

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"

	"trainmem/bench"
	"trainmem/cuda"
	"trainmem/model"
)

func init() {
	register(command{
		name:    "estimate",
		summary: "memory per category from the literature's formulas (ZeRO paper, Korthikanti et al.)",
		run:     runEstimate,
	})
}

const estimateSynopsis = `Prints the memory one rank needs to train the model, per category (params,
grads, master, adam_m, adam_v, gathered, activations), from the closed-form
formulas of the literature, each with its source: model states and ZeRO
sharding (Rajbhandari et al. 2020), activations by the ZeRO paper's
12·h·b·s·L values and by Korthikanti et al. 2022's sbh·(34 + 5as/h) bytes a
layer, for the checkpoint policy, tensor and pipeline parallelism given.
Sizes print in GB (10^9 bytes, as the articles and the ZeRO paper) and GiB
(2^30, as PyTorch); --format json and csv give exact bytes.

example: trainmem estimate --preset gpt2-xl --batch 32 --seq 1000 --precision fp16`

func runEstimate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	sf := addSetupFlags(fs, setupOptions{parallel: true, batch: 1})
	formula := model.Korthikanti
	fs.Func("formula", "activation formula counted in total_bytes: zero_paper or korthikanti (default korthikanti)", func(s string) error {
		f, err := model.ParseFormula(s)
		formula = f
		return err
	})
	format := newFormatFlag(fs, "text", "json", "csv")
	if err := parseFlags(fs, args, stderr, estimateSynopsis); err != nil {
		if err == errHelp {
			return nil
		}
		return err
	}
	s, err := sf.setup()
	if err != nil {
		return err
	}
	sf.noteIgnored(stderr)
	e, err := s.EstimateBy(formula)
	if err != nil {
		return badSetup(err) // only a shape too large is left
	}
	policies, err := comparePolicies(s, formula)
	if err != nil {
		return badSetup(err)
	}
	switch format.v {
	case "json":
		d := estimateDoc(e, formula)
		for _, p := range policies {
			pd := policyDoc{Policy: p.Setup.Checkpoint.String(), SegmentLayers: p.Setup.Checkpoint.Segment(s.Model.Layers / s.PP),
				Activations: map[string]int64{}, RecomputeFraction: p.Recompute.Fraction}
			for _, a := range p.Activations {
				pd.Activations[a.Formula] = a.Total
			}
			d.Policies = append(d.Policies, pd)
		}
		return writeJSON(stdout, d)
	case "csv":
		return estimateCSV(stdout, e, formula)
	}
	return estimateText(stdout, e, formula, policies)
}

// comparePolicies estimates the setup under each checkpoint policy fit
// compares (and the setup's own), for the side-by-side table; none for a
// parameter-only setup.
func comparePolicies(s model.Setup, formula string) ([]model.Estimate, error) {
	if s.ParamsOnly() {
		return nil, nil
	}
	var es []model.Estimate
	for _, p := range model.FitPolicies(s.Checkpoint) {
		t := s
		t.Checkpoint = p
		e, err := t.EstimateBy(formula)
		if err != nil {
			return nil, err
		}
		es = append(es, e)
	}
	return es, nil
}

// The JSON document. Keys are stable: programs read them.
type (
	modelDoc struct {
		Name    string `json:"name"`
		Layers  int    `json:"layers,omitempty"`
		Hidden  int    `json:"hidden,omitempty"`
		Heads   int    `json:"heads,omitempty"`
		Vocab   int    `json:"vocab,omitempty"`
		Context int    `json:"context,omitempty"`
		Tied    *bool  `json:"tied,omitempty"`
		Params  int64  `json:"params"`
	}
	setupDoc struct {
		Batch            int    `json:"batch,omitempty"`
		Seq              int    `json:"seq,omitempty"`
		Precision        string `json:"precision"`
		Optimizer        string `json:"optimizer"`
		Checkpoint       string `json:"checkpoint,omitempty"`
		Ranks            int    `json:"ranks"`
		ZeRO             int    `json:"zero"`
		TP               int    `json:"tp"`
		PP               int    `json:"pp"`
		SequenceParallel bool   `json:"sequence_parallel"`
	}
	rankDoc struct {
		Params int64 `json:"params"` // parameters held before ZeRO sharding
		Stage  int   `json:"stage"`  // reported pipeline stage, 0 first
	}
	statesDoc struct {
		Params int64 `json:"params"`
		Grads  int64 `json:"grads"`
		Master int64 `json:"master"`
		AdamM  int64 `json:"adam_m"`
		AdamV  int64 `json:"adam_v"`
		Total  int64 `json:"total"`
	}
	recomputeDoc struct {
		Policy         string  `json:"policy"`
		SegmentLayers  int     `json:"segment_layers"`
		ForwardFLOPs   float64 `json:"forward_flops"`
		StepFLOPs      float64 `json:"step_flops"`
		RecomputeFLOPs float64 `json:"recompute_flops"`
		Fraction       float64 `json:"fraction"`
	}
	// policyDoc is one checkpoint policy of the comparison: its activations
	// by formula and its recompute share, the rest of the setup unchanged.
	policyDoc struct {
		Policy            string           `json:"policy"`
		SegmentLayers     int              `json:"segment_layers"`
		Activations       map[string]int64 `json:"activations"`
		RecomputeFraction float64          `json:"recompute_fraction"`
	}
	commDoc struct {
		Collective string `json:"collective"`
		Elements   int64  `json:"elements"`
		Bytes      int64  `json:"bytes"`
		RingBytes  int64  `json:"ring_bytes"`
		DType      string `json:"dtype"`
	}
	estimateJSON struct {
		Model           modelDoc                    `json:"model"`
		Setup           setupDoc                    `json:"setup"`
		Rank            rankDoc                     `json:"rank"`
		ModelStates     statesDoc                   `json:"model_states"`
		Gathered        int64                       `json:"gathered"`
		Activations     map[string]int64            `json:"activations"`
		ActivationTerms map[string]map[string]int64 `json:"activation_terms"`
		Sources         map[string]string           `json:"sources"`
		Recompute       *recomputeDoc               `json:"recompute,omitempty"`
		Policies        []policyDoc                 `json:"checkpoint_policies,omitempty"`
		Communication   commDoc                     `json:"communication"`
		Totals          map[string]int64            `json:"totals"`
		Formula         string                      `json:"formula"`
		TotalBytes      int64                       `json:"total_bytes"`
	}
)

func modelDocOf(s model.Setup) modelDoc {
	if s.ParamsOnly() {
		return modelDoc{Name: "params-only", Params: s.Params}
	}
	m := s.Model
	tied := !m.Untied
	return modelDoc{Name: m.Name, Layers: m.Layers, Hidden: m.Hidden, Heads: m.Heads, Vocab: m.Vocab, Context: m.Context, Tied: &tied, Params: m.NumParams()}
}

func setupDocOf(s model.Setup) setupDoc {
	d := setupDoc{Precision: s.Precision.String(), Optimizer: s.Optimizer.String(), Ranks: s.Ranks, ZeRO: s.ZeRO, TP: s.TP, PP: s.PP, SequenceParallel: s.SequenceParallel}
	if !s.ParamsOnly() {
		d.Batch, d.Seq, d.Checkpoint = s.Batch, s.Seq, s.Checkpoint.String()
	}
	return d
}

func estimateDoc(e model.Estimate, formula string) estimateJSON {
	s := e.Setup
	st := e.States
	d := estimateJSON{
		Model:           modelDocOf(s),
		Setup:           setupDocOf(s),
		Rank:            rankDoc{Params: e.RankParams, Stage: e.Stage},
		ModelStates:     statesDoc{st.Params, st.Grads, st.Master, st.AdamM, st.AdamV, st.Total()},
		Gathered:        e.Gathered,
		Activations:     map[string]int64{},
		ActivationTerms: map[string]map[string]int64{},
		Sources: map[string]string{
			"model_states":  "Rajbhandari et al. 2020 (ZeRO), Section 3.1 (2Φ+2Φ+KΦ) and Table 1 (per-rank sharding)",
			"communication": "Rajbhandari et al. 2020 (ZeRO), Section 7",
		},
		Communication: commDoc{e.Comm.Collective, e.Comm.Elements, e.Comm.Bytes, e.Comm.RingBytes, e.Comm.DType},
		Totals:        map[string]int64{},
		Formula:       formula,
		TotalBytes:    e.Total(formula),
	}
	for _, a := range e.Activations {
		d.Activations[a.Formula] = a.Total
		d.Sources[a.Formula] = a.Source
		d.Totals[a.Formula] = e.Total(a.Formula)
		d.ActivationTerms[a.Formula] = map[string]int64{}
		for _, t := range a.Terms {
			d.ActivationTerms[a.Formula][t.Name] = t.Bytes
		}
	}
	if len(e.Activations) == 0 {
		d.Totals["model_states"] = e.Total(formula)
	} else {
		r := e.Recompute
		d.Sources["recompute"] = "Narayanan et al. 2021, Section 5.1; Korthikanti et al. 2022, Appendix A"
		d.Recompute = &recomputeDoc{s.Checkpoint.String(), s.Checkpoint.Segment(s.Model.Layers / s.PP), r.Forward, r.Step, r.Recompute, r.Fraction}
	}
	return d
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// estimateCSV writes section,name,bytes rows: every figure of the JSON that
// is a byte count.
func estimateCSV(w io.Writer, e model.Estimate, formula string) error {
	cw := csv.NewWriter(w)
	row := func(section, name string, n int64) { cw.Write([]string{section, name, strconv.FormatInt(n, 10)}) }
	cw.Write([]string{"section", "name", "bytes"})
	for _, t := range e.States.Named() {
		row("model_states", t.Cat.String(), t.Bytes)
	}
	row("model_states", "total", e.States.Total())
	row("gathered", cuda.Gathered.String(), e.Gathered)
	for _, a := range e.Activations {
		row("activations", a.Formula, a.Total)
	}
	for _, a := range e.Activations {
		for _, t := range a.Terms {
			row("activation_terms."+a.Formula, t.Name, t.Bytes)
		}
	}
	row("communication", "bytes", e.Comm.Bytes)
	row("communication", "ring_bytes", e.Comm.RingBytes)
	for _, a := range e.Activations {
		row("totals", a.Formula, e.Total(a.Formula))
	}
	row("total_bytes", formula, e.Total(formula))
	cw.Flush()
	return cw.Error()
}

// sizeCells is a byte figure as table cells: exact bytes, GB, GiB.
func sizeCells(n int64) []string { return []string{model.Comma(n), model.GB(n), model.GiB(n)} }

// row joins a name and cells.
func row(name string, cells ...[]string) []string {
	r := []string{name}
	for _, c := range cells {
		r = append(r, c...)
	}
	return r
}

func estimateText(w io.Writer, e model.Estimate, formula string, policies []model.Estimate) error {
	s := e.Setup
	fmt.Fprintln(w, modelLine(s))
	fmt.Fprintf(w, "setup: %s\n", describe(s))
	if s.PP > 1 || s.TP > 1 {
		where := "the"
		if s.PP > 1 {
			where = fmt.Sprintf("on the heavier of the first and last pipeline stages (stage %d of 0..%d), the", e.Stage, s.PP-1)
		}
		fmt.Fprintf(w, "reported rank: %s tensor-parallel rank with the most vocabulary rows; it holds %s parameters\n",
			where, model.Comma(e.RankParams))
	}
	fmt.Fprintln(w)

	var t bench.Table
	rate := model.PerParam(s.Precision, s.Optimizer)
	t.Add("model states per rank", "bytes", "GB", "GiB", "bytes/param")
	for i, c := range e.States.Named() {
		t.Add(row("  "+c.Cat.String(), sizeCells(c.Bytes), []string{fmt.Sprint(rate.Named()[i].Bytes) + sharded(c.Cat, s)})...)
	}
	t.Add(row("  total", sizeCells(e.States.Total()), []string{fmt.Sprint(rate.Total())})...)
	if e.Gathered > 0 {
		t.Add(row("  "+cuda.Gathered.String(), sizeCells(e.Gathered), []string{""})...)
	}
	t.Write(w)
	fmt.Fprintf(w, "  source: ZeRO paper (Rajbhandari et al. 2020) Section 3.1: 2Φ + 2Φ + KΦ bytes, K = %d here", rate.Optimizer())
	if s.ZeRO > 0 && s.Ranks > 1 {
		fmt.Fprintf(w, "; Table 1: ZeRO-%d shards %s over N = %d ranks, ceil(Φ/N) = %s parameters each",
			s.ZeRO, shardedList(s.ZeRO), s.Ranks, model.Comma((e.RankParams+int64(s.Ranks)-1)/int64(s.Ranks)))
	}
	fmt.Fprintln(w)
	if e.Gathered > 0 {
		fmt.Fprintln(w, "  gathered: ZeRO-3's working copy of the largest unit gathered at once (embeddings, a block or the head); trainmem's term, not the paper's")
	}
	fmt.Fprintln(w)

	if len(e.Activations) == 0 {
		fmt.Fprintln(w, "activations: not estimated (--params gives no shape; use --preset or --layers, --hidden, --heads)")
	} else {
		t = bench.Table{}
		t.Add("activations per rank, checkpoint "+s.Checkpoint.String(), "bytes", "GB", "GiB")
		for _, a := range e.Activations {
			t.Add(row("  "+a.Formula, sizeCells(a.Total))...)
			for _, x := range a.Terms {
				t.Add(row("    "+x.Name, sizeCells(x.Bytes))...)
			}
		}
		t.Write(w)
		for _, a := range e.Activations {
			fmt.Fprintf(w, "  %s: %s\n", a.Formula, a.Source)
		}
		r := e.Recompute
		fmt.Fprintf(w, "\nrecompute: checkpoint %s adds %.1f%% to a step's FLOPs (a step is 3 forward passes, %.3g FLOPs a micro-batch; Narayanan et al. 2021, Korthikanti et al. 2022 Appendix A)\n\n",
			s.Checkpoint, 100*r.Fraction, r.Step)
		t = bench.Table{}
		head := []string{"checkpoint policies"}
		for _, a := range e.Activations {
			head = append(head, a.Formula)
		}
		t.Add(append(head, "recompute")...)
		for _, p := range policies {
			r := []string{"  " + policyName(p.Setup.Checkpoint, s)}
			for _, a := range p.Activations {
				r = append(r, model.GB(a.Total))
			}
			t.Add(append(r, fmt.Sprintf("%.1f%%", 100*p.Recompute.Fraction))...)
		}
		t.Write(w)
		fmt.Fprintln(w, "  (activations per rank; recompute: extra FLOPs as a share of a step)")
		fmt.Fprintln(w)
	}

	c := e.Comm
	if c.Collective == "none" {
		fmt.Fprintln(w, "communication: none (one data-parallel rank)")
	} else {
		k := c.Elements / e.RankParams
		fmt.Fprintf(w, "communication per rank per step: %s, %dΦ = %s elements, %s in %s; a ring sends %d(N-1)/N·Φ: %s (ZeRO paper Section 7)\n",
			c.Collective, k, model.Comma(c.Elements), model.GB(c.Bytes), c.DType, k, model.GB(c.RingBytes))
	}
	fmt.Fprintln(w)

	t = bench.Table{}
	t.Add("total per rank", "bytes", "GB", "GiB")
	if len(e.Activations) == 0 {
		t.Add(row("  model states", sizeCells(e.Total(formula)))...)
	}
	for _, a := range e.Activations {
		mark := ""
		if a.Formula == formula {
			mark = " (--formula)"
		}
		t.Add(row("  with "+a.Formula+mark, sizeCells(e.Total(a.Formula)))...)
	}
	t.Write(w)
	fmt.Fprintln(w, "  not counted: temporaries, kernel workspaces, allocator caching and fragmentation, the CUDA context")
	return nil
}

// sharded marks a category that ZeRO shards at the setup's stage.
func sharded(cat cuda.Category, s model.Setup) string {
	if s.Ranks == 1 {
		return ""
	}
	stage := map[cuda.Category]int{cuda.Params: 3, cuda.Grads: 2, cuda.Master: 1, cuda.AdamM: 1, cuda.AdamV: 1}[cat]
	if s.ZeRO >= stage {
		return fmt.Sprintf("/%d", s.Ranks)
	}
	return ""
}

func shardedList(stage int) string {
	switch stage {
	case 1:
		return "the optimizer states (master, adam_m, adam_v)"
	case 2:
		return "the optimizer states and the gradients"
	}
	return "the optimizer states, the gradients and the weights"
}
