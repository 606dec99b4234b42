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

// Kinds of activation tensors, in explanation order.
const (
	kindValues      = iota // s·b·h-sized values inside the transformer layers
	kindScores             // attention scores, a·s²·b-sized
	kindMasks              // 1-byte dropout masks
	kindStats              // layer-norm statistics (fp32 mean and 1/std a row)
	kindCheckpoints        // layer inputs kept for recomputation
	kindOutside            // the embedding output and the head: final layer norm, logits
	kindIDs                // token ids and targets
	kindOther              // what a formula's terms hold beyond the kinds above (0 when the split is complete)
	numKinds
)

// kinds is one formula's activation bytes split by kind of tensor.
type kinds [numKinds]int64

func (k kinds) total() int64 {
	var t int64
	for _, v := range k {
		t += v
	}
	return t
}

// dims are the setup's sizes in bytes and elements.
type dims struct {
	N, sbh, nh, as2b, P, S, V, L, e int64
	k                               int64 // layers per recomputed segment (0: none, selective)
}

func dimsOf(s model.Setup) dims {
	m := s.Model
	e := s.Precision.Size()
	N := int64(s.Batch) * int64(s.Seq)
	d := dims{N: N, sbh: N * int64(m.Hidden), e: e, V: int64(m.Vocab), L: int64(m.Layers)}
	d.nh = d.sbh * e
	d.as2b = int64(m.Heads) * int64(s.Seq) * int64(s.Seq) * int64(s.Batch)
	d.P = d.as2b * e
	d.S = 16 * N
	d.k = int64(s.Checkpoint.Segment(m.Layers))
	return d
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// zeroKinds splits the ZeRO paper's count: 12·s·b·h values a layer, and
// with block checkpointing one input a segment plus one segment.
func zeroKinds(d dims, total int64) kinds {
	var k kinds
	if d.k > 0 {
		k[kindCheckpoints] = ceilDiv(d.L, d.k) * d.nh
		k[kindValues] = d.k * 12 * d.nh
	} else {
		k[kindValues] = d.L * 12 * d.nh
	}
	k[kindOther] = total - k.total()
	return k
}

// korthikantiKinds splits Korthikanti et al.'s count (one rank, no tensor
// parallelism): a layer is 16·s·b·h values, two a·s²·b·e score tensors and
// 2·s·b·h + a·s²·b bytes of dropout masks; the embedding's dropout mask
// (s·b·h bytes), the final layer norm's and the output projection's inputs
// and fp32 logits lie outside the layers.
func korthikantiKinds(d dims, pol model.Checkpoint, total int64) kinds {
	var k kinds
	masks := 2*d.sbh + d.as2b
	switch {
	case pol.Kind == model.CheckpointSelective:
		k[kindValues] = d.L * 16 * d.nh
		k[kindMasks] = d.L*2*d.sbh + d.as2b
		k[kindScores] = 2 * d.P
	case d.k > 0:
		k[kindCheckpoints] = ceilDiv(d.L, d.k) * d.nh
		k[kindValues] = d.k * 16 * d.nh
		k[kindScores] = d.k * 2 * d.P
		k[kindMasks] = d.k * masks
	default:
		k[kindValues] = d.L * 16 * d.nh
		k[kindScores] = d.L * 2 * d.P
		k[kindMasks] = d.L * masks
	}
	k[kindMasks] += d.sbh
	k[kindOutside] = 2*d.nh + 4*d.N*d.V
	k[kindOther] = total - k.total()
	return k
}

// exactKinds splits the implementation-exact formula's terms at its peak.
func exactKinds(d dims, a model.Activations) kinds {
	var k kinds
	blockT := 16*d.nh + d.P + d.S
	for _, t := range a.Terms {
		switch t.Name {
		case "tokens", "targets":
			k[kindIDs] += t.Bytes
		case "embedding":
			if d.k > 0 {
				k[kindCheckpoints] += t.Bytes // segment 0's input
			} else {
				k[kindOutside] += t.Bytes
			}
		case "ln1_stats", "ln2_stats":
			k[kindStats] += t.Bytes
		case "attention_probs", "recompute_probs":
			k[kindScores] += t.Bytes
		case "ln1", "qkv", "attention_out", "residual1", "ln2", "mlp_fc", "mlp_gelu", "block_output":
			k[kindValues] += t.Bytes
		case "final_layer_norm":
			k[kindStats] += 8 * d.N
			k[kindOutside] += t.Bytes - 8*d.N
		case "logits":
			k[kindOutside] += t.Bytes
		case "checkpoints":
			k[kindCheckpoints] += t.Bytes
		case "blocks_without_probs":
			n := t.Bytes / (16*d.nh + d.S)
			k[kindStats] += n * d.S
			k[kindValues] += t.Bytes - n*d.S
		case "recompute_segment":
			kj := (t.Bytes + d.nh) / blockT
			k[kindScores] += kj * d.P
			k[kindStats] += kj * d.S
			k[kindValues] += t.Bytes - kj*(d.P+d.S)
		default:
			k[kindOther] += t.Bytes
		}
	}
	return k
}

// formulaKinds splits formula f's activations in e.
func formulaKinds(e model.Estimate, f string) (kinds, bool) {
	d := dimsOf(e.Setup)
	for _, a := range e.Activations {
		if a.Formula != f {
			continue
		}
		switch f {
		case model.ZeROPaper:
			return zeroKinds(d, a.Total), true
		case model.Korthikanti:
			return korthikantiKinds(d, e.Setup.Checkpoint, a.Total), true
		case model.Exact:
			return exactKinds(d, a), true
		}
	}
	return kinds{}, false
}

func exactActivations(e model.Estimate) (model.Activations, bool) {
	for _, a := range e.Activations {
		if a.Formula == model.Exact {
			return a, true
		}
	}
	return model.Activations{}, false
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

// count is n·unit as "n×" with the unit's name, for whole multiples.
func count(n, unit int64) int64 {
	if unit == 0 {
		return 0
	}
	return n / unit
}

func explain(r *Report) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	s, e := r.Setup, r.Estimate
	d := dimsOf(s)
	sim := observed(r.SimulatedStats)
	phi := s.Model.NumParams()
	el := fmt.Sprintf("%d-byte", d.e)

	// Model states: bytes a parameter, from requested bytes.
	rate := model.PerParam(s.Precision, s.Optimizer)
	var parts []string
	for _, t := range rate.Named() {
		if t.Bytes > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", t.Cat, t.Bytes))
		}
	}
	st := sim[RowModelStates]
	exactly := "exactly"
	if st != e.States.Total() {
		exactly = fmt.Sprintf("NOT %d·Φ but %.4f", rate.Total(), float64(st)/float64(phi))
	}
	var rounded int64
	for _, c := range []cuda.Category{cuda.Params, cuda.Grads, cuda.Master, cuda.AdamM, cuda.AdamV} {
		rounded += r.SimulatedStats.CategoryAllocated[c].Peak - r.SimulatedStats.CategoryRequested[c].Peak
	}
	add("model states: %d bytes a parameter (%s) × Φ = %s parameters = %s bytes, as every formula counts them; the simulation requests %s %d bytes a parameter (%s bytes), one flat buffer a category, which the allocator rounds up by %s bytes in all",
		rate.Total(), strings.Join(parts, " + "), model.Comma(phi), model.Comma(e.States.Total()), exactly, rate.Total(), model.Comma(st), model.Comma(rounded))

	// Activations: the implementation-exact formula against the simulation,
	// then each published formula kind by kind.
	simAct := sim[cuda.Activations.String()]
	ex, hasExact := exactActivations(e)
	if hasExact {
		if ex.Total == simAct {
			add("activations, %s: equal to the simulation byte for byte (%s bytes, peaking at %s): the formula follows the tensors this GPT-2's ops keep and the executor's schedule", model.Exact, model.Comma(simAct), ex.At)
		} else {
			add("activations, %s: %s off the simulation (%s vs %s bytes): model/exact.go no longer follows the implementation", model.Exact, signed(ex.Total-simAct), model.Comma(ex.Total), model.Comma(simAct))
		}
	}
	tk, _ := formulaKinds(e, model.Exact)
	head := false
	for _, t := range ex.Terms {
		head = head || t.Name == "logits"
	}
	for _, f := range []string{model.ZeROPaper, model.Korthikanti} {
		fk, ok := formulaKinds(e, f)
		if !ok || !hasExact {
			continue
		}
		fa := e.ActivationBytes(f)
		add("activations, %s: %s (%s) against the simulation; by kind of tensor, %s vs trainmem at its peak (%s):", f, Percent(fa, simAct), signed(fa-simAct), f, ex.At)
		for kind := range numKinds {
			if fk[kind] == tk[kind] {
				continue
			}
			add("  %s", kindLine(kind, f, fk[kind], tk[kind], d, s, el, head))
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
		att := int64(cuda.AttentionScratchLen(s.Seq, s.Model.Heads)) * 4
		ce := int64(cuda.CrossEntropyScratchLen(s.Batch*s.Seq)) * 4
		add("workspace: %s: kernel scratch that no formula models: attention backward's fp32 score gradients for one sequence (4·a·s² = %s) and cross-entropy's per-row losses (4·b·s = %s)", bt(v), bt(att), bt(ce))
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

// kindLine explains one kind's difference between formula f (fv bytes) and
// trainmem at its peak (tv bytes).
func kindLine(kind int, f string, fv, tv int64, d dims, s model.Setup, el string, head bool) string {
	diff := signed(fv - tv)
	name := map[string]string{model.ZeROPaper: "the ZeRO paper", model.Korthikanti: "Korthikanti"}[f]
	switch kind {
	case kindValues:
		per := int64(16)
		if f == model.ZeROPaper {
			per = 12
		}
		return fmt.Sprintf("layer values %s: %s counts %d values of s·b·h a layer × %s = %s; trainmem holds %d s·b·h tensors of %s values = %s (%s)",
			diff, name, per, plural(count(fv, per*d.nh), "layer"), bt(fv), count(tv, d.nh), el, bt(tv), valuesNote(count(tv, d.nh), d, s))
	case kindScores:
		if f == model.ZeROPaper {
			return fmt.Sprintf("attention scores %s: the ZeRO paper has no attention-score term; trainmem keeps the softmax probabilities, a·s²·b·e = %s a layer, × %d = %s",
				diff, bt(d.P), count(tv, d.P), bt(tv))
		}
		return fmt.Sprintf("attention scores %s: Korthikanti keeps two a·s²·b·e copies a layer (the softmax output and its dropout output) × %d = %s; trainmem keeps the probabilities once (no dropout) × %d = %s",
			diff, count(fv, 2*d.P), bt(fv), count(tv, d.P), bt(tv))
	case kindMasks:
		var where string
		switch per := 2*d.sbh + d.as2b; {
		case s.Checkpoint.Kind == model.CheckpointSelective:
			where = fmt.Sprintf("2·s·b·h a layer (attention and MLP outputs) × %d, a·s²·b for the one layer whose scores are recomputed", d.L)
		default:
			where = fmt.Sprintf("2·s·b·h + a·s²·b = %s a layer (attention and MLP outputs, attention probabilities) × %d", bt(per), count(fv-d.sbh, per))
		}
		return fmt.Sprintf("dropout masks %s: Korthikanti counts 1-byte masks, %s, and s·b·h after the embedding: %s; this GPT-2 has no dropout", diff, where, bt(fv))
	case kindStats:
		return fmt.Sprintf("layer-norm statistics %s: trainmem keeps each layer norm's row mean and 1/std in fp32 for the backward pass, 16·s·b = %s a layer and 8·s·b for the final one, %s at its peak; no formula counts them",
			diff, bt(d.S), bt(tv))
	case kindCheckpoints:
		return fmt.Sprintf("checkpoints %s: %s keeps ceil(L/K) = %d layer inputs (e·s·b·h each) = %s; trainmem holds %d at its peak (the embedding output and the segment outputs whose backward has not run) = %s",
			diff, name, count(fv, d.nh), bt(fv), count(tv, d.nh), bt(tv))
	case kindOutside:
		if f == model.ZeROPaper {
			return fmt.Sprintf("outside the layers %s: the ZeRO paper counts no embedding or head; trainmem holds %s", diff, outsideTrainmem(tv, d, s, head))
		}
		return fmt.Sprintf("outside the layers %s: Korthikanti counts the final layer norm's and the output projection's inputs (2·e·s·b·h = %s) and fp32 logits (4·s·b·V = %s); trainmem holds %s",
			diff, bt(2*d.nh), bt(4*d.N*d.V), outsideTrainmem(tv, d, s, head))
	case kindIDs:
		return fmt.Sprintf("token ids and targets %s: trainmem keeps the int32 inputs and targets (4·s·b each, %s) for the embedding's and the loss's backward; no formula counts them", diff, bt(tv))
	}
	return fmt.Sprintf("unclassified %s: %s's terms hold %s that the split above does not account for, trainmem %s", diff, name, bt(fv), bt(tv))
}

// valuesNote says which s·b·h tensors trainmem holds: 16 a kept layer, less
// or more at a recomputation.
func valuesNote(n int64, d dims, s model.Setup) string {
	const kept = "16 a kept layer: q, k, v, the attention output, both layer-norm outputs, the residual stream after each half, the MLP's 4h-wide input and GELU output"
	switch {
	case n == 0:
		return "none at its peak, the end of the forward pass: the layers' values are dropped, and recomputed only once the backward pass has freed the head, which the formulas count beside a recomputed layer"
	case n%16 == 0:
		return kept
	case d.k > 0 && n%16 == 15:
		return kept + "; the recomputed segment's last output is already freed: the later segments' backward, which read it, has run"
	case s.Checkpoint.Kind == model.CheckpointSelective && n%16 == 4:
		return kept + ", in every layer but the last, whose backward has begun: its ln1 output and qkv remain to recompute its attention probabilities"
	}
	return kept
}

// plural is "n thing" or "n things".
func plural(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// outsideTrainmem describes what trainmem holds outside the layers at its
// peak: the embedding output (a checkpoint under block policies, counted
// there), and the head (the final layer norm's output and the logits) unless
// the backward pass has freed it.
func outsideTrainmem(tv int64, d dims, s model.Setup, head bool) string {
	var parts []string
	if d.k == 0 {
		parts = append(parts, fmt.Sprintf("the embedding output (e·s·b·h = %s)", bt(d.nh)))
	}
	if head {
		parts = append(parts, fmt.Sprintf("the final layer norm's output (the projection's input, e·s·b·h = %s) and %s logits (e·s·b·V = %s)", bt(d.nh), s.Precision, bt(d.N*d.V*d.e)))
	} else {
		parts = append(parts, "no head: the backward pass has freed the final layer norm's output and the logits before the recomputation")
	}
	return fmt.Sprintf("%s: %s", bt(tv), strings.Join(parts, "; "))
}
