package model

// The GPT-2 training graph built from trainmem's own ops (ops.go): forward
// pass, loss, and the backward graph from gorgonia's symbolic
// differentiation. Build binds no values: the graph is a description for
// trainmem's executor, so gpt2-xl at any batch builds in milliseconds without
// allocating a tensor.

import (
	"errors"
	"fmt"
	"strings"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Graph is one GPT-2 training step as a gorgonia expression graph.
type Graph struct {
	Config Config
	B, T   int          // batch and sequence length; N = B·T rows
	Dtype  tensor.Dtype // Float32 or Float64: the dtype of every float node

	G *G.ExprGraph

	Tokens  *G.Node // input token ids, Int32 (B·T), row-major (b, t)
	Targets *G.Node // next-token targets, Int32 (B·T)
	// DLoss is the seed of the backward pass, a scalar input: the gradient
	// of the loss, which the executor binds to the loss scale (1 without
	// loss scaling). On a pipeline stage before the last it is the
	// gradient of Output, received from the next stage.
	DLoss *G.Node
	// Input is a pipeline stage's input after the first: the previous
	// stage's residual stream (rows × C), a step input; nil on the first
	// stage. DInput is its gradient, which the stage sends back.
	Input, DInput *G.Node
	// Output is a pipeline stage's residual stream after its last block,
	// which it sends to the next stage; nil on the last stage, whose
	// forward pass ends in the loss.
	Output *G.Node
	// Table is Config.Params(), made once for the graph and everything
	// built from it (the schedule, the trainer, its policies).
	Table []Param
	// Params are the parameter input nodes, one per row of Table, in
	// table order, named and shaped as the table.
	Params []*G.Node
	Loss   *G.Node // the mean cross-entropy, a scalar of Dtype; nil on a pipeline stage before the last
	// Grads[i] is the gradient node of Params[i] (the same shape); nil
	// for a frozen row (Param.Frozen), which has none.
	Grads []*G.Node
	// args[id] are the arguments of the node of that ID (nodes[id]),
	// read once when the graph is built (Args).
	args  [][]*G.Node
	nodes []*G.Node
	// layers[id] is the forward layer of the node of that ID (LayerOf),
	// notForward for the inputs and the backward nodes.
	layers []int32
}

// EmbeddingLayer is the forward layer of the embedding (Graph.LayerOf).
const EmbeddingLayer = -1

// HeadLayer is the forward layer of the final layer norm, the logits and the
// loss (Graph.LayerOf): the number of blocks, L.
func (c Config) HeadLayer() int { return c.Layers }

// LayerOf returns the forward layer of n: EmbeddingLayer for the
// embedding, 0..L-1 for the transformer blocks, HeadLayer(L) for the final
// layer norm, the logits and the loss; false when n is not a forward op
// node of g (an input, a backward node, a node of another graph).
func (g *Graph) LayerOf(n *G.Node) (int, bool) {
	if i := g.Index(n); i >= 0 {
		l := g.layers[i]
		return int(l), l != notForward
	}
	return 0, false
}

// notForward marks a node that is no forward op in Graph.layers.
const notForward = -1 << 31

// Build makes the training graph of cfg for a batch of B sequences of T
// tokens (T ≤ cfg.Context) with float nodes of dtype dt (tensor.Float32 or
// tensor.Float64).
//
// The forward pass is the dataflow of dataflow.go (GPT-2's pre-LN
// transformer), its nodes named as its steps. The backward graph comes from
// the reverse pass of backward.go (gorgonia.Backpropagate's algorithm)
// seeded with DLoss, so it holds only trainmem's ops
// and gorgonia's "+" where gradients of a value with several consumers
// accumulate (see IsGradAccumulation); Build checks that.
//
// gorgonia merges nodes by a 32-bit hash (see opBase): Build checks that
// the graph has exactly the nodes a graph of its depth has (the count is
// linear in the layers: it is measured on one- and two-layer graphs of the
// same shape), and on a merge builds again with the ops' tags salted,
// which draws every hash anew.
func Build(cfg Config, B, T int, dt tensor.Dtype) (*Graph, error) {
	want := -1
	if cfg.Layers > 2 {
		// The count is linear in the dead blocks (frozen, the backward
		// pass never reaches them: forward nodes only) and in the others.
		dead := cfg.DeadBlocks()
		live := cfg.Layers - dead
		count := func(d, l int) (int, error) {
			c := cfg
			c.Layers = d + l
			if dead > 0 {
				c.Freeze.Blocks = c.Stage.Lo + d
			}
			g, err := build(c, B, T, dt, 0, seedGraphIndex, -1)
			if err != nil {
				return 0, err
			}
			return len(g.G.AllNodes()), nil
		}
		d0, l0 := min(dead, 1), min(live, 1)
		base, err := count(d0, l0)
		if err != nil {
			return nil, err
		}
		want = base
		for _, more := range []struct{ d, l, times int }{{d0 + 1, l0, dead - d0}, {d0, l0 + 1, live - l0}} {
			if more.times > 0 {
				n, err := count(more.d, more.l)
				if err != nil {
					return nil, err
				}
				want += more.times * (n - base)
			}
		}
	}
	var err error
	for salt := range buildTries {
		var gr *Graph
		gr, err = build(cfg, B, T, dt, salt, seedGraphIndex, want)
		if err == nil && testMerge != nil && testMerge(salt) {
			err = &mergeError{"a merge the test asked for"}
		}
		var merged *mergeError
		switch {
		case errors.As(err, &merged):
			continue
		case err != nil:
			return nil, err
		case want >= 0 && len(gr.G.AllNodes()) != want:
			err = &mergeError{fmt.Sprintf("the graph has %d nodes, a graph of %d layers has %d", len(gr.G.AllNodes()), cfg.Layers, want)}
			continue
		}
		return gr, nil
	}
	return nil, fmt.Errorf("model: building %s: %w, in each of %d tries", cfg.Name, err, buildTries)
}

// buildTries is how often Build draws the hashes anew. With the ops
// tagged, only gorgonia's own gradient "+" nodes (two a block, of one
// shape) can merge; at MaxLayers the chance of a merge is about 1 in 8 a
// build, so eight tries all fail about once in 20 million.
const buildTries = 8

// gorgoniaBackprop, when a test sets it, builds the backward pass with
// gorgonia.Backpropagate instead of backward (backward.go), to compare.
var gorgoniaBackprop bool

// testMerge, when set by a test, makes the try of the given salt fail as
// if two nodes had merged.
var testMerge func(salt int) bool

// mergeError is gorgonia merging two different nodes whose hashes collided.
type mergeError struct{ what string }

func (e *mergeError) Error() string {
	return "gorgonia merged two different nodes whose 32-bit hashes collided (" + e.what + ")"
}

// CheckGraph refuses what no graph of cfg is built for: an invalid
// config, a batch or sequence length that is not positive, a sequence past
// the context, a dtype other than float32 and float64. Build and the
// reference (model/reference) both ask it.
func CheckGraph(cfg Config, B, T int, dt tensor.Dtype) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if B <= 0 || T <= 0 {
		return fmt.Errorf("model: batch %d and sequence length %d must be positive", B, T)
	}
	if T > cfg.Context {
		return fmt.Errorf("model: sequence length %d exceeds %s's context of %d positions (valid: 1..%d)", T, cfg.Name, cfg.Context, cfg.Context)
	}
	if dt != tensor.Float32 && dt != tensor.Float64 {
		return fmt.Errorf("model: graph dtype %v is not supported (valid: float32, float64)", dt)
	}
	return nil
}

// build is one try of Build, its ops' tags salted by salt, gorgonia's node
// cache seeded when seed is set (graph_index.go) for want nodes in all
// (-1: not known; the backward pass is then seeded by a bound).
func build(cfg Config, B, T int, dt tensor.Dtype, salt int, seed bool, want int) (*Graph, error) {
	if err := CheckGraph(cfg, B, T, dt); err != nil {
		return nil, err
	}
	if err := (Setup{Model: cfg, Batch: B, Seq: T}).checkSizes(); err != nil {
		return nil, err
	}

	b := &builder{
		gr:   &Graph{Config: cfg, B: B, T: T, Dtype: dt, G: G.NewGraph()},
		salt: salt,
	}
	gr, g := b.gr, b.gr.G
	N, L := B*T, cfg.Layers
	flow, err := flowOf(cfg, B, T)
	if err != nil {
		return nil, err
	}
	// Seed gorgonia's node cache for the nodes about to be made, so that
	// the build is linear in the graph's size (graph_index.go): the inputs,
	// the parameters and the forward ops.
	table := cfg.Params()
	gr.Table = table
	var index *graphIndex
	if seed {
		index = newGraphIndex(g)
	}
	index.presize(want) // and its maps made at the size they will reach, when known
	index.ahead(4 + len(table) + len(flow.embed) + L*len(flow.block) + len(flow.head))

	// The inputs first (the reverse pass finds the forward ops after
	// them): the tokens, the targets, the seed and a later stage's input.
	rows := N / cfg.Tensor.seq() // the residual stream's rows on this rank
	gr.Tokens = G.NewVector(g, tensor.Int32, G.WithShape(N), G.WithName("tokens"))
	gr.Targets = G.NewVector(g, tensor.Int32, G.WithShape(N), G.WithName("targets"))
	if cfg.Last() {
		gr.DLoss = G.NewScalar(g, dt, G.WithName("dloss"))
	} else {
		gr.DLoss = G.NewMatrix(g, dt, G.WithShape(rows, cfg.Hidden), G.WithName("d(x_out)"))
	}
	if !cfg.First() {
		gr.Input = G.NewMatrix(g, dt, G.WithShape(rows, cfg.Hidden), G.WithName("x_in"))
	}
	b.params = make(map[string]*G.Node, len(table))
	for _, p := range table {
		n := G.NewTensor(g, dt, len(p.Shape), G.WithShape(p.Shape...), G.WithName(p.Name))
		gr.Params = append(gr.Params, n)
		b.params[p.Name] = n
	}

	x := gr.Input
	if cfg.First() {
		x = b.section(flow.embed, "", EmbeddingLayer, nil)
	}
	for l := 0; l < L; l++ {
		x = b.section(flow.block, fmt.Sprintf("h%d.", cfg.Stage.Lo+l), l, x)
	}
	root := x // what the backward pass is seeded at: the loss, or the stage's output
	if cfg.Last() {
		gr.Loss = b.section(flow.head, "", cfg.HeadLayer(), x)
		root = gr.Loss
	} else {
		gr.Output = x
	}
	if b.err != nil {
		return nil, b.err
	}
	// The trained parameters (all but the frozen rows) and a later
	// stage's input.
	var wrt []*G.Node
	for i, p := range gr.Params {
		if !table[i].Frozen {
			wrt = append(wrt, p)
		}
	}
	trained := len(wrt)
	if gr.Input != nil {
		wrt = append(wrt, gr.Input)
	}

	// The backward pass makes a few nodes per forward op (one per
	// differentiable input, and the "+" of gradient accumulation): the
	// nodes the graph of this depth has beyond the forward's, when known,
	// so that the cache holds no more than it needs (a bound eight times
	// larger left it four times the graph's size, each lookup slower).
	if backward := want - len(g.AllNodes()); want >= 0 && backward > 0 {
		index.ahead(backward)
	} else {
		index.ahead(8*len(b.order) + 64)
	}
	var grads []*G.Node
	if gorgoniaBackprop {
		grads, err = G.Backpropagate(G.Nodes{root}, G.Nodes{gr.DLoss}, G.Nodes(wrt))
	} else {
		grads, err = b.backward(root, gr.DLoss, wrt)
	}
	if err != nil {
		return nil, fmt.Errorf("model: differentiating %s: %w", cfg.Name, err)
	}
	if gr.Input != nil {
		gr.DInput, grads = grads[len(grads)-1], grads[:len(grads)-1]
	}
	if len(grads) != trained {
		return nil, fmt.Errorf("model: differentiation returned %d gradients for %d trained parameters", len(grads), trained)
	}
	gr.Grads = make([]*G.Node, len(gr.Params))
	for i := range gr.Params {
		if table[i].Frozen {
			continue
		}
		d := grads[0]
		grads = grads[1:]
		if !d.Shape().Eq(gr.Params[i].Shape()) {
			return nil, fmt.Errorf("model: gradient of %s has shape %v, want %v", table[i].Name, d.Shape(), gr.Params[i].Shape())
		}
		gr.Grads[i] = d
	}
	index.trim()
	if err := checkGraphIndex(g); err != nil {
		if index == nil {
			return nil, err
		}
		// The seeding went wrong on this gorgonia: build without it.
		return build(cfg, B, T, dt, salt, false, want)
	}
	// Name the gradient of every value that has one "d(name)", from the
	// loss down, so that reports can say which gradient a buffer holds.
	// Add passes its output gradient through, so d(h0.res1) also serves
	// as d(h0.attn.proj): the first name given stays.
	named := map[*G.Node]bool{}
	nameGrad := func(n *G.Node) {
		if d := n.Deriv(); d != nil && !named[d] && d.Op() != nil {
			named[d] = true
			G.WithName("d(" + n.Name() + ")")(d)
		}
	}
	for i := len(b.order) - 1; i >= 0; i-- {
		nameGrad(b.order[i])
	}
	for _, p := range wrt {
		nameGrad(p)
	}
	// The terms a "+" sums are partial gradients: d(name)#0, d(name)#1.
	for d := range named {
		if !IsGradAccumulation(d.Op()) {
			continue
		}
		for i, term := range Args(d) {
			if !named[term] {
				named[term] = true
				G.WithName(fmt.Sprintf("%s#%d", d.Name(), i))(term)
			}
		}
	}
	if err := CheckOps(g); err != nil {
		return nil, err
	}
	gr.index(b)
	return gr, nil
}

// index reads every node's arguments once, by ID (gorgonia gives node i of
// AllNodes the ID i while no node is removed, which checkGraphIndex
// verified; a node found elsewhere is read from the graph). The forward
// nodes' arguments and layers are the builder's own (b: the forward ops
// follow the inputs, as backward checked); the others' are read from the
// graph.
func (g *Graph) index(b *builder) {
	all := g.G.AllNodes()
	g.nodes = make([]*G.Node, len(all))
	g.args = make([][]*G.Node, len(all))
	g.layers = make([]int32, len(all))
	first := len(all) // the first forward node's ID, when the builder's order is known
	if b != nil && len(b.order) > 0 {
		first = int(b.order[0].ID())
	}
	for _, n := range all {
		id := n.ID()
		if id < 0 || id >= int64(len(all)) {
			continue
		}
		g.nodes[id], g.layers[id] = n, notForward
		if j := int(id) - first; j >= 0 && j < len(b.order) && b.order[j] == n {
			g.args[id], g.layers[id] = b.args[j], int32(b.layers[j])
			continue
		}
		g.args[id] = Args(n)
	}
}

// Args returns n's arguments in order, from the table the build made.
func (g *Graph) Args(n *G.Node) []*G.Node {
	if i := g.Index(n); i >= 0 {
		return g.args[i]
	}
	return Args(n)
}

// Index is n's place among the graph's nodes, 0 ≤ Index < NumNodes, for
// tables indexed by node; -1 when n is not one of them.
func (g *Graph) Index(n *G.Node) int {
	if id := n.ID(); id >= 0 && id < int64(len(g.nodes)) && g.nodes[id] == n {
		return int(id)
	}
	return -1
}

// NumNodes is how many nodes the graph has.
func (g *Graph) NumNodes() int { return len(g.nodes) }

// builder applies forward ops, names their nodes and records their layers.
type builder struct {
	gr     *Graph
	params map[string]*G.Node // the parameter nodes by name
	vals   []*G.Node          // the current section's step outputs
	layer  int
	order  []*G.Node   // forward nodes in build order
	args   [][]*G.Node // their arguments
	layers []int       // their forward layers
	salt   int         // added to every tag when nonzero (Build's retries)
	err    error
}

// section makes the nodes of one section of the dataflow (dataflow.go)
// for forward layer layer, its nodes and block parameters named with prefix,
// reading stream as its input; it returns the section's value.
func (b *builder) section(steps []step, prefix string, layer int, stream *G.Node) *G.Node {
	b.layer = layer
	b.vals = b.vals[:0]
	for _, st := range steps {
		args := make([]*G.Node, 0, len(st.args)) // the node keeps the slice
		for _, a := range st.args {
			var n *G.Node
			switch a.kind {
			case refValue:
				n = b.vals[a.at]
			case refStream:
				n = stream
			case refParam:
				n = b.params[prefix+a.name]
			case refTokens:
				n = b.gr.Tokens
			case refTargets:
				n = b.gr.Targets
			}
			if n == nil && b.err == nil {
				b.err = fmt.Errorf("model: building %s%s: argument %d (%s) is not in the graph", prefix, st.name, len(args), a.name)
			}
			args = append(args, n)
		}
		b.vals = append(b.vals, b.apply(prefix+st.name, st.op(), args...))
	}
	if b.err != nil || len(b.vals) == 0 {
		return nil
	}
	return b.vals[len(b.vals)-1]
}

func (b *builder) apply(name string, o op, children ...*G.Node) *G.Node {
	if b.err != nil {
		return nil
	}
	tag := name
	if b.salt != 0 {
		tag = fmt.Sprintf("%s~%d", name, b.salt)
	}
	before := len(b.gr.G.AllNodes())
	n, err := applyOp(bind(o, tag), children...)
	if err == nil {
		G.WithName(name)(n)
	}
	if err != nil {
		b.err = fmt.Errorf("model: building %s: %w", name, err)
		return nil
	}
	// gorgonia merges nodes of equal hash without comparing children; two
	// forward nodes of GPT-2 are never the same computation, so a merge
	// here is a 32-bit hash collision and the graph would be wrong. A node
	// that is new is the one the graph's node list grew by.
	if all := b.gr.G.AllNodes(); len(all) != before+1 || all[before] != n {
		b.err = fmt.Errorf("model: building %s: %w", name, &mergeError{"an earlier node"})
		return nil
	}
	b.order = append(b.order, n)
	b.args = append(b.args, children)
	b.layers = append(b.layers, b.layer)
	return n
}

// IsTrainmemOp reports whether op is one of trainmem's own ops (the op_*.go
// files: every one embeds opBase).
func IsTrainmemOp(op G.Op) bool {
	_, ok := op.(interface{ trainmemOp() })
	return ok
}

// IsGradAccumulation reports whether op is gorgonia's elementwise "+" that
// symbolic differentiation inserts (through ReduceAdd) where a value with
// several consumers sums its gradients. gorgonia does not export the type,
// so it is recognised by its Go type name and its String ("+ false": the
// operator and retSame).
func IsGradAccumulation(op G.Op) bool {
	return fmt.Sprintf("%T", op) == "gorgonia.elemBinOp" && strings.HasPrefix(op.String(), "+ ")
}

// CheckOps returns an error naming the first node of g whose op is neither
// trainmem's nor gorgonia's gradient accumulation "+", nor an input: such a
// node could not be lowered by trainmem's executor.
func CheckOps(g *G.ExprGraph) error {
	for _, n := range g.AllNodes() {
		if n.Op() == nil { // an input
			continue
		}
		op := n.Op()
		if IsTrainmemOp(op) || IsGradAccumulation(op) {
			continue
		}
		return fmt.Errorf("model: node %q has op %v (%T), which is neither trainmem's nor gorgonia's gradient \"+\"", n.Name(), op, op)
	}
	return nil
}

// Args returns n's arguments in order (gorgonia keeps them as the node's
// outgoing edges).
func Args(n *G.Node) []*G.Node {
	from := n.Graph().From(n.ID())
	if from == nil {
		return nil
	}
	args := make([]*G.Node, 0, from.Len())
	for from.Next() {
		args = append(args, from.Node().(*G.Node))
	}
	return args
}

// Order returns g's nodes in an order that computes every node after its
// arguments (inputs first): gorgonia.Sort's order, which puts roots first,
// reversed.
func Order(g *G.ExprGraph) ([]*G.Node, error) {
	sorted, err := G.Sort(g)
	if err != nil {
		return nil, fmt.Errorf("model: sorting the graph: %w", err)
	}
	order := make([]*G.Node, len(sorted))
	for i, n := range sorted {
		order[len(sorted)-1-i] = n
	}
	return order, nil
}
