package zero

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"trainmem/cuda"
)

// TestSplitCollectives runs, in one Run of a dp 2 × tp 2 × pp 2 group of
// host ranks, an all-reduce on each rank's tensor, data and pipeline group
// in turn, and an all-gather on its tensor group, and holds every result to
// a sequential reference: the float64 sum (or the concatenation) of the
// values the group's ranks hold, in the group's rank order. Each sub-group
// counts its own traffic, the ring's for a group of its size.
func TestSplitCollectives(t *testing.T) {
	l := Layout{DP: 2, TP: 2, PP: 2}
	g, err := NewGroup(hosts(t, l.Size()))
	if err != nil {
		t.Fatal(err)
	}
	axes := map[Axis][]*Group{}
	for a := range NumAxes {
		if axes[a], err = g.Split(l.Groups(a)); err != nil {
			t.Fatal(err)
		}
	}
	const n = 37 // not a multiple of any group's size
	rng := rand.New(rand.NewPCG(1, 2))
	inputs := make([][]float64, l.Size()) // rank r's values
	for r := range inputs {
		inputs[r] = make([]float64, n)
		for i := range inputs[r] {
			inputs[r][i] = float64(rng.IntN(2001)-1000) / 8 // exact in fp32, sums too
		}
	}
	got := make([]map[Axis][]float64, l.Size())
	gathered := make([][]float64, l.Size())
	err = g.Run(func(c *Comm) error {
		d := c.Device()
		got[c.Rank()] = map[Axis][]float64{}
		for a := range NumAxes {
			sub := axes[a][groupIndex(l, a, c.Rank())]
			sc, ok := sub.Sub(c)
			if !ok {
				return errors.New("not a member of its own group")
			}
			b, err := d.Alloc(cuda.Grads, cuda.F32, n)
			if err != nil {
				return err
			}
			if err := d.Upload(b, inputs[c.Rank()]); err != nil {
				return err
			}
			if err := sc.AllReduce(b, b, Sum); err != nil {
				return err
			}
			v := make([]float64, n)
			if err := d.Download(v, b); err != nil {
				return err
			}
			got[c.Rank()][a] = v
			d.Free(b)
		}
		sc, _ := axes[TensorAxis][groupIndex(l, TensorAxis, c.Rank())].Sub(c)
		send, err := d.Alloc(cuda.Grads, cuda.F32, n)
		if err != nil {
			return err
		}
		recv, err := d.Alloc(cuda.Grads, cuda.F32, n*l.TP)
		if err != nil {
			return err
		}
		if err := d.Upload(send, inputs[c.Rank()]); err != nil {
			return err
		}
		if err := sc.AllGather(send, recv); err != nil {
			return err
		}
		gathered[c.Rank()] = make([]float64, n*l.TP)
		return d.Download(gathered[c.Rank()], recv)
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := range l.Size() {
		for a := range NumAxes {
			want := make([]float64, n)
			for _, q := range l.Group(a, r) {
				for i, v := range inputs[q] {
					want[i] += v
				}
			}
			for i := range want {
				if got[r][a][i] != want[i] {
					t.Fatalf("rank %d, %s group %v: element %d is %g, the sum is %g", r, a, l.Group(a, r), i, got[r][a][i], want[i])
				}
			}
		}
		var want []float64
		for _, q := range l.Group(TensorAxis, r) {
			want = append(want, inputs[q]...)
		}
		for i := range want {
			if gathered[r][i] != want[i] {
				t.Fatalf("rank %d: gathered element %d is %g, want %g", r, i, gathered[r][i], want[i])
			}
		}
	}
	// Traffic: each sub-group's ranks made one all-reduce (the tensor
	// groups an all-gather too), at the ring's bytes for 2 ranks; the
	// group it was split from made none.
	for a := range NumAxes {
		for _, sub := range axes[a] {
			for i := range sub.Members() {
				tr := sub.Comm(i).Traffic()
				k := call{kind: AllReduce, dtype: cuda.F32, sendLen: n, recvLen: n}
				sent, recvd := k.ringTraffic(sub.Comm(i).Rank(), sub.Size())
				if tr[AllReduce] != (Traffic{Calls: 1, SentBytes: sent, RecvBytes: recvd}) {
					t.Errorf("%s group rank %d: all-reduce traffic %+v, want 1 call, %d sent, %d received", a, i, tr[AllReduce], sent, recvd)
				}
			}
		}
	}
	for i := range g.Members() {
		if tr := g.Comm(i).Traffic(); tr != ([NumCollectives]Traffic{}) {
			t.Errorf("the split group's rank %d counted traffic %+v", i, tr)
		}
	}
}

// groupIndex is the index, in Layout.Groups(a), of rank's group.
func groupIndex(l Layout, a Axis, rank int) int {
	first := l.Group(a, rank)[0]
	for i, g := range l.Groups(a) {
		if g[0] == first {
			return i
		}
	}
	return -1
}

// TestSplitLeave: a rank that fails ends the sub-groups it belongs to: its
// tensor-group peer, waiting there in an all-reduce, fails naming it, and
// nothing hangs.
func TestSplitLeave(t *testing.T) {
	l := Layout{DP: 2, TP: 2, PP: 1}
	g, err := NewGroup(shapes(l.Size()))
	if err != nil {
		t.Fatal(err)
	}
	tp, err := g.Split(l.Groups(TensorAxis))
	if err != nil {
		t.Fatal(err)
	}
	err = g.Run(func(c *Comm) error {
		if c.Rank() == 3 {
			return errors.New("rank 3's own failure")
		}
		sc, _ := tp[groupIndex(l, TensorAxis, c.Rank())].Sub(c)
		b, err := c.Device().Alloc(cuda.Grads, cuda.F32, 8)
		if err != nil {
			return err
		}
		return sc.AllReduce(b, b, Sum)
	})
	if err == nil || !strings.Contains(err.Error(), "rank 2: zero: rank 3 left the group (it failed (rank 3: rank 3's own failure))") {
		t.Errorf("rank 2's wait for rank 3: %v", err)
	}
	// The first tensor group, ranks 0 and 1, finished.
	if err != nil && strings.Contains(err.Error(), "rank 0:") {
		t.Errorf("ranks 0 and 1 did not need rank 3: %v", err)
	}
}

// TestSplitErrors: a split that repeats a rank, names one outside the
// group or leaves a computing group's rank out of its members is refused,
// naming it; a sparse group's sub-groups hold its members only.
func TestSplitErrors(t *testing.T) {
	g, err := NewGroup(shapes(4))
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		groups [][]int
		want   string
	}{
		{[][]int{{0, 1}, {1, 2}}, "rank 1 is in sub-groups 0 and 1"},
		{[][]int{{0, 4}}, "rank 4 is not in the group (valid: 0 to 3)"},
		{[][]int{{}}, "sub-group 0 has no ranks"},
	} {
		if _, err := g.Split(x.groups); err == nil || !strings.Contains(err.Error(), x.want) {
			t.Errorf("%v: %v, want %q", x.groups, err, x.want)
		}
	}
	sp, err := NewSparseGroup(shapes(2), []int{0, 5}, 8)
	if err != nil {
		t.Fatal(err)
	}
	subs, err := sp.Split(Layout{DP: 2, TP: 4, PP: 1}.Groups(TensorAxis))
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 2 || subs[0].Size() != 4 || subs[0].Members() != 1 || subs[1].Members() != 1 || subs[1].Comm(0).Rank() != 1 {
		t.Errorf("sparse split: %d groups", len(subs))
	}
}

// TestSplitOverTCP: four processes' ranks (TCP links, as four processes
// would have) split into a dp 2 × tp 2 layout's tensor and data groups:
// an all-reduce on each tensor group equals the sum of its ranks' values,
// and each data group (ranks 0 and 2, 1 and 3: not ring neighbours, so
// they need the link's mesh) exchanges by SendRecv value by value, over
// the parent's links with the sub-groups' ranks translated, as over MPI
// (TestMPISendRecv splits the same layout).
func TestSplitOverTCP(t *testing.T) {
	l := Layout{DP: 2, TP: 2, PP: 1}
	gs, _, run := linkedGroups(t, l.Size())
	err := run(func(c *Comm) error {
		return splitAndExchange(c, gs[c.Rank()], l, true)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tensorSum all-reduces rank c's salted values over its group of tp, the
// tensor groups of l, and checks them against the sum of its ranks'.
func tensorSum(c *Comm, tp []*Group, l Layout) error {
	r, d := c.Rank(), c.Device()
	sc, ok := tp[groupIndex(l, TensorAxis, r)].Sub(c)
	if !ok {
		return errors.New("not in its own tensor group")
	}
	b := filledOn(d, cuda.F32, 5, r)
	defer d.Free(b)
	if err := sc.AllReduce(b, b, Sum); err != nil {
		return err
	}
	want := make([]float64, 5)
	for _, q := range l.Group(TensorAxis, r) {
		for i, v := range saltedValues(5, q) {
			want[i] += v
		}
	}
	if got := download(d, b); fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("rank %d: tensor all-reduce %v, want %v", r, got, want)
	}
	return nil
}

// splitTensorData splits g into l's tensor groups, then its data groups.
func splitTensorData(g *Group, l Layout) (tp, dp []*Group, err error) {
	if tp, err = g.Split(l.Groups(TensorAxis)); err != nil {
		return nil, nil, err
	}
	dp, err = g.Split(l.Groups(DataAxis))
	return tp, dp, err
}

// splitAndExchange is one rank's part of a split layout's exchanges: it
// splits its group (g; nil: c's own) into the tensor groups and, with
// data, the data groups; an all-reduce on its tensor group is checked
// against the sum of its ranks' values, and its data group exchanges by
// SendRecv (ringAndChain, checked value by value).
func splitAndExchange(c *Comm, g *Group, l Layout, data bool) error {
	if g == nil {
		g = c.g
	}
	r := c.Rank()
	tp, err := g.Split(l.Groups(TensorAxis))
	if err != nil {
		return err
	}
	for j, sub := range tp {
		if mine := j == groupIndex(l, TensorAxis, r); (sub != nil) != mine && g.Link() != nil {
			return fmt.Errorf("rank %d: over processes a rank gets its own tensor group only (group %d: %v)", r, j, sub != nil)
		}
	}
	if err := tensorSum(c, tp, l); err != nil {
		return err
	}
	if !data {
		return nil
	}
	dp, err := g.Split(l.Groups(DataAxis))
	if err != nil {
		return err
	}
	dc, _ := dp[groupIndex(l, DataAxis, r)].Sub(c)
	return ringAndChain(dc, cuda.F32, 3)
}
