package zero

// Sub-groups: the groups of one axis of a layout (Layout.Groups), made from
// a group whose members are every rank of the layout, each sub-group's
// collectives run by the members' own goroutines inside the group's Run.

import (
	"fmt"

	"trainmem/cuda"
)

// Split makes a group for each of groups, lists of g's ranks (a layout
// axis's, Layout.Groups), each rank in at most one: sub-group j's rank i is
// g's rank groups[j][i], on that rank's device, and its members are those
// of g's members it holds (a sparse group's sub-groups are sparse too).
// Its collectives are made from g's Run by its members' goroutines (Sub
// gives a member its communicator): g's Run starts its sub-groups, and a
// member that leaves g leaves every sub-group it is in, so that no rank
// waits for it there. A sub-group moves data as g does (the ring, or the
// native engine g simulates), and counts its own traffic. Over processes
// the process's rank gets the sub-group it is in (the others are nil): the
// ring over a link of its own, the parent's link with the sub-group's
// ranks translated (subLink), so TCP and MPI groups split alike. A native
// engine's groups are refused: their sub-groups are the library's
// (ncclCommSplit), not made here.
func (g *Group) Split(groups [][]int) ([]*Group, error) { return g.split(groups, nil) }

// split is Split; placeOf, when not nil, gives any rank of g its index in
// its group of the split, so that groups holding none of g's members (and
// so no rank g needs but the ranks its members stand for) may be left out:
// a simulation's few members of a million ranks split by their own groups.
func (g *Group) split(groups [][]int, placeOf func(rank int) int) ([]*Group, error) {
	lt, overLink := g.tr.(*linked)
	member := make(map[int]int, len(g.ranks)) // g's rank → member index
	for i, r := range g.ranks {
		member[r] = i
	}
	taken := map[int]int{} // rank → the group holding it
	pos := map[int]int{}   // rank → its index in the group holding it
	subs := make([]*Group, 0, len(groups))
	for j, ranks := range groups {
		if len(ranks) == 0 {
			return nil, fmt.Errorf("zero: sub-group %d has no ranks", j)
		}
		var parents []*Comm
		var subRanks []int
		for i, r := range ranks {
			if r < 0 || r >= g.size {
				return nil, fmt.Errorf("zero: sub-group %d: rank %d is not in the group (valid: 0 to %d)", j, r, g.size-1)
			}
			if k, dup := taken[r]; dup {
				return nil, fmt.Errorf("zero: rank %d is in sub-groups %d and %d: each rank belongs to one group of a split", r, k, j)
			}
			taken[r], pos[r] = j, i
			if m, ok := member[r]; ok {
				parents = append(parents, g.comms[m])
				subRanks = append(subRanks, i)
			}
		}
		if len(parents) == 0 {
			subs = append(subs, nil) // none of g's members is in it
			continue
		}
		if overLink {
			sub, err := newGroup([]cuda.Device{parents[0].Device()}, subRanks, len(ranks))
			if err != nil {
				return nil, err
			}
			sl := &subLink{l: lt.l, ranks: append([]int(nil), ranks...), rank: subRanks[0]}
			sub.tr, sub.parents = &linked{l: sl}, parents
			if sub.eng, err = g.subEngine(sub.devs, sl); err != nil {
				closeSubs(subs)
				return nil, err
			}
			subs = append(subs, sub)
			continue
		}
		if g.computes && len(parents) != len(ranks) {
			closeSubs(subs)
			return nil, fmt.Errorf("zero: sub-group %d: ranks %v are not all members of the group", j, ranks)
		}
		sub, err := g.subGroup(parents, subRanks, len(ranks))
		if err == nil {
			sub.eng, err = g.subEngine(sub.devs, nil)
		}
		if err != nil {
			closeSubs(subs)
			return nil, err
		}
		subs = append(subs, sub)
	}
	for _, sub := range subs {
		if sub == nil {
			continue
		}
		g.subs = append(g.subs, sub)
		for k, p := range sub.parents {
			splitAlike(p, sub.comms[k], func(r int) int {
				if placeOf != nil {
					return placeOf(r)
				}
				return pos[r]
			})
		}
	}
	return subs, nil
}

// subEngine is what moves a sub-group's data, its members on devs (over
// l when they are processes): g's ring, or engines of the sub-group's own
// from g's native library.
func (g *Group) subEngine(devs []cuda.Device, l Link) (engine, error) {
	if e, ok := g.eng.(native); ok {
		return e.split(devs, l)
	}
	return g.eng, nil
}

// closeSubs closes the sub-groups a failed split made.
func closeSubs(subs []*Group) {
	for _, sub := range subs {
		if sub != nil {
			sub.Close()
		}
	}
}

// subGroup is the group of n ranks whose members are g's members parents,
// sub-group rank ranks[i] being parents[i].
func (g *Group) subGroup(parents []*Comm, ranks []int, n int) (*Group, error) {
	devs := make([]cuda.Device, len(parents))
	for i, p := range parents {
		devs[i] = p.Device()
	}
	sub, err := newGroup(devs, ranks, n)
	if err != nil {
		return nil, err
	}
	sub.parents = parents
	return sub, nil
}

// Sub is c's communicator in sub, a group Split made from c's group; false
// when c is not one of sub's members.
func (sub *Group) Sub(c *Comm) (*Comm, bool) {
	for i, p := range sub.parents {
		if p == c {
			return sub.comms[i], true
		}
	}
	return nil, false
}

// world is c's rank in the group the splits began from: the rank errors
// name, so that a sub-group's failure says which of the run's ranks it was.
func (c *Comm) world() int {
	for c.g.parents != nil {
		c = c.g.parents[c.idx]
	}
	return c.rank
}

// worldRanks are g's members' ranks in the group the splits began from.
func (g *Group) worldRanks() []int {
	if g.parents == nil {
		return g.ranks
	}
	rs := make([]int, len(g.comms))
	for i, c := range g.comms {
		rs[i] = c.world()
	}
	return rs
}

// subLink is a sub-group's link over its parent's: the sub-group's rank i
// is the parent's rank ranks[i]. Messages between two processes keep their
// order on the parent's link whichever group sends them, and a process
// makes its groups' calls in one order, as its peers do; an abort ends the
// parent's link, and so every group of the run.
type subLink struct {
	l     Link
	ranks []int
	rank  int
}

func (s *subLink) Rank() int    { return s.rank }
func (s *subLink) Size() int    { return len(s.ranks) }
func (s *subLink) Name() string { return s.l.Name() }

func (s *subLink) Send(to int, b []byte) error   { return s.l.Send(s.ranks[to], b) }
func (s *subLink) Recv(from int, b []byte) error { return s.l.Recv(s.ranks[from], b) }

// Exchange translates only the halves it makes: a missing half's rank may
// be any.
func (s *subLink) Exchange(to int, out []byte, from int, in []byte) error {
	pt, pf := -1, -1
	if out != nil {
		pt = s.ranks[to]
	}
	if in != nil {
		pf = s.ranks[from]
	}
	return s.l.Exchange(pt, out, pf, in)
}

func (s *subLink) Abort(err error) { s.l.Abort(err) }

// Close leaves the sub-group; the parent's link stays open.
func (s *subLink) Close() error { return nil }
