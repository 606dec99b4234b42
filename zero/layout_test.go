package zero

import (
	"fmt"
	"strings"
	"testing"
)

// TestLayoutMegatronOrder holds the layout to the groups Megatron-LM's
// initialize_model_parallel documents for 16 GPUs with tensor-parallel 2 and
// pipeline-parallel 4 (megatron/core/parallel_state.py, its docstring: "8
// data_parallel groups: [g0, g2], [g1, g3], ..."), in its default order
// tp-dp-pp.
func TestLayoutMegatronOrder(t *testing.T) {
	l := Layout{DP: 2, TP: 2, PP: 4}
	if err := l.Check(); err != nil || l.Size() != 16 {
		t.Fatalf("%v: size %d, %v", l, l.Size(), err)
	}
	want := map[Axis]string{
		DataAxis:     "[0 2] [1 3] [4 6] [5 7] [8 10] [9 11] [12 14] [13 15]",
		TensorAxis:   "[0 1] [2 3] [4 5] [6 7] [8 9] [10 11] [12 13] [14 15]",
		PipelineAxis: "[0 4 8 12] [1 5 9 13] [2 6 10 14] [3 7 11 15]",
	}
	for a, w := range want {
		var gs []string
		for _, g := range l.Groups(a) {
			gs = append(gs, fmt.Sprint(g))
		}
		if got := strings.Join(gs, " "); got != w {
			t.Errorf("%s groups: %s, want %s", a, got, w)
		}
	}
}

// TestLayoutCoords: every rank of a few layouts goes to a place and back,
// each place once, and each of its groups holds it at its own place.
func TestLayoutCoords(t *testing.T) {
	for _, l := range []Layout{{1, 1, 1}, {3, 1, 1}, {1, 4, 1}, {1, 1, 5}, {2, 3, 4}, {4, 4, 4}} {
		seen := map[Coord]bool{}
		for r := range l.Size() {
			c := l.Coord(r)
			if seen[c] {
				t.Errorf("%v: rank %d at %v, a place already taken", l, r, c)
			}
			seen[c] = true
			for a := range NumAxes {
				if c[a] < 0 || c[a] >= l.Degree(a) {
					t.Errorf("%v: rank %d's %s place %d is out of range", l, r, a, c[a])
				}
				g := l.Group(a, r)
				if len(g) != l.Degree(a) || g[c[a]] != r {
					t.Errorf("%v: rank %d's %s group %v does not hold it at %d", l, r, a, g, c[a])
				}
			}
			if back := l.Rank(c); back != r {
				t.Errorf("%v: rank %d → %v → %d", l, r, c, back)
			}
		}
		for a := range NumAxes {
			if n := len(l.Groups(a)); n*l.Degree(a) != l.Size() {
				t.Errorf("%v: %d %s groups of %d ranks", l, n, a, l.Degree(a))
			}
		}
	}
}

func TestLayoutCheck(t *testing.T) {
	for _, x := range []struct {
		l    Layout
		want string
	}{
		{Layout{0, 1, 1}, "data-parallel degree 0: out of range (valid: 1 to 1073741824)"},
		{Layout{1, -2, 1}, "tensor-parallel degree -2"},
		{Layout{1, 1, 0}, "pipeline-parallel degree 0"},
		{Layout{1 << 20, 1 << 10, 2}, "has more than 1073741824 ranks"},
		{Layout{1 << 30, 1 << 30, 1 << 30}, "has more than 1073741824 ranks"},
	} {
		if err := x.l.Check(); err == nil || !strings.Contains(err.Error(), x.want) {
			t.Errorf("%v: %v, want an error saying %q", x.l, err, x.want)
		}
	}
}
