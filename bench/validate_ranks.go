package bench

// validate over ranks: per rank and per category, the ZeRO paper's model
// states, the simulation and the measurement side by side, and each
// rank's measured traffic beside the paper's communication volume.

import (
	"fmt"
	"io"
	"math"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/train"
	"trainmem/zero"
)

// writeRanks is WriteText over ranks.
func (v *ValidateReport) writeRanks(w io.Writer) error {
	s := v.Setup
	lay := zero.LayoutOf(s)
	WriteHeader(w, s, fmt.Sprintf("%s × shape (simulated)", model.Comma(int64(lay.Size()))))
	if v.Device != "" {
		over := "in one process"
		if v.Engine != "" {
			over = "one a process over " + v.Engine
		}
		fmt.Fprintf(w, "measured %s ranks on %s each, %s, data %s\n", model.Comma(int64(lay.Size())), v.Device, over, v.Data)
	}
	writeTensorSplit(w, s)
	writePipelineSplit(w, s)
	writeSimulatedRanks(w, lay.Size(), v.SimulatedRanks)
	fmt.Fprintf(w, "setting %s over %s; the last of %d steps, each rank's peak per category in requested bytes (the tensors' sizes), and its total peak requested (the memory viewer's timeline peak) and allocated (the allocator's 512-byte blocks)\n\n", v.Setting, ranksText(s), v.Steps)
	st := v.Estimate.States
	paper := map[cuda.Category]int64{cuda.Params: st.Params, cuda.Grads: st.Grads, cuda.Master: st.Master, cuda.AdamM: st.AdamM, cuda.AdamV: st.AdamV,
		cuda.Activations: v.Estimate.ActivationBytes(model.ZeROPaper)}
	for _, g := range alikeRanks(v.SimulatedRanks, func(x, y zero.RankResult) bool {
		return x.Stats == y.Stats && sameMeasured(v.MeasuredRanks, x.Rank, y.Rank)
	}) {
		sim := v.SimulatedRanks[g.first]
		var meas *zero.RankResult
		if v.MeasuredRanks != nil {
			meas = &v.MeasuredRanks[sim.Rank]
		}
		if s.PP > 1 && !v.Setting.PS {
			// A stage's model states are of its own part.
			if ps, err := s.RankStates(v.partParams(sim.Rank), v.Setting.Stage); err == nil {
				paper[cuda.Params], paper[cuda.Grads], paper[cuda.Master], paper[cuda.AdamM], paper[cuda.AdamV] = ps.Params, ps.Grads, ps.Master, ps.AdamM, ps.AdamV
			}
		}
		var t Table
		t.Add("rank "+g.name, "zero_paper", "Δ", "simulated", "measured", "Δ")
		for _, c := range rankCategories {
			sv := sim.Stats.CategoryRequested[c].Peak
			row := []string{"  " + c.String(), "-", "", model.GiB(sv), "-", ""}
			if p, ok := paper[c]; ok && (!v.Setting.PS || c == cuda.Activations) {
				row[1], row[2] = model.GiB(p), Percent(p, sv)
			}
			if meas != nil {
				mv := meas.Stats.CategoryRequested[c].Peak
				row[4], row[5] = model.GiB(mv), Percent(mv, sv)
			}
			t.Add(row...)
		}
		// The totals: requested (the viewer's timeline peak), then
		// allocated (the allocator's 512-byte blocks).
		for _, tot := range []struct {
			name string
			of   func(cuda.Stats) int64
		}{{"total peak (requested)", func(st cuda.Stats) int64 { return st.RequestedBytes.Peak }},
			{"total peak (allocated)", func(st cuda.Stats) int64 { return st.AllocatedBytes.Peak }}} {
			row := []string{"  " + tot.name, "-", "", model.GiB(tot.of(sim.Stats)), "-", ""}
			if meas != nil {
				row[4], row[5] = model.GiB(tot.of(meas.Stats)), Percent(tot.of(meas.Stats), tot.of(sim.Stats))
			}
			t.Add(row...)
		}
		if meas != nil && meas.Engine != "" {
			t.Add("  context and libraries ("+meas.Engine+")", "-", "", "-", model.GiB(meas.EngineBytes), "")
		}
		if err := t.Write(w); err != nil {
			return err
		}
		if v.PartActivations != nil {
			v.writePartFormulas(w, sim, meas)
		}
		fmt.Fprintln(w)
	}
	r0 := v.SimulatedRanks[0].Stats
	if s.PP > 1 {
		var sims []zero.RankResult
		for _, sr := range v.SimulatedRanks {
			sims = append(sims, sr)
			if v.MeasuredRanks != nil {
				sims[len(sims)-1].Record = v.MeasuredRanks[sr.Rank].Record
			}
		}
		if err := writeStages(w, s, sims, v.MeasuredRanks != nil); err != nil {
			return err
		}
		fmt.Fprintf(w, "why they differ: a pipeline stage's activations are its micro-batches in flight times one micro-batch's of its own blocks (1F1B: stage r keeps min(P-r, M), GPipe all M); the paper's and Korthikanti's first stage count P in flight of L/P blocks, %s by Korthikanti et al.'s formula\n\n",
			model.Bytes(v.Estimate.ActivationBytes(model.Korthikanti)))
	}
	if a := r0.CategoryRequested[cuda.Activations].Peak; a > 0 && s.PP == 1 {
		fmt.Fprintf(w, "why they differ: activations are a rank's own micro-batch's, which data parallelism leaves as they are: the ZeRO paper's 12·h·b·s·L values say %s, the simulation %s; 'trainmem validate' without --ranks explains each formula's gap kind by kind\n",
			model.Bytes(paper[cuda.Activations]), model.Bytes(a))
	}
	if g := r0.CategoryRequested[cuda.Grads].Peak - st.Grads; v.Setting.Stage >= 2 && g > 0 {
		fmt.Fprintf(w, "why they differ: grads peak at the shard the paper counts plus %s: the bucket in flight while the backward pass writes it (a ZeRO-%d rank holds a whole bucket, padded to N·ceil(L/N), until its reduce-scatter)\n", model.Bytes(g), v.Setting.Stage)
	}
	if g := r0.CategoryRequested[cuda.Gathered].Peak; g > 0 {
		fmt.Fprintf(w, "why they differ: gathered, %s at its peak, is the units' weights all-gathered while the forward or backward pass reads them, which the paper's 16Φ/N leaves out; %s\n", model.Bytes(g), gatheredTerm(v.Setup, v.Setting, v.Estimate.Gathered, g))
	}
	if c := r0.CategoryRequested[cuda.Comm].Peak; c > 0 {
		fmt.Fprintf(w, "why they differ: comm, %s at its peak, is the collectives' staging (two ring blocks a reduction, the padded shards of a gather), which no formula counts\n", model.Bytes(c))
	}
	if v.LibraryWorkspace > 0 {
		fmt.Fprintf(w, "why they differ: the measured ranks' workspace holds their libraries' too (cuBLAS's, %s a rank), which the shape-only device has none of\n", model.Bytes(v.LibraryWorkspace))
	}
	if m := v.MeasuredRanks; len(m) > 0 && m[0].Engine != "" {
		fmt.Fprintf(w, "the ranks' collectives are %s's, which stages partial sums in buffers of its own, outside the allocator (comm holds none of the ring's staging, in the simulation too): %s on rank 0, measured around its init (context and libraries)\n",
			m[0].Engine, model.Bytes(m[0].EngineBytes))
	}
	if v.Setting.PS {
		fmt.Fprintln(w, "zero_paper: the ZeRO paper does not count the parameter server (rank 0 alone holds master, adam_m and adam_v)")
	} else {
		fmt.Fprintf(w, "zero_paper: Rajbhandari et al. 2020, Section 3.1 and Table 1, ZeRO-%d over N = %d (trainmem pads a shard to ceil(Φ/N), per unit or bucket under ZeRO-2 and 3)\n", v.Setting.Stage, s.Ranks)
		switch {
		case s.PP > 1:
			fmt.Fprintln(w, "  Φ is each rank's part of the model, its stage's (and tensor rank's) parameters (each data-parallel group shards its own part)")
		case s.TP > 1:
			fmt.Fprintf(w, "  Φ is a tensor-parallel rank's part of the model, %s parameters on rank 0 (each data-parallel group shards its own part)\n", model.Comma(rankParams(s)))
		}
		if n := mainGradsNote(s); n != "" {
			fmt.Fprintln(w, "  "+n)
		}
	}
	fmt.Fprintln(w, "Δ: the column to its left against simulated, in percent of the simulated bytes (0: equal to the byte)")
	fmt.Fprintln(w)
	v.writeEstimators(w, v.SimulatedRanks[0])
	var meas *train.OffloadRecord
	if len(v.MeasuredRanks) > 0 {
		meas = v.MeasuredRanks[0].Record.Offload
	}
	writeOffload(w, s, "simulated rank 0", v.SimulatedRanks[0].Record.Offload, meas)

	fmt.Fprintln(w, "\ntraffic per rank in the last step:")
	var t Table
	// By group with tensor parallelism (the tensor group's, the data
	// group's); all of a rank's otherwise.
	type part struct {
		group string
		of    func(r zero.RankResult) [zero.NumCollectives]zero.Traffic
	}
	parts := []part{{"", func(r zero.RankResult) [zero.NumCollectives]zero.Traffic { return r.Traffic }}}
	head := []string{"rank", "collective", "calls", "simulated sent", "measured sent", "received"}
	if s.TP > 1 || s.PP > 1 {
		parts = nil
		for _, a := range []zero.Axis{zero.TensorAxis, zero.DataAxis, zero.PipelineAxis} {
			parts = append(parts, part{a.String(), func(r zero.RankResult) [zero.NumCollectives]zero.Traffic { return r.AxisTraffic[a] }})
		}
		head = append([]string{"rank", "group"}, head[1:]...)
	}
	t.Add(head...)
	for _, g := range alikeRanks(v.SimulatedRanks, func(x, y zero.RankResult) bool { return x.Traffic == y.Traffic && x.AxisTraffic == y.AxisTraffic }) {
		sim := v.SimulatedRanks[g.first]
		for _, p := range parts {
			for k, tr := range p.of(sim) {
				if tr.Calls == 0 {
					continue
				}
				ms := "-"
				if v.MeasuredRanks != nil {
					ms = model.Bytes(p.of(v.MeasuredRanks[sim.Rank])[k].SentBytes)
				}
				row := []string{g.name, zero.Collective(k).String(), model.Comma(tr.Calls), model.Bytes(tr.SentBytes), ms, model.Bytes(tr.RecvBytes)}
				if p.group != "" {
					row = append([]string{g.name, p.group}, row[1:]...)
				}
				t.Add(row...)
			}
		}
	}
	if err := t.Write(w); err != nil {
		return err
	}
	if c := v.Estimate.Comm; c.Collective != "none" && !v.Setting.PS {
		fmt.Fprintf(w, "the ZeRO paper, Section 7: %s, %s elements a rank (%s in %s); a ring sends (N-1)/N of each pass: %s\n",
			c.Collective, model.Comma(c.Elements), model.Bytes(c.Bytes), c.DType, model.Bytes(c.RingBytes))
		fmt.Fprintln(w, "(trainmem's sums beside it include the ranks' agreement on skipping a step, one all-reduce of two int32 flags; under ZeRO-3 a unit that the backward pass does not read, such as untied embeddings, is not gathered again)")
	}
	v.Time.writeText(w)
	return nil
}

// writeEstimators writes DeepSpeed's and Megatron-LM's estimates beside
// rank 0's simulation (Megatron-LM's of the layout's most loaded rank, the
// first stage, a tensor rank's part), and what each counts differently,
// term by term.
func (v *ValidateReport) writeEstimators(w io.Writer, r0 zero.RankResult) {
	s, x := v.Setup, v.Estimators
	sim := simulatedOf(r0.Stats, r0.Record)
	var t Table
	t.Add("estimators", "bytes", "Δ", "simulated rank 0")
	if d := x.DeepSpeed; d != nil {
		o := d.Row(x.Offload)
		t.Add(fmt.Sprintf("  deepspeed, estimate_zero%d (%s)", d.Stage, o.Options(d.Stage)), model.GiB(o.GPU), Percent(o.GPU, sim.States()), model.GiB(sim.States())+" (model states and gathered)")
	}
	if m := x.Megatron; m != nil {
		states := sim.States() - sim.Gathered
		t.Add("  megatron, weights and optimizer", model.GiB(m.WeightsAndOptimizer), Percent(m.WeightsAndOptimizer, states), model.GiB(states))
		t.Add("  megatron, activations", model.GiB(m.Activations), Percent(m.Activations, sim.Activations), model.GiB(sim.Activations))
		t.Add("  megatron, total (simulated: peak allocated)", model.GiB(m.Total()), Percent(m.Total(), sim.Peak), model.GiB(sim.Peak))
	}
	t.Write(w)
	for _, line := range x.explain(s, sim) {
		fmt.Fprintf(w, "why they differ: %s\n", line)
	}
	if x.DeepSpeed == nil {
		fmt.Fprintf(w, "deepspeed: %s\n", x.DeepSpeedNone)
	}
	fmt.Fprintf(w, "sources: deepspeed, %s; megatron, %s\n\n", model.DeepSpeedSource, model.MegatronSource)
}

// writePartFormulas writes, under a tensor-parallel rank's table, its
// activations by the formulas beside the simulation and the measurement:
// the trainmem formula of its own part (equal to the simulation to the
// byte) and Korthikanti et al.'s for the layout (Table 2's tensor-parallel
// row with Section 4.3's embedding and output terms, of the rank with the
// most vocabulary rows).
func (v *ValidateReport) writePartFormulas(w io.Writer, sim zero.RankResult, meas *zero.RankResult) {
	sv := sim.Stats.CategoryRequested[cuda.Activations].Peak
	pa := v.PartActivations[v.partOf(sim.Rank)]
	var t Table
	t.Add("  activations by formula", "bytes", "Δ against simulated")
	t.Add("    trainmem (this rank's part)", model.GiB(pa), Percent(pa, sv))
	k := v.Estimate.ActivationBytes(model.Korthikanti)
	name := "    korthikanti (tensor parallel)"
	if v.Setup.PP > 1 {
		name = "    korthikanti (the heavier end stage)"
	}
	t.Add(name, model.GiB(k), Percent(k, sv))
	if meas != nil {
		mv := meas.Stats.CategoryRequested[cuda.Activations].Peak
		t.Add("    measured", model.GiB(mv), Percent(mv, sv))
	}
	t.Write(w)
}

// sameMeasured reports whether ranks a and b measured alike (true when
// nothing was measured).
func sameMeasured(m []zero.RankResult, a, b int) bool {
	return m == nil || m[a].Stats == m[b].Stats
}

// writeRanksJSON is WriteJSON over ranks.
func (v *ValidateReport) writeRanksJSON(w io.Writer) error {
	type rankDoc struct {
		Rank      int                     `json:"rank"`
		Simulated map[cuda.Category]int64 `json:"simulated_peak_requested"`
		Measured  map[cuda.Category]int64 `json:"measured_peak_requested,omitempty"`
		SimSent   int64                   `json:"simulated_sent_bytes"`
		MeasSent  *int64                  `json:"measured_sent_bytes,omitempty"`
		// The measured rank's last step: its loss (its own micro-batch's),
		// peak allocated and reserved bytes, and traffic per collective.
		MeasLoss      *float64                `json:"measured_loss,omitempty"`
		MeasAllocated *int64                  `json:"measured_peak_allocated_bytes,omitempty"`
		MeasReserved  *int64                  `json:"measured_peak_reserved_bytes,omitempty"`
		MeasTraffic   map[string]zero.Traffic `json:"measured_traffic,omitempty"`
		// A native engine's (NCCL's) own device memory, outside the allocator.
		MeasEngineBytes int64 `json:"measured_engine_bytes,omitempty"`
		// With tensor parallelism: the trainmem formula's activations of
		// the rank's part, and the simulated and measured traffic by group
		// (tensor, data).
		PartActivations  *int64                             `json:"trainmem_part_activations,omitempty"`
		SimGroupTraffic  map[string]map[string]zero.Traffic `json:"simulated_traffic_by_group,omitempty"`
		MeasGroupTraffic map[string]map[string]zero.Traffic `json:"measured_traffic_by_group,omitempty"`
	}
	byGroup := func(r zero.RankResult) map[string]map[string]zero.Traffic {
		out := map[string]map[string]zero.Traffic{}
		for _, a := range []zero.Axis{zero.TensorAxis, zero.DataAxis} {
			out[a.String()] = map[string]zero.Traffic{}
			for k, tr := range r.AxisTraffic[a] {
				if tr.Calls > 0 {
					out[a.String()][zero.Collective(k).String()] = tr
				}
			}
		}
		return out
	}
	st := v.Estimate.States
	doc := struct {
		Model   modelDoc  `json:"model"`
		Setup   setupDoc  `json:"setup"`
		Setting string    `json:"setting"`
		Engine  string    `json:"engine,omitempty"`
		Steps   int       `json:"steps"`
		Paper   statesDoc `json:"zero_paper_states"`
		Comm    commDoc   `json:"zero_paper_communication"`
		// Estimators are DeepSpeed's and Megatron-LM's estimates
		// (Megatron-LM's of a layout's most loaded rank).
		Estimators *estimatorsJSON `json:"estimators"`
		Ranks      []rankDoc       `json:"ranks"`
		// Time is each measured host rank's step beside the replayed one.
		Time *TimeCheck `json:"time,omitempty"`
	}{Time: v.Time, Model: modelDocOf(v.Setup), Setup: setupDocOf(v.Setup), Setting: v.Setting.String(), Engine: v.Engine, Steps: v.Steps,
		Paper: statesDocOf(st),
		Comm:  commDoc{v.Estimate.Comm.Collective, v.Estimate.Comm.Elements, v.Estimate.Comm.Bytes, v.Estimate.Comm.RingBytes, v.Estimate.Comm.DType}}
	doc.Estimators = v.Estimators.doc()
	sent := func(tr [zero.NumCollectives]zero.Traffic) (n int64) {
		for _, t := range tr {
			n += t.SentBytes
		}
		return n
	}
	for _, sr := range v.SimulatedRanks {
		d := rankDoc{Rank: sr.Rank, Simulated: map[cuda.Category]int64{}, SimSent: sent(sr.Traffic)}
		for _, c := range rankCategories {
			d.Simulated[c] = sr.Stats.CategoryRequested[c].Peak
		}
		if v.PartActivations != nil {
			pa := v.PartActivations[v.partOf(sr.Rank)]
			d.PartActivations, d.SimGroupTraffic = &pa, byGroup(sr)
			if v.MeasuredRanks != nil {
				d.MeasGroupTraffic = byGroup(v.MeasuredRanks[sr.Rank])
			}
		}
		if v.MeasuredRanks != nil {
			m := v.MeasuredRanks[sr.Rank]
			d.Measured = map[cuda.Category]int64{}
			for _, c := range rankCategories {
				d.Measured[c] = m.Stats.CategoryRequested[c].Peak
			}
			ms, loss, alloc, res := sent(m.Traffic), m.Record.Loss, m.Stats.AllocatedBytes.Peak, m.Stats.ReservedBytes.Peak
			d.MeasSent, d.MeasAllocated, d.MeasReserved = &ms, &alloc, &res
			if !math.IsNaN(loss) && !math.IsInf(loss, 0) {
				d.MeasLoss = &loss // JSON has no NaN or infinity: an fp16 step that overflowed has none
			}
			d.MeasEngineBytes = m.EngineBytes
			d.MeasTraffic = map[string]zero.Traffic{}
			for k, tr := range m.Traffic {
				if tr.Calls > 0 {
					d.MeasTraffic[zero.Collective(k).String()] = tr
				}
			}
		}
		doc.Ranks = append(doc.Ranks, d)
	}
	return writeJSON(w, doc)
}

// gatheredTerm says what trainmem's formula counts of ZeRO-3's gathered
// units (model.Estimate.Gathered) against the simulation's peak.
func gatheredTerm(s model.Setup, set zero.Setting, formula, simulated int64) string {
	what := "the largest of the embeddings, a block and the final layer norm with the head"
	if !s.Model.Untied {
		what = "the tied embeddings, kept gathered through the forward pass for the head, beside a block"
	}
	if k := s.Checkpoint.Segment(s.Model.Layers); k > 1 {
		what += fmt.Sprintf(", or the %d blocks of a recomputed segment", k)
	}
	msg := fmt.Sprintf("trainmem's formula counts %s: %s", what, model.Bytes(formula))
	switch d := simulated - formula; {
	case d == 0:
		return msg + ", equal to the simulation"
	case set.Prefetch:
		return msg + fmt.Sprintf("; --prefetch gathers the next unit ahead, %s more", model.Bytes(d))
	default:
		return msg + fmt.Sprintf(", %s from the simulation", model.Bytes(d))
	}
}
