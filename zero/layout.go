package zero

// How the ranks of a data × tensor × pipeline run are arranged, and the
// groups each rank belongs to on each axis.

import (
	"fmt"
	"math"
	"sort"

	"trainmem/cuda/enum"
	"trainmem/model"
)

// Layout is DP·TP·PP ranks: DP data-parallel replicas (ZeRO shards over
// them), each a pipeline of PP stages, each stage TP tensor-parallel ranks.
// Ranks are numbered in Megatron-LM's order (megatron/core/parallel_state.py,
// initialize_model_parallel, its default order "tp-dp-pp"): the tensor rank
// varies fastest, then the data rank, then the pipeline stage,
//
//	rank = pp·(DP·TP) + dp·TP + tp,
//
// so a tensor-parallel group is TP consecutive ranks (one node's GPUs, over
// its fastest links) and a pipeline group strides over the whole run.
type Layout struct {
	DP, TP, PP int
}

// Axis is one dimension of a layout.
type Axis uint8

const (
	TensorAxis   Axis = iota // the ranks that split each layer's matrices
	DataAxis                 // the replicas that split the batch
	PipelineAxis             // the stages that split the layers
	NumAxes
)

var axisNames = enum.New[Axis]("zero", "Axis", "axis", "tensor", "data", "pipeline")

func (a Axis) String() string { return axisNames.String(a) }

// Coord is a rank's place in a layout: its tensor rank, data rank and
// pipeline stage, indexed by Axis.
type Coord [NumAxes]int

// MaxLayoutRanks is the most ranks a layout may have.
const MaxLayoutRanks = 1 << 30

// Check says whether every degree is at least 1 and the ranks number at
// most MaxLayoutRanks.
func (l Layout) Check() error {
	n := int64(1)
	for a := range NumAxes {
		d := l.Degree(a)
		if d < 1 || d > MaxLayoutRanks {
			return fmt.Errorf("zero: %s-parallel degree %d: out of range (valid: 1 to %d)", a, d, MaxLayoutRanks)
		}
		if n > math.MaxInt64/int64(d) || n*int64(d) > MaxLayoutRanks {
			return fmt.Errorf("zero: layout %v has more than %d ranks", l, MaxLayoutRanks)
		}
		n *= int64(d)
	}
	return nil
}

// Degree is the layout's size along a.
func (l Layout) Degree(a Axis) int {
	switch a {
	case TensorAxis:
		return l.TP
	case DataAxis:
		return l.DP
	case PipelineAxis:
		return l.PP
	}
	return 0
}

// LayoutOf is the layout of a setup's ranks: its data-parallel ranks, its
// tensor-parallel ranks and its pipeline stages.
func LayoutOf(s model.Setup) Layout { return Layout{DP: s.Ranks, TP: s.TP, PP: s.PP} }

// Size is the number of ranks, DP·TP·PP (the layout must Check).
func (l Layout) Size() int { return l.DP * l.TP * l.PP }

// stride is how far apart two ranks one step apart along a are.
func (l Layout) stride(a Axis) int {
	s := 1
	for b := range a { // the faster axes: tensor, then data
		s *= l.Degree(b)
	}
	return s
}

// Coord is rank's place in the layout, 0 ≤ rank < Size.
func (l Layout) Coord(rank int) Coord {
	var c Coord
	for a := range NumAxes {
		c[a] = rank / l.stride(a) % l.Degree(a)
	}
	return c
}

// Rank is the rank at c.
func (l Layout) Rank(c Coord) int {
	r := 0
	for a := range NumAxes {
		r += c[a] * l.stride(a)
	}
	return r
}

// Group is the ranks that share rank's place on every axis but a, in the
// order of their place on a: rank's group of that axis, with rank at
// index Coord(rank)[a].
func (l Layout) Group(a Axis, rank int) []int {
	c := l.Coord(rank)
	g := make([]int, l.Degree(a))
	for i := range g {
		c[a] = i
		g[i] = l.Rank(c)
	}
	return g
}

// GroupsOf is the groups of axis a that hold one of ranks, in the order of
// their first ranks: a simulation's few member ranks need their own
// groups, not the whole world's (a million ranks over tp 12 and pp 12
// listed 150 million).
func (l Layout) GroupsOf(a Axis, ranks []int) [][]int {
	seen := make(map[int]bool, len(ranks))
	var gs [][]int
	for _, r := range ranks {
		g := l.Group(a, r)
		if !seen[g[0]] {
			seen[g[0]] = true
			gs = append(gs, g)
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i][0] < gs[j][0] })
	return gs
}

// Groups is every group of axis a, in the order of their first ranks.
func (l Layout) Groups(a Axis) [][]int {
	var gs [][]int
	for r := range l.Size() {
		if l.Coord(r)[a] == 0 {
			gs = append(gs, l.Group(a, r))
		}
	}
	return gs
}

func (l Layout) String() string {
	return fmt.Sprintf("dp %d × tp %d × pp %d", l.DP, l.TP, l.PP)
}
