package model

// Pipeline parallelism (Huang et al. 2019, GPipe; Narayanan et al. 2021,
// PipeDream-Flush's 1F1B as Megatron-LM runs it): the blocks are split into
// consecutive runs, one a stage; the first stage also holds the embedding,
// the last the final layer norm, the head and the loss. A stage's forward
// pass reads the previous stage's residual stream (a step input, received)
// and its output is sent on; its backward pass is seeded with the gradient
// of that output (received from the next stage) and yields the gradient of
// its input (sent back). With GPT-2's tied head the last stage holds a copy
// of the token embedding for the head, whose gradient it and the first
// stage sum before the update (Megatron-LM's embedding group), so the two
// copies stay the same.
//
// A stage's part of the model is a Config with Stage set
// (Config.PipelineStage): Layers is the stage's blocks, its parameter table
// holds its rows under the whole model's names (h<l> numbered in the whole
// model), so SplitParams and JoinParams move weights between a stage and
// the whole model by name.

import (
	"fmt"
	"trainmem/cuda/enum"
)

// PipelineStage is one stage of a pipeline-parallel split: Size stages,
// this one Rank, holding blocks [Lo, Lo+Layers) of the whole model's
// Blocks (the Config's Layers). The zero value is the whole model.
type PipelineStage struct {
	Size, Rank int
	Lo         int // the whole model's index of the stage's first block
	Blocks     int // the whole model's blocks, L
}

// first reports whether the stage holds the embedding (the whole model's
// only stage does).
func (p PipelineStage) first() bool { return p.Size < 2 || p.Rank == 0 }

// last reports whether the stage holds the head and the loss.
func (p PipelineStage) last() bool { return p.Size < 2 || p.Rank == p.Size-1 }

// First reports whether c holds the embedding: the first stage, or the
// whole model.
func (c Config) First() bool { return c.Stage.first() }

// Last reports whether c holds the final layer norm, the head and the
// loss: the last stage, or the whole model.
func (c Config) Last() bool { return c.Stage.last() }

// StageBlocks is the blocks [lo, lo+n) of stage r of a split of L blocks
// over p stages: L/p each, the first L mod p stages one more.
func StageBlocks(L, p, r int) (lo, n int) {
	q, m := L/p, L%p
	lo, n = r*q+min(r, m), q
	if r < m {
		n++
	}
	return lo, n
}

// PipelineStage is stage r of c's blocks split over size stages; one
// stage is the whole model. A tensor-parallel part splits into stages of
// the part.
func (c Config) PipelineStage(size, r int) (Config, error) {
	switch {
	case c.Stage != (PipelineStage{}):
		return Config{}, fmt.Errorf("model: %s is already pipeline stage %d of %d", c.Name, c.Stage.Rank, c.Stage.Size)
	case size < 1 || size > c.Layers:
		return Config{}, fmt.Errorf("model: a pipeline of %d stages over %d blocks (valid: 1 to %d)", size, c.Layers, c.Layers)
	case r < 0 || r >= size:
		return Config{}, fmt.Errorf("model: pipeline stage %d of %d (valid: 0 to %d)", r, size, size-1)
	case size == 1:
		return c, nil
	}
	lo, n := StageBlocks(c.Layers, size, r)
	c.Stage = PipelineStage{Size: size, Rank: r, Lo: lo, Blocks: c.Layers}
	c.Layers = n
	return c, c.Validate()
}

// check refuses a stage whose blocks fall outside the whole model's.
func (p PipelineStage) check(layers int) error {
	switch {
	case p == PipelineStage{}:
		return nil
	case p.Size < 2:
		return fmt.Errorf("model: a pipeline of %d stages (valid: 2 or more; the whole model is the zero PipelineStage)", p.Size)
	case p.Rank < 0 || p.Rank >= p.Size:
		return fmt.Errorf("model: pipeline stage %d of %d (valid: 0 to %d)", p.Rank, p.Size, p.Size-1)
	case p.Lo < 0 || p.Lo+layers > p.Blocks:
		return fmt.Errorf("model: pipeline stage %d holds blocks %d to %d of %d", p.Rank, p.Lo, p.Lo+layers-1, p.Blocks)
	}
	return nil
}

// headCopy reports whether c's table holds the last stage's copy of the
// token embedding for its tied head.
func (c Config) headCopy() bool { return !c.Untied && c.Last() && !c.First() }

// SplitParams cuts a part's flat parameters (a tensor-parallel rank's, a
// pipeline stage's, or a stage of a rank's) out of the whole model's: each
// row of the part's table is the whole table's row of its name, or its
// Split of it.
func SplitParams(part Config, whole []float32) ([]float32, error) {
	w := part.Whole()
	if n := w.NumParams(); int64(len(whole)) != n {
		return nil, fmt.Errorf("model: %d parameters, want the whole %s's %d", len(whole), part.Name, n)
	}
	rows := byName(w.Params())
	out := make([]float32, part.NumParams())
	for _, p := range part.Params() {
		wr, ok := rows[p.Name]
		if !ok {
			return nil, fmt.Errorf("model: %s of %s is not a row of the whole model", p.Name, part)
		}
		copyRow(wr, p, func(wo, po, n int64) {
			copy(out[p.Offset+po:p.Offset+po+n], whole[wr.Offset+wo:wr.Offset+wo+n])
		})
	}
	return out, nil
}

// JoinParams puts the whole model's flat parameters together from every
// part's (parts[i] holds the weights of the model part cfgs[i]: the
// tensor-parallel ranks, the pipeline stages, or both). A value that
// several parts hold (a row every tensor-parallel rank holds whole, the
// tied embedding on the first and last stages) is taken from the first,
// after checking that the others hold the same: parts whose copies differ
// have not trained alike, which is an error. Every value of the whole
// model must be held by some part.
func JoinParams(cfgs []Config, parts [][]float32) ([]float32, error) {
	if len(cfgs) == 0 || len(cfgs) != len(parts) {
		return nil, fmt.Errorf("model: %d parts and %d configs to join", len(parts), len(cfgs))
	}
	whole := cfgs[0].Whole()
	rows := byName(whole.Params())
	out := make([]float32, whole.NumParams())
	held := make([]bool, len(out))
	for i, pc := range cfgs {
		if pc.Whole().String() != whole.String() {
			return nil, fmt.Errorf("model: part %d is of %s, not of %s", i, pc.Whole(), whole)
		}
		flat := parts[i]
		if int64(len(flat)) != pc.NumParams() {
			return nil, fmt.Errorf("model: part %d (%s) has %d parameters, want %d", i, partName(pc), len(flat), pc.NumParams())
		}
		for _, p := range pc.Params() {
			w, ok := rows[p.Name]
			if !ok {
				return nil, fmt.Errorf("model: %s of %s is not a row of the whole model", p.Name, partName(pc))
			}
			var differs error
			copyRow(w, p, func(wo, po, n int64) {
				src, dst := flat[p.Offset+po:p.Offset+po+n], out[w.Offset+wo:w.Offset+wo+n]
				has := held[w.Offset+wo : w.Offset+wo+n]
				for j := range src {
					switch {
					case !has[j]:
						dst[j], has[j] = src[j], true
					case src[j] != dst[j] && differs == nil:
						differs = fmt.Errorf("model: %s[%d] is %g on %s and %g on another part that holds it: a row several parts hold must be the same on each", p.Name, po+int64(j), src[j], partName(pc), dst[j])
					}
				}
			})
			if differs != nil {
				return nil, differs
			}
		}
	}
	for j, h := range held {
		if !h {
			return nil, fmt.Errorf("model: the parts hold no value %d of the whole model's %d", j, len(out))
		}
	}
	return out, nil
}

// partName says which part c is: its tensor rank and its stage.
func partName(c Config) string {
	var s string
	if c.Tensor.Size > 1 {
		s = fmt.Sprintf("tensor-parallel rank %d", c.Tensor.Rank)
	}
	if c.Stage.Size > 1 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("pipeline stage %d", c.Stage.Rank)
	}
	if s == "" {
		s = "the whole model"
	}
	return s
}

func byName(table []Param) map[string]Param {
	m := make(map[string]Param, len(table))
	for _, p := range table {
		m[p.Name] = p
	}
	return m
}

// PipelineSchedule is the order a pipeline stage runs its micro-batches'
// forward and backward passes in.
type PipelineSchedule uint8

const (
	// OneFOneB is 1F1B (PipeDream-Flush, Narayanan et al. 2021, as
	// Megatron-LM's forward_backward_pipelining_without_interleaving runs
	// it): stage r of P runs min(P-r-1, M) forward passes, then one forward
	// and one backward at a time, then the remaining backward passes, so it
	// keeps at most P-r micro-batches' activations.
	OneFOneB PipelineSchedule = iota
	// GPipe runs every micro-batch's forward pass, then every backward
	// pass (Huang et al. 2019): each stage keeps all M micro-batches'
	// activations.
	GPipe
)

var pipelineScheduleNames = enum.New[PipelineSchedule]("model", "PipelineSchedule", "pipeline schedule", "1f1b", "gpipe")

func (p PipelineSchedule) String() string { return pipelineScheduleNames.String(p) }

// ParsePipelineSchedule reads a schedule's name (1f1b, gpipe).
func ParsePipelineSchedule(s string) (PipelineSchedule, error) {
	return pipelineScheduleNames.Parse(s)
}

// PipelineAction is one step of a stage's schedule: the forward or the
// backward pass of a micro-batch.
type PipelineAction struct {
	Backward bool
	Micro    int
}

// Actions is the order stage r of p stages runs m micro-batches' passes
// in under the schedule; micro-batches go forward in order and come back
// in order under both schedules (so their gradients are summed in the same
// order and the schedules give the same weights).
func (p PipelineSchedule) Actions(stages, r, m int) []PipelineAction {
	acts := make([]PipelineAction, 0, 2*m)
	warm := m
	if p == OneFOneB {
		warm = min(stages-r-1, m)
	}
	f, b := 0, 0
	for ; f < warm; f++ {
		acts = append(acts, PipelineAction{Micro: f})
	}
	for ; f < m; f++ {
		acts = append(acts, PipelineAction{Micro: f}, PipelineAction{Backward: true, Micro: b})
		b++
	}
	for ; b < m; b++ {
		acts = append(acts, PipelineAction{Backward: true, Micro: b})
	}
	return acts
}

// InFlight is the most micro-batches whose forward pass has run and
// backward pass has not, at once, in acts.
func InFlight(acts []PipelineAction) int {
	n, most := 0, 0
	for _, a := range acts {
		if a.Backward {
			n--
		} else {
			n++
		}
		most = max(most, n)
	}
	return most
}

// StageRank is the setup of pipeline stage r of c's PP stages: its model
// the stage's part of c's (Config.PipelineStage), the rest as c's. With
// one stage it is c.
func (c Checked) StageRank(r int) (Checked, error) {
	return c.part("no blocks to split into pipeline stages", func(s Setup) (Config, error) { return s.Model.PipelineStage(s.PP, r) })
}

// Bubble is each stage's idle share of a step under the schedule, for
// stages whose forward and backward passes of one micro-batch take fwd[r]
// and bwd[r]: every stage runs its Actions in order, a forward pass once
// the previous stage's of the same micro-batch is done, a backward pass
// once the next stage's is (communication taking no time). The step ends
// when the last pass of any stage does; a stage's share is the time it is
// not computing. With equal passes on every stage both schedules idle
// (P-1)/(M+P-1) of the step (Narayanan et al. 2021, Section 2.2); 1F1B
// keeps fewer micro-batches, not less idle time.
func (p PipelineSchedule) Bubble(m int, fwd, bwd []float64) []float64 {
	P := len(fwd)
	acts := make([][]PipelineAction, P)
	for r := range acts {
		acts[r] = p.Actions(P, r, m)
	}
	// The time each stage's passes end, by micro-batch; -1: not yet run.
	fEnd, bEnd := make([][]float64, P), make([][]float64, P)
	for r := range fEnd {
		fEnd[r], bEnd[r] = make([]float64, m), make([]float64, m)
		for k := range m {
			fEnd[r][k], bEnd[r][k] = -1, -1
		}
	}
	next, clock := make([]int, P), make([]float64, P)
	for left := P * 2 * m; left > 0; {
		ran := false
		for r := range P {
		stage:
			for next[r] < len(acts[r]) {
				a := acts[r][next[r]]
				ready := clock[r]
				switch {
				case !a.Backward && r > 0:
					if fEnd[r-1][a.Micro] < 0 {
						break stage
					}
					ready = max(ready, fEnd[r-1][a.Micro])
				case a.Backward && r < P-1:
					if bEnd[r+1][a.Micro] < 0 {
						break stage
					}
					ready = max(ready, bEnd[r+1][a.Micro])
				}
				if a.Backward {
					clock[r] = ready + bwd[r]
					bEnd[r][a.Micro] = clock[r]
				} else {
					clock[r] = ready + fwd[r]
					fEnd[r][a.Micro] = clock[r]
				}
				next[r]++
				left--
				ran = true
			}
		}
		if !ran {
			break // a schedule that cannot go on (none of trainmem's)
		}
	}
	end := 0.0
	for _, c := range clock {
		end = max(end, c)
	}
	share := make([]float64, P)
	for r := range share {
		if end > 0 {
			share[r] = 1 - float64(m)*(fwd[r]+bwd[r])/end
		}
	}
	return share
}
