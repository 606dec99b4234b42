package model

// trainmem's own gorgonia ops: what every op shares (this file) and one file
// per op family (op_embedding.go, op_layernorm.go, op_bias.go, op_linear.go,
// op_attention.go, op_gelu.go, op_add.go, op_crossentropy.go), each holding
// the family's forward op, its backward ops (one per differentiable input,
// made by the forward op's SymDiff), what each keeps for backward, and Run:
// the kernels of cuda.Kernels it is lowered to. They exist so that the
// backward graph that gorgonia's symbolic differentiation builds holds only
// operations trainmem's executor can run, and carry as exported fields the
// dimensions their kernels need.
//
// The ops are symbolic only. They do not run on gorgonia's VMs: Do returns an
// error saying so (ErrNotVM). Package train compiles the graph into its own
// schedule and lowers each node through its op's Run (Runner), e.g.
//
//	func (op *AttentionProbsOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
//		return x.K.AttentionProbs(out, a[0], op.B, op.T, op.C, op.NH, op.KV)
//	}
//
// Conventions. N is the number of rows, B·T; C the channels; V the vocabulary;
// NH the heads. Activations are 2-D (N, ·) row-major; attention
// probabilities are (B, NH, T, T). Token ids are Int32. Every op has one
// output. Each forward op's doc comment says what its backward ops read (the
// tensors the forward pass must keep, with their sizes in elements): that is
// what the checkpointing policy of package train trades for recomputation,
// and what the exact formula counts, found in the backward ops SymDiff makes
// (dataflow.go), not in a list of its own.
//
// Invariants the prototype established and these ops keep: Type builds a
// fresh hm type on every call (gorgonia returns types to a pool); WriteHash
// covers every field and the node tag (gorgonia merges nodes of equal
// hash); SymDiff returns one entry per argument, nil for the arguments
// DiffWRT marks false.

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"trainmem/cuda"
)

// ErrNotVM is returned by the Do method of every trainmem op: the ops are
// lowered to kernels by trainmem's executor (package train), not run by
// gorgonia's TapeMachine or LispMachine.
var ErrNotVM = errors.New("model: trainmem ops run on trainmem's executor (package train), not on gorgonia's VMs")

// LayerNormEps is the ε of every layer norm, as in GPT-2.
const LayerNormEps = 1e-5

// RMSNormEps is the RMSNorm's ε, LLaMA 2's rms_norm_eps (its released
// config.json files: 1e-05).
const RMSNormEps = 1e-5

// Exec is what an op runs on: the device's kernels, workspace the
// executor lends for one call (allocated as cuda.Workspace, so that the
// shape-only device sees every byte a computing one would), and, for a
// tensor-parallel rank's ops, the ranks it is split over (tensor.go).
type Exec struct {
	K       cuda.Kernels
	Scratch func(n int, run func(*cuda.Buffer) error) error
	// ScratchLike lends n elements of like's dtype (sequence parallelism's
	// gathered rows).
	ScratchLike func(like *cuda.Buffer, n int, run func(*cuda.Buffer) error) error
	Tensor      TensorGroup
	// Accumulate asks an op that says so (Accumulator) to add its result
	// into out instead of writing it: out is a parameter's gradient that
	// an earlier term of it (the tied head's, before the embedding's)
	// already holds. The executor sets it only for an Accumulator.
	Accumulate bool
}

// Accumulator is an op whose Run adds its result into out when
// Exec.Accumulate is set, in its kernel (a product's Beta = 1, a scatter
// that leaves the rows it does not touch): a parameter used more than once
// has its gradient terms summed in place in its gradient buffer, as
// PyTorch's AccumulateGrad and llm.c add each partial gradient as it is
// made, so no term outlives its kernel. The executor adds the result of an
// op that is no Accumulator from a temporary that lives for that one add.
type Accumulator interface {
	Runner
	Accumulates() bool
}

// Runner is an op that runs itself on a device: out is the buffer of its
// output, a its arguments in the op's order. Every trainmem op is one, in
// the file of its family (op_*.go: the forward op, its backward ops, what
// each keeps for backward and runs); package train lowers an op through
// Run, once, when a schedule is compiled, and so holds no list of ops.
type Runner interface {
	G.Op
	Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error
}

// IsStatistic reports whether op's output is fp32 bookkeeping rather than
// an activation of the working dtype (layer-norm statistics, the loss): an
// op that says so with a Statistic method.
func IsStatistic(op G.Op) bool {
	s, ok := op.(interface{ Statistic() bool })
	return ok && s.Statistic()
}

// noGradient is embedded by the ops whose output carries no gradient of
// its own, because their consumer's backward op reads the output instead of
// differentiating through it: a norm's statistics (the norm's gradients
// read them), the attention probabilities (AttentionBackward goes through
// them). DiffWRT and SymDiff say so here, once.
type noGradient struct{}

// DiffWRT is false for every input.
func (noGradient) DiffWRT(n int) []bool { return make([]bool, n) }

// SymDiff is an error: the op is not differentiable on its own.
func (noGradient) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, errors.New("model: the op is not differentiable on its own: its consumer's backward op reads its output")
}

// FLOPer is an op that knows its floating-point operations, for profiles
// and the modelled clock: the ops that multiply matrices, each in its
// family's file, a multiply-add counting 2, as its kernels compute them
// (attention over the whole T×T score matrix, the causal mask applied to
// it). The other ops are memory-bound: a profile gives their bytes moved
// instead.
type FLOPer interface {
	FLOPs() float64
}

// Specialer is an op whose kernels evaluate special functions (exp, tanh,
// sin, cos, pow), each in its family's file: how many a call makes, as its
// kernels compute them (GELU's tanh an exponential, the causal softmax's
// exponentials over the pairs it keeps), for the modelled clock, which
// runs them at the card's rate (cuda.Efficiency.Special). Square roots
// (the norms', Adam's) are not counted: a CPU and a GPU take one
// instruction for each.
type Specialer interface {
	Specials() float64
}

// FusedAttention is a fused attention kernel's op (flash attention's):
// its arithmetic runs at the card's attention fraction of the peak.
type FusedAttention interface {
	FusedAttention()
}

// Producter is an op that multiplies matrices: its products' shapes, each
// a kernel (cuda.Roofline.Matmul times them in tiles and waves).
type Producter interface {
	Products() []cuda.Product
}

// StatisticLen is how many values a statistic op's output holds (its
// signature's output shape): a layer norm's (mean, 1/std) a row, RMSNorm's
// 1/rms. The kernels store statistics in fp32 (fp64 only in the float64
// reference runs), so the formulas count 4 bytes each. 0 for an op that is
// no statistic.
func StatisticLen(o G.Op) int64 {
	s, ok := o.(op)
	if !ok || !IsStatistic(o) {
		return 0
	}
	return int64(s.signature().out.TotalSize())
}

// IsDroppedBySelective reports whether selective checkpointing drops op's
// output for recomputation (the attention probabilities).
func IsDroppedBySelective(op G.Op) bool {
	s, ok := op.(interface{ DroppedBySelective() bool })
	return ok && s.DroppedBySelective()
}

// opBase holds what every trainmem op shares: the node tag, and the G.Op
// methods every op has alike (Arity, Type and InferShape from its
// signature, Do, WriteHash and Hashcode from its String), which reach the op
// through self. An op is bound to its base once, when it is made (bind for
// a forward op, sub for a backward one), and never copied afterwards: a
// copy's base would still describe the original, so every shared method
// checks that the base is its op's own.
//
// The tag makes each node's op hash its own. gorgonia merges a new node
// into an existing one when their 32-bit tree hashes are equal and the ops'
// hashes, types, shapes and argument counts agree, without comparing the
// arguments themselves; every block of GPT-2 repeats the same ops on the
// same shapes, so in a graph of thousands of blocks a tree-hash collision
// would silently merge two different computations. The builder tags each
// forward op with its node's name and each backward op with its forward
// op's tag and the input it differentiates, so a merge needs two 32-bit
// collisions at once. (Build also checks the node count: see build.)
type opBase struct {
	tag  string
	self op
	hash []byte // WriteHash's bytes, made on first use (bind clears them)
	// sg is the op's signature, made on first use (sig; bind clears it).
	sg    signature
	hasSG bool
}

// op is what every trainmem op is: a Runner that says its signature and
// has an opBase.
type op interface {
	Runner
	signature() signature
	base() *opBase
}

// signature is an op's arguments, in its order, and its result. Float
// arguments and the result share one dtype a (Float32 or Float64); token
// ids are Int32 vectors; a shape of no dimensions is a scalar. check, when
// set, runs before the arguments' shapes are compared (attention's heads).
type signature struct {
	check func() error
	args  []param
	out   tensor.Shape
}

// param is one argument: its name in messages, its shape, and whether it
// holds token ids.
type param struct {
	name  string
	shape tensor.Shape
	ids   bool
}

// arg is a float argument of the given shape.
func arg(name string, shape ...int) param { return param{name: name, shape: shape} }

// tokenArg is an int32 vector of n token ids.
func tokenArg(name string, n int) param { return param{name: name, shape: tensor.Shape{n}, ids: true} }

// result is the shape of an op's output.
func result(shape ...int) tensor.Shape { return shape }

// bind ties op to its base and tags it; it returns op.
func bind[T op](o T, tag string) T {
	b := o.base()
	b.self, b.tag, b.hash, b.hasSG = o, tag, nil, false
	return o
}

// sub binds child, a backward op that differentiates input what of the
// op b belongs to, with the tag that names both.
func (b *opBase) sub(what string, child op) op { return bind(child, b.tag+"/"+what) }

// base is the op's opBase.
func (b *opBase) base() *opBase { return b }

// bound is the op b belongs to; an unbound or copied op is a programming
// error.
func (b *opBase) bound() op {
	switch {
	case b.self == nil:
		panic("model: a trainmem op used before bind (make ops with bind or sub)")
	case b.self.base() != b:
		panic(fmt.Sprintf("model: %v was copied after bind: its base describes the original", b.self))
	}
	return b.self
}

// sig is the bound op's signature, made once: gorgonia asks an op its
// arity and type several times a node.
func (b *opBase) sig() signature {
	o := b.bound()
	if !b.hasSG {
		b.sg, b.hasSG = o.signature(), true
	}
	return b.sg
}

// nodeTag is the op's tag, hashed with its fields.
func (b *opBase) nodeTag() string { return b.tag }

// trainmemOp marks trainmem's ops (IsTrainmemOp).
func (*opBase) trainmemOp() {}

// Arity is the signature's argument count.
func (b *opBase) Arity() int { return len(b.sig().args) }

// Type is the signature as an hm type, built fresh on every call.
func (b *opBase) Type() hm.Type {
	sg := b.sig()
	a := fa()
	of := func(shape tensor.Shape, isIDs bool) hm.Type {
		switch {
		case isIDs:
			return tt(1, tensor.Int32)
		case len(shape) == 0:
			return a
		}
		return tt(len(shape), a)
	}
	ts := make([]hm.Type, 0, len(sg.args)+1)
	for _, p := range sg.args {
		ts = append(ts, of(p.shape, p.ids))
	}
	return hm.NewFnType(append(ts, of(sg.out, false))...)
}

// InferShape checks every argument's shape against the signature and
// returns the result's.
func (b *opBase) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	o := b.bound()
	sg := b.sig()
	s, err := shapes(o, in, len(sg.args))
	if err != nil {
		return nil, err
	}
	if sg.check != nil {
		if err := sg.check(); err != nil {
			return nil, err
		}
	}
	for i, p := range sg.args {
		if !s[i].Eq(p.shape) {
			return nil, fmt.Errorf("model: %v: %s has shape %v, want %v", o, p.name, s[i], p.shape)
		}
	}
	return sg.out.Clone(), nil
}

// Do is not supported: see ErrNotVM.
func (b *opBase) Do(...G.Value) (G.Value, error) {
	return nil, fmt.Errorf("%w: %v", ErrNotVM, b.bound())
}

// WriteHash writes the op's String, which names it and every field, and
// its node tag. The bytes are made once: gorgonia hashes a node's op each
// time it adds or looks up the node.
func (b *opBase) WriteHash(h hash.Hash) {
	if b.hash == nil {
		o := b.bound()
		str := o.String()
		h := make([]byte, 0, len("trainmem.")+len(str)+1+len(b.tag))
		h = append(append(h, "trainmem."...), str...)
		if b.tag != "" {
			h = append(append(h, '@'), b.tag...)
		}
		b.hash = h
	} else {
		b.bound() // a copied op is still refused
	}
	h.Write(b.hash)
}

// Hashcode is the FNV-32a hash of WriteHash.
func (b *opBase) Hashcode() uint32 {
	h := fnv.New32a()
	b.WriteHash(h)
	return h.Sum32()
}

// ReturnsPtr is false: an op's output is a fresh value.
func (*opBase) ReturnsPtr() bool { return false }

// CallsExtern is false: the ops are never executed by gorgonia.
func (*opBase) CallsExtern() bool { return false }

// OverwritesInput is -1: no op writes into an input.
func (*opBase) OverwritesInput() int { return -1 }

// applyOp is gorgonia.ApplyOp for trainmem's ops, without its type
// inference: o's signature says the result's type (a tensor of the result's
// rank, or a bare scalar, of the float arguments' dtype), so the node is
// made with it after the same checks (one graph, the arity, every
// argument's shape; and here every float argument of one dtype and every
// id argument int32, which the unification checked). TestApplyOpTypes holds
// its types to gorgonia's inference for every op.
func applyOp(o op, children ...*G.Node) (*G.Node, error) {
	if len(children) == 0 || children[0].Graph() == nil {
		return nil, fmt.Errorf("model: %v: no graph supplied", o)
	}
	g := children[0].Graph()
	sg := o.base().sig()
	if len(children) != len(sg.args) {
		return nil, fmt.Errorf("model: %v takes %d inputs, got %d", o, len(sg.args), len(children))
	}
	var dt tensor.Dtype
	for i, c := range children {
		if c.Graph() != g {
			return nil, fmt.Errorf("model: %v: not all inputs are in one graph", o)
		}
		p := sg.args[i]
		switch {
		case p.ids:
			if c.Dtype() != tensor.Int32 {
				return nil, fmt.Errorf("model: %v: %s is %v, want int32 token ids", o, p.name, c.Dtype())
			}
		case dt == (tensor.Dtype{}):
			dt = c.Dtype()
		case c.Dtype() != dt:
			return nil, fmt.Errorf("model: %v: %s is %v, want %v as the other inputs", o, p.name, c.Dtype(), dt)
		}
		if !c.Shape().Eq(p.shape) && !(len(p.shape) == 0 && c.IsScalar()) {
			return nil, fmt.Errorf("model: %v: %s has shape %v, want %v", o, p.name, c.Shape(), p.shape)
		}
	}
	if dt == (tensor.Dtype{}) {
		return nil, fmt.Errorf("model: %v: no float input to take the result's dtype from", o)
	}
	if sg.check != nil {
		if err := sg.check(); err != nil {
			return nil, err
		}
	}
	var ret hm.Type = dt
	if len(sg.out) > 0 {
		ret = G.TensorType{Dims: len(sg.out), Of: dt}
	}
	return G.NewUniqueNode(G.WithType(ret), G.WithOp(o), G.WithChildren(children), G.In(g), G.WithShape(sg.out...)), nil
}

// diffArgs checks the inputs SymDiff is given against the op's arity.
func diffArgs(o op, in G.Nodes) error {
	if n := o.Arity(); len(in) != n {
		return fmt.Errorf("model: %v.SymDiff: %d inputs, want %d", o, len(in), n)
	}
	return nil
}

// Types (opBase.Type). Every float operand of an op shares one dtype a
// (Float32 or Float64); token ids are Int32 vectors.
func tt(dims int, of hm.Type) hm.Type { return G.TensorType{Dims: dims, Of: of} }

func fa() hm.TypeVariable { return hm.TypeVariable('a') }

// shapes converts the dim sizers gorgonia passes to InferShape.
func shapes(op G.Op, in []G.DimSizer, want int) ([]tensor.Shape, error) {
	if len(in) != want {
		return nil, fmt.Errorf("model: %v takes %d inputs, got %d", op, want, len(in))
	}
	ss := make([]tensor.Shape, len(in))
	for i, d := range in {
		s, ok := d.(tensor.Shape)
		if !ok {
			return nil, fmt.Errorf("model: %v: input %d has no shape (%T)", op, i, d)
		}
		ss[i] = s
	}
	return ss, nil
}

func checkHeads(op G.Op, c, nh, kv int) error {
	if nh <= 0 || c%nh != 0 {
		return fmt.Errorf("model: %v: heads %d do not divide channels %d", op, nh, c)
	}
	if kv <= 0 || nh%kv != 0 {
		return fmt.Errorf("model: %v: %d key and value heads do not divide %d query heads", op, kv, nh)
	}
	return nil
}
