package model

import (
	"fmt"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// The pinned gorgonia has the node cache graph_index.go seeds: if a new
// version renames or retypes it, the build is quadratic again and this
// test says so.
func TestGraphIndexFound(t *testing.T) {
	if newGraphIndex(G.NewGraph()) == nil {
		t.Fatal("gorgonia's ExprGraph has no byID map[int64]int and counter uint: the build is quadratic in the graph's size again (model/graph_index.go)")
	}
}

// Seeding the cache changes no answer: the graph built with it is the
// graph built without it, node for node (ID, name, op, arguments), and
// every node is found under its ID.
func TestGraphIndexSameGraph(t *testing.T) {
	describe := func(g *Graph) []string {
		var d []string
		for _, n := range g.G.AllNodes() {
			var args []int64
			for _, a := range Args(n) {
				args = append(args, a.ID())
			}
			d = append(d, fmt.Sprintf("%d %s %v %v %v", n.ID(), n.Name(), n.Op(), n.Shape(), args))
		}
		for _, n := range g.Grads {
			d = append(d, fmt.Sprintf("grad %d", n.ID()))
		}
		return d
	}
	for _, cfg := range []Config{
		{Name: "tiny", Layers: 2, Hidden: 64, Heads: 4, Vocab: 256, Context: 64},
		{Name: "untied", Layers: 3, Hidden: 32, Heads: 2, Vocab: 100, Context: 16, Untied: true},
	} {
		seeded, err := Build(cfg, 2, 8, tensor.Float32)
		if err != nil {
			t.Fatal(err)
		}
		seedGraphIndex = false
		plain, err := Build(cfg, 2, 8, tensor.Float32)
		seedGraphIndex = true
		if err != nil {
			t.Fatal(err)
		}
		a, b := describe(seeded), describe(plain)
		if len(a) != len(b) {
			t.Fatalf("%s: %d nodes seeded, %d without", cfg.Name, len(a), len(b))
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s: node %d differs:\n seeded  %s\n without %s", cfg.Name, i, a[i], b[i])
			}
		}
		if err := checkGraphIndex(seeded.G); err != nil {
			t.Error(err)
		}
	}
}

// A wrong cache entry is caught by the check after the build.
func TestGraphIndexCheckCatchesWrongEntry(t *testing.T) {
	g := G.NewGraph()
	a := G.NewScalar(g, tensor.Float32, G.WithName("a"))
	G.NewScalar(g, tensor.Float32, G.WithName("b"))
	x := newGraphIndex(g)
	x.byID[a.ID()] = 1 // the index of b
	if err := checkGraphIndex(g); err == nil {
		t.Fatal("a cache entry pointing at the wrong node passed the check")
	}
}
