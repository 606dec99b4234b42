package model

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

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

// Every trainmem op of a graph hashes differently (the node tags), so two
// of trainmem's nodes merge only if two 32-bit hashes collide at once.
func TestOpHashesUnique(t *testing.T) {
	g, err := Build(Config{Name: "x", Layers: 3, Hidden: 32, Heads: 2, Vocab: 100, Context: 16, Untied: true}, 2, 8, tensor.Float32)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[uint32]string{}
	n := 0
	for _, nd := range g.G.AllNodes() {
		if nd.Op() == nil || !IsTrainmemOp(nd.Op()) {
			continue
		}
		n++
		h := nd.Op().Hashcode()
		if other, dup := seen[h]; dup {
			t.Errorf("%s and %s have one op hash %#x", other, nd.Name(), h)
		}
		seen[h] = nd.Name()
	}
	if n < 3*13 {
		t.Errorf("only %d trainmem ops", n)
	}
}

// A merge makes Build draw the hashes anew (with salted tags), and a merge
// in every try is an error that says so; the graph built on a retry is the
// same computation.
func TestBuildRetriesMerges(t *testing.T) {
	defer func() { testMerge = nil }()
	cfg := Config{Name: "tiny", Layers: 3, Hidden: 64, Heads: 4, Vocab: 256, Context: 64}
	want, err := Build(cfg, 2, 8, tensor.Float32)
	if err != nil {
		t.Fatal(err)
	}
	var tries []int
	testMerge = func(salt int) bool { tries = append(tries, salt); return salt < 2 }
	got, err := Build(cfg, 2, 8, tensor.Float32)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(tries) != "[0 1 2]" {
		t.Errorf("tries %v, want [0 1 2]", tries)
	}
	if len(got.G.AllNodes()) != len(want.G.AllNodes()) {
		t.Errorf("retry built %d nodes, first try %d", len(got.G.AllNodes()), len(want.G.AllNodes()))
	}
	for i, n := range got.G.AllNodes() {
		if w := want.G.AllNodes()[i]; n.Name() != w.Name() || fmt.Sprint(n.Op()) != fmt.Sprint(w.Op()) {
			t.Fatalf("node %d: %s %v, want %s %v", i, n.Name(), n.Op(), w.Name(), w.Op())
		}
	}
	testMerge = func(int) bool { return true }
	_, err = Build(cfg, 2, 8, tensor.Float32)
	if err == nil || !strings.Contains(err.Error(), "32-bit hashes collided") || !strings.Contains(err.Error(), "8 tries") {
		t.Errorf("a merge in every try: %v", err)
	}
}

// BenchmarkBuildLinearity builds the narrow model's graph at 256 and 2048
// layers and, interleaved in the same loop, a chain of as many nodes made by
// gorgonia alone (G.Add after G.Add in a graph seeded and presized as Build
// does: no trainmem op, no backward pass), each from a collected heap. The ratios set the build's
// growth beside the floor its dependency has on this machine: gorgonia's
// node making keeps a map entry or three a node, and at 2048 layers those
// maps and the nodes outgrow the last-level cache, so even its chain costs
// more a node (a linear count of work a node at both sizes).
func BenchmarkBuildLinearity(b *testing.B) {
	layers := []int{256, 2048}
	nodes := make([]int, len(layers))
	build, chain := make([]time.Duration, len(layers)), make([]time.Duration, len(layers))
	cfg := func(L int) Config {
		return Config{Name: "narrow", Layers: L, Hidden: 64, Heads: 4, Vocab: 256, Context: 64}
	}
	for i, L := range layers {
		gr, err := Build(cfg(L), 1, 64, tensor.Float32)
		if err != nil {
			b.Fatal(err)
		}
		nodes[i] = gr.NumNodes()
	}
	for b.Loop() {
		for i, L := range layers {
			runtime.GC()
			start := time.Now()
			if _, err := Build(cfg(L), 1, 64, tensor.Float32); err != nil {
				b.Fatal(err)
			}
			build[i] += time.Since(start)

			runtime.GC()
			start = time.Now()
			g := G.NewGraph()
			index := newGraphIndex(g)
			index.presize(nodes[i])
			index.ahead(nodes[i])
			x := G.NewMatrix(g, tensor.Float32, G.WithShape(4, 4), G.WithName("x"))
			w := G.NewMatrix(g, tensor.Float32, G.WithShape(4, 4), G.WithName("w"))
			for range nodes[i] - 2 {
				x = G.Must(G.Add(x, w))
			}
			chain[i] += time.Since(start)
		}
	}
	b.ReportMetric(float64(build[1])/float64(build[0]), "build-2048/256")
	b.ReportMetric(float64(chain[1])/float64(chain[0]), "gorgonia-2048/256")
	b.ReportMetric(float64(nodes[1]), "nodes@L=2048")
}
