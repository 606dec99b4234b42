package bench

// The ranks' tables: each rank's memory per category beside the ZeRO
// paper's model states, and the bytes each rank sends and receives in a
// step (simulate's and validate's over ranks).

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/train"
	"trainmem/zero"
)

// writeSimulatedRanks says which ranks a group too large to simulate whole
// was simulated in.
func writeSimulatedRanks(w io.Writer, n int, rs []zero.RankResult) {
	if len(rs) == n {
		return
	}
	var names []string
	for _, rr := range rs {
		names = append(names, fmt.Sprint(rr.Rank))
	}
	fmt.Fprintf(w, "ranks simulated: %s; every other rank's buffers have rank 2's sizes, and the ends of the chains and the ring's uneven blocks, which these ranks cover, are what makes a rank's traffic its own\n", strings.Join(names, ", "))
}

// rankPeaks says what the per-rank table's columns hold.
const rankPeaks = "each rank's peak per category in requested bytes (the tensors' sizes), its peak requested (the total the memory viewer's timeline peaks at), peak allocated (the allocator's 512-byte blocks) and peak reserved (its segments)"

// rankCategories are the columns of the per-rank table.
var rankCategories = []cuda.Category{cuda.Params, cuda.Grads, cuda.Master, cuda.AdamM, cuda.AdamV,
	cuda.Activations, cuda.Temporaries, cuda.Workspace, cuda.Gathered, cuda.Comm}

// writeRanks is WriteText over ranks.
func (r *SimulateReport) writeRanks(w io.Writer) error {
	s := r.Setup
	lay := zero.LayoutOf(s)
	WriteHeader(w, s, fmt.Sprintf("%s × %s", model.Comma(int64(lay.Size())), r.Device))
	fmt.Fprintf(w, "setting %s over %s\n", r.Setting, ranksText(s))
	writeTensorSplit(w, s)
	writePipelineSplit(w, s)
	writeSimulatedRanks(w, lay.Size(), r.Ranks)
	fmt.Fprintf(w, "simulated %d steps in %v; the last step, %s:\n\n", r.Steps, r.Elapsed.Round(time.Millisecond), rankPeaks)
	if err := writeRankTables(w, r.Setup, r.Setting, r.Ranks, r.States, false); err != nil {
		return err
	}
	writeOffload(w, r.Setup, "simulated rank 0", r.Ranks[0].Record.Offload, nil)
	r.writeRankTimes(w)
	return nil
}

// writeTensorSplit says, with tensor parallelism, what a rank holds and
// how the ranks are numbered.
func writeTensorSplit(w io.Writer, s model.Setup) {
	if s.TP == 1 {
		return
	}
	part, err := s.Model.TensorRank(s.TP, 0)
	if err != nil {
		return
	}
	_, rows := part.Tensor.VocabRows(s.Model.Vocab)
	fmt.Fprintf(w, "tensor  each rank holds 1/%d of every block's heads and MLP channels and about 1/%d of the vocabulary (rank 0: %s rows, %s parameters of %s); ranks are numbered tensor rank fastest, then data rank (Megatron-LM's order)\n",
		s.TP, s.TP, model.Comma(int64(rows)), model.Comma(part.NumParams()), model.Comma(s.Model.NumParams()))
}

// writePipelineSplit says, with pipeline stages, what each stage holds,
// its micro-batches and the schedule's bubble.
func writePipelineSplit(w io.Writer, s model.Setup) {
	if s.PP == 1 {
		return
	}
	m := max(s.MicroBatches, 1)
	fmt.Fprintf(w, "pipeline %d stages of the %d blocks (L/P each, the first L mod P one more), the embedding on stage 0, the head and the loss on stage %d", s.PP, s.Model.Layers, s.PP-1)
	if !s.Model.Untied {
		fmt.Fprint(w, " with a copy of the tied token embedding")
	}
	fmt.Fprintf(w, "; %s of %d a step in %s's order, an ideal bubble of (P-1)/(M+P-1) = %.1f%% of a step; ranks are numbered tensor rank fastest, then data rank, then stage (Megatron-LM's order)\n",
		microBatches(m), s.Batch, s.Pipeline, 100*float64(s.PP-1)/float64(m+s.PP-1))
	if s.Model.Layers%s.PP == 0 {
		return
	}
	// Uneven stages: the schedule's bubble with each stage's passes as
	// long as its blocks (a backward pass twice its forward).
	fwd, bwd := make([]float64, s.PP), make([]float64, s.PP)
	for r := range fwd {
		_, n := model.StageBlocks(s.Model.Layers, s.PP, r)
		fwd[r], bwd[r] = float64(n), 2*float64(n)
	}
	var shares []string
	for r, b := range s.Pipeline.Bubble(m, fwd, bwd) {
		shares = append(shares, fmt.Sprintf("stage %d %.1f%%", r, 100*b))
	}
	fmt.Fprintf(w, "         the stages are uneven: with each stage's passes as long as its blocks, the schedule idles %s of the step\n", strings.Join(shares, ", "))
}

// writeStages writes each pipeline stage's blocks, parameters and
// micro-batches in flight (counted as the stage ran: the most whose
// forward pass had run and backward pass had not) and, measured, the time
// it waited on its neighbours.
func writeStages(w io.Writer, s model.Setup, ranks []zero.RankResult, measured bool) error {
	if s.PP == 1 {
		return nil
	}
	lay := zero.LayoutOf(s)
	fmt.Fprintln(w, "\nper pipeline stage (its ranks' first):")
	var t Table
	head := []string{"stage", "ranks", "blocks", "parameters", "in flight", "peak activations"}
	if measured {
		head = append(head, "waited", "of the step")
	}
	t.Add(head...)
	seen := map[int]bool{}
	for _, rr := range ranks {
		st := lay.Coord(rr.Rank)[zero.PipelineAxis]
		if seen[st] {
			continue
		}
		seen[st] = true
		part, err := s.Model.TensorRank(s.TP, lay.Coord(rr.Rank)[zero.TensorAxis])
		if err == nil {
			part, err = part.PipelineStage(s.PP, st)
		}
		if err != nil {
			return err
		}
		var members []int
		for r := range lay.Size() {
			if lay.Coord(r)[zero.PipelineAxis] == st {
				members = append(members, r)
			}
		}
		blocks := fmt.Sprintf("%d-%d", part.Stage.Lo, part.Stage.Lo+part.Layers-1)
		span := fmt.Sprint(members[0])
		if len(members) > 1 {
			span = fmt.Sprintf("%d-%d", members[0], members[len(members)-1])
		}
		row := []string{fmt.Sprint(st), span, blocks, model.Comma(part.NumParams()),
			fmt.Sprint(rr.Record.InFlight), model.GiB(rr.Stats.CategoryRequested[cuda.Activations].Peak)}
		if measured {
			share := "-"
			if rr.Record.StepMs > 0 {
				share = fmt.Sprintf("%.1f%%", 100*rr.Record.BubbleMs/rr.Record.StepMs)
			}
			row = append(row, fmt.Sprintf("%.1f ms", rr.Record.BubbleMs), share)
		}
		t.Add(row...)
	}
	return t.Write(w)
}

// writeRankTables writes each rank's peaks per category (ranks alike
// folded into one row) with the ZeRO paper's model states (nil: not
// counted) beside them, then each rank's traffic in the last step.
func writeRankTables(w io.Writer, s model.Setup, set zero.Setting, ranks []zero.RankResult, states *model.States, measured bool) error {
	var t Table
	head := []string{"rank"}
	for _, c := range rankCategories {
		head = append(head, c.String())
	}
	t.Add(append(head, "peak requested", "peak allocated", "peak reserved")...)
	for _, g := range alikeRanks(ranks, func(x, y zero.RankResult) bool { return x.Stats == y.Stats }) {
		st := ranks[g.first].Stats
		row := []string{g.name}
		for _, c := range rankCategories {
			row = append(row, model.GiB(st.CategoryRequested[c].Peak))
		}
		t.Add(append(row, model.GiB(st.RequestedBytes.Peak), model.GiB(st.AllocatedBytes.Peak), model.GiB(st.ReservedBytes.Peak))...)
	}
	if st := states; st != nil {
		t.Add("ZeRO paper", model.GiB(st.Params), model.GiB(st.Grads), model.GiB(st.Master), model.GiB(st.AdamM), model.GiB(st.AdamV), "-", "-", "-", "-", "-", "-", "-", "-")
	}
	if err := t.Write(w); err != nil {
		return err
	}
	switch {
	case states != nil && set.Stage == 0:
		fmt.Fprintln(w, "  ZeRO paper: Rajbhandari et al. 2020, Section 3.1: every rank holds the 2Φ + 2Φ + KΦ bytes of the model states")
	case states != nil:
		fmt.Fprintf(w, "  ZeRO paper: Rajbhandari et al. 2020, Section 3.1 and Table 1 (ZeRO-%d over N = %d, ceil(Φ/N) parameters a shard); trainmem pads a sharded buffer to N·ceil(Φ/N)\n", set.Stage, s.Ranks)
	default:
		fmt.Fprintln(w, "  parameter server: rank 0 alone holds the optimizer states (master, adam_m, adam_v); the ZeRO paper does not count this setting")
	}
	if n := mainGradsNote(s); states != nil && n != "" {
		fmt.Fprintln(w, "  "+n)
	}
	switch {
	case states != nil && s.PP > 1:
		fmt.Fprintf(w, "  Φ is the first stage's part of the model (tensor rank 0's), %s parameters (the ZeRO paper's model parallelism: each data-parallel group shards its own part)\n", model.Comma(rankParams(s)))
	case states != nil && s.TP > 1:
		fmt.Fprintf(w, "  Φ is a tensor-parallel rank's part of the model, %s parameters (the ZeRO paper's model parallelism: each data-parallel group shards its own part)\n", model.Comma(rankParams(s)))
	}
	if err := writeStages(w, s, ranks, measured); err != nil {
		return err
	}
	fmt.Fprintln(w, "\ntraffic per rank in the last step (the ring algorithm's bytes):")
	t = Table{}
	if s.TP == 1 && s.PP == 1 {
		t.Add("rank", "collective", "calls", "sent", "received")
		for _, g := range alikeRanks(ranks, func(x, y zero.RankResult) bool { return x.Traffic == y.Traffic }) {
			for k, tr := range ranks[g.first].Traffic {
				if tr.Calls > 0 {
					t.Add(g.name, zero.Collective(k).String(), model.Comma(tr.Calls), model.Bytes(tr.SentBytes), model.Bytes(tr.RecvBytes))
				}
			}
		}
		return t.Write(w)
	}
	t.Add("rank", "group", "collective", "calls", "sent", "received")
	for _, g := range alikeRanks(ranks, func(x, y zero.RankResult) bool { return x.AxisTraffic == y.AxisTraffic }) {
		for _, a := range []zero.Axis{zero.TensorAxis, zero.DataAxis, zero.PipelineAxis} {
			for k, tr := range ranks[g.first].AxisTraffic[a] {
				if tr.Calls > 0 {
					t.Add(g.name, a.String(), zero.Collective(k).String(), model.Comma(tr.Calls), model.Bytes(tr.SentBytes), model.Bytes(tr.RecvBytes))
				}
			}
		}
	}
	return t.Write(w)
}

// rankGroup is a run of consecutive ranks that are alike.
type rankGroup struct {
	first int
	name  string
}

func alikeRanks(rs []zero.RankResult, alike func(x, y zero.RankResult) bool) []rankGroup {
	var out []rankGroup
	for i := 0; i < len(rs); {
		j := i + 1
		for j < len(rs) && alike(rs[j], rs[i]) {
			j++
		}
		name := fmt.Sprint(rs[i].Rank)
		if j-i > 1 {
			name = fmt.Sprintf("%d-%d", rs[i].Rank, rs[j-1].Rank)
		}
		out = append(out, rankGroup{first: i, name: name})
		i = j
	}
	return out
}

// writeRanksJSON is WriteJSON over ranks.
func (r *SimulateReport) writeRanksJSON(w io.Writer) error {
	type trafficDoc struct {
		Collective string `json:"collective"`
		zero.Traffic
	}
	type rankDoc struct {
		Rank               int                     `json:"rank"`
		PeakRequested      map[cuda.Category]int64 `json:"peak_requested"`
		PeakRequestedBytes int64                   `json:"peak_requested_bytes"`
		PeakAllocatedBytes int64                   `json:"peak_allocated_bytes"`
		PeakReservedBytes  int64                   `json:"peak_reserved_bytes"`
		Traffic            []trafficDoc            `json:"traffic"`
		// TrafficByGroup is Traffic by the rank's tensor and data groups,
		// with more than one tensor-parallel rank.
		TrafficByGroup map[string][]trafficDoc `json:"traffic_by_group,omitempty"`
		// Offload is the rank's offload device under optimizer offload.
		Offload *train.OffloadRecord `json:"offload,omitempty"`
		// Timing is the rank's step replayed in time, on a modelled card
		// over a network.
		Timing *timingDoc `json:"timing,omitempty"`
	}
	doc := struct {
		Model    modelDoc   `json:"model"`
		Setup    setupDoc   `json:"setup"`
		Setting  string     `json:"setting"`
		Capacity int64      `json:"capacity_bytes"`
		Steps    int        `json:"steps"`
		States   *statesDoc `json:"zero_paper_states,omitempty"`
		Ranks    []rankDoc  `json:"ranks"`
		Seconds  float64    `json:"seconds"`
		// Predicted is the step's time over the ranks (the slowest's),
		// with a modelled card and a network.
		Predicted *ranksTimeDoc `json:"predicted,omitempty"`
	}{Model: modelDocOf(r.Setup), Setup: setupDocOf(r.Setup), Setting: strings.ToLower(r.Setting.String()),
		Capacity: r.Capacity, Steps: r.Steps, Seconds: r.Elapsed.Seconds()}
	if st := r.States; st != nil {
		doc.States = ptr(statesDocOf(*st))
	}
	for _, rr := range r.Ranks {
		d := rankDoc{Rank: rr.Rank, PeakRequested: map[cuda.Category]int64{}, PeakRequestedBytes: rr.Stats.RequestedBytes.Peak, PeakAllocatedBytes: rr.Stats.AllocatedBytes.Peak, PeakReservedBytes: rr.Stats.ReservedBytes.Peak, Offload: rr.Record.Offload}
		for _, c := range rankCategories {
			d.PeakRequested[c] = rr.Stats.CategoryRequested[c].Peak
		}
		for k, tr := range rr.Traffic {
			if tr.Calls > 0 {
				d.Traffic = append(d.Traffic, trafficDoc{zero.Collective(k).String(), tr})
			}
		}
		if r.Setup.TP > 1 || r.Setup.PP > 1 {
			d.TrafficByGroup = map[string][]trafficDoc{}
			for _, a := range []zero.Axis{zero.TensorAxis, zero.DataAxis, zero.PipelineAxis} {
				for k, tr := range rr.AxisTraffic[a] {
					if tr.Calls > 0 {
						d.TrafficByGroup[a.String()] = append(d.TrafficByGroup[a.String()], trafficDoc{zero.Collective(k).String(), tr})
					}
				}
			}
		}
		if tm := rr.Timing; tm != nil {
			d.Timing = &timingDoc{StepMs: ms(tm.Step), ComputeMs: ms(tm.Compute), CommMs: ms(tm.Comm), WaitMs: ms(tm.Wait), CommStreamMs: ms(tm.CommStream)}
		}
		doc.Ranks = append(doc.Ranks, d)
	}
	doc.Predicted = r.ranksTime()
	return writeJSON(w, doc)
}

// timingDoc is a rank's replayed step, in milliseconds.
type timingDoc struct {
	StepMs       float64 `json:"step_ms"`
	ComputeMs    float64 `json:"compute_ms"`
	CommMs       float64 `json:"comm_exposed_ms"`
	WaitMs       float64 `json:"waited_ms"`
	CommStreamMs float64 `json:"comm_stream_ms"`
}

// ranksTimeDoc is the simulated step's time over the ranks.
type ranksTimeDoc struct {
	GPU             string  `json:"gpu"`
	Network         string  `json:"network"`
	StepMs          float64 `json:"step_ms"`
	TokensPerSecond float64 `json:"tokens_per_second"`
	MFU             float64 `json:"mfu"`
	HFU             float64 `json:"hfu"`
}

// ranksTime is the step over the ranks: the slowest rank's replayed step,
// the run's tokens in it, and its model and hardware FLOPs over the GPUs'
// peak (nil without timings).
func (r *SimulateReport) ranksTime() *ranksTimeDoc {
	var step time.Duration
	for _, rr := range r.Ranks {
		if rr.Timing == nil {
			return nil
		}
		step = max(step, rr.Timing.Step)
	}
	if r.Roofline == nil || step <= 0 || r.Setting.Network == nil {
		return nil
	}
	s := r.Setup
	d := &ranksTimeDoc{GPU: r.Roofline.Name, Network: r.Setting.Network.Name, StepMs: ms(step)}
	steps := float64(max(1, s.MicroBatches)) * float64(s.Ranks)
	d.TokensPerSecond = float64(s.Batch) * float64(s.Seq) * steps / step.Seconds()
	if c, err := s.Check(); err == nil {
		if e, err := c.Estimate(); err == nil {
			peak := r.Roofline.PeakFLOPS(train.WorkingDType(s.Precision)) * float64(zero.LayoutOf(s).Size())
			d.MFU = e.Recompute.Step * steps / step.Seconds() / peak
			d.HFU = (e.Recompute.Step + e.Recompute.Recompute) * steps / step.Seconds() / peak
		}
	}
	return d
}

// writeRankTimes writes each simulated rank's replayed step and the step
// over the ranks (nothing without timings).
func (r *SimulateReport) writeRankTimes(w io.Writer) {
	d := r.ranksTime()
	if d == nil {
		return
	}
	fmt.Fprintf(w, "\npredicted step on %s over %s: %s (the slowest rank's), %.0f tokens/s, MFU %.1f%%, HFU %.1f%%\n", d.GPU, d.Network, msText(d.StepMs), d.TokensPerSecond, 100*d.MFU, 100*d.HFU)
	var t Table
	t.Add("  rank", "step", "kernels", "collectives", "waited", "comm stream busy")
	prev := ""
	for _, rr := range r.Ranks {
		tm := rr.Timing
		row := []string{msText(ms(tm.Step)), msText(ms(tm.Compute)), msText(ms(tm.Comm)), msText(ms(tm.Wait)), msText(ms(tm.CommStream))}
		key := strings.Join(row, "|")
		if key == prev {
			continue // alike ranks, one row
		}
		prev = key
		t.Add(append([]string{"  " + strconv.Itoa(rr.Rank)}, row...)...)
	}
	t.Write(w)
	fmt.Fprintln(w, "  each rank's step replayed in time: its kernels on the card's kernel model, collectives holding it (tensor parallelism's, the last gradient reduction, the weights' gather) and those it waited for other ranks to reach, the pipeline's sends; DDP's and ZeRO-2's bucket reductions and ZeRO-3's prefetched gathers on the communication stream, overlapping the kernels until waited for; a model, not a measurement")
}
