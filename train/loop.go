package train

// The run loop, once for every run: train and simulate, validate's
// measured steps, one rank or a group's ranks (package zero's Ranks are a
// Stepper of their members). Each caller adds what its run does between
// the steps (records written, progress, the ranks' agreement to stop) in
// the loop's onStep.

import "context"

// Stepper is what a run steps: its members, each a trainer, take a step
// together. One rank is a Stepper of one member (One).
type Stepper interface {
	Members() int
	// Step runs one step of every member, member i on batch(i)'s tokens
	// and targets, and returns their records.
	Step(batch func(member int) (tokens, targets []int32)) ([]Record, error)
}

// One is t as the one member of a run.
func One(t *Trainer) Stepper { return one{t} }

type one struct{ t *Trainer }

func (o one) Members() int { return 1 }

func (o one) Step(batch func(int) ([]int32, []int32)) ([]Record, error) {
	tokens, targets := batch(0)
	r, err := o.t.Step(tokens, targets)
	return []Record{r}, err
}

// Batch gives member's tokens and targets for a step; shape-only members
// take none (nil).
type Batch func(step, member int) (tokens, targets []int32, err error)

// NoBatch is the batch of shape-only members, which read no tokens.
func NoBatch(int, int) ([]int32, []int32, error) { return nil, nil, nil }

// Looped is what a run loop did: the steps it finished, the records of
// the last of them, and whether ctx stopped it before the steps were done.
type Looped struct {
	Steps       int
	Last        []Record
	Interrupted bool
}

// Loop runs steps steps of st: member i's batch of each step from
// batch(step, i), copied (batch may reuse its slices). After each finished
// step, onStep (when set) gets every member's record; a step that diverged
// is finished, and comes with its *DivergedError, after which the loop
// ends with that error. An error from onStep ends the loop after its step;
// one from batch or from a step that did not finish ends it at once. ctx
// ending stops the loop before its next step (Looped.Interrupted).
func Loop(ctx context.Context, st Stepper, steps int, batch Batch, onStep func(step int, recs []Record, err error) error) (Looped, error) {
	var res Looped
	n := st.Members()
	toks, tgts := make([][]int32, n), make([][]int32, n)
	for step := range steps {
		if ctx.Err() != nil {
			res.Interrupted = true
			return res, nil
		}
		for i := range n {
			tok, tgt, err := batch(step, i)
			if err != nil {
				return res, err
			}
			toks[i], tgts[i] = append(toks[i][:0], tok...), append(tgts[i][:0], tgt...)
			if tok == nil {
				toks[i], tgts[i] = nil, nil // shape-only members
			}
		}
		recs, err := st.Step(func(i int) ([]int32, []int32) { return toks[i], tgts[i] })
		if err != nil && !isDiverged(err) {
			return res, err
		}
		res.Steps, res.Last = step+1, recs
		if onStep != nil {
			if oerr := onStep(step, recs, err); oerr != nil {
				return res, oerr
			}
		}
		if err != nil {
			return res, err
		}
	}
	return res, nil
}
