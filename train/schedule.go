package train

import (
	"fmt"
	"strings"

	"gorgonia.org/gorgonia"

	"trainmem/cuda"
	"trainmem/cuda/enum"
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

var phaseNames = enum.New[Phase]("train", "Phase", "phase", "forward", "recompute", "backward", "update")

func (p Phase) String() string { return phaseNames.String(p) }

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
	Input      bool // a step input (tokens, targets, loss seed, a pipeline stage's input): allocated and filled by the executor just before its first use
	// Sent is a pipeline stage's output or input gradient, which no
	// instruction reads: the trainer frees it once it is sent.
	Sent  bool
	Param int // parameter-table row for parameter and gradient slots, else -1
}

// Instr runs one node's op.
type Instr struct {
	Phase Phase
	Node  *gorgonia.Node
	Out   int   // slot written
	Args  []int // slots read, in the op's argument order
	Free  []int // slots freed once this instruction is done
	Layer int   // the forward layer of the node (model.Graph.LayerOf), -2 for backward nodes
	// Accumulate: the instruction adds its result into its output, a
	// parameter's gradient that an earlier term already wrote (a weight
	// used twice: the tied embedding's head and lookup). Partial: a later
	// instruction adds the gradient's next term, so it is not complete yet
	// (no policy hears of it).
	Accumulate, Partial bool

	run kernel
}

// Schedule is a compiled training step: every instruction of the forward,
// recompute and backward passes in execution order, with the liveness of
// every value.
type Schedule struct {
	Graph  *model.Graph
	Slots  []Slot
	Instrs []Instr

	Tokens, Targets, DLoss, Loss int   // slots of the step's inputs, the loss seed (a stage's output gradient) and the loss (-1 on a stage before the last)
	ParamSlots, GradSlots        []int // one per parameter-table row (GradSlots -1 for a frozen row)
	// Input, Output and DInput are a pipeline stage's received input, its
	// output and its input's gradient (model.Graph's), -1 where the stage
	// has none.
	Input, Output, DInput int
	// Backward0 is the first instruction after the forward pass: a
	// micro-batch's forward pass is Instrs[:Backward0], its backward pass
	// (with recomputation) the rest.
	Backward0 int

	// Dropped lists the forward nodes the checkpoint policy frees after the
	// forward pass and recomputes during backward.
	Dropped []*gorgonia.Node
}

// compile turns the graph into a schedule for a precision and checkpoint
// policy, in passes that each read what the earlier ones found (the
// compiler's fields, in pass order) and can be tested one by one:
//
//   - order: every node the loss and the gradients depend on, in creation
//     order, which is a topological order (a node can only be created after
//     its arguments). The builder creates the forward pass layer by layer
//     and gorgonia's Backpropagate creates gradient nodes as it walks back
//     from the loss, so the backward pass runs block by block in reverse,
//     the order PyTorch's autograd would take.
//   - phases: which nodes belong to the backward pass (everything that
//     depends on the loss seed) and who consumes each node.
//   - terms: a parameter's gradient that gorgonia sums from several
//     terms (a "+" of partial gradients: the tied embedding's) is summed
//     in place instead, each term written into the gradient's buffer as it
//     is made, the later ones added (Instr.Accumulate), and the "+" never
//     runs: no term outlives the instruction that makes it.
//   - bind: the persistent slots (parameters, gradients) and the step's
//     inputs.
//   - segments: the checkpoint policy assigns forward nodes to segments; a
//     value used by the backward pass whose segment is dropped and which no
//     later segment reads is dropped: freed after its last forward use.
//   - lower: every op lowered to its kernels (model.Runner), once, so that
//     an op the executor cannot run fails here.
//   - forward: the forward instructions. A forward value read by the
//     backward pass is an activation; one that dies in the forward pass is
//     a temporary.
//   - backward: the backward instructions, every backward value a temporary
//     but the parameter gradients, which are written straight into the
//     grads buffer; before the first backward instruction that needs one of
//     a segment's dropped values, the segment's forward instructions needed
//     to produce them run again (recompute).
//   - liveness: every value is freed right after its last use.
func compile(gr *model.Graph, st storage, pol model.Checkpoint) (*Schedule, error) {
	c := &compiler{gr: gr, st: st, pol: pol, s: &Schedule{Graph: gr, Loss: -1, Input: -1, Output: -1, DInput: -1}}
	for _, p := range c.passes() {
		if err := p.run(); err != nil {
			return nil, err
		}
	}
	c.s.Backward0 = len(c.s.Instrs)
	for i, in := range c.s.Instrs {
		if in.Phase != Forward {
			c.s.Backward0 = i
			break
		}
	}
	for _, sl := range []int{c.s.Output, c.s.DInput} {
		if sl >= 0 {
			c.s.Slots[sl].Sent = true
		}
	}
	c.s.liveness()
	return c.s, nil
}

// compiler holds what compile's passes find, field by field in pass order.
type compiler struct {
	gr  *model.Graph
	st  storage
	pol model.Checkpoint
	s   *Schedule

	nodes  gorgonia.Nodes // order: the step's nodes in creation order
	gradOf *nodeMap[int]  // order: the parameter-table row of each gradient node

	isBackward *nodeMap[bool]             // phases: the backward pass's nodes
	consumers  *nodeMap[[]*gorgonia.Node] // phases: the nodes reading each node

	termOf  *nodeMap[int]  // terms: the parameter-table row of each gradient term summed in place
	summed  *nodeMap[bool] // terms: the "+" nodes those terms replace, never run
	written []bool         // backward: the rows whose gradient a term has written

	live *nodeMap[int] // bind, then forward and backward: each node's live slot

	seg     *nodeMap[int]  // segments: each forward node's checkpoint segment (-1: kept)
	dropped *nodeMap[bool] // segments: the values freed after the forward pass

	kernels *nodeMap[kernel] // lower: each op's kernels
}

// pass is one of compile's passes, by name.
type pass struct {
	name string
	run  func() error
}

// passes are compile's passes in order.
func (c *compiler) passes() []pass {
	return []pass{{"order", c.order}, {"phases", c.phases}, {"terms", c.terms}, {"bind", c.bind},
		{"segments", c.segments}, {"lower", c.lower}, {"forward", c.forward}, {"backward", c.backward}}
}

// order collects every node the loss and the gradients depend on, in
// creation order, and the gradient node of each parameter. A node is made
// after its arguments, so one walk over the graph's nodes from the last
// made to the first marks everything the roots need (no recursion, which
// at thousands of layers ran as deep as the graph, and no sort); gorgonia
// keeps its nodes in creation order, each under the next ID, so a second
// walk in that order lists them as a sort by ID would.
func (c *compiler) order() error {
	gr := c.gr
	all := gr.G.AllNodes()
	need := newNodeMap[bool](gr)
	roots := gorgonia.Nodes{gr.Loss}
	if gr.Loss == nil { // a pipeline stage before the last
		roots = gorgonia.Nodes{gr.Output}
	}
	if gr.DInput != nil {
		roots = append(roots, gr.DInput)
	}
	for _, r := range append(roots, gr.Grads...) {
		if r != nil { // a frozen row has no gradient
			need.set(r, true)
		}
	}
	for i := len(all) - 1; i >= 0; i-- {
		n := all[i]
		if i > 0 && all[i-1].ID() >= n.ID() {
			return fmt.Errorf("train: gorgonia's nodes are not in creation order (%s, ID %d, follows ID %d)", n.Name(), n.ID(), all[i-1].ID())
		}
		if need.at(n) {
			for _, a := range gr.Args(n) {
				need.set(a, true)
			}
		}
	}
	c.nodes = make([]*gorgonia.Node, 0, need.len())
	for _, n := range all {
		if need.at(n) {
			c.nodes = append(c.nodes, n)
		}
	}

	c.gradOf = newNodeMap[int](gr)
	for i, d := range gr.Grads {
		if d == nil {
			continue // frozen
		}
		if d.Op() == nil {
			return fmt.Errorf("train: the gradient of %s is an input node, not computed", gr.Table[i].Name)
		}
		if j, dup := c.gradOf.get(d); dup {
			return fmt.Errorf("train: parameters %d and %d share one gradient node", j, i)
		}
		c.gradOf.set(d, i)
	}
	return nil
}

// phases marks the backward pass (the loss seed and everything computed
// from it) and records each node's consumers.
func (c *compiler) phases() error {
	c.isBackward = newNodeMap[bool](c.gr)
	c.isBackward.set(c.gr.DLoss, true)
	// Every node's consumers, in creation order, carved from one array:
	// counted first, then filled.
	count := newNodeMap[int](c.gr)
	total := 0
	for _, n := range c.nodes {
		for _, a := range c.gr.Args(n) {
			count.set(a, count.at(a)+1)
			total++
		}
	}
	all := make([]*gorgonia.Node, 0, total)
	c.consumers = newNodeMap[[]*gorgonia.Node](c.gr)
	for _, n := range c.nodes {
		if k := count.at(n); k > 0 {
			c.consumers.set(n, all[len(all):len(all):len(all)+k])
			all = all[:len(all)+k]
		}
	}
	for _, n := range c.nodes {
		for _, a := range c.gr.Args(n) {
			c.consumers.set(a, append(c.consumers.at(a), n))
			if c.isBackward.at(a) {
				c.isBackward.set(n, true)
			}
		}
	}
	return nil
}

// terms finds the parameter gradients summed from several terms by
// gorgonia's "+" (ReduceAdd's chain, which sums a weight's partial
// gradients: the tied head's and the embedding's for wte) and sums them in
// place: each term, a trainmem op read by nothing but the chain, writes
// into the gradient's buffer. A chain whose terms are anything else is
// left to run as it is.
func (c *compiler) terms() error {
	c.termOf = newNodeMap[int](c.gr)
	c.summed = newNodeMap[bool](c.gr)
	for row, d := range c.gr.Grads {
		if d == nil || !model.IsGradAccumulation(d.Op()) {
			continue
		}
		var terms, sums []*gorgonia.Node
		ok := true
		var walk func(n *gorgonia.Node)
		walk = func(n *gorgonia.Node) {
			sums = append(sums, n)
			for _, a := range c.gr.Args(n) {
				switch {
				case len(c.consumers.at(a)) != 1:
					ok = false
				case model.IsGradAccumulation(a.Op()):
					walk(a)
				default:
					if _, run := a.Op().(model.Runner); !run {
						ok = false
					}
					terms = append(terms, a)
				}
			}
		}
		walk(d)
		if !ok {
			continue
		}
		for _, n := range terms {
			c.termOf.set(n, row)
		}
		for _, n := range sums {
			c.summed.set(n, true)
		}
	}
	return nil
}

// usedByBackward reports whether a backward node reads n.
func (c *compiler) usedByBackward(n *gorgonia.Node) bool {
	for _, u := range c.consumers.at(n) {
		if c.isBackward.at(u) {
			return true
		}
	}
	return false
}

// newSlot appends a slot to the schedule.
func (c *compiler) newSlot(sl Slot) int {
	c.s.Slots = append(c.s.Slots, sl)
	return len(c.s.Slots) - 1
}

// bind makes the persistent slots (one per parameter and gradient row) and
// the step's inputs, and checks that every input node is one of them.
func (c *compiler) bind() error {
	gr, s, st := c.gr, c.s, c.st
	s.Slots = make([]Slot, 0, len(c.nodes)+len(gr.Table))
	c.live = newNodeMap[int](gr)
	table := gr.Table
	s.ParamSlots = make([]int, len(table))
	s.GradSlots = make([]int, len(table))
	for i, p := range gr.Params {
		cat := cuda.Params
		if table[i].Frozen {
			cat = cuda.Frozen
		}
		s.ParamSlots[i] = c.newSlot(Slot{Node: p, Len: int(table[i].Count), DType: st.param, Cat: cat, Persistent: true, Param: i})
		c.live.set(p, s.ParamSlots[i])
	}
	for i, d := range gr.Grads {
		s.GradSlots[i] = -1 // a frozen row has no gradient
		if d != nil {
			s.GradSlots[i] = c.newSlot(Slot{Node: d, Len: int(table[i].Count), DType: st.param, Cat: cuda.Grads, Persistent: true, Param: i})
		}
	}
	// The step's inputs are kept for backward (the embedding and the loss
	// gradients read them), so they count as activations; the loss seed lives
	// in the backward pass only.
	s.Tokens = c.newSlot(Slot{Node: gr.Tokens, Len: size(gr.Tokens), DType: cuda.I32, Cat: cuda.Activations, Input: true, Param: -1})
	s.Targets = c.newSlot(Slot{Node: gr.Targets, Len: size(gr.Targets), DType: cuda.I32, Cat: cuda.Activations, Input: true, Param: -1})
	if gr.Loss != nil {
		s.DLoss = c.newSlot(Slot{Node: gr.DLoss, Len: 1, DType: st.state, Cat: cuda.Temporaries, Input: true, Param: -1})
	} else {
		// A stage's output gradient, received from the next stage: a
		// gradient of a forward value, stored as one.
		s.DLoss = c.newSlot(Slot{Node: gr.DLoss, Len: size(gr.DLoss), DType: st.param, Cat: cuda.Temporaries, Input: true, Param: -1})
	}
	if gr.Input != nil {
		// The previous stage's residual stream, received: kept for
		// backward as the first block's input.
		s.Input = c.newSlot(Slot{Node: gr.Input, Len: size(gr.Input), DType: st.param, Cat: cuda.Activations, Input: true, Param: -1})
		c.live.set(gr.Input, s.Input)
	}
	c.live.set(gr.Tokens, s.Tokens)
	c.live.set(gr.Targets, s.Targets)
	c.live.set(gr.DLoss, s.DLoss)
	for _, n := range c.nodes {
		if n.Op() == nil {
			if _, ok := c.live.get(n); !ok {
				return fmt.Errorf("train: input node %q is neither a parameter nor a step input", n.Name())
			}
		}
	}
	return nil
}

// segments assigns the forward nodes to the policy's segments and picks
// the dropped values: those the backward pass reads whose segment is
// dropped, unless a later segment reads them too (then they are that
// segment's checkpoint). A selective segment is one node, read only by the
// rest of its block, so it is always dropped.
func (c *compiler) segments() error {
	c.seg = newNodeMap[int](c.gr)
	for _, n := range c.nodes {
		if n.Op() != nil && !c.isBackward.at(n) {
			c.seg.set(n, segment(c.pol, c.gr, n))
		}
	}
	c.dropped = newNodeMap[bool](c.gr)
	for _, n := range c.nodes {
		sg, ok := c.seg.get(n)
		if !ok || sg < 0 || !c.usedByBackward(n) {
			continue
		}
		crosses := false
		for _, u := range c.consumers.at(n) {
			if !c.isBackward.at(u) && c.seg.at(u) != sg {
				crosses = true
			}
		}
		if c.pol.Kind == model.CheckpointSelective || !crosses {
			c.dropped.set(n, true)
			c.s.Dropped = append(c.s.Dropped, n)
		}
	}
	return nil
}

// lower lowers every op to its kernels.
func (c *compiler) lower() error {
	c.kernels = newNodeMap[kernel](c.gr)
	for _, n := range c.nodes {
		if n.Op() == nil {
			continue
		}
		k, err := lower(n.Op())
		if err != nil {
			return fmt.Errorf("%w (node %s)", err, n.Name())
		}
		c.kernels.set(n, k)
	}
	return nil
}

// emit appends the instruction that runs n in phase ph, its output a new
// slot of category cat (or the gradient's persistent slot).
func (c *compiler) emit(ph Phase, n *gorgonia.Node, cat cuda.Category) error {
	args := c.gr.Args(n)
	in := Instr{Phase: ph, Node: n, Layer: layerOf(c.gr, n), run: c.kernels.at(n), Args: make([]int, 0, len(args))}
	for _, a := range args {
		sl, ok := c.live.get(a)
		if !ok {
			return fmt.Errorf("train: %s (%s) reads %s, which is not live", n.Name(), ph, a.Name())
		}
		in.Args = append(in.Args, sl)
	}
	if row, isTerm := c.termOf.get(n); isTerm {
		// A term of a gradient summed in place: the first made writes
		// the gradient, each later one adds to it.
		in.Out = c.s.GradSlots[row]
		if c.written == nil {
			c.written = make([]bool, len(c.s.GradSlots))
		}
		in.Accumulate = c.written[row]
		c.written[row] = true
	} else if i, isGrad := c.gradOf.get(n); isGrad {
		in.Out = c.s.GradSlots[i]
	} else {
		dt := c.st.param
		if model.IsStatistic(n.Op()) {
			dt = c.st.state
		}
		in.Out = c.newSlot(Slot{Node: n, Len: size(n), DType: dt, Cat: cat, Param: -1})
	}
	c.live.set(n, in.Out)
	switch n {
	case c.gr.Output:
		c.s.Output = in.Out
	case c.gr.DInput:
		c.s.DInput = in.Out
	}
	c.s.Instrs = append(c.s.Instrs, in)
	return nil
}

// forward emits the forward pass; afterwards only the kept activations are
// live: temporaries and dropped values died at their last forward use.
func (c *compiler) forward() error {
	// One instruction a node (fewer: the inputs have none), and the
	// recomputed ones again where the policy drops values.
	want := len(c.nodes)
	if c.dropped.len() > 0 {
		want *= 2
	}
	c.s.Instrs = make([]Instr, 0, want)
	for _, n := range c.nodes {
		if n.Op() == nil || c.isBackward.at(n) {
			continue
		}
		cat := cuda.Temporaries
		if c.usedByBackward(n) && !c.dropped.at(n) {
			cat = cuda.Activations
		}
		if err := c.emit(Forward, n, cat); err != nil {
			return err
		}
		if n == c.gr.Loss {
			c.s.Loss = c.live.at(n)
		}
	}
	for _, n := range c.nodes {
		if n.Op() != nil && !c.isBackward.at(n) && (c.dropped.at(n) || !c.usedByBackward(n)) {
			c.live.del(n)
		}
	}
	return nil
}

// backward emits the backward pass, recomputing a segment before the
// first instruction that reads one of its dropped values.
func (c *compiler) backward() error {
	recomputed := map[int]bool{}
	for _, n := range c.nodes {
		if !c.isBackward.at(n) || n.Op() == nil || c.summed.at(n) {
			continue
		}
		for _, a := range c.gr.Args(n) {
			if !c.dropped.at(a) {
				continue
			}
			if _, ok := c.live.get(a); ok {
				continue
			}
			sg := c.seg.at(a)
			if recomputed[sg] {
				return fmt.Errorf("train: segment %d was recomputed already but %s is no longer live", sg, a.Name())
			}
			recomputed[sg] = true
			if err := c.recompute(sg); err != nil {
				return err
			}
		}
		if err := c.emit(Backward, n, cuda.Temporaries); err != nil {
			return err
		}
	}
	// Every term but a gradient's last leaves it incomplete.
	last := make(map[int]int, len(c.s.GradSlots))
	for i, in := range c.s.Instrs {
		if _, isTerm := c.termOf.get(in.Node); isTerm {
			if j, seen := last[in.Out]; seen {
				c.s.Instrs[j].Partial = true
			}
			last[in.Out] = i
		}
	}
	return nil
}

// recompute emits, in creation order, the forward instructions that
// produce segment sg's dropped values from what is live.
func (c *compiler) recompute(sg int) error {
	need := map[*gorgonia.Node]bool{}
	var mark func(t *gorgonia.Node) error
	mark = func(t *gorgonia.Node) error {
		if _, ok := c.live.get(t); ok || need[t] {
			return nil
		}
		need[t] = true
		if _, ok := c.seg.get(t); !ok {
			return fmt.Errorf("train: %s is needed for recomputation but is not a forward value", t.Name())
		}
		for _, a := range c.gr.Args(t) {
			if err := mark(a); err != nil {
				return err
			}
		}
		return nil
	}
	for _, d := range c.s.Dropped {
		if c.seg.at(d) == sg {
			if err := mark(d); err != nil {
				return err
			}
		}
	}
	for _, m := range c.nodes {
		if !need[m] {
			continue
		}
		cat := cuda.Temporaries
		if c.usedByBackward(m) {
			cat = cuda.Activations
		}
		if err := c.emit(Recompute, m, cat); err != nil {
			return err
		}
	}
	return nil
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
		if i >= 0 && !s.Slots[sl].Persistent && !s.Slots[sl].Sent {
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

func size(n *gorgonia.Node) int {
	if n.IsScalar() {
		return 1
	}
	return n.Shape().TotalSize()
}

// layerOf is the forward layer of a node, or -2 for nodes outside the
// forward pass (inputs and backward nodes).
func layerOf(gr *model.Graph, n *gorgonia.Node) int {
	if l, ok := gr.LayerOf(n); ok {
		return l
	}
	return -2
}

// nodeMap maps a graph's nodes to values of T in a table by node
// (model.Graph.Index) rather than a hash map: compile looks each of the
// step's nodes up several times in each of its tables, and a graph of
// thousands of blocks has hundreds of thousands of nodes. A node outside
// the graph's table (none in a built graph) goes to a map beside it.
type nodeMap[T any] struct {
	gr    *model.Graph
	vals  []T
	has   []bool
	n     int
	other map[*gorgonia.Node]T
}

func newNodeMap[T any](gr *model.Graph) *nodeMap[T] {
	return &nodeMap[T]{gr: gr, vals: make([]T, gr.NumNodes()), has: make([]bool, gr.NumNodes())}
}

// get is n's value and whether n has one.
func (m *nodeMap[T]) get(n *gorgonia.Node) (T, bool) {
	if i := m.gr.Index(n); i >= 0 {
		return m.vals[i], m.has[i]
	}
	v, ok := m.other[n]
	return v, ok
}

// at is n's value, or T's zero value.
func (m *nodeMap[T]) at(n *gorgonia.Node) T {
	v, _ := m.get(n)
	return v
}

func (m *nodeMap[T]) set(n *gorgonia.Node, v T) {
	if i := m.gr.Index(n); i >= 0 {
		if !m.has[i] {
			m.n++
		}
		m.vals[i], m.has[i] = v, true
		return
	}
	if m.other == nil {
		m.other = map[*gorgonia.Node]T{}
	}
	if _, ok := m.other[n]; !ok {
		m.n++
	}
	m.other[n] = v
}

func (m *nodeMap[T]) del(n *gorgonia.Node) {
	if i := m.gr.Index(n); i >= 0 {
		if m.has[i] {
			m.n--
		}
		var zero T
		m.vals[i], m.has[i] = zero, false
		return
	}
	if _, ok := m.other[n]; ok {
		m.n--
		delete(m.other, n)
	}
}

// len is how many nodes have a value.
func (m *nodeMap[T]) len() int { return m.n }
