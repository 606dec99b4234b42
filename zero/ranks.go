package zero

import (
	"errors"
	"fmt"

	"trainmem/model"
	"trainmem/train"
)

// Ranks is a group of trainers, one per member rank of a Group, each
// running setup s (s.Batch is a rank's micro-batch) under the setting's
// policy: s.Ranks data-parallel replicas of s.TP tensor-parallel ranks
// each, numbered as Layout says (the tensor rank fastest).
type Ranks struct {
	g      *Group
	set    Setting
	layout Layout
	tr     []*train.Trainer
	// tensor, data and pipe are each member's communicators of its tensor
	// group (nil with one tensor-parallel rank), its data group (the
	// member's own communicator of g with one data group) and its pipeline
	// (nil with one stage).
	tensor, data, pipe []*Comm
	// timings are the last step's, replayed in time (Timings).
	timings []Timing
}

// NewRanks builds a trainer per rank of g on the rank's device, each of
// the one checked setup c (a tensor-parallel rank of the part of c's model
// it holds, Checked.TensorRank). The setup says the group: its Ranks times
// its TP must be g's size, and its ZeRO the setting's stage (0 under the
// parameter server). With more than one tensor-parallel rank, g is split
// into its tensor groups (each rank's parallel layers sum over its own) and
// its data groups (each rank's policy reduces over its own).
func NewRanks(g *Group, c model.Checked, set Setting, opts train.Options) (*Ranks, error) {
	if err := set.Check(); err != nil {
		return nil, err
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	s := c.Setup()
	lay := LayoutOf(s)
	switch {
	case lay.Size() != g.Size() && s.TP == 1 && s.PP == 1:
		return nil, fmt.Errorf("zero: the setup has %d ranks and the group %d", s.Ranks, g.Size())
	case lay.Size() != g.Size():
		return nil, fmt.Errorf("zero: the setup has %d ranks (%v) and the group %d", lay.Size(), lay, g.Size())
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
	if set.Network != nil && set.Network.GPUsPerNode < 1 {
		return nil, fmt.Errorf("zero: network %q has %d GPUs a node", set.Network.Name, set.Network.GPUsPerNode)
	}
	axes, err := axisComms(g, lay, set.Network)
	if err != nil {
		return nil, err
	}
	tensor, data, pipe := axes[TensorAxis], axes[DataAxis], axes[PipelineAxis]
	rk := &Ranks{g: g, set: set, layout: lay, tensor: tensor, data: data, pipe: pipe}
	for i := range g.Members() {
		err := func() error {
			o, rc := opts, c
			if s.Ranks > 1 || s.Offload == model.OffloadParams {
				// One replica has nothing to reduce, shard or gather: its
				// trainers are one device's, whatever the setting; but
				// offloaded weights are gathered from host memory, as
				// ZeRO-3 gathers them (ZeRO-Infinity on one GPU).
				var err error
				if o.Policy, err = NewPolicy(data[i], set); err != nil {
					return err
				}
			}
			if s.TP > 1 {
				var err error
				if rc, err = c.TensorRank(lay.Coord(g.ranks[i])[TensorAxis]); err != nil {
					return err
				}
				o.TensorGroup = tensor[i]
			}
			if s.PP > 1 {
				var err error
				if rc, err = rc.StageRank(lay.Coord(g.ranks[i])[PipelineAxis]); err != nil {
					return err
				}
				o.Pipeline = pipe[i]
			}
			t, err := train.New(g.devs[i], rc, o)
			if err != nil {
				return err
			}
			rk.tr = append(rk.tr, t)
			return nil
		}()
		if err != nil {
			rk.Close()
			return nil, &RankError{Rank: g.ranks[i], Err: err}
		}
	}
	return rk, nil
}

// axisComms is each member's communicator in its group of each axis:
// its tensor group and its pipeline (nil with one rank on the axis), its
// data group (g's own when the layout is data-parallel only).
func axisComms(g *Group, lay Layout, net *Network) (axes [NumAxes][]*Comm, err error) {
	data := make([]*Comm, g.Members())
	axes[DataAxis] = data
	if net != nil {
		// The world's group spans every node; its collectives (AnyRank's
		// flags) cross them all.
		nodes := (lay.Size() + net.GPUsPerNode - 1) / net.GPUsPerNode
		g.net, g.span = net, Span{N: lay.Size(), Nodes: nodes}
	}
	if lay.TP == 1 && lay.PP == 1 {
		copy(data, g.comms)
		if net != nil {
			g.span = lay.GroupOf(DataAxis, net.GPUsPerNode)
		}
		return axes, nil
	}
	index := make(map[*Comm]int, g.Members())
	for i, c := range g.comms {
		index[c] = i
	}
	for a := range NumAxes {
		if a != DataAxis && lay.Degree(a) == 1 {
			continue
		}
		out := make([]*Comm, g.Members())
		subs, err := g.split(lay.GroupsOf(a, g.ranks), func(r int) int { return lay.Coord(r)[a] })
		if err != nil {
			return axes, err
		}
		for _, sub := range subs {
			if sub == nil {
				continue
			}
			if net != nil {
				sub.net, sub.span = net, lay.GroupOf(a, net.GPUsPerNode)
			}
			for k, p := range sub.parents {
				out[index[p]] = sub.comms[k]
			}
		}
		axes[a] = out
	}
	return axes, nil
}

// Members is the number of member ranks (every rank but in a sparse
// group); the methods below take a member's index.
func (rk *Ranks) Members() int { return len(rk.tr) }

// Trainer is member i's trainer.
func (rk *Ranks) Trainer(i int) *train.Trainer { return rk.tr[i] }

// Comm is member i's communicator.
func (rk *Ranks) Comm(i int) *Comm { return rk.g.Comm(i) }

// Traffic is what member i has sent and received so far, by kind of
// collective: its tensor group's (the parallel layers' sums), its data
// group's (the policy's reductions and gathers) and, in all, theirs and
// whatever else it sent over the whole group.
func (rk *Ranks) Traffic(i int) (all [NumCollectives]Traffic, axes [NumAxes][NumCollectives]Traffic) {
	return rk.traffic(i, -1)
}

// traffic is Traffic of member i (j < 0) or of the j-th rank it stands
// for in a simulation (alike.go).
func (rk *Ranks) traffic(i, j int) (all [NumCollectives]Traffic, axes [NumAxes][NumCollectives]Traffic) {
	of := func(c *Comm) [NumCollectives]Traffic {
		if j < 0 {
			return c.Traffic()
		}
		return c.alike[j].traffic
	}
	axes[DataAxis] = of(rk.data[i])
	if rk.tensor != nil {
		axes[TensorAxis] = of(rk.tensor[i])
	}
	if rk.pipe != nil {
		axes[PipelineAxis] = of(rk.pipe[i])
	}
	all = of(rk.g.Comm(i))
	if rk.data[i] != rk.g.Comm(i) {
		all = addTraffic(all, axes[DataAxis])
	}
	return addTraffic(addTraffic(all, axes[TensorAxis]), axes[PipelineAxis]), axes
}

func addTraffic(a, b [NumCollectives]Traffic) [NumCollectives]Traffic {
	for k := range a {
		a[k].Calls += b[k].Calls
		a[k].SentBytes += b[k].SentBytes
		a[k].RecvBytes += b[k].RecvBytes
	}
	return a
}

// SetParams loads the whole model's weights: on every rank the same, or
// the part a tensor-parallel rank or pipeline stage holds
// (model.SplitParams).
func (rk *Ranks) SetParams(flat []float32) error {
	var errs []error
	for i, t := range rk.tr {
		mine := flat
		if rk.layout.TP > 1 || rk.layout.PP > 1 {
			var err error
			if mine, err = model.SplitParams(t.Setup().Model, flat); err != nil {
				errs = append(errs, &RankError{Rank: rk.g.ranks[i], Err: err})
				continue
			}
		}
		if err := t.SetParams(mine); err != nil {
			errs = append(errs, &RankError{Rank: rk.g.ranks[i], Err: err})
		}
	}
	return errors.Join(errs...)
}

// Params assembles the whole model's weights, in flat table order, from
// every rank's pieces (the fp32 master copy under mixed precision) and the
// tensor-parallel ranks' parts (model.JoinParams), whatever the setting
// shards. Over processes every rank calls it, and rank 0 gathers the
// others' pieces and gets the weights (the others nil).
func (rk *Ranks) Params() ([]float32, error) {
	type held struct {
		Pieces []train.Piece
		Vals   [][]float32
		// Frozen is a fine-tune's frozen weights (whole on every rank of
		// the first data replica; model.Trained's frozen part).
		Frozen []float32
	}
	var mine []held
	for i, t := range rk.tr {
		first := rk.layout.Coord(rk.g.ranks[i])[DataAxis] == 0
		if rk.set.Stage == 0 && !rk.set.PS && !first {
			mine = append(mine, held{}) // every DDP replica holds everything: the first's are the weights
			continue
		}
		pieces, vals, err := t.PieceParams()
		var frozen []float32
		if err == nil && first {
			frozen, err = t.FrozenParams()
		}
		if err != nil {
			return nil, &RankError{Rank: rk.g.ranks[i], Err: err}
		}
		mine = append(mine, held{pieces, vals, frozen})
	}
	all, err := Gather(rk.g, mine)
	if err != nil || all == nil {
		return nil, err
	}
	// The parts: one per tensor rank and stage, in the layout's order of
	// the first data replica's ranks.
	whole := rk.tr[0].Setup().Model.Whole()
	partOf := func(key [2]int) (model.Config, error) {
		part, err := whole.TensorRank(rk.layout.TP, key[0])
		if err == nil {
			part, err = part.PipelineStage(rk.layout.PP, key[1])
		}
		return part, err
	}
	var cfgs []model.Config
	parts, frozen := map[[2]int][]float32{}, map[[2]int][]float32{}
	covered := map[[2]int]int{}
	for r, h := range all {
		c := rk.layout.Coord(r)
		key := [2]int{c[TensorAxis], c[PipelineAxis]}
		if parts[key] == nil {
			part, err := partOf(key)
			if err != nil {
				return nil, err
			}
			parts[key] = make([]float32, part.NumTrained()) // the pieces are the trained rows'
		}
		for i, p := range h.Pieces {
			covered[key] += copy(parts[key][p.Lo:p.Hi], h.Vals[i])
		}
		if h.Frozen != nil {
			frozen[key] = h.Frozen
		}
	}
	var flats [][]float32
	for pp := range rk.layout.PP {
		for tp := range rk.layout.TP {
			key := [2]int{tp, pp}
			part, err := partOf(key)
			if err != nil {
				return nil, err
			}
			if covered[key] != len(parts[key]) {
				return nil, fmt.Errorf("zero: the ranks' pieces cover %d of the %d trained parameters of tensor-parallel rank %d of pipeline stage %d", covered[key], len(parts[key]), tp, pp)
			}
			if n := part.NumFrozen(); int64(len(frozen[key])) != n {
				return nil, fmt.Errorf("zero: %d frozen weights of tensor-parallel rank %d of pipeline stage %d, want %d", len(frozen[key]), tp, pp, n)
			}
			cfgs = append(cfgs, part)
			flats = append(flats, model.Whole(part, parts[key], frozen[key]))
		}
	}
	if len(flats) == 1 {
		return flats[0], nil
	}
	return model.JoinParams(cfgs, flats)
}

// Step runs one training step on every member at once, the rank of
// member i on the tokens and targets batch(i) gives, and returns every
// member's record.
func (rk *Ranks) Step(batch func(i int) (tokens, targets []int32)) ([]train.Record, error) {
	recs := make([]train.Record, len(rk.tr))
	err := rk.g.Run(func(c *Comm) error {
		tokens, targets := batch(c.idx)
		c.logStart()
		var err error
		recs[c.idx], err = rk.tr[c.idx].Step(tokens, targets)
		c.logEnd()
		return err
	})
	rk.timings = nil
	if err == nil && rk.g.net != nil && rk.g.comms[0].log.on {
		rk.timings, err = replay(rk.g.comms)
	}
	return recs, err
}

// Timings are the members' last step replayed in time (clock.go), in
// member order: nil unless the ranks are simulated on devices with a
// modelled clock under a Setting with a Network.
func (rk *Ranks) Timings() []Timing { return rk.timings }

var _ train.Stepper = (*Ranks)(nil) // the ranks step in train's run loop (train.Loop)

// Close frees every rank's model states.
func (rk *Ranks) Close() {
	for _, t := range rk.tr {
		t.Close()
	}
	rk.tr = nil
}
