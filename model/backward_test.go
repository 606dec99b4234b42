package model

import (
	"fmt"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestReversePass holds the reverse pass (backward.go) to
// gorgonia.Backpropagate: for tied and untied heads and a few depths, the
// two builds have the same nodes in the same order (each node's name, op,
// shape and arguments), the same derivative of every node and the same
// gradient of every parameter.
func TestReversePass(t *testing.T) {
	describe := func(gr *Graph) []string {
		id := map[*G.Node]int64{}
		for _, n := range gr.G.AllNodes() {
			id[n] = n.ID()
		}
		var out []string
		for _, n := range gr.G.AllNodes() {
			line := fmt.Sprintf("%d %s %v", n.ID(), n.Name(), n.Shape())
			if n.Op() != nil {
				line += " " + n.Op().String()
			}
			for _, a := range Args(n) {
				line += fmt.Sprintf(" %d", id[a])
			}
			if d := n.Deriv(); d != nil {
				line += fmt.Sprintf(" d=%d", id[d])
			}
			out = append(out, line)
		}
		for i, d := range gr.Grads {
			out = append(out, fmt.Sprintf("grad %s = %d", gr.Table[i].Name, id[d]))
		}
		return out
	}
	for _, x := range []struct {
		layers int
		untied bool
	}{{1, false}, {2, true}, {5, false}} {
		cfg := preset(t, "tiny")
		cfg.Layers, cfg.Untied = x.layers, x.untied
		build := func(gorgonia bool) []string {
			gorgoniaBackprop = gorgonia
			defer func() { gorgoniaBackprop = false }()
			gr, err := Build(cfg, 2, 8, tensor.Float64)
			if err != nil {
				t.Fatal(err)
			}
			return describe(gr)
		}
		ours, theirs := build(false), build(true)
		if len(ours) != len(theirs) {
			t.Errorf("L=%d untied=%t: %d nodes and gradients, gorgonia's pass %d", x.layers, x.untied, len(ours), len(theirs))
		}
		for i := range min(len(ours), len(theirs)) {
			if ours[i] != theirs[i] {
				t.Errorf("L=%d untied=%t: line %d\n ours     %s\n gorgonia %s", x.layers, x.untied, i, ours[i], theirs[i])
				break
			}
		}
	}
}
