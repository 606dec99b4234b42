package zero

// Ranks simulated once: in a simulation, ranks whose memory is alike (the
// same stage, the same part of the model, the same data-parallel buffers)
// run the same instructions and make the same calls, and differ only in
// the bytes their collectives move, which a shape-only rank counts in
// closed form from its place in each group. One member of a sparse group
// stands for such ranks (Group.standFor): each of its communicators
// counts, beside its own traffic, every alike rank's at that rank's place
// in its own group of the same axis, and Run gives each alike rank the
// member's record and statistics with its own traffic.

import (
	"fmt"

	"trainmem/model"
)

// alikeRank is a rank a member stands for: its rank in the whole group,
// its index in this communicator's group, and its traffic there.
type alikeRank struct {
	rank, idx int
	traffic   [NumCollectives]Traffic
}

// countEach counts a shape-only collective's bytes, f(r) for a rank at
// index r of the group: this rank's and every alike rank's.
func (c *Comm) countEach(kind Collective, f func(r int) (sent, recvd int64)) {
	s, r := f(c.rank)
	c.count(kind, s, r)
	for _, a := range c.alike {
		s, r := f(a.idx)
		a.traffic[kind].SentBytes += s
		a.traffic[kind].RecvBytes += r
	}
}

// countCall counts one call of kind, on this rank and every alike rank.
func (c *Comm) countCall(kind Collective) {
	c.traffic[kind].Calls++
	for _, a := range c.alike {
		a.traffic[kind].Calls++
	}
}

// standFor makes member i of a shape-only group count the traffic of the
// ranks alike too (ranks of the whole group, none of them a member).
func (g *Group) standFor(i int, alike []int) error {
	if g.computes {
		return fmt.Errorf("zero: a rank stands for others in a simulation only")
	}
	for _, r := range alike {
		if r < 0 || r >= g.size {
			return fmt.Errorf("zero: alike rank %d: out of range (valid: 0 to %d)", r, g.size-1)
		}
		g.comms[i].alike = append(g.comms[i].alike, &alikeRank{rank: r, idx: r})
	}
	return nil
}

// splitAlike gives sub, member k of a split's group made from parent p,
// the ranks p stands for at their places in their own groups (pos: a rank
// of p's group → its index in its group of the split).
func splitAlike(p, sub *Comm, pos func(int) int) {
	for _, a := range p.alike {
		sub.alike = append(sub.alike, &alikeRank{rank: a.rank, idx: pos(a.idx)})
	}
}

// alikeKey is what makes two ranks of a layout hold the same memory: their
// pipeline stage, the vocabulary rows of their tensor-parallel part (the
// first V mod t ranks hold one more), and, under the parameter server,
// whether they are the server (data rank 0).
func alikeKey(lay Layout, s model.Setup, set Setting, rank int) [3]int {
	c := lay.Coord(rank)
	_, rows := model.TensorRank{Size: lay.TP, Rank: c[TensorAxis]}.VocabRows(s.Model.Vocab)
	server := 0
	if set.PS && c[DataAxis] == 0 {
		server = 1
	}
	return [3]int{c[PipelineAxis], rows, server}
}

// representatives splits the ranks a simulation reports into those it runs
// (the first of each alike kind, in rank order) and, for each of them, the
// others it stands for.
func representatives(lay Layout, s model.Setup, set Setting, report []int) (run []int, alike [][]int) {
	first := map[[3]int]int{} // kind → its index in run
	for _, r := range report {
		k := alikeKey(lay, s, set, r)
		if i, ok := first[k]; ok {
			alike[i] = append(alike[i], r)
			continue
		}
		first[k] = len(run)
		run = append(run, r)
		alike = append(alike, nil)
	}
	return run, alike
}
