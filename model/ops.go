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
//		return x.K.AttentionProbs(out, a[0], op.B, op.T, op.C, op.NH)
//	}
//
// Conventions. N is the number of rows, B·T; C the channels; V the vocabulary;
// NH the heads. Activations are 2-D (N, ·) row-major; attention
// probabilities are (B, NH, T, T). Token ids are Int32. Every op has one
// output. Each forward op's doc comment says what its backward ops read (the
// tensors the forward pass must keep, with their sizes in elements): that is
// what the checkpointing policy of package train trades for recomputation.
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

// Exec is what an op runs on: the device's kernels, and workspace the
// executor lends for one call (allocated as cuda.Workspace, so that the
// shape-only device sees every byte a computing one would).
type Exec struct {
	K       cuda.Kernels
	Scratch func(n int, run func(*cuda.Buffer) error) error
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

// IsDroppedBySelective reports whether selective checkpointing drops op's
// output for recomputation (the attention probabilities).
func IsDroppedBySelective(op G.Op) bool {
	s, ok := op.(interface{ DroppedBySelective() bool })
	return ok && s.DroppedBySelective()
}

// opBase holds what every trainmem op shares: the methods below and the
// node tag.
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
type opBase struct{ tag string }

// nodeTag is the op's tag, hashed with its fields.
func (b opBase) nodeTag() string { return b.tag }

// setTag sets the tag of a forward op (the builder's).
func (b *opBase) setTag(t string) { b.tag = t }

// sub is the opBase of a backward op that differentiates input what.
func (b opBase) sub(what string) opBase { return opBase{tag: b.tag + "/" + what} }

// trainmemOp marks trainmem's ops (IsTrainmemOp).
func (opBase) trainmemOp() {}

// ReturnsPtr is false: an op's output is a fresh value.
func (opBase) ReturnsPtr() bool { return false }

// CallsExtern is false: the ops are never executed by gorgonia.
func (opBase) CallsExtern() bool { return false }

// OverwritesInput is -1: no op writes into an input.
func (opBase) OverwritesInput() int { return -1 }

func notVM(op G.Op) error { return fmt.Errorf("%w: %v", ErrNotVM, op) }

// hashOp hashes an op by its String, which names the op and every field,
// and its node tag.
func hashOp(op fmt.Stringer, h hash.Hash) {
	fmt.Fprintf(h, "trainmem.%s", op.String())
	if t, ok := op.(interface{ nodeTag() string }); ok && t.nodeTag() != "" {
		fmt.Fprintf(h, "@%s", t.nodeTag())
	}
}

func hashcode(op fmt.Stringer) uint32 {
	h := fnv.New32a()
	hashOp(op, h)
	return h.Sum32()
}

// Types. Every float operand of an op shares one dtype a (Float32 or
// Float64); token ids are Int32 vectors.
func tt(dims int, of hm.Type) hm.Type { return G.TensorType{Dims: dims, Of: of} }

func fa() hm.TypeVariable { return hm.TypeVariable('a') }

func ids() hm.Type { return tt(1, tensor.Int32) }

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

// wantShape checks one input's shape.
func wantShape(op G.Op, what string, got tensor.Shape, want ...int) error {
	if !got.Eq(tensor.Shape(want)) {
		return fmt.Errorf("model: %v: %s has shape %v, want %v", op, what, got, tensor.Shape(want))
	}
	return nil
}

// checkAll runs the checks in order and returns the first error.
func checkAll(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func checkHeads(op G.Op, c, nh int) error {
	if nh <= 0 || c%nh != 0 {
		return fmt.Errorf("model: %v: heads %d do not divide channels %d", op, nh, c)
	}
	return nil
}
