package bench

// The explanations under the validation table: one line per difference,
// each computed from the setup's numbers. The activation formulas are
// compared kind of tensor by kind of tensor (layer values, attention scores,
// dropout masks, layer-norm statistics, checkpoints, what lies outside the
// layers, token ids), so that every byte of a formula's gap is attributed and
// the parts sum to the whole; what no formula models (temporaries,
// workspace, rounding, caching, the CUDA context) gets a line of its own.

import (
	"fmt"
	"strings"

	"trainmem/cuda"
	"trainmem/model"
)

// kinds is one formula's activations split by kind of tensor (model.ByKind),
// in explanation order, and what its terms hold beyond their parts.
type kinds struct {
	by    [model.NumTensorKinds]model.KindTotal
	other int64
}

// dims are the setup's sizes in bytes and elements.
type dims struct {
	N, sbh, nh, as2b, P, V, L, e int64
	k                            int64 // layers per recomputed segment (0: none, selective)
}

func dimsOf(s model.Setup) dims {
	m := s.Model
	e := s.Precision.Size()
	N := int64(s.Batch) * int64(s.Seq)
	d := dims{N: N, sbh: N * int64(m.Hidden), e: e, V: int64(m.Vocab), L: int64(m.Layers)}
	d.nh = d.sbh * e
	d.as2b = int64(m.Heads) * int64(s.Seq) * int64(s.Seq) * int64(s.Batch)
	d.P = d.as2b * e
	d.k = int64(s.Checkpoint.Segment(m.Layers))
	return d
}

// formulaKinds splits formula f's activations in e by kind of tensor.
func formulaKinds(e model.Estimate, f model.Formula) (kinds, bool) {
	a, ok := e.Activation(f)
	var k kinds
	k.by, k.other = a.ByKind()
	return k, ok
}

// bt is a byte count for an explanation: binary units, exact below 1 KiB.
func bt(n int64) string { return model.GiB(n) }

// signed is a difference with its sign.
func signed(n int64) string {
	if n >= 0 {
		return "+" + bt(n)
	}
	return "−" + bt(-n)
}

// Percent is (a − b)/b in percent, as the table prints it: "0" when equal,
// "-" when b is 0 and a is not.
func Percent(a, b int64) string {
	switch {
	case a == b:
		return "0"
	case b == 0:
		return "-"
	}
	p := float64(a-b) / float64(b) * 100
	s := fmt.Sprintf("%+.1f%%", p)
	if s == "+0.0%" || s == "-0.0%" {
		s = fmt.Sprintf("%+.3f%%", p)
	}
	return strings.Replace(s, "-", "−", 1)
}

func explain(r *ValidateReport) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	s, e := r.Setup, r.Estimate
	d := dimsOf(s)
	sim := observed(r.SimulatedStats)
	phi := s.Model.NumParams()
	el := fmt.Sprintf("%d-byte", d.e)

	// Model states: bytes a parameter, from requested bytes.
	rate := s.DevicePerParam()
	eightBit := s.Optimizer.EightBit()
	if eightBit { // m and v are a tensor's blocks, not a rate: said apart
		rate.AdamM, rate.AdamV = 0, 0
	}
	var parts []string
	for _, t := range rate.Named() {
		if t.Bytes > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", t.Cat, t.Bytes))
		}
	}
	st := sim[RowModelStates]
	exactly := fmt.Sprintf("exactly %d", rate.Total())
	if st != e.States.Total() {
		exactly = fmt.Sprintf("not %d but %.4f", rate.Total(), float64(st)/float64(phi))
	}
	var rounded int64
	for _, c := range []cuda.Category{cuda.Params, cuda.Grads, cuda.Master, cuda.AdamM, cuda.AdamV} {
		rounded += r.SimulatedStats.CategoryAllocated[c].Peak - r.SimulatedStats.CategoryRequested[c].Peak
	}
	if frozen := s.Model.NumFrozen(); frozen > 0 || eightBit {
		// A fine-tune: the rate is a trained parameter's, the frozen
		// weights beside them at the working width; 8-bit states: the
		// rate is without m and v, said beside it.
		trained := phi - frozen
		if st == e.States.Total() {
			exactly = "exactly that"
		} else {
			exactly = fmt.Sprintf("%s bytes, not %s", model.Comma(st), model.Comma(e.States.Total()))
		}
		weights := fmt.Sprintf("at %d bytes × %s = %s bytes", s.Precision.Size(), model.Comma(frozen), model.Comma(e.States.Frozen))
		if q := s.Model.Quantize; q != model.QuantNone {
			codes, state := s.Model.QuantBytes()
			nq := s.Model.NumQuantized()
			weights = fmt.Sprintf("at %d bytes × %s and the blocks' %s linear weights in %s, %s bytes of codes (4 bits a weight) and %s of quantization state (its scales, %.4f bits a weight), %s bytes in all",
				s.Precision.Size(), model.Comma(frozen-nq), model.Comma(nq), q, model.Comma(codes), model.Comma(state), 8*float64(state)/float64(nq), model.Comma(e.States.Frozen+e.States.QuantState))
		}
		for _, c := range []cuda.Category{cuda.Frozen, cuda.QuantState} {
			rounded += r.SimulatedStats.CategoryAllocated[c].Peak - r.SimulatedStats.CategoryRequested[c].Peak
		}
		var also []string
		if eightBit {
			also = append(also, fmt.Sprintf("%s's m and v in 8 bits, %s bytes each (a byte a parameter and an fp32 scale a block of %d of each tensor, a tensor under %s values in fp32, as bitsandbytes keeps them)",
				s.Optimizer, model.Comma(e.States.AdamM), cuda.Block8, model.Comma(model.Min8bitSize)))
		}
		if frozen > 0 {
			also = append(also, fmt.Sprintf("the frozen weights (%s) %s, with no gradient and no optimizer state", s.Model.FrozenBy(), weights))
		}
		add("model states: %d bytes a trained parameter (%s) × %s trained parameters, and %s: %s bytes; the simulation requests %s, one flat buffer a category, which the allocator rounds up by %s bytes in all",
			rate.Total(), strings.Join(parts, " + "), model.Comma(trained), strings.Join(also, ", and "),
			model.Comma(e.States.Total()), exactly, model.Comma(rounded))
	} else {
		add("model states: %d bytes a parameter (%s) × Φ = %s parameters = %s bytes, as every formula counts them; the simulation requests %s bytes a parameter (%s bytes), one flat buffer a category, which the allocator rounds up by %s bytes in all",
			rate.Total(), strings.Join(parts, " + "), model.Comma(phi), model.Comma(e.States.Total()), exactly, model.Comma(st), model.Comma(rounded))
	}
	if g := sim[cuda.Grads.String()] - e.States.Grads; s.Offload == model.OffloadParams && g > 0 {
		add("grads peak at the formula's plus %s: ZeRO-3's bucket of a unit's gradients in flight until its reduction, which one rank runs too when it gathers its weights from host memory; comm, %s, is each unit's weight shard copied up before its gather", model.Bytes(g), model.Bytes(sim[cuda.Comm.String()]))
	}
	if s.Offload != model.OffloadNone {
		what := "the optimizer offloaded: the fp32 master weights, m and v (12 bytes a parameter, %s) are in host memory with copies of the gradients and 16-bit weights: the offload device's table above"
		if s.Offload == model.OffloadParams {
			what = "the optimizer and the weights offloaded: the fp32 master weights, m and v (12 bytes a parameter, %s) and the 16-bit weights' shard are in host memory with a copy of the gradients: the offload device's table above"
		}
		add(what, model.Bytes(e.Offloaded.Master+e.Offloaded.AdamM+e.Offloaded.AdamV))
	}
	if n := mainGradsNote(s); n != "" {
		add("%s: %s more than 16-bit gradients; each backward kernel writes its 16-bit gradient into a temporary, added into them", n, model.Bytes(2*phi))
	}

	// Activations: the implementation-exact formula against the simulation,
	// then each published formula kind by kind.
	simAct := sim[cuda.Activations.String()]
	ex, hasExact := e.Activation(model.Exact)
	if hasExact {
		if ex.Total == simAct {
			add("activations, %s: equal to the simulation byte for byte (%s bytes, peaking at %s): the formula follows the tensors this %s's ops keep and the executor's schedule", model.Exact, model.Comma(simAct), ex.At, kindOf(s.Model))
		} else {
			add("activations, %s: %s off the simulation (%s vs %s bytes): model/exact.go no longer follows the implementation", model.Exact, signed(ex.Total-simAct), model.Comma(ex.Total), model.Comma(simAct))
		}
	}
	tk, _ := formulaKinds(e, model.Exact)
	// The head (final layer norm, logits) is alive only until the
	// backward pass begins.
	head := ex.At.Kind == model.EndOfForward
	for _, f := range []model.Formula{model.ZeROPaper, model.Korthikanti} {
		fk, ok := formulaKinds(e, f)
		if !ok || !hasExact {
			continue
		}
		fa := e.ActivationBytes(f)
		add("activations, %s: %s (%s) against the simulation; by kind of tensor, %s vs trainmem at its peak (%s):", f, Percent(fa, simAct), signed(fa-simAct), f, ex.At)
		for kind := range model.NumTensorKinds {
			if fk.by[kind].Bytes == tk.by[kind].Bytes {
				continue
			}
			add("  %s", kindLine(kind, f, fk.by[kind], tk.by[kind], d, s, ex.At, el, head))
		}
		if fk.other != tk.other {
			add("  unclassified %s: %s's terms hold %s beyond their kinds of tensor, trainmem's %s", signed(fk.other-tk.other), f, bt(fk.other), bt(tk.other))
		}
		if rest := ex.Total - simAct; rest != 0 {
			add("  and %s between trainmem's formula and the simulation (above)", signed(-rest))
		}
	}

	// What no formula models.
	if v := sim[cuda.Temporaries.String()]; v > 0 {
		add("temporaries: %s (their own peak; %s of allocator blocks at the overall peak): values that die inside the forward or backward pass, which no formula models", bt(v), bt(r.SimulatedStats.AtPeak[cuda.Temporaries]))
	}
	if v := sim[cuda.Workspace.String()]; v > 0 {
		m := s.Model
		att := int64(cuda.AttentionScratchLen(s.Seq, m.Hidden, m.Heads, m.KV())) * 4
		ce := int64(cuda.CrossEntropyScratchLen(s.Batch*s.Seq)) * 4
		what := "fp32 score gradients for one sequence (4·a·s²"
		switch {
		case m.Attention == model.AttentionFlash:
			att = int64(cuda.FlashScratchLen(s.Batch, s.Seq, m.Heads)) * 4
			what = "fp32 D = rowsum(dO ⊙ O) of every head's rows, flash attention's (4·a·b·s"
		case m.KV() < m.Heads:
			what = "fp32 score gradients and key or value gradients for one sequence (4·a·s² + 4·s·h·kv/a"
		}
		add("workspace: %s: kernel scratch that no formula models: attention backward's %s = %s) and cross-entropy's per-row losses (4·b·s = %s)", bt(v), what, bt(att), bt(ce))
	}
	if v := sim[RowRounding]; v != 0 {
		add("allocator rounding: %s, %s over the requested peak (peak allocated %s − peak requested %s bytes): every request is rounded up to a multiple of 512 bytes, and a large-pool block is handed out whole when at most 1 MiB would remain after a split",
			bt(v), Percent(sim[RowTotalPeak], sim[RowTotalPeak]-v), model.Comma(sim[RowTotalPeak]), model.Comma(sim[RowTotalPeak]-v))
	}
	at := r.SimulatedStats.AtPeak
	add("total peak: %s; each formula counts model states + activations (%s); at the moment of the peak the allocator holds model states %s, activations %s, temporaries %s and workspace %s (allocator blocks): the formulas miss the temporaries, the workspace and the rounding",
		bt(sim[RowTotalPeak]), formulaTotals(e, sim[RowTotalPeak]),
		bt(at[cuda.Params]+at[cuda.Grads]+at[cuda.Master]+at[cuda.AdamM]+at[cuda.AdamV]), bt(at[cuda.Activations]), bt(at[cuda.Temporaries]), bt(at[cuda.Workspace]))
	if v := sim[RowCache]; v > 0 {
		add("reserved − allocated: %s that the caching allocator holds without a live tensor at the peak: freed blocks kept for reuse, and free pieces of split segments (fragmentation; %s inactive split at the end of the step); PyTorch's caching allocator does the same",
			bt(v), bt(r.SimulatedStats.InactiveSplitBytes.Current))
	}

	// Simulated against measured.
	if r.MeasuredStats != nil {
		meas := observed(*r.MeasuredStats)
		var diffs []string
		for _, row := range rowOrder {
			if row == RowContext {
				continue
			}
			if meas[row] != sim[row] {
				diffs = append(diffs, fmt.Sprintf("%s %s (%s)", row, signed(meas[row]-sim[row]), Percent(meas[row], sim[row])))
			}
		}
		if len(diffs) == 0 {
			add("measured on %s = simulated, byte for byte, in every row: the same schedule through the same caching allocator; the shape-only device only leaves out what the allocator does not see", r.Device)
		} else {
			add("measured on %s differs from the simulation: %s: the device's allocator did not follow the shape-only device's decisions", r.Device, strings.Join(diffs, "; "))
		}
		if row := r.Row(RowContext); row != nil && row.Measured != nil {
			add("context and libraries: %s: the device's used memory (%s) minus what the allocator reserved (%s): the CUDA context, cuBLAS and the kernel modules, which no allocator statistic and no formula sees",
				bt(*row.Measured), bt(r.DeviceUsed), bt(r.MeasuredStats.ReservedBytes.Current))
		}
	} else {
		add("not measured: the simulation is exact for this implementation on the host (the measured run adds nothing but timings there); on a GPU the CUDA context adds to the device's used memory")
	}
	return out
}

func formulaTotals(e model.Estimate, peak int64) string {
	var ps []string
	for _, a := range e.Activations {
		t := e.Total(a.Formula)
		ps = append(ps, fmt.Sprintf("%s %s, %s", a.Formula, bt(t), Percent(t, peak)))
	}
	return strings.Join(ps, "; ")
}

// kindLine explains one kind's difference between formula f (fk) and
// trainmem at its peak (tk), from the kinds' counts and the setup's sizes.
func kindLine(kind model.TensorKind, f model.Formula, fk, tk model.KindTotal, d dims, s model.Setup, at model.Moment, el string, head bool) string {
	fv, tv := fk.Bytes, tk.Bytes
	diff := signed(fv - tv)
	name := map[model.Formula]string{model.ZeROPaper: "the ZeRO paper", model.Korthikanti: "Korthikanti"}[f]
	switch kind {
	case model.LayerValues:
		if tk.Count*d.nh != tv { // an MLP whose width is no multiple of h
			return fmt.Sprintf("layer values %s: %s counts %d values of s·b·h a layer × %s = %s; trainmem holds its blocks' s·b·h values and their MLP's %d-wide ones in %s values = %s",
				diff, name, perLayer(fk), plural(fk.Layers, "layer"), bt(fv), s.Model.FFNWidth(), el, bt(tv))
		}
		return fmt.Sprintf("layer values %s: %s counts %d values of s·b·h a layer × %s = %s; trainmem holds %d s·b·h tensors of %s values = %s (%s)",
			diff, name, perLayer(fk), plural(fk.Layers, "layer"), bt(fv), tk.Count, el, bt(tv), valuesNote(tk.Count, s, at))
	case model.Scores:
		if fk.Count == 0 {
			return fmt.Sprintf("attention scores %s: %s has no attention-score term; trainmem keeps the softmax probabilities, a·s²·b·e = %s a layer, × %d = %s",
				diff, name, bt(d.P), tk.Count, bt(tv))
		}
		return fmt.Sprintf("attention scores %s: %s keeps %s a·s²·b·e copies a layer (the softmax output and its dropout output) × %d = %s; trainmem keeps the probabilities once (no dropout) × %d = %s",
			diff, name, number(perLayer(fk)), fk.Layers, bt(fv), tk.Count, bt(tv))
	case model.Masks:
		var where string
		switch per := 2*d.sbh + d.as2b; {
		case s.Model.Attention == model.AttentionFlash:
			where = fmt.Sprintf("2·s·b·h a layer (attention and MLP outputs; with flash attention no mask of the probabilities) × %d", fk.Layers)
		case s.Checkpoint.Kind == model.CheckpointSelective:
			where = fmt.Sprintf("2·s·b·h a layer (attention and MLP outputs) × %d, a·s²·b for the one layer whose scores are recomputed", fk.Layers)
		default:
			where = fmt.Sprintf("2·s·b·h + a·s²·b = %s a layer (attention and MLP outputs, attention probabilities) × %d", bt(per), fk.Layers)
		}
		return fmt.Sprintf("dropout masks %s: %s counts 1-byte masks, %s, and s·b·h after the embedding: %s; this %s has no dropout", diff, name, where, bt(fv), kindOf(s.Model))
	case model.Statistics:
		block, final := statistics(s)
		label, what := "layer-norm statistics", "each layer norm's row mean and 1/std"
		if s.Model.Norm == model.NormRMS {
			label, what = "RMSNorm statistics", "each RMSNorm's row 1/rms"
		}
		if s.Model.Attention == model.AttentionFlash {
			label, what = "statistics", what+" and flash attention's row log-sum-exp of each head (a·s·b values)"
		}
		return fmt.Sprintf("%s %s: trainmem keeps %s in fp32 for the backward pass, %d·s·b = %s a layer and %d·s·b for the final one, %s at its peak; no formula counts them",
			label, diff, what, block/d.N, bt(block), final/d.N, bt(tv))
	case model.Checkpoints:
		return fmt.Sprintf("checkpoints %s: %s keeps ceil(L/K) = %d layer inputs (e·s·b·h each) = %s; trainmem holds %d at its peak (the embedding output and the segment outputs whose backward has not run) = %s",
			diff, name, fk.Count, bt(fv), tk.Count, bt(tv))
	case model.Outside:
		if fk.Count == 0 {
			return fmt.Sprintf("outside the layers %s: %s counts no embedding or head; trainmem holds %s", diff, name, outsideTrainmem(tv, d, s, head))
		}
		return fmt.Sprintf("outside the layers %s: %s counts the final layer norm's and the output projection's inputs (2·e·s·b·h = %s) and fp32 logits (4·s·b·V = %s); trainmem holds %s",
			diff, name, bt(2*d.nh), bt(4*d.N*d.V), outsideTrainmem(tv, d, s, head))
	case model.TokenIDs:
		switch tv {
		case 2 * 4 * d.N:
			return fmt.Sprintf("token ids and targets %s: trainmem keeps the int32 inputs and targets (4·s·b each, %s) for the embedding's and the loss's backward; no formula counts them", diff, bt(tv))
		case 4 * d.N:
			if wte, ok := s.Model.ParamByName("wte"); ok && wte.Frozen {
				return fmt.Sprintf("token ids and targets %s: trainmem keeps the int32 targets (4·s·b, %s) for the loss's backward; the token ids, which no backward op of a frozen embedding reads, only until a recomputation of the first block needs them; no formula counts them", diff, bt(tv))
			}
			return fmt.Sprintf("token ids and targets %s: trainmem keeps the int32 token ids (4·s·b, %s) for the embedding's backward; the targets, which the loss's backward reads, are freed by then; no formula counts them", diff, bt(tv))
		}
		return fmt.Sprintf("token ids and targets %s: trainmem keeps %s of int32 ids (4·s·b each); no formula counts them", diff, bt(tv))
	case model.Adapters:
		return fmt.Sprintf("LoRA adapters %s: trainmem keeps each adapted projection's down projection x·Aᵀ (r = %d values a row) for B's gradient, %s; no published formula counts them (x itself, A's gradient's input, is the layer's input, counted above)",
			diff, s.Model.LoRA.Rank, bt(tv))
	}
	return fmt.Sprintf("tensors of kind %d %s: %s holds %s, trainmem %s", kind, diff, name, bt(fv), bt(tv))
}

// perLayer is a kind's tensors a layer.
func perLayer(k model.KindTotal) int64 {
	if k.Layers == 0 {
		return k.Count
	}
	return k.Count / k.Layers
}

// number is a small count in words.
func number(n int64) string {
	if words := []string{"no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"}; n >= 0 && n < int64(len(words)) {
		return words[n]
	}
	return fmt.Sprint(n)
}

// valuesNote says which s·b·h tensors trainmem holds at its peak (n of
// them, at): its block's values in every kept layer, fewer where the peak
// is a recomputation.
func valuesNote(n int64, s model.Setup, at model.Moment) string {
	perBlock, beforeProbs := blockValues(s)
	m := s.Model
	norms, mlp := "both layer-norm outputs", "the MLP's 4h-wide input and GELU output"
	if m.Norm == model.NormRMS {
		norms = "both RMSNorm outputs"
	}
	if m.MLP == model.MLPSwiGLU {
		mlp = fmt.Sprintf("the MLP's gate and up projections (%d wide each) and SwiGLU's output", m.FFNWidth())
	} else if m.FFNWidth() != 4*m.Hidden {
		mlp = fmt.Sprintf("the MLP's %d-wide input and GELU output", m.FFNWidth())
	}
	qkv := "q, k, v"
	if kv := m.KV(); kv < m.Heads {
		qkv = fmt.Sprintf("q and the %d key and value heads' k and v (%d wide each)", kv, kv*m.HeadDim())
	}
	kept := fmt.Sprintf("%d a kept layer: %s, the attention output, %s, the residual stream after each half, %s", perBlock, qkv, norms, mlp)
	switch {
	case n == 0:
		return "none at its peak, " + at.String() + ": the layers' values are dropped, and recomputed only once the backward pass has freed the head, which the formulas count beside a recomputed layer"
	case at.Kind == model.RecomputedSegment:
		return kept + "; the recomputed segment's last output is already freed: the later segments' backward, which read it, has run"
	case at.Kind == model.RecomputedProbs:
		return kept + fmt.Sprintf(", in every layer but the last, whose backward has begun: of it remain the %d values its attention probabilities are recomputed from (its ln1 output and qkv)", beforeProbs)
	}
	return kept
}

// blockValues counts the s·b·h values one of trainmem's blocks keeps, and
// those it keeps before its attention probabilities.
func blockValues(s model.Setup) (all, beforeProbs int64) {
	kept, err := s.KeptTensors()
	if err != nil {
		return 0, 0
	}
	probs := false
	for _, t := range kept.Block {
		for _, p := range t.Parts {
			switch p.Kind {
			case model.LayerValues:
				all += p.Count
				if !probs {
					beforeProbs += p.Count
				}
			case model.Scores:
				probs = true
			}
		}
	}
	return all, beforeProbs
}

// statistics is the bytes of statistics a block of trainmem's keeps, and
// the head.
func statistics(s model.Setup) (block, head int64) {
	kept, err := s.KeptTensors()
	if err != nil {
		return 0, 0
	}
	sum := func(ts []model.Term) (n int64) {
		for _, t := range ts {
			for _, p := range t.Parts {
				if p.Kind == model.Statistics {
					n += p.Bytes
				}
			}
		}
		return n
	}
	return sum(kept.Block), sum(kept.Head)
}

// outsideTrainmem describes what trainmem holds outside the layers at its
// peak: the embedding output (a checkpoint under block policies, counted
// there), and the head (the final layer norm's output and the logits) unless
// the backward pass has freed it.
func outsideTrainmem(tv int64, d dims, s model.Setup, head bool) string {
	// What the embedding and the head keep, from the terms the backward
	// pass reads (a frozen head keeps no projection input, a frozen
	// embedding no output).
	outside := map[string]bool{}
	if kept, err := s.KeptTensors(); err == nil {
		for _, ts := range [][]model.Term{kept.Embed, kept.Head} {
			for _, t := range ts {
				for _, p := range t.Parts {
					if p.Kind == model.Outside {
						outside[t.Name] = true
					}
				}
			}
		}
	}
	var parts []string
	if d.k == 0 && outside["embedding"] {
		parts = append(parts, fmt.Sprintf("the embedding output (e·s·b·h = %s)", bt(d.nh)))
	}
	if head {
		var hs []string
		if outside["final_layer_norm"] {
			hs = append(hs, fmt.Sprintf("the final %s's output (the projection's input, e·s·b·h = %s)", normWord(s.Model), bt(d.nh)))
		}
		if outside["logits"] {
			hs = append(hs, fmt.Sprintf("%s logits (e·s·b·V = %s)", s.Precision, bt(d.N*d.V*d.e)))
		}
		parts = append(parts, strings.Join(hs, " and "))
	} else {
		parts = append(parts, "no head: the backward pass has freed the final "+normWord(s.Model)+"'s output and the logits before the recomputation")
	}
	return fmt.Sprintf("%s: %s", bt(tv), strings.Join(parts, "; "))
}

// kindOf names the kind of model in an explanation: GPT-2, or a model of
// other blocks.
func kindOf(m model.Config) string {
	if m.Norm == model.NormLayer && m.MLP == model.MLPGELU && m.Positions == model.PosLearned {
		return "GPT-2"
	}
	return "model"
}

// normWord names the model's norm: "layer norm" or "RMSNorm".
func normWord(m model.Config) string {
	if m.Norm == model.NormRMS {
		return "RMSNorm"
	}
	return "layer norm"
}
