package train

import (
	"fmt"
	"sort"
	"strings"

	"gorgonia.org/gorgonia"

	"trainmem/cuda"
	"trainmem/model"
)

// Phase is the part of a training step an instruction belongs to.
type Phase uint8

const (
	Forward   Phase = iota // the forward pass
	Recompute              // forward values dropped by the checkpoint policy, recomputed during backward
	Backward               // the backward pass
	Update                 // the optimizer
	numPhases
)

func (p Phase) String() string {
	return [...]string{"forward", "recompute", "backward", "update"}[p]
}

// Slot is one value instance of the schedule: a node's output from one
// execution. A node recomputed under checkpointing has two slots, one per
// execution. Persistent slots (parameters, gradients) are
// bound by the executor; the others are allocated by the instruction that
// produces them and freed after their last use.
type Slot struct {
	Node       *gorgonia.Node
	Len        int        // elements
	DType      cuda.DType // storage type
	Cat        cuda.Category
	Persistent bool // bound for the whole run: parameters and gradients
	Input      bool // a step input (tokens, targets, loss seed): allocated and uploaded by the executor just before its first use
	Param      int  // parameter-table row for parameter and gradient slots, else -1
}

// Instr runs one node's op.
type Instr struct {
	Phase Phase
	Node  *gorgonia.Node
	Out   int   // slot written
	Args  []int // slots read, in the op's argument order
	Free  []int // slots freed once this instruction is done
	Layer int   // the forward layer of the node (model.Graph.Layer), -2 for backward nodes

	run kernel
}

// Schedule is a compiled training step: every instruction of the forward,
// recompute and backward passes in execution order, with the liveness of
// every value.
type Schedule struct {
	Graph  *model.Graph
	Slots  []Slot
	Instrs []Instr

	Tokens, Targets, DLoss, Loss int   // slots of the step's inputs, the loss seed and the loss
	ParamSlots, GradSlots        []int // one per parameter-table row

	// Dropped lists the forward nodes the checkpoint policy frees after the
	// forward pass and recomputes during backward.
	Dropped []*gorgonia.Node
}

// compile turns the graph into a schedule for a precision and checkpoint
// policy.
//
// Order: nodes run in creation order, which is a topological order (a node
// can only be created after its arguments). The builder creates the forward
// pass layer by layer and gorgonia's Backpropagate creates gradient nodes as
// it walks back from the loss, so the backward pass runs block by block in
// reverse, the order PyTorch's autograd would take.
//
// Liveness: every value is freed right after its last use. A forward value
// read by the backward pass is an activation; one that dies in the forward
// pass is a temporary; so is every backward value but the parameter
// gradients, which are written straight into the grads buffer.
//
// Checkpointing: the policy assigns forward nodes to segments. A value
// used by the backward pass whose segment is dropped and which no later
// segment reads is freed after its last forward use; before the first
// backward instruction that needs one of a segment's dropped values, the
// segment's forward instructions needed to produce them run again.
func compile(gr *model.Graph, st storage, pol model.Checkpoint) (*Schedule, error) {
	s := &Schedule{Graph: gr}
	g := gr.G

	// Every node the loss and the gradients depend on, in creation order.
	roots := append(gorgonia.Nodes{gr.Loss}, gr.Grads...)
	seen := map[*gorgonia.Node]bool{}
	var nodes gorgonia.Nodes
	var walk func(n *gorgonia.Node)
	walk = func(n *gorgonia.Node) {
		if seen[n] {
			return
		}
		seen[n] = true
		for _, c := range children(g, n) {
			walk(c)
		}
		nodes = append(nodes, n)
	}
	for _, r := range roots {
		walk(r)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID() < nodes[j].ID() })

	param := map[*gorgonia.Node]int{}
	for i, p := range gr.Params {
		param[p] = i
	}
	gradOf := map[*gorgonia.Node]int{}
	for i, d := range gr.Grads {
		if d.Op() == nil {
			return nil, fmt.Errorf("train: the gradient of %s is an input node, not computed", gr.Config.Params()[i].Name)
		}
		if j, dup := gradOf[d]; dup {
			return nil, fmt.Errorf("train: parameters %d and %d share one gradient node", j, i)
		}
		gradOf[d] = i
	}

	// Phases and consumers.
	backward := map[*gorgonia.Node]bool{gr.DLoss: true}
	consumers := map[*gorgonia.Node][]*gorgonia.Node{}
	for _, n := range nodes {
		for _, c := range children(g, n) {
			consumers[c] = append(consumers[c], n)
			if backward[c] {
				backward[n] = true
			}
		}
	}
	usedByBackward := func(n *gorgonia.Node) bool {
		for _, c := range consumers[n] {
			if backward[c] {
				return true
			}
		}
		return false
	}

	// Persistent slots.
	newSlot := func(sl Slot) int {
		s.Slots = append(s.Slots, sl)
		return len(s.Slots) - 1
	}
	live := map[*gorgonia.Node]int{}
	table := gr.Config.Params()
	s.ParamSlots = make([]int, len(table))
	s.GradSlots = make([]int, len(table))
	for i, p := range gr.Params {
		s.ParamSlots[i] = newSlot(Slot{Node: p, Len: int(table[i].Count), DType: st.param, Cat: cuda.Params, Persistent: true, Param: i})
		live[p] = s.ParamSlots[i]
	}
	for i, d := range gr.Grads {
		s.GradSlots[i] = newSlot(Slot{Node: d, Len: int(table[i].Count), DType: st.param, Cat: cuda.Grads, Persistent: true, Param: i})
	}
	// The step's inputs are kept for backward (the embedding and the loss
	// gradients read them), so they count as activations; the loss seed lives
	// in the backward pass only.
	s.Tokens = newSlot(Slot{Node: gr.Tokens, Len: size(gr.Tokens), DType: cuda.I32, Cat: cuda.Activations, Input: true, Param: -1})
	s.Targets = newSlot(Slot{Node: gr.Targets, Len: size(gr.Targets), DType: cuda.I32, Cat: cuda.Activations, Input: true, Param: -1})
	s.DLoss = newSlot(Slot{Node: gr.DLoss, Len: 1, DType: st.state, Cat: cuda.Temporaries, Input: true, Param: -1})
	live[gr.Tokens], live[gr.Targets], live[gr.DLoss] = s.Tokens, s.Targets, s.DLoss

	for _, n := range nodes {
		if n.Op() == nil {
			if _, ok := live[n]; !ok {
				return nil, fmt.Errorf("train: input node %q is neither a parameter nor a step input", n.Name())
			}
		}
	}

	// Checkpoint segments.
	seg := map[*gorgonia.Node]int{}
	for _, n := range nodes {
		if n.Op() != nil && !backward[n] {
			seg[n] = segment(pol, gr, n)
		}
	}
	dropped := map[*gorgonia.Node]bool{}
	for _, n := range nodes {
		sg, ok := seg[n]
		if !ok || sg < 0 || !usedByBackward(n) {
			continue
		}
		// A value a later segment reads is that segment's checkpoint. (A
		// selective segment is one node, read only by the rest of its block.)
		crosses := false
		for _, c := range consumers[n] {
			if !backward[c] && seg[c] != sg {
				crosses = true
			}
		}
		if pol.Kind == model.CheckpointSelective || !crosses {
			dropped[n] = true
			s.Dropped = append(s.Dropped, n)
		}
	}

	outDType := func(n *gorgonia.Node) cuda.DType {
		if model.IsStatistic(n.Op()) {
			return st.state
		}
		return st.param
	}
	kernels := map[*gorgonia.Node]kernel{}
	for _, n := range nodes {
		if n.Op() == nil {
			continue
		}
		k, err := lower(n.Op())
		if err != nil {
			return nil, fmt.Errorf("%w (node %s)", err, n.Name())
		}
		kernels[n] = k
	}
	emit := func(ph Phase, n *gorgonia.Node, cat cuda.Category) error {
		in := Instr{Phase: ph, Node: n, Layer: layerOf(gr, n), run: kernels[n]}
		for _, c := range children(g, n) {
			sl, ok := live[c]
			if !ok {
				return fmt.Errorf("train: %s (%s) reads %s, which is not live", n.Name(), ph, c.Name())
			}
			in.Args = append(in.Args, sl)
		}
		if i, isGrad := gradOf[n]; isGrad {
			in.Out = s.GradSlots[i]
		} else {
			in.Out = newSlot(Slot{Node: n, Len: size(n), DType: outDType(n), Cat: cat, Param: -1})
		}
		live[n] = in.Out
		s.Instrs = append(s.Instrs, in)
		return nil
	}

	// Forward.
	for _, n := range nodes {
		if n.Op() == nil || backward[n] {
			continue
		}
		cat := cuda.Temporaries
		if usedByBackward(n) && !dropped[n] {
			cat = cuda.Activations
		}
		if err := emit(Forward, n, cat); err != nil {
			return nil, err
		}
		if n == gr.Loss {
			s.Loss = live[n]
		}
	}
	// After the forward pass only the kept activations remain: temporaries
	// and dropped values died at their last forward use.
	for _, n := range nodes {
		if n.Op() != nil && !backward[n] && (dropped[n] || !usedByBackward(n)) {
			delete(live, n)
		}
	}

	// Backward, recomputing a segment before its first use.
	recomputed := map[int]bool{}
	var recompute func(target *gorgonia.Node, done map[*gorgonia.Node]bool) error
	recompute = func(t *gorgonia.Node, done map[*gorgonia.Node]bool) error {
		if _, ok := live[t]; ok || done[t] {
			return nil
		}
		done[t] = true
		if _, ok := seg[t]; !ok {
			return fmt.Errorf("train: %s is needed for recomputation but is not a forward value", t.Name())
		}
		for _, c := range children(g, t) {
			if err := recompute(c, done); err != nil {
				return err
			}
		}
		return nil
	}
	for _, n := range nodes {
		if !backward[n] || n.Op() == nil {
			continue
		}
		for _, c := range children(g, n) {
			if !dropped[c] {
				continue
			}
			if _, ok := live[c]; ok {
				continue
			}
			sg := seg[c]
			if recomputed[sg] {
				return nil, fmt.Errorf("train: segment %d was recomputed already but %s is no longer live", sg, c.Name())
			}
			recomputed[sg] = true
			need := map[*gorgonia.Node]bool{}
			for _, d := range s.Dropped {
				if seg[d] == sg {
					if err := recompute(d, need); err != nil {
						return nil, err
					}
				}
			}
			for _, m := range nodes { // creation order
				if !need[m] {
					continue
				}
				cat := cuda.Temporaries
				if usedByBackward(m) {
					cat = cuda.Activations
				}
				if err := emit(Recompute, m, cat); err != nil {
					return nil, err
				}
			}
		}
		if err := emit(Backward, n, cuda.Temporaries); err != nil {
			return nil, err
		}
	}

	s.liveness()
	return s, nil
}

// liveness frees every non-persistent slot after its last use; a value that
// nothing reads is freed right after it is produced.
func (s *Schedule) liveness() {
	last := make([]int, len(s.Slots))
	for i := range last {
		last[i] = -1
	}
	for i, in := range s.Instrs {
		last[in.Out] = max(last[in.Out], i)
		for _, a := range in.Args {
			last[a] = i
		}
	}
	for sl, i := range last {
		if i >= 0 && !s.Slots[sl].Persistent {
			s.Instrs[i].Free = append(s.Instrs[i].Free, sl)
		}
	}
}

// Summary counts instructions per phase.
func (s *Schedule) Summary() string {
	var n [numPhases]int
	for _, in := range s.Instrs {
		n[in.Phase]++
	}
	var parts []string
	for p := Phase(0); p < Update; p++ {
		parts = append(parts, fmt.Sprintf("%s %d", p, n[p]))
	}
	return fmt.Sprintf("%d slots; instructions: %s; %d values dropped for recomputation",
		len(s.Slots), strings.Join(parts, ", "), len(s.Dropped))
}

func children(g *gorgonia.ExprGraph, n *gorgonia.Node) gorgonia.Nodes {
	it := g.From(n.ID())
	var out gorgonia.Nodes
	for it.Next() {
		out = append(out, it.Node().(*gorgonia.Node))
	}
	return out
}

func size(n *gorgonia.Node) int {
	if n.IsScalar() {
		return 1
	}
	return n.Shape().TotalSize()
}

// layerOf is the forward layer of a node, or -2 for nodes outside the
// forward pass (inputs and backward nodes).
func layerOf(gr *model.Graph, n *gorgonia.Node) int {
	if l, ok := gr.Layer[n]; ok {
		return l
	}
	return -2
}
