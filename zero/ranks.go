package zero

import (
	"errors"
	"fmt"

	"trainmem/model"
	"trainmem/train"
)

// Ranks is a data-parallel group of trainers, one per member rank of a
// Group, each running setup s (s.Batch is a rank's micro-batch) under the
// setting's policy.
type Ranks struct {
	g   *Group
	set Setting
	tr  []*train.Trainer
}

// NewRanks builds a trainer per rank of g on the rank's device, each of
// the one checked setup c. The setup says the group: its Ranks must be g's
// size and its ZeRO the setting's stage (0 under the parameter server).
func NewRanks(g *Group, c model.Checked, set Setting, opts train.Options) (*Ranks, error) {
	if err := set.Check(); err != nil {
		return nil, err
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	s := c.Setup()
	switch {
	case s.Ranks != g.Size():
		return nil, fmt.Errorf("zero: the setup has %d ranks and the group %d", s.Ranks, g.Size())
	case s.ZeRO != set.Stage:
		return nil, fmt.Errorf("zero: the setup says ZeRO-%d and the setting %s", s.ZeRO, set)
	case g.Engine(0) != nil && !set.Native:
		return nil, fmt.Errorf("zero: the group's collectives are a native engine's (%s), and the setting %s says the ring's: set Native", g.Engine(0).Name(), set)
	case set.Native && g.Engine(0) == nil && g.computes:
		return nil, fmt.Errorf("zero: the setting %s needs a native engine's group (NCCL), and this group's ring moves the data", set)
	}
	if !g.computes && g.Engine(0) == nil {
		// A simulation moves data as the engine it simulates.
		if set.Native {
			g.eng = native{}
		} else {
			g.eng = ring{}
		}
	}
	rk := &Ranks{g: g, set: set}
	for i := range g.Members() {
		p, err := NewPolicy(g.Comm(i), set)
		if err == nil {
			o := opts
			if o.Policy = p; g.Size() == 1 {
				// One rank has nothing to reduce, shard or gather: its
				// trainer is one device's, whatever the setting.
				o.Policy = nil
			}
			var t *train.Trainer
			if t, err = train.New(g.devs[i], c, o); err == nil {
				rk.tr = append(rk.tr, t)
				continue
			}
		}
		rk.Close()
		return nil, &RankError{Rank: g.ranks[i], Err: err}
	}
	return rk, nil
}

// Members is the number of member ranks (every rank but in a sparse
// group); the methods below take a member's index.
func (rk *Ranks) Members() int { return len(rk.tr) }

// Trainer is member i's trainer.
func (rk *Ranks) Trainer(i int) *train.Trainer { return rk.tr[i] }

// Comm is member i's communicator.
func (rk *Ranks) Comm(i int) *Comm { return rk.g.Comm(i) }

// SetParams loads the same weights on every rank.
func (rk *Ranks) SetParams(flat []float32) error {
	var errs []error
	for i, t := range rk.tr {
		if err := t.SetParams(flat); err != nil {
			errs = append(errs, &RankError{Rank: rk.g.ranks[i], Err: err})
		}
	}
	return errors.Join(errs...)
}

// Params assembles the weights, in flat table order, from every rank's
// pieces (the fp32 master copy under mixed precision): the whole model
// whatever the setting shards. Over processes every rank calls it, and
// rank 0 gathers the others' pieces and gets the weights (the others nil).
func (rk *Ranks) Params() ([]float32, error) {
	type held struct {
		Pieces []train.Piece
		Vals   [][]float32
	}
	var mine []held
	for i, t := range rk.tr {
		if rk.set.Stage == 0 && !rk.set.PS && rk.g.ranks[i] != 0 {
			mine = append(mine, held{}) // every DDP rank holds everything: rank 0's are the weights
			continue
		}
		pieces, vals, err := t.PieceParams()
		if err != nil {
			return nil, &RankError{Rank: rk.g.ranks[i], Err: err}
		}
		mine = append(mine, held{pieces, vals})
	}
	all, err := Gather(rk.g, mine)
	if err != nil || all == nil {
		return nil, err
	}
	n := int(rk.tr[0].Setup().Model.NumParams())
	out := make([]float32, n)
	covered := 0
	for _, h := range all {
		for i, p := range h.Pieces {
			covered += copy(out[p.Lo:p.Hi], h.Vals[i])
		}
	}
	if covered != n {
		return nil, fmt.Errorf("zero: the ranks' pieces cover %d of the %d parameters", covered, n)
	}
	return out, nil
}

// Step runs one training step on every member at once, the rank of
// member i on the tokens and targets batch(i) gives, and returns every
// member's record.
func (rk *Ranks) Step(batch func(i int) (tokens, targets []int32)) ([]train.Record, error) {
	recs := make([]train.Record, len(rk.tr))
	err := rk.g.Run(func(c *Comm) error {
		tokens, targets := batch(c.idx)
		var err error
		recs[c.idx], err = rk.tr[c.idx].Step(tokens, targets)
		return err
	})
	return recs, err
}

var _ train.Stepper = (*Ranks)(nil) // the ranks step in train's run loop (train.Loop)

// Close frees every rank's model states.
func (rk *Ranks) Close() {
	for _, t := range rk.tr {
		t.Close()
	}
	rk.tr = nil
}
