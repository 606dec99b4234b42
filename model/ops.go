package model

// trainmem's own gorgonia ops: the forward ops of GPT-2 (this file) and their
// backward ops (ops_backward.go). They exist so that the backward graph that
// gorgonia's symbolic differentiation builds holds only operations trainmem's
// executor knows how to lower to the kernels of package cuda (see
// cuda.Kernels): every op here is one kernel call there, with the same
// semantics, and carries as exported fields the dimensions that call needs.
//
// The ops are symbolic only. They do not run on gorgonia's VMs: Do returns an
// error saying so (ErrNotVM). Package train compiles the graph into its own
// schedule and lowers each node by its op's type, e.g.
//
//	case *model.AttnProbsOp:
//		dev.AttentionProbs(out, qkv, op.B, op.T, op.C, op.NH)
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
// covers every field and the node tag (gorgonia merges nodes of equal hash); SymDiff returns one
// entry per argument, nil for the arguments DiffWRT marks false.

import (
	"errors"
	"fmt"
	"hash"
	"hash/fnv"

	"github.com/chewxy/hm"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// ErrNotVM is returned by the Do method of every trainmem op: the ops are
// lowered to kernels by trainmem's executor (package train), not run by
// gorgonia's TapeMachine or LispMachine.
var ErrNotVM = errors.New("model: trainmem ops run on trainmem's executor (package train), not on gorgonia's VMs")

// LayerNormEps is the ε of every layer norm, as in GPT-2.
const LayerNormEps = 1e-5

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
func fa() hm.TypeVariable             { return hm.TypeVariable('a') }
func ids() hm.Type                    { return tt(1, tensor.Int32) }

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

// ---------------------------------------------------------------------------
// Embedding

// EmbeddingOp is the token and position embedding: out[b·T+t, :] =
// wte[tokens[b·T+t], :] + wpe[t, :]. Inputs: tokens Int32 (B·T), wte (V, C),
// wpe (Ctx, C); output (B·T, C). Lowered to cuda Kernels.Embedding.
//
// Kept for backward: tokens (B·T Int32 elements) for wte's gradient; wpe's
// gradient reads only the output gradient. Differentiable in wte and wpe.
type EmbeddingOp struct {
	opBase
	B, T, C int
	V       int // vocabulary: wte's rows
	Ctx     int // positions: wpe's rows, ≥ T
}

// Arity is 3: tokens, wte, wpe.
func (op *EmbeddingOp) Arity() int { return 3 }

// Type is Int32 vector → a matrix → a matrix → a matrix.
func (op *EmbeddingOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(ids(), tt(2, a), tt(2, a), tt(2, a))
}

// InferShape checks the inputs and returns (B·T, C).
func (op *EmbeddingOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 3)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "tokens", s[0], op.B*op.T),
		wantShape(op, "wte", s[1], op.V, op.C),
		wantShape(op, "wpe", s[2], op.Ctx, op.C),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.B * op.T, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *EmbeddingOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *EmbeddingOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *EmbeddingOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *EmbeddingOp) String() string {
	return fmt.Sprintf("Embedding{B=%d,T=%d,C=%d,V=%d,Ctx=%d}", op.B, op.T, op.C, op.V, op.Ctx)
}

// DiffWRT: wte and wpe, not the token ids.
func (op *EmbeddingOp) DiffWRT(n int) []bool { return []bool{false, true, true} }

// SymDiff returns EmbeddingGradTokens(dy, tokens) for wte and
// EmbeddingGradPositions(dy) for wpe.
func (op *EmbeddingOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if len(in) != 3 {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want 3", op, len(in))
	}
	dwte, err := G.ApplyOp(&EmbeddingGradTokensOp{opBase: op.sub("wte"), B: op.B, T: op.T, C: op.C, V: op.V}, dy, in[0])
	if err != nil {
		return nil, err
	}
	dwpe, err := G.ApplyOp(&EmbeddingGradPositionsOp{opBase: op.sub("wpe"), B: op.B, T: op.T, C: op.C, Ctx: op.Ctx}, dy)
	if err != nil {
		return nil, err
	}
	return G.Nodes{nil, dwte, dwpe}, nil
}

// ---------------------------------------------------------------------------
// Layer norm

// LNStatsOp computes the layer-norm statistics of x (N, C): a (N, 2) tensor,
// per row (mean, 1/sqrt(var + Eps)) with var the biased variance over C.
// Lowered to Kernels.LayerNormStats; the kernel stores stats in fp32 whatever
// the storage type of x.
//
// It is not differentiable: LayerNorm marks its stats input
// non-differentiable, and LayerNorm's backward ops read the stats (2N
// elements) instead of recomputing them.
type LNStatsOp struct {
	opBase
	N, C int
	Eps  float32
}

// Arity is 1.
func (op *LNStatsOp) Arity() int { return 1 }

// Type is a matrix → a matrix.
func (op *LNStatsOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(2, a)) }

// InferShape returns (N, 2).
func (op *LNStatsOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 1)
	if err != nil {
		return nil, err
	}
	if err := wantShape(op, "x", s[0], op.N, op.C); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, 2}, nil
}

// Do is not supported: see ErrNotVM.
func (op *LNStatsOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LNStatsOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LNStatsOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *LNStatsOp) String() string {
	return fmt.Sprintf("LNStats{N=%d,C=%d,Eps=%g}", op.N, op.C, op.Eps)
}

// DiffWRT is false: statistics carry no gradient of their own.
func (op *LNStatsOp) DiffWRT(n int) []bool { return []bool{false} }

// SymDiff is an error: the op is not differentiable.
func (op *LNStatsOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("model: %v is not differentiable (LayerNorm marks its stats input non-differentiable)", op)
}

// LayerNormOp is y = (x - mean)·rstd·w + b for x (N, C), stats (N, 2) from
// LNStatsOp, w and b (C); y (N, C). Lowered to Kernels.LayerNorm.
//
// Kept for backward: x (N·C elements), stats (2N) and w (C, a parameter).
// Differentiable in x, w and b; not in stats.
type LayerNormOp struct {
	opBase
	N, C int
}

// Arity is 4: x, stats, w, b.
func (op *LayerNormOp) Arity() int { return 4 }

// Type is a matrix → a matrix → a vector → a vector → a matrix.
func (op *LayerNormOp) Type() hm.Type {
	a := fa()
	return hm.NewFnType(tt(2, a), tt(2, a), tt(1, a), tt(1, a), tt(2, a))
}

// InferShape returns (N, C).
func (op *LayerNormOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 4)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "x", s[0], op.N, op.C),
		wantShape(op, "stats", s[1], op.N, 2),
		wantShape(op, "w", s[2], op.C),
		wantShape(op, "b", s[3], op.C),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *LayerNormOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LayerNormOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LayerNormOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *LayerNormOp) String() string { return fmt.Sprintf("LayerNorm{N=%d,C=%d}", op.N, op.C) }

// DiffWRT: x, w and b; not stats.
func (op *LayerNormOp) DiffWRT(n int) []bool { return []bool{true, false, true, true} }

// SymDiff returns LayerNormGradX(dy, x, stats, w), nil,
// LayerNormGradW(dy, x, stats) and SumRows(dy).
func (op *LayerNormOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if len(in) != 4 {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want 4", op, len(in))
	}
	x, stats, w := in[0], in[1], in[2]
	dx, err := G.ApplyOp(&LayerNormGradXOp{opBase: op.sub("x"), N: op.N, C: op.C}, dy, x, stats, w)
	if err != nil {
		return nil, err
	}
	dw, err := G.ApplyOp(&LayerNormGradWOp{opBase: op.sub("w"), N: op.N, C: op.C}, dy, x, stats)
	if err != nil {
		return nil, err
	}
	db, err := G.ApplyOp(&SumRowsOp{opBase: op.sub("b"), N: op.N, C: op.C}, dy)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx, nil, dw, db}, nil
}

// ---------------------------------------------------------------------------
// Linear

// LinearOp is y = x·Wᵀ + b for x (N, In), W (Out, In) stored as in llm.c, and
// optionally b (Out); y (N, Out). Bias is false for the tied head (logits =
// x·wteᵀ), which has two inputs. Lowered to one Kernels.MatMul (TransB) and,
// with a bias, Kernels.AddBias.
//
// Kept for backward: x (N·In elements) for W's gradient and W (Out·In, a
// parameter) for x's gradient; b's gradient reads only dy. Differentiable in
// every input.
type LinearOp struct {
	opBase
	N, In, Out int
	Bias       bool
}

// Arity is 3 with a bias, else 2.
func (op *LinearOp) Arity() int {
	if op.Bias {
		return 3
	}
	return 2
}

// Type is a matrix → a matrix [→ a vector] → a matrix.
func (op *LinearOp) Type() hm.Type {
	a := fa()
	if op.Bias {
		return hm.NewFnType(tt(2, a), tt(2, a), tt(1, a), tt(2, a))
	}
	return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a))
}

// InferShape returns (N, Out).
func (op *LinearOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, op.Arity())
	if err != nil {
		return nil, err
	}
	errs := []error{
		wantShape(op, "x", s[0], op.N, op.In),
		wantShape(op, "W", s[1], op.Out, op.In),
	}
	if op.Bias {
		errs = append(errs, wantShape(op, "b", s[2], op.Out))
	}
	if err := checkAll(errs...); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, op.Out}, nil
}

// Do is not supported: see ErrNotVM.
func (op *LinearOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *LinearOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *LinearOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *LinearOp) String() string {
	return fmt.Sprintf("Linear{N=%d,In=%d,Out=%d,Bias=%t}", op.N, op.In, op.Out, op.Bias)
}

// DiffWRT: every input.
func (op *LinearOp) DiffWRT(n int) []bool {
	d := make([]bool, n)
	for i := range d {
		d[i] = true
	}
	return d
}

// SymDiff returns LinearGradX(dy, W), LinearGradW(dy, x) and, with a bias,
// SumRows(dy).
func (op *LinearOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if len(in) != op.Arity() {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want %d", op, len(in), op.Arity())
	}
	x, w := in[0], in[1]
	dx, err := G.ApplyOp(&LinearGradXOp{opBase: op.sub("x"), N: op.N, In: op.In, Out: op.Out}, dy, w)
	if err != nil {
		return nil, err
	}
	dw, err := G.ApplyOp(&LinearGradWOp{opBase: op.sub("w"), N: op.N, In: op.In, Out: op.Out}, dy, x)
	if err != nil {
		return nil, err
	}
	if !op.Bias {
		return G.Nodes{dx, dw}, nil
	}
	db, err := G.ApplyOp(&SumRowsOp{opBase: op.sub("b"), N: op.N, C: op.Out}, dy)
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx, dw, db}, nil
}

// ---------------------------------------------------------------------------
// Attention

// AttnProbsOp computes causal attention probabilities from qkv (B·T, 3C),
// laid out [q | k | v], each C wide and split into NH heads of C/NH
// channels: P (B, NH, T, T) is the softmax of q·kᵀ/sqrt(C/NH) over keys
// 0..t for query t (row t has T-1-t trailing exact zeros). Lowered to
// Kernels.AttentionProbs.
//
// Its output is a node of its own so that AttnOut and its backward op read it
// instead of recomputing it; the op is not differentiable (AttnOut marks P
// non-differentiable and AttnGrad differentiates through P itself).
type AttnProbsOp struct {
	opBase
	B, T, C, NH int
}

// Arity is 1.
func (op *AttnProbsOp) Arity() int { return 1 }

// Type is a matrix → a 4-tensor.
func (op *AttnProbsOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(4, a)) }

// InferShape returns (B, NH, T, T).
func (op *AttnProbsOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 1)
	if err != nil {
		return nil, err
	}
	if err := checkHeads(op, op.C, op.NH); err != nil {
		return nil, err
	}
	if err := wantShape(op, "qkv", s[0], op.B*op.T, 3*op.C); err != nil {
		return nil, err
	}
	return tensor.Shape{op.B, op.NH, op.T, op.T}, nil
}

func checkHeads(op G.Op, c, nh int) error {
	if nh <= 0 || c%nh != 0 {
		return fmt.Errorf("model: %v: heads %d do not divide channels %d", op, nh, c)
	}
	return nil
}

// Do is not supported: see ErrNotVM.
func (op *AttnProbsOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *AttnProbsOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *AttnProbsOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *AttnProbsOp) String() string {
	return fmt.Sprintf("AttnProbs{B=%d,T=%d,C=%d,NH=%d}", op.B, op.T, op.C, op.NH)
}

// DiffWRT is false: AttnGrad differentiates through P.
func (op *AttnProbsOp) DiffWRT(n int) []bool { return []bool{false} }

// SymDiff is an error: the op is not differentiable on its own.
func (op *AttnProbsOp) SymDiff(G.Nodes, *G.Node, *G.Node) (G.Nodes, error) {
	return nil, fmt.Errorf("model: %v is not differentiable (AttnOut's gradient goes through the probabilities)", op)
}

// AttnOutOp is the attention output y (B·T, C): head h's channels of row
// b·T+t are Σ_s P[b, h, t, s]·v[b·T+s, head h], for qkv (B·T, 3C) and P
// (B, NH, T, T) from AttnProbsOp. Lowered to Kernels.AttentionOut.
//
// Kept for backward: qkv (N·3C elements) and P (B·NH·T·T), which AttnGrad
// reads to produce the whole gradient of qkv (through v directly and through
// q and k via P). Differentiable in qkv only.
type AttnOutOp struct {
	opBase
	B, T, C, NH int
}

// Arity is 2: qkv, P.
func (op *AttnOutOp) Arity() int { return 2 }

// Type is a matrix → a 4-tensor → a matrix.
func (op *AttnOutOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(4, a), tt(2, a)) }

// InferShape returns (B·T, C).
func (op *AttnOutOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 2)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		checkHeads(op, op.C, op.NH),
		wantShape(op, "qkv", s[0], op.B*op.T, 3*op.C),
		wantShape(op, "P", s[1], op.B, op.NH, op.T, op.T),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.B * op.T, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *AttnOutOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *AttnOutOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *AttnOutOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *AttnOutOp) String() string {
	return fmt.Sprintf("AttnOut{B=%d,T=%d,C=%d,NH=%d}", op.B, op.T, op.C, op.NH)
}

// DiffWRT: qkv only.
func (op *AttnOutOp) DiffWRT(n int) []bool { return []bool{true, false} }

// SymDiff returns AttnGrad(dy, qkv, P) for qkv and nil for P.
func (op *AttnOutOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want 2", op, len(in))
	}
	dqkv, err := G.ApplyOp(&AttnGradOp{opBase: op.sub("qkv"), B: op.B, T: op.T, C: op.C, NH: op.NH}, dy, in[0], in[1])
	if err != nil {
		return nil, err
	}
	return G.Nodes{dqkv, nil}, nil
}

// ---------------------------------------------------------------------------
// GELU

// GELUOp is y = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) elementwise
// on x (N, C). Lowered to Kernels.GELU.
//
// Kept for backward: x (N·C elements). Differentiable in x.
type GELUOp struct {
	opBase
	N, C int
}

// Arity is 1.
func (op *GELUOp) Arity() int { return 1 }

// Type is a matrix → a matrix.
func (op *GELUOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(2, a)) }

// InferShape returns (N, C).
func (op *GELUOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 1)
	if err != nil {
		return nil, err
	}
	if err := wantShape(op, "x", s[0], op.N, op.C); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *GELUOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *GELUOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *GELUOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *GELUOp) String() string { return fmt.Sprintf("GELU{N=%d,C=%d}", op.N, op.C) }

// DiffWRT: x.
func (op *GELUOp) DiffWRT(n int) []bool { return []bool{true} }

// SymDiff returns GELUGrad(dy, x).
func (op *GELUOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if len(in) != 1 {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want 1", op, len(in))
	}
	dx, err := G.ApplyOp(&GELUGradOp{opBase: op.sub("x"), N: op.N, C: op.C}, dy, in[0])
	if err != nil {
		return nil, err
	}
	return G.Nodes{dx}, nil
}

// ---------------------------------------------------------------------------
// Residual add

// AddOp is the residual connection y = a + b elementwise on (N, C) inputs.
// Lowered to Kernels.Add.
//
// Kept for backward: nothing. Its gradient is the output gradient itself for
// both inputs, so SymDiff creates no node.
type AddOp struct {
	opBase
	N, C int
}

// Arity is 2.
func (op *AddOp) Arity() int { return 2 }

// Type is a matrix → a matrix → a matrix.
func (op *AddOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), tt(2, a), tt(2, a)) }

// InferShape returns (N, C).
func (op *AddOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 2)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "a", s[0], op.N, op.C),
		wantShape(op, "b", s[1], op.N, op.C),
	); err != nil {
		return nil, err
	}
	return tensor.Shape{op.N, op.C}, nil
}

// Do is not supported: see ErrNotVM.
func (op *AddOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *AddOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *AddOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *AddOp) String() string { return fmt.Sprintf("Add{N=%d,C=%d}", op.N, op.C) }

// DiffWRT: both inputs.
func (op *AddOp) DiffWRT(n int) []bool { return []bool{true, true} }

// SymDiff returns dy for both inputs.
func (op *AddOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want 2", op, len(in))
	}
	return G.Nodes{dy, dy}, nil
}

// ---------------------------------------------------------------------------
// Cross-entropy

// CrossEntropyOp is the mean over N rows of -log softmax(logits[i, :])[targets[i]]
// for logits (N, V) and targets Int32 (N) in [0, V); the output is a bare
// scalar of the logits' dtype (a scalar dtype, so that gorgonia's
// differentiation accepts it as a cost). Lowered to Kernels.CrossEntropy.
//
// Kept for backward: logits (N·V elements, the largest activation of a GPT-2)
// and targets (N Int32). Differentiable in the logits.
type CrossEntropyOp struct {
	opBase
	N, V int
}

// Arity is 2: logits, targets.
func (op *CrossEntropyOp) Arity() int { return 2 }

// Type is a matrix → Int32 vector → a.
func (op *CrossEntropyOp) Type() hm.Type { a := fa(); return hm.NewFnType(tt(2, a), ids(), a) }

// InferShape returns the scalar shape ().
func (op *CrossEntropyOp) InferShape(in ...G.DimSizer) (tensor.Shape, error) {
	s, err := shapes(op, in, 2)
	if err != nil {
		return nil, err
	}
	if err := checkAll(
		wantShape(op, "logits", s[0], op.N, op.V),
		wantShape(op, "targets", s[1], op.N),
	); err != nil {
		return nil, err
	}
	return tensor.ScalarShape(), nil
}

// Do is not supported: see ErrNotVM.
func (op *CrossEntropyOp) Do(...G.Value) (G.Value, error) { return nil, notVM(op) }

// WriteHash writes every field.
func (op *CrossEntropyOp) WriteHash(h hash.Hash) { hashOp(op, h) }

// Hashcode is the FNV-32a hash of WriteHash.
func (op *CrossEntropyOp) Hashcode() uint32 { return hashcode(op) }

// String names the op and every field; WriteHash hashes it.
func (op *CrossEntropyOp) String() string { return fmt.Sprintf("CrossEntropy{N=%d,V=%d}", op.N, op.V) }

// DiffWRT: the logits, not the targets.
func (op *CrossEntropyOp) DiffWRT(n int) []bool { return []bool{true, false} }

// SymDiff returns CrossEntropyGrad(dloss, logits, targets) for the logits.
func (op *CrossEntropyOp) SymDiff(in G.Nodes, out, dloss *G.Node) (G.Nodes, error) {
	if len(in) != 2 {
		return nil, fmt.Errorf("model: %v.SymDiff: %d inputs, want 2", op, len(in))
	}
	d, err := G.ApplyOp(&CrossEntropyGradOp{opBase: op.sub("logits"), N: op.N, V: op.V}, dloss, in[0], in[1])
	if err != nil {
		return nil, err
	}
	return G.Nodes{d, nil}, nil
}
