package zero

import (
	"errors"
	"fmt"
	"sync"

	"trainmem/cuda"
)

// Group is N in-process ranks, one device each, that make collectives
// together: Run gives every rank its Communicator in a goroutine of its
// own. The devices either all compute (the host: the data moves and is
// reduced) or none does (shape-only: the allocations and the traffic
// without the data).
type Group struct {
	devs     []cuda.Device // one per member
	ranks    []int         // each member's rank
	size     int           // the ranks of the group, members or not
	computes bool
	tr       transport // how the members meet and move a ring step's bytes

	stage [][2]*cuda.Buffer // each member's two staging buffers (partial sums in flight)
	eng   engine            // what moves the data: the ring, or a native engine (native.go)
	// tracers, when set, gives each member rank's tracer (TraceRanks).
	tracers func(rank int) cuda.Tracer
	comms   []*Comm // one per member, for the group's life (its traffic accumulates)

	// subs are the groups Split made of this one; parents, in a sub-group,
	// are its members' communicators in the group it was split from.
	subs    []*Group
	parents []*Comm

	// net, when set, times the simulated members' collectives (clock.go),
	// span saying where the group's ranks sit on it.
	net  *Network
	span Span
}

// NewGroup makes a group of len(devs) ranks, rank r on devs[r].
func NewGroup(devs []cuda.Device) (*Group, error) {
	if len(devs) == 0 {
		return nil, errors.New("zero: a group needs at least one rank")
	}
	ranks := make([]int, len(devs))
	for r := range ranks {
		ranks[r] = r
	}
	return newGroup(devs, ranks, len(devs))
}

// NewSparseGroup is a group of n ranks of which only ranks[i], on
// devs[i], take part: shape-only devices, which move no data, so a rank's
// collectives need no peer to count its allocations and its traffic. It
// simulates a few ranks of a group too large to simulate whole.
func NewSparseGroup(devs []cuda.Device, ranks []int, n int) (*Group, error) {
	if len(devs) != len(ranks) || len(devs) == 0 {
		return nil, fmt.Errorf("zero: a sparse group takes one device per member rank (%d devices, %d ranks)", len(devs), len(ranks))
	}
	seen := map[int]bool{}
	for i, r := range ranks {
		switch {
		case r < 0 || r >= n || seen[r]:
			return nil, fmt.Errorf("zero: member rank %d: out of range or repeated (valid: distinct ranks 0 to %d)", r, n-1)
		case devs[i] != nil && devs[i].Computes():
			return nil, fmt.Errorf("zero: a sparse group's ranks are shape-only devices; rank %d's is %s", r, devs[i].Name())
		}
		seen[r] = true
	}
	return newGroup(devs, ranks, n)
}

func newGroup(devs []cuda.Device, ranks []int, n int) (*Group, error) {
	g := &Group{devs: devs, ranks: ranks, size: n, computes: devs[0] != nil && devs[0].Computes(), stage: make([][2]*cuda.Buffer, len(devs)), eng: ring{}}
	g.tr = newShared(g)
	for i, r := range ranks {
		g.comms = append(g.comms, &Comm{g: g, rank: r, idx: i})
	}
	for i, d := range devs {
		r := ranks[i]
		if d == nil {
			return nil, fmt.Errorf("zero: rank %d has no device", r)
		}
		if d.Computes() != g.computes {
			return nil, fmt.Errorf("zero: rank %d's device (%s) and rank 0's (%s) differ in whether they compute: a group's ranks all hold data or none does", r, d.Name(), devs[0].Name())
		}
	}
	return g, nil
}

// Size is the number of ranks.
func (g *Group) Size() int { return g.size }

// TraceRanks makes the trainers that Run builds on g send their allocator
// events to tracer(rank) (nil for a rank: none), as train.Trainer.Trace.
func (g *Group) TraceRanks(tracer func(rank int) cuda.Tracer) { g.tracers = tracer }

// Members is the number of ranks that take part: Size, but in a sparse
// group.
func (g *Group) Members() int { return len(g.devs) }

// Comm is member i's Communicator (rank i but in a sparse group), the one
// Run gives that member.
func (g *Group) Comm(i int) *Comm { return g.comms[i] }

// Run calls f once per member rank, each in its own goroutine with that rank's
// Communicator, and waits for all of them. A rank whose f returns while
// others are still in a collective ends theirs with an error naming it, as
// does a disagreement between the ranks: the rest of that run fails. The
// errors come back joined, in rank order. Runs follow one another, never
// overlap.
func (g *Group) Run(f func(c *Comm) error) error {
	g.tr.start() // every run starts whole: the last one's ranks have all returned
	for _, sub := range g.subs {
		sub.tr.start()
	}
	errs := make([]error, len(g.devs))
	var wg sync.WaitGroup
	for i := range g.devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := g.comms[i]
			r := c.rank
			defer func() {
				if p := recover(); p != nil {
					errs[i] = fmt.Errorf("zero: rank %d panicked: %v", r, p)
				}
				g.tr.leave(c, errs[i])
				for _, sub := range g.subs {
					if sc, ok := sub.Sub(c); ok {
						sub.tr.leave(sc, errs[i])
					}
				}
			}()
			if err := f(c); err != nil {
				errs[i] = &RankError{Rank: r, Err: err}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Comm is one rank of a Group: its Communicator.
type Comm struct {
	g       *Group
	rank    int // in the group
	idx     int // among the members
	traffic [NumCollectives]Traffic
	// alike are the ranks this one stands for in a simulation (alike.go).
	alike []*alikeRank
	// log is the step's events, for its replay in time (clock.go).
	log clockLog
}

var _ Communicator = (*Comm)(nil)

// Rank is this rank's index, 0 to Size()-1.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.g.size }

// Device is this rank's device.
func (c *Comm) Device() cuda.Device { return c.g.devs[c.idx] }

// own is this rank's staging buffer i.
func (c *Comm) own(i int) *cuda.Buffer { return c.g.stage[c.idx][i] }

// Traffic is what this rank has sent and received, per collective, over
// the group's life.
func (c *Comm) Traffic() [NumCollectives]Traffic { return c.traffic }

// RankError is one rank's error in a group, naming the rank.
type RankError struct {
	Rank int
	Err  error
}

func (e *RankError) Error() string { return fmt.Sprintf("rank %d: %v", e.Rank, e.Err) }

func (e *RankError) Unwrap() error { return e.Err }
