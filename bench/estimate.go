package bench

// The estimate report: the closed-form memory of one rank, per category,
// with every formula of the literature side by side and each figure's
// source.

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/zero"
)

// EstimateReport is the estimate of a setup by its formula, with the same
// setup under each checkpoint policy fit compares beside it.
type EstimateReport struct {
	Estimate model.Estimate
	Formula  model.Formula    // the activation formula counted in the total
	Policies []model.Estimate // the setup under each compared policy; none for a parameter-only setup
	// Estimators are DeepSpeed's and Megatron-LM's estimates of the setup
	// on its cluster.
	Estimators Estimators
	// Time is the formula's step time on a card and network (AddTime),
	// PolicyTimes each compared policy's; nil and none until asked.
	Time        *zero.StepTime
	PolicyTimes []zero.StepTime
}

// AddTime gives the report the formula's step time on opts' card and
// network, for the setup and for each compared policy.
func (r *EstimateReport) AddTime(c model.Checked, opts zero.TimeOptions) error {
	st, err := zero.StepTimeOf(c, opts)
	if err != nil {
		return err
	}
	r.Time = &st
	r.PolicyTimes = nil
	for _, p := range r.Policies {
		t := c.Setup()
		t.Checkpoint = p.Setup.Checkpoint
		tc, err := t.Check()
		if err != nil {
			return err
		}
		pt, err := zero.StepTimeOf(tc, opts)
		if err != nil {
			return err
		}
		r.PolicyTimes = append(r.PolicyTimes, pt)
	}
	return nil
}

// Estimate estimates s by formula (model.Formulas), compares the
// checkpoint policies and sets DeepSpeed's and Megatron-LM's estimates
// (on cluster cl) beside them; the error is the model's (a shape too large
// to count) or cl's.
func Estimate(c model.Checked, formula model.Formula, cl model.Cluster) (*EstimateReport, error) {
	s := c.Setup()
	e, err := c.EstimateBy(formula)
	if err != nil {
		return nil, err
	}
	policies, err := comparePolicies(s, formula)
	if err != nil {
		return nil, err
	}
	x, err := estimatorsOf(s, cl)
	if err != nil {
		return nil, err
	}
	return &EstimateReport{Estimate: e, Formula: formula, Policies: policies, Estimators: x}, nil
}

// comparePolicies estimates the setup under each checkpoint policy fit
// compares (and the setup's own), for the side-by-side table; none for a
// parameter-only setup.
func comparePolicies(s model.Setup, formula model.Formula) ([]model.Estimate, error) {
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

func estimateDoc(e model.Estimate, formula model.Formula) estimateJSON {
	s := e.Setup
	st := e.States
	d := estimateJSON{
		Model:           modelDocOf(s),
		Setup:           setupDocOf(s),
		Rank:            rankDoc{Params: e.RankParams, Stage: e.Stage},
		ModelStates:     statesDocOf(st),
		Gathered:        e.Gathered,
		Activations:     map[model.Formula]int64{},
		ActivationTerms: map[model.Formula]map[string]int64{},
		NoDropout:       map[model.Formula]int64{},
		Sources: map[string]string{
			"model_states":  "Rajbhandari et al. 2020 (ZeRO), Section 3.1 (2Φ+2Φ+KΦ) and Table 1 (per-rank sharding)",
			"communication": "Rajbhandari et al. 2020 (ZeRO), Section 7",
		},
		Communication: commDoc{e.Comm.Collective, e.Comm.Elements, e.Comm.Bytes, e.Comm.RingBytes, e.Comm.DType},
		Totals:        map[string]int64{},
		Formula:       formula,
		TotalBytes:    e.Total(formula),
	}
	if s.Offload != model.OffloadNone {
		o := e.Offloaded
		d.Offloaded = ptr(statesDocOf(o))
		d.PCIe = &pcieDoc{e.PCIe.ToHost, e.PCIe.ToDevice}
		d.Sources["offload"] = offloadSource
	}
	for _, a := range e.Activations {
		d.Activations[a.Formula] = a.Total
		d.Sources[a.Formula.String()] = a.Source
		d.Totals[a.Formula.String()] = e.Total(a.Formula)
		d.ActivationTerms[a.Formula] = map[string]int64{}
		for _, t := range a.Terms {
			d.ActivationTerms[a.Formula][t.Name] = t.Bytes
		}
		if nd := a.NoDropout(); nd != a.Total {
			d.NoDropout[a.Formula] = nd
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

// WriteJSON writes the estimate with exact bytes.
func (r *EstimateReport) WriteJSON(w io.Writer) error {
	s := r.Estimate.Setup
	d := estimateDoc(r.Estimate, r.Formula)
	d.Estimators = r.Estimators.doc()
	if r.Time != nil {
		d.StepTime = stepTimeDocOf(*r.Time)
	}
	for i, p := range r.Policies {
		pd := policyDoc{Policy: p.Setup.Checkpoint.String(), SegmentLayers: p.Setup.Checkpoint.Segment(s.Model.Layers / s.PP),
			Activations: map[model.Formula]int64{}, RecomputeFraction: p.Recompute.Fraction}
		if i < len(r.PolicyTimes) {
			pd.StepMs = ms(r.PolicyTimes[i].Step)
		}
		for _, a := range p.Activations {
			pd.Activations[a.Formula] = a.Total
		}
		d.Policies = append(d.Policies, pd)
	}
	return writeJSON(w, d)
}

// WriteCSV writes section,name,bytes rows: every figure of the JSON that
// is a byte count.
func (r *EstimateReport) WriteCSV(w io.Writer) error {
	e, formula := r.Estimate, r.Formula
	cw := csv.NewWriter(w)
	row := func(section, name string, n int64) { cw.Write([]string{section, name, strconv.FormatInt(n, 10)}) }
	cw.Write([]string{"section", "name", "bytes"})
	for _, t := range e.States.Named() {
		row("model_states", t.Cat.String(), t.Bytes)
	}
	row("model_states", "total", e.States.Total())
	row("gathered", cuda.Gathered.String(), e.Gathered)
	for _, a := range e.Activations {
		row("activations", a.Formula.String(), a.Total)
	}
	for _, a := range e.Activations {
		for _, t := range a.Terms {
			row("activation_terms."+a.Formula.String(), t.Name, t.Bytes)
		}
	}
	row("communication", "bytes", e.Comm.Bytes)
	row("communication", "ring_bytes", e.Comm.RingBytes)
	r.Estimators.csvRows(row)
	for _, a := range e.Activations {
		row("totals", a.Formula.String(), e.Total(a.Formula))
	}
	row("total_bytes", formula.String(), e.Total(formula))
	cw.Flush()
	return cw.Error()
}

// WriteText writes the estimate as tables in bytes, GB and GiB, each
// figure with its source.
func (r *EstimateReport) WriteText(w io.Writer) error {
	e, formula, policies := r.Estimate, r.Formula, r.Policies
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

	var t Table
	rate := s.DevicePerParam()
	t.Add("model states per rank", "bytes", "GB", "GiB", "bytes/param")
	for i, c := range e.States.Named() {
		var per string
		switch c.Cat {
		case cuda.Frozen:
			per = fmt.Sprintf("%d a frozen one", s.Precision.Size())
			if s.Model.Quantize != model.QuantNone {
				per = fmt.Sprintf("%.3f a frozen one (%s: 0.5)", float64(c.Bytes)/float64(e.RankParams-e.RankTrained), s.Model.Quantize)
			}
		case cuda.QuantState:
			per = fmt.Sprintf("%.4f a quantized one", float64(c.Bytes)/float64(s.Model.NumQuantized()))
		case cuda.AdamM, cuda.AdamV:
			per = fmt.Sprint(rate.Named()[i].Bytes) + sharded(c.Cat, s)
			if s.Optimizer.EightBit() {
				per = fmt.Sprintf("%.4f", float64(c.Bytes)/float64(e.RankTrained))
			}
		default:
			per = fmt.Sprint(rate.Named()[i].Bytes) + sharded(c.Cat, s)
		}
		t.Add(row("  "+c.Cat.String(), sizeCells(c.Bytes), []string{per})...)
	}
	perParam := fmt.Sprint(rate.Total())
	if (s.ZeRO > 0 && s.Ranks > 1 || e.RankTrained != e.RankParams || s.Optimizer.EightBit()) && e.RankParams > 0 {
		// What the rank holds a parameter, its shards included: not the
		// 16 of an unsharded rank.
		perParam = fmt.Sprintf("%.2f", float64(e.States.Total())/float64(e.RankParams))
	}
	t.Add(row("  total", sizeCells(e.States.Total()), []string{perParam})...)
	if e.Gathered > 0 {
		t.Add(row("  "+cuda.Gathered.String(), sizeCells(e.Gathered), []string{""})...)
	}
	t.Write(w)
	if s.Optimizer.EightBit() {
		fmt.Fprintf(w, "  source: ZeRO paper (Rajbhandari et al. 2020) Section 3.1: 2Φ + 2Φ + KΦ bytes, K = %.4f here: %s keeps m and v in 8 bits (Dettmers et al. 2022; bitsandbytes' blockwise 8-bit Adam), a byte a parameter and an fp32 scale a block of %d each, a tensor under %d values in fp32",
			float64(e.States.Optimizer())/float64(e.RankTrained), s.Optimizer, cuda.Block8, model.Min8bitSize)
	} else {
		fmt.Fprintf(w, "  source: ZeRO paper (Rajbhandari et al. 2020) Section 3.1: 2Φ + 2Φ + KΦ bytes, K = %d here", rate.Optimizer())
	}
	if e.RankTrained != e.RankParams {
		fmt.Fprintf(w, ", Φ the %s trained parameters; the %s frozen ones (%s) at %d bytes each, with no gradient and no optimizer state",
			model.Comma(e.RankTrained), model.Comma(e.RankParams-e.RankTrained), s.Model.FrozenBy(), s.Precision.Size())
	}
	if q := s.Model.Quantize; q != model.QuantNone {
		codes, state := s.Model.QuantBytes()
		n := s.Model.NumQuantized()
		fmt.Fprintf(w, "; %s of them, the blocks' linear weights, in %s (QLoRA, Dettmers et al. 2023, Section 3, as bitsandbytes 0.50.1 stores them): %s bytes of 4-bit codes and %s of quantization state (a scale a %d weights in 8 bits, a scale a %d of those in fp32, an offset a weight matrix), %.4f bits a weight (%.4f for whole blocks)",
			model.Comma(n), q, model.Comma(codes), model.Comma(state), cuda.NF4Block, cuda.Block8, 8*float64(codes+state)/float64(n), model.NF4BitsPerWeight)
	}
	if s.MainGrads == model.GradsFP32 && s.Precision.Mixed() {
		fmt.Fprint(w, "; fp32 main gradients (Megatron-LM's main_grad, DeepSpeed's fp32 gradients) make the gradients 4Φ: 2Φ + 4Φ + KΦ")
	}
	if s.ZeRO > 0 && s.Ranks > 1 {
		fmt.Fprintf(w, "; Table 1: ZeRO-%d shards %s over N = %d ranks, ceil(Φ/N) = %s parameters each",
			s.ZeRO, shardedList(s.ZeRO), s.Ranks, model.Comma((e.RankParams+int64(s.Ranks)-1)/int64(s.Ranks)))
	}
	fmt.Fprintln(w)
	if s.Offload != model.OffloadNone {
		t = Table{}
		t.Add("offloaded to host memory, a rank's", "bytes", "GB", "GiB")
		for _, c := range e.Offloaded.Named() {
			t.Add(row("  "+c.Cat.String(), sizeCells(c.Bytes))...)
		}
		t.Add(row("  total", sizeCells(e.Offloaded.Total()))...)
		t.Add(row("  PCIe a step, to host (the gradients)", sizeCells(e.PCIe.ToHost))...)
		t.Add(row("  PCIe a step, to the device (the weights)", sizeCells(e.PCIe.ToDevice))...)
		t.Write(w)
		fmt.Fprintf(w, "  source: %s\n", offloadSource)
	}
	if e.Gathered > 0 {
		what := "the largest unit gathered at once (the embeddings, a block, or the final layer norm with the head)"
		if !s.Model.Untied && s.PP == 1 {
			what = "the units gathered at once at the peak: the tied embeddings, kept through the forward pass for the head, beside a block"
		}
		fmt.Fprintf(w, "  gathered: ZeRO-3's working copy of %s, as trainmem's schedule gathers them (a recomputed segment gathers its blocks at once; --prefetch one unit more); trainmem's term, not the paper's\n", what)
	}
	fmt.Fprintln(w)

	if len(e.Activations) == 0 {
		fmt.Fprintln(w, "activations: not estimated (--params gives no shape; use --preset or --layers, --hidden, --heads)")
	} else {
		t = Table{}
		t.Add("activations per rank, checkpoint "+s.Checkpoint.String(), "bytes", "GB", "GiB")
		for _, a := range e.Activations {
			t.Add(row("  "+a.Formula.String(), sizeCells(a.Total))...)
			for _, x := range a.Terms {
				t.Add(row("    "+x.Name, sizeCells(x.Bytes))...)
			}
			if nd := a.NoDropout(); nd != a.Total {
				t.Add(row("  "+a.Formula.String()+", no dropout", sizeCells(nd))...)
			}
		}
		t.Write(w)
		for _, a := range e.Activations {
			fmt.Fprintf(w, "  %s: %s\n", a.Formula, a.Source)
		}
		rc := e.Recompute
		fmt.Fprintf(w, "\nrecompute: checkpoint %s adds %.1f%% to a step's FLOPs (a step is 3 forward passes, %.3g FLOPs a micro-batch; Narayanan et al. 2021, Korthikanti et al. 2022 Appendix A)\n\n",
			s.Checkpoint, 100*rc.Fraction, rc.Step)
		t = Table{}
		head := []string{"checkpoint policies"}
		for _, a := range e.Activations {
			head = append(head, a.Formula.String())
		}
		head = append(head, "recompute")
		if len(r.PolicyTimes) == len(policies) && len(policies) > 0 {
			head = append(head, "step", "MFU")
		}
		t.Add(head...)
		for i, p := range policies {
			row := []string{"  " + policyName(p.Setup.Checkpoint, s)}
			for _, a := range p.Activations {
				row = append(row, model.GB(a.Total))
			}
			row = append(row, fmt.Sprintf("%.1f%%", 100*p.Recompute.Fraction))
			if len(r.PolicyTimes) == len(policies) {
				row = append(row, msText(ms(r.PolicyTimes[i].Step)), fmt.Sprintf("%.1f%%", 100*r.PolicyTimes[i].MFU))
			}
			t.Add(row...)
		}
		t.Write(w)
		note := "  (activations per rank; recompute: extra FLOPs as a share of a step"
		if len(r.PolicyTimes) == len(policies) {
			note += "; step and MFU: the formula's time, below"
		}
		fmt.Fprintln(w, note+")")
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
	r.Estimators.writeText(w, e)
	fmt.Fprintln(w)

	t = Table{}
	t.Add("total per rank", "bytes", "GB", "GiB")
	if len(e.Activations) == 0 {
		t.Add(row("  model states", sizeCells(e.Total(formula)))...)
	}
	for _, a := range e.Activations {
		mark := ""
		if a.Formula == formula {
			mark = " (--formula)"
		}
		t.Add(row("  with "+a.Formula.String()+mark, sizeCells(e.Total(a.Formula)))...)
	}
	t.Write(w)
	fmt.Fprintln(w, "  not counted: temporaries, kernel workspaces, allocator caching and fragmentation, the CUDA context")
	if r.Time != nil {
		fmt.Fprintln(w)
		writeStepTime(w, *r.Time)
	}
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
