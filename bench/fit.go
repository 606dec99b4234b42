package bench

// The fit report: the largest micro-batch, or the fewest ranks, that fit
// in a memory, for every checkpoint policy and ZeRO stage.

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/train"
	"trainmem/zero"
)

// fitCell is one answer of the search.
type fitCell struct {
	policy    model.Checkpoint
	zero      int
	answer    int // micro-batch or ranks by the formula; 0: none fits
	simulated int // the largest micro-batch the simulation fits; -1: not simulated
	est       model.Estimate
	// refused: trainmem runs no such setup (pipelineRefused), so nothing
	// fits in it, whatever the formula says.
	refused bool
}

// pipelineRefused says whether ZeRO stage z is refused with s's pipeline:
// over several ranks (byRanks: any rank count but one, which is alike at
// every stage) a stage adds each micro-batch's gradients into the step's,
// which needs every gradient whole on the rank, and ZeRO-2 and 3 keep
// shards (train.setupMicro refuses them; DeepSpeed's pipeline engine too).
func pipelineRefused(s model.Setup, z int, byRanks bool) bool {
	return s.PP > 1 && z >= 2 && (byRanks || s.Ranks > 1)
}

// refusedNote says why a refused cell has no answer.
const refusedNote = "refused: ZeRO-2 and 3 with a pipeline over several ranks (a stage adds each micro-batch's gradients into the step's, which needs every gradient whole on the rank, and ZeRO-2 and 3 keep shards; DeepSpeed's pipeline engine refuses them too)"

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
	// estimators are DeepSpeed's and Megatron-LM's answers (fewest ranks
	// only); estimatorsNone says why one has none.
	estimators     []estimatorFit
	estimatorsNone []string
}

// Fit searches the answers; byRanks asks for ranks (a parameter-only
// setup always does). The largest micro-batch is also searched by the
// simulation (the real schedule of one rank on a shape-only device of
// memory bytes), so that fit never claims a micro-batch simulate refutes;
// progress, when set, gets a line per cell. The fewest ranks are also
// answered by DeepSpeed's and Megatron-LM's own figures, DeepSpeed's on
// cluster cl. The error is the model's (a shape too large to count).
func Fit(c model.Checked, memory int64, formula model.Formula, byRanks bool, cl model.Cluster, progress io.Writer) (*FitReport, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	s := c.Setup()
	byRanks = byRanks || s.ParamsOnly()
	var err error
	if byRanks {
		// A shape too large to count is refused, not answered with zeros
		// (without --batch, MaxBatch refuses it at batch 1).
		if _, err := c.EstimateBy(formula); err != nil {
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
			t := s.AtStage(z)
			t.Checkpoint = p
			c := fitCell{policy: p, zero: z, simulated: -1}
			if byRanks {
				c.answer, c.est, err = t.MinRanks(memory, formula)
			} else {
				c.answer, c.est, err = t.MaxBatch(memory, formula)
			}
			if err != nil {
				return nil, err
			}
			if pipelineRefused(s, z, byRanks) {
				c.answer, c.refused = 0, true
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
			if pipelineRefused(s, z, false) {
				z = -1 // what fits at --ranks is a stage trainmem refuses
			}
			lowest[p] = fitCell{policy: p, zero: z, answer: s.Ranks, est: e}
		}
	}
	if !s.ParamsOnly() {
		if err := simulateCells(s, memory, cells, byRanks, progress); err != nil {
			return nil, err
		}
	}
	r := &FitReport{Setup: s, Memory: memory, Formula: formula, ByRanks: byRanks, policies: policies, cells: cells, lowest: lowest}
	if byRanks {
		if r.estimators, r.estimatorsNone, err = fitEstimators(s, memory, cl); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// simulateCells finds every cell's simulated answer (the largest
// micro-batch, or with byRanks the fewest ranks), the cells searched side
// by side on the machine's cores (one rank's stages are alike: it is
// searched once a policy).
func simulateCells(s model.Setup, memory int64, cells []fitCell, byRanks bool, progress io.Writer) error {
	var mu sync.Mutex
	// One rank's stages are alike, but for the weights offloaded at
	// ZeRO-3 (gathered from host memory even on one rank).
	alike := func(c fitCell) bool {
		return s.Ranks == 1 && c.zero > 0 && !byRanks && s.AtStage(c.zero).Offload == s.AtStage(0).Offload
	}
	err := onCores(len(cells), func(i int) error {
		c := &cells[i]
		if alike(*c) {
			return nil
		}
		if c.refused {
			c.simulated = 0
			return nil
		}
		t := s.AtStage(c.zero)
		t.Checkpoint = c.policy
		what := "micro-batch"
		var err error
		if byRanks {
			what = "ranks"
			c.simulated, err = simulatedMinRanks(t, memory, c.answer)
		} else {
			c.simulated, err = simulatedMaxBatch(t, memory, c.answer)
		}
		if progress != nil {
			mu.Lock()
			fmt.Fprintf(progress, "fit: simulated %s, ZeRO-%d: %s %d\n", policyName(c.policy, s), c.zero, what, c.simulated)
			mu.Unlock()
		}
		return err
	})
	for i := range cells {
		if alike(cells[i]) {
			cells[i].simulated = cells[i-1].simulated
		}
	}
	return err
}

// onCores calls f(0) to f(n-1), as many at once as the machine has
// cores, and returns their errors joined.
func onCores(n int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	slots := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// simPrefix is a cell's simulated answer before the formula's: "12 / ";
// a rank count that never fits is "-".
func simPrefix(s model.Setup, c fitCell, byRanks bool) string {
	switch {
	case c.simulated < 0:
		return ""
	case c.simulated == 0 && byRanks:
		return "- / "
	}
	return batchText(s, c.simulated, byRanks) + " / "
}

// atLimit reports whether micro-batch n is the largest the setup can have
// (model.MaxFitBatch, or a batch one larger is no valid setup: batch × seq
// past the rows a tensor may have): then the memory did not decide it, and
// it is a bound, not an answer.
func atLimit(s model.Setup, n int) bool {
	if n <= 0 {
		return false
	}
	if n >= model.MaxFitBatch {
		return true
	}
	s.Batch = n + 1
	return s.Validate() != nil
}

// batchText is a micro-batch answer: at the setup's limit it is a bound,
// "≥ N" (the memory holds more than the setup can ask for).
func batchText(s model.Setup, n int, byRanks bool) string {
	if !byRanks && atLimit(s, n) {
		return "≥ " + model.Comma(int64(n))
	}
	return model.Comma(int64(n))
}

// simFits reports whether s's simulation fits a card of memory bytes: the
// single-rank schedule, or rank 0 of a ZeRO setting (every rank's buffers
// have the same sizes) or of a tensor-parallel layout (its part has the
// most rows of the vocabulary), of every pipeline stage.
func simFits(c model.Checked, memory int64) (bool, error) {
	dev := shape.New(memory)
	defer dev.Close()
	var err error
	if s := c.Setup(); zero.LayoutOf(s).Size() == 1 && s.Offload != model.OffloadParams {
		_, _, err = train.Simulate(dev, c, 2, nil)
	} else {
		// Rank 0 of each pipeline stage: the stages hold different layers
		// (the last the head and its logits), and each must fit.
		l := zero.LayoutOf(s)
		for p := 0; p < l.PP && err == nil; p++ {
			var at zero.Coord
			at[zero.PipelineAxis] = p
			d := dev
			if p > 0 {
				d = shape.New(memory)
				defer d.Close()
			}
			_, err = zero.SimulateRank(d, c, zero.Setting{Stage: s.ZeRO}, l.Rank(at), 2)
		}
	}
	var oom *cuda.OutOfMemoryError
	if errors.As(err, &oom) {
		return false, nil
	}
	return err == nil, err
}

// simulatedMaxBatch is the largest micro-batch whose simulation fits a card
// of memory bytes (0: none), searched from the formula's answer hint.
func simulatedMaxBatch(s model.Setup, memory int64, hint int) (int, error) {
	fits := simulatedFits(s, memory, func(t *model.Setup, b int) { t.Batch = b })
	if ok, err := fits(1); !ok || err != nil {
		return 0, err
	}
	last, _, err := edge(1, hint, model.MaxBatch, true, fits)
	return last, err
}

// simulatedMinRanks is the fewest data-parallel ranks, at most
// model.MaxFitRanks, whose simulation (one rank of them) fits a card of
// memory bytes (0: none), searched from the formula's answer hint. A
// rank's memory only shrinks as ranks are added (its shards and staging
// do).
func simulatedMinRanks(s model.Setup, memory int64, hint int) (int, error) {
	fits := simulatedFits(s, memory, func(t *model.Setup, n int) { t.Ranks = n })
	if ok, err := fits(1); ok || err != nil {
		return 1, err
	}
	_, first, err := edge(1, hint, model.MaxFitRanks, false, fits)
	return first, err
}

// simulatedFits is whether s, with set's value n, simulates within memory
// bytes: a setup past what can be counted does not fit.
func simulatedFits(s model.Setup, memory int64, set func(*model.Setup, int)) func(int) (bool, error) {
	return func(n int) (bool, error) {
		t := s
		set(&t, n)
		if t.PP > 1 && t.MicroBatches == 0 {
			// A pipeline runs micro-batches: as many as its stages, the
			// formula's M ≥ P (its first stage holds P micro-batches).
			t.MicroBatches = t.PP
		}
		c, err := t.Check()
		if err != nil {
			return false, nil
		}
		return simFits(c, memory)
	}
}

// edge finds where fits changes from its answer at lo (side) going up, to
// at most most: from hint doubled while the answer stays, then bisected.
// It returns the last n with the answer side and the first without (0
// when the answer stays side up to most).
func edge(lo, hint, most int, side bool, fits func(int) (bool, error)) (last, first int, err error) {
	hi := min(max(hint, lo+1), most)
	for {
		ok, err := fits(hi)
		if err != nil {
			return 0, 0, err
		}
		if ok != side {
			break
		}
		if lo = hi; hi >= most {
			return lo, 0, nil
		}
		hi = min(2*hi, most)
	}
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		ok, err := fits(mid)
		if err != nil {
			return 0, 0, err
		}
		if ok == side {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, hi, nil
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
	fmt.Fprintf(&b, "%s, %s", precisionPhrase(s), s.Optimizer)
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
		if s.ParamsOnly() {
			fmt.Fprintf(w, "fewest data-parallel ranks that fit in %s a rank (%s)\n\n", model.Bytes(memory), what)
		} else {
			fmt.Fprintf(w, "fewest data-parallel ranks that fit in %s a rank: simulated / the formula (%s)\n", model.Bytes(memory), what)
			fmt.Fprintf(w, "(simulated: the real schedule of one rank of them on a card of %s; the lowest stage at --ranks is the formula's)\n\n", model.Bytes(memory))
		}
	} else {
		fmt.Fprintf(w, "largest micro-batch per rank that fits in %s: simulated / the formula (%s)\n", model.Bytes(memory), what)
		fmt.Fprintf(w, "(simulated: the real schedule of one rank on a card of %s, every allocation of the step; the formula's answer beside it counts no temporaries, workspace or allocator rounding)\n\n", model.Bytes(memory))
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
	if s.Offload == model.OffloadParams {
		note("ZeRO-0 to 2 offload the optimizer alone: ZeRO-Infinity's weight offload shards the weights, which ZeRO-3 alone does.")
	}
	for _, p := range policies {
		r := []string{policyName(p, s)}
		var rec float64
		for _, c := range cells {
			if c.policy != p {
				continue
			}
			rec = c.est.Recompute.Fraction
			if c.refused {
				r = append(r, "refused")
				note(refusedNote)
				continue
			}
			cellText := simPrefix(s, c, byRanks) + batchText(s, c.answer, byRanks)
			if !byRanks && (atLimit(s, c.answer) || atLimit(s, c.simulated)) {
				note(fmt.Sprintf("≥ N: the memory holds more than the largest micro-batch this setup can have (at most %s, and batch × seq at most 2^31-1 rows): at least that many fit", model.Comma(model.MaxFitBatch)))
			}
			if c.answer > 0 {
				r = append(r, cellText)
				switch {
				case c.simulated == 0 && byRanks:
					note(fmt.Sprintf("%s, ZeRO-%d: the simulation fits at no rank count up to %s", policyName(p, s), c.zero, model.Comma(model.MaxFitRanks)))
				case c.simulated == 0:
					note(fmt.Sprintf("%s, ZeRO-%d: the simulation fits no micro-batch: micro-batch 1 runs out of the card's memory", policyName(p, s), c.zero))
				}
				continue
			}
			states := c.est.States.Total() + c.est.Gathered
			switch {
			case byRanks && c.zero == 0:
				r = append(r, simPrefix(s, c, byRanks)+"-")
				note(fmt.Sprintf("ZeRO-0: every rank holds all the model states, %s; more ranks do not help", model.Bytes(states)))
			case byRanks && c.est.ActivationBytes(formula) > memory:
				r = append(r, simPrefix(s, c, byRanks)+"-")
				note(fmt.Sprintf("%s: activations alone need %s a rank, and ranks do not shrink them (try checkpointing, a smaller micro-batch, --tp or --pp)",
					policyName(p, s), model.Bytes(c.est.ActivationBytes(formula))))
			case byRanks:
				// What the stage keeps whole on every rank does not fit.
				r = append(r, simPrefix(s, c, byRanks)+"-")
				whole := map[int]string{1: "the weights and the gradients whole", 2: "the weights whole", 3: "the gathered units"}[c.zero]
				act := ""
				if !s.ParamsOnly() {
					act = fmt.Sprintf(" and %s of activations", model.Bytes(c.est.ActivationBytes(formula)))
				}
				note(fmt.Sprintf("%s, ZeRO-%d: at %s ranks a rank still needs %s: %s%s, which more ranks do not shrink",
					policyName(p, s), c.zero, model.Comma(model.MaxFitRanks), model.Bytes(c.est.Total(formula)), whole, act))
			case states > memory:
				r = append(r, cellText)
				note(fmt.Sprintf("ZeRO-%d: 0, nothing fits: the model states alone need %s a rank", c.zero, model.Bytes(states)))
			default:
				r = append(r, cellText)
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
	writeEstimatorFits(w, r.estimators, r.estimatorsNone, memory)
	fmt.Fprintln(w)
	if !s.ParamsOnly() {
		fmt.Fprintln(w, "recompute: the policy's extra FLOPs as a share of a training step.")
	}
	if byRanks {
		fmt.Fprintln(w, "Not counted: temporaries, kernel workspaces, allocator caching and fragmentation, the CUDA context.")
	} else {
		fmt.Fprintln(w, "The formula does not count temporaries, kernel workspaces, allocator caching and fragmentation; the simulation counts all but the CUDA context.")
	}
	return nil
}

type fitRowDoc struct {
	Checkpoint    string `json:"checkpoint"`
	ZeRO          int    `json:"zero"`
	MaxMicroBatch *int   `json:"max_micro_batch,omitempty"`
	// SimulatedMaxMicroBatch is the simulation's answer: the largest
	// micro-batch whose real schedule fits the memory.
	SimulatedMaxMicroBatch *int `json:"simulated_max_micro_batch,omitempty"`
	// SimulatedMinRanks is the simulation's fewest ranks (0: none fits).
	SimulatedMinRanks *int `json:"simulated_min_ranks,omitempty"`
	// Refused says trainmem runs no such setup: ZeRO-2 and 3 with a
	// pipeline over several ranks.
	Refused bool `json:"refused,omitempty"`
	// AtLeast says the micro-batch answers are the search's limit
	// (model.MaxFitBatch), a lower bound: more would fit than a setup can
	// ask for.
	AtLeast  bool `json:"at_least,omitempty"`
	MinRanks *int `json:"min_ranks,omitempty"`
	Ranks    *int `json:"ranks,omitempty"`
	Fits     bool `json:"fits"`
	// TotalBytes is the total at the answer (at micro-batch 1, or at the
	// largest rank count tried, when nothing fits).
	TotalBytes       int64   `json:"total_bytes"`
	ModelStatesBytes int64   `json:"model_states_bytes"`
	RecomputeShare   float64 `json:"recompute_fraction"`
}

func fitRow(s model.Setup, c fitCell, byRanks bool, formula model.Formula) fitRowDoc {
	ans := c.answer
	r := fitRowDoc{Checkpoint: c.policy.String(), ZeRO: c.zero, Fits: ans > 0, Refused: c.refused, TotalBytes: c.est.Total(formula),
		ModelStatesBytes: c.est.States.Total(), RecomputeShare: c.est.Recompute.Fraction}
	if byRanks {
		r.MinRanks = &ans
	} else {
		r.MaxMicroBatch = &ans
		r.AtLeast = atLimit(s, ans) || atLimit(s, c.simulated)
	}
	if c.simulated >= 0 {
		sim := c.simulated
		if byRanks {
			r.SimulatedMinRanks = &sim
		} else {
			r.SimulatedMaxMicroBatch = &sim
		}
	}
	return r
}

// fitHead is what every fit report's JSON starts with: the model, the
// setup, the memory, the formula and the question answered.
type fitHead struct {
	Model       modelDoc      `json:"model"`
	Setup       setupDoc      `json:"setup"`
	MemoryBytes int64         `json:"memory_bytes"`
	Formula     model.Formula `json:"formula"`
	Question    string        `json:"question"`
}

func fitHeadOf(s model.Setup, memory int64, f model.Formula, question string) fitHead {
	return fitHead{Model: modelDocOf(s), Setup: setupDocOf(s), MemoryBytes: memory, Formula: f, Question: question}
}

// WriteJSON writes the answers with exact bytes.
func (r *FitReport) WriteJSON(w io.Writer) error {
	s, memory, formula, byRanks, cells, lowest := r.Setup, r.Memory, r.Formula, r.ByRanks, r.cells, r.lowest
	doc := struct {
		fitHead
		Results     []fitRowDoc `json:"results"`
		LowestStage []fitRowDoc `json:"lowest_stage,omitempty"`
		// Estimators are DeepSpeed's and Megatron-LM's fewest ranks.
		Estimators []estimatorFit `json:"estimators,omitempty"`
	}{fitHead: fitHeadOf(s, memory, formula, "max_micro_batch")}
	if byRanks {
		doc.Question = "min_ranks"
		doc.Estimators = r.estimators
	}
	for i, c := range cells {
		doc.Results = append(doc.Results, fitRow(s, c, byRanks, formula))
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
	head := []string{"checkpoint", "zero", col, "total_bytes"}
	simulated := len(cells) > 0 && cells[0].simulated >= 0
	if simulated {
		head = append(head, "simulated_"+col)
	}
	cw.Write(head)
	for _, c := range cells {
		row := []string{c.policy.String(), strconv.Itoa(c.zero), strconv.Itoa(c.answer), strconv.FormatInt(c.est.Total(formula), 10)}
		if simulated {
			row = append(row, strconv.Itoa(c.simulated))
		}
		cw.Write(row)
	}
	cw.Flush()
	return cw.Error()
}
