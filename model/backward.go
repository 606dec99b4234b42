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

// someDiffer is an op that can differentiate some of its arguments only:
// symDiffSome is SymDiff of the arguments need says (nil: all), nil for the
// others, and makes no node for them.
type someDiffer interface {
	symDiffSome(in G.Nodes, out, dy *G.Node, need []bool) (G.Nodes, error)
}

// needs reports whether need (nil: every argument) asks for argument i.
func needs(need []bool, i int) bool { return need == nil || need[i] }

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

	// Tables by place in all, not hash maps: at thousands of layers a map
	// of the whole graph outgrows the cache and every probe misses.
	// gorgonia gives node i of all the ID i while no node is removed; a
	// node found elsewhere is looked up by a map made only then.
	var elsewhere map[*G.Node]int
	place := func(n *G.Node) (int, error) {
		if id := n.ID(); id >= 0 && id < int64(len(all)) && all[id] == n {
			return int(id), nil
		}
		if elsewhere == nil {
			elsewhere = make(map[*G.Node]int, len(all))
			for i, m := range all {
				elsewhere[m] = i
			}
		}
		if i, ok := elsewhere[n]; ok {
			return i, nil
		}
		return -1, fmt.Errorf("model: node %s is not one of the graph's nodes", n.Name())
	}

	// depends: the nodes a wrt node reaches through differentiable
	// arguments.
	depends := make([]bool, len(all))
	for _, n := range wrt {
		i, err := place(n)
		if err != nil {
			return nil, err
		}
		depends[i] = true
	}
	for i, n := range b.order {
		diff := n.Op().(G.SDOp).DiffWRT(len(b.args[i]))
		for j, a := range b.args[i] {
			k, err := place(a)
			if err != nil {
				return nil, err
			}
			if diff[j] && depends[k] {
				depends[inputs+i] = true
				break
			}
		}
	}

	grads := make([]G.Nodes, len(all))
	at, err := place(loss)
	if err != nil {
		return nil, err
	}
	grads[at] = G.Nodes{dloss}
	for i := len(all) - 1; i >= 0; i-- {
		n := all[i]
		gs := grads[i]
		if len(gs) == 0 || !depends[i] {
			continue
		}
		d := gs[0]
		if len(gs) > 1 {
			var err error
			if d, err = G.ReduceAdd(gs); err != nil {
				return nil, fmt.Errorf("model: summing the gradients of %s: %w", n.Name(), err)
			}
			grads[i] = G.Nodes{d}
		}
		G.SetDerivOf(d, n)
		if i < inputs {
			continue // an input: its gradient is complete
		}
		args := b.args[i-inputs]
		op := n.Op().(G.SDOp)
		// need: the differentiable arguments that depend on wrt. The
		// others (a frozen weight; an input with nothing trained below it)
		// get no gradient, and no node is made for one.
		diff := op.DiffWRT(len(args))
		need := make([]bool, len(args))
		at := make([]int, len(args)) // each argument's place
		some := false
		for j := range args {
			if at[j], err = place(args[j]); err != nil {
				return nil, err
			}
			need[j] = diff[j] && depends[at[j]]
			some = some || diff[j] && !need[j]
		}
		made := len(g.AllNodes())
		var dargs G.Nodes
		if s, ok := op.(someDiffer); ok && some {
			dargs, err = s.symDiffSome(args, n, d, need)
		} else {
			dargs, err = op.SymDiff(args, n, d)
		}
		if err != nil {
			return nil, fmt.Errorf("model: differentiating %s: %w", n.Name(), err)
		}
		if len(dargs) != len(args) {
			return nil, fmt.Errorf("model: differentiating %s: %d gradients for %d arguments", n.Name(), len(dargs), len(args))
		}
		for j := range args {
			if diff[j] && !need[j] && dargs[j] != nil && dargs[j].ID() >= int64(made) {
				return nil, fmt.Errorf("model: differentiating %s: it made a gradient of %s, which nothing trained needs (an op with arguments that may be frozen implements symDiffSome)", n.Name(), args[j].Name())
			}
			if need[j] {
				grads[at[j]] = append(grads[at[j]], dargs[j])
			}
		}
	}
	out := make([]*G.Node, len(wrt))
	for i, n := range wrt {
		k, err := place(n)
		if err != nil {
			return nil, err
		}
		if len(grads[k]) == 0 || !depends[k] {
			return nil, fmt.Errorf("model: %s does not affect the loss: it has no gradient", n.Name())
		}
		out[i] = grads[k][0]
	}
	return out, nil
}
