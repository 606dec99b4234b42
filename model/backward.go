package model

// The reverse pass: gorgonia.Backpropagate's algorithm, on the graph Build
// makes. gorgonia's version first works out, for any graph, an order and
// two reachability sets over every node (a sort, forward and backward
// analyses, set intersections: hash maps of the whole graph); in a
// simulation of thousands of blocks that was a fifth of the build. Build's
// graph is made in topological order (the inputs, then the forward ops,
// each after its arguments), so the reverse creation order is a reverse
// topological order, and it is the order gorgonia's sort gives such a graph
// (its ties go to the higher ID). Walking it, this pass makes the same
// nodes, in the same order, with the same gradients summed in the same
// order: TestReversePass holds it to gorgonia.Backpropagate node by node.

import (
	"fmt"

	G "gorgonia.org/gorgonia"
)

// backward differentiates loss with respect to wrt, seeded with dloss: the
// nodes are visited in reverse creation order; a node whose consumers sent
// it gradients sums them (gorgonia.ReduceAdd, in the order they were sent)
// and becomes its derivative (gorgonia.SetDerivOf); an op node then sends
// each differentiable argument its gradient from the op's SymDiff. Only
// nodes that depend differentiably on wrt are differentiated, as
// gorgonia's analysis has it. It returns wrt's gradients in order.
func (b *builder) backward(loss, dloss *G.Node, wrt []*G.Node) ([]*G.Node, error) {
	g := b.gr.G
	all := append([]*G.Node(nil), g.AllNodes()...)
	// The forward ops are the last nodes, in build order, after the inputs.
	inputs := len(all) - len(b.order)
	if inputs < 0 || len(b.order) > 0 && all[inputs] != b.order[0] {
		return nil, fmt.Errorf("model: the graph's nodes are not its inputs followed by its %d forward ops", len(b.order))
	}
	for i, n := range b.order {
		if all[inputs+i] != n {
			return nil, fmt.Errorf("model: node %s is not where the build made it", n.Name())
		}
	}

	// depends: the nodes a wrt node reaches through differentiable
	// arguments.
	depends := make(map[*G.Node]bool, len(all))
	for _, n := range wrt {
		depends[n] = true
	}
	for i, n := range b.order {
		diff := n.Op().(G.SDOp).DiffWRT(len(b.args[i]))
		for j, a := range b.args[i] {
			if diff[j] && depends[a] {
				depends[n] = true
				break
			}
		}
	}

	grads := make(map[*G.Node]G.Nodes, len(all))
	grads[loss] = G.Nodes{dloss}
	for i := len(all) - 1; i >= 0; i-- {
		n := all[i]
		gs := grads[n]
		if len(gs) == 0 || !depends[n] {
			continue
		}
		d := gs[0]
		if len(gs) > 1 {
			var err error
			if d, err = G.ReduceAdd(gs); err != nil {
				return nil, fmt.Errorf("model: summing the gradients of %s: %w", n.Name(), err)
			}
			grads[n] = G.Nodes{d}
		}
		G.SetDerivOf(d, n)
		if i < inputs {
			continue // an input: its gradient is complete
		}
		args := b.args[i-inputs]
		op := n.Op().(G.SDOp)
		dargs, err := op.SymDiff(args, n, d)
		if err != nil {
			return nil, fmt.Errorf("model: differentiating %s: %w", n.Name(), err)
		}
		if len(dargs) != len(args) {
			return nil, fmt.Errorf("model: differentiating %s: %d gradients for %d arguments", n.Name(), len(dargs), len(args))
		}
		for j, diff := range op.DiffWRT(len(args)) {
			if diff {
				grads[args[j]] = append(grads[args[j]], dargs[j])
			}
		}
	}
	out := make([]*G.Node, len(wrt))
	for i, n := range wrt {
		if len(grads[n]) == 0 || !depends[n] {
			return nil, fmt.Errorf("model: %s does not affect the loss: it has no gradient", n.Name())
		}
		out[i] = grads[n][0]
	}
	return out, nil
}
