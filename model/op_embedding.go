package model

// The embedding family: the token and position embedding and the gradients of its two tables.

import (
	"fmt"

	G "gorgonia.org/gorgonia"

	"trainmem/cuda"
)

// EmbeddingOp is the token and position embedding: out[b·T+t, :] =
// wte[tokens[b·T+t], :] + wpe[t, :]. Inputs: tokens Int32 (B·T), wte (V, C),
// wpe (Ctx, C); output (B·T, C). Lowered to cuda Kernels.Embedding.
//
// Kept for backward: tokens (B·T Int32 elements) for wte's gradient; wpe's
// gradient reads only the output gradient. Differentiable in wte and wpe.
//
// A tensor-parallel rank's embedding is vocabulary-parallel (tensor.go):
// its wte holds the V rows from id Lo of a vocabulary of Vocab (0: the
// whole one), a token outside them embeds to zero, the positions are added
// on one rank of the group alone (NoPositions on the others), and the
// ranks' outputs are summed over the tensor group, so every rank has the
// whole embedding.
type EmbeddingOp struct {
	opBase
	B, T, C     int
	V           int // vocabulary: wte's rows
	Ctx         int // positions: wpe's rows, ≥ T
	Lo, Vocab   int
	NoPositions bool
	// Rotary: the model has no learned positions (its attention rotates q
	// and k, op_rope.go): no wpe argument, nothing added.
	Rotary bool
	// Seq, with sequence parallelism, is the ranks the output's rows are
	// split over: the ranks' lookups are reduce-scattered, each rank
	// keeping its B·T/Seq rows.
	Seq int
}

// part is the kernels' view of the rows wte holds.
func (op *EmbeddingOp) part() cuda.VocabPart {
	return cuda.VocabPart{Lo: op.Lo, V: op.Vocab, NoPositions: op.NoPositions || op.Rotary}
}

// signature: tokens (B*T) token ids, wte (V, C), wpe (Ctx, C) (none when
// Rotary) → (B*T/Seq, C).
func (op *EmbeddingOp) signature() signature {
	args := []param{tokenArg("tokens", op.B*op.T), arg("wte", op.V, op.C), arg("wpe", op.Ctx, op.C)}
	if op.Rotary {
		args = args[:2]
	}
	return signature{
		args: args,
		out:  result(op.B*op.T/seqOf(op.Seq), op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *EmbeddingOp) String() string {
	if op.Lo != 0 || op.Vocab != 0 || op.NoPositions || op.Seq != 0 || op.Rotary {
		return fmt.Sprintf("Embedding{B=%d,T=%d,C=%d,V=%d,Ctx=%d,Lo=%d,Vocab=%d,NoPositions=%t,Seq=%d,Rotary=%t}", op.B, op.T, op.C, op.V, op.Ctx, op.Lo, op.Vocab, op.NoPositions, op.Seq, op.Rotary)
	}
	return fmt.Sprintf("Embedding{B=%d,T=%d,C=%d,V=%d,Ctx=%d}", op.B, op.T, op.C, op.V, op.Ctx)
}

// Run is Kernels.Embedding, for a part of the vocabulary summed over the
// tensor group.
func (op *EmbeddingOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	var wpe *cuda.Buffer
	if !op.Rotary {
		wpe = a[2]
	}
	lookup := func(y *cuda.Buffer) error { return x.K.Embedding(y, a[0], a[1], wpe, op.B, op.T, op.C, op.part()) }
	if seq := seqOf(op.Seq); seq > 1 {
		return x.scattered(op, out, seq, lookup)
	}
	if err := lookup(out); err != nil {
		return err
	}
	if op.Vocab != 0 {
		return x.allReduce(op, out)
	}
	return nil
}

// DiffWRT: wte and wpe, not the token ids.
func (op *EmbeddingOp) DiffWRT(n int) []bool { return []bool{false, true, true}[:op.Arity()] }

// SymDiff returns EmbeddingBackwardTokens(dy, tokens) for wte and
// EmbeddingBackwardPositions(dy) for wpe.
func (op *EmbeddingOp) SymDiff(in G.Nodes, out, dy *G.Node) (G.Nodes, error) {
	if err := diffArgs(op, in); err != nil {
		return nil, err
	}
	dwte, err := applyOp(op.sub("wte", &EmbeddingBackwardTokensOp{B: op.B, T: op.T, C: op.C, V: op.V, Lo: op.Lo, Vocab: op.Vocab, Seq: op.Seq}), dy, in[0])
	if err != nil {
		return nil, err
	}
	if op.Rotary {
		return G.Nodes{nil, dwte}, nil
	}
	dwpe, err := applyOp(op.sub("wpe", &EmbeddingBackwardPositionsOp{B: op.B, T: op.T, C: op.C, Ctx: op.Ctx, Seq: op.Seq}), dy)
	if err != nil {
		return nil, err
	}
	return G.Nodes{nil, dwte, dwpe}, nil
}

// EmbeddingBackwardTokensOp is wte's gradient (V, C) from dy (B·T, C) and tokens
// Int32 (B·T): zero, then row tokens[i] += dy[i, :]. Lowered to
// Kernels.EmbeddingBackwardTokens.
type EmbeddingBackwardTokensOp struct {
	opBase
	B, T, C, V int
	Lo, Vocab  int // the rows wte holds, as EmbeddingOp's
	Seq        int // dy is this rank's B·T/Seq rows, gathered first
}

// signature: dy (B*T/Seq, C), tokens (B*T) token ids → (V, C).
func (op *EmbeddingBackwardTokensOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.B*op.T/seqOf(op.Seq), op.C), tokenArg("tokens", op.B*op.T)},
		out:  result(op.V, op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *EmbeddingBackwardTokensOp) String() string {
	if op.Lo != 0 || op.Vocab != 0 || op.Seq != 0 {
		return fmt.Sprintf("EmbeddingBackwardTokens{B=%d,T=%d,C=%d,V=%d,Lo=%d,Vocab=%d,Seq=%d}", op.B, op.T, op.C, op.V, op.Lo, op.Vocab, op.Seq)
	}
	return fmt.Sprintf("EmbeddingBackwardTokens{B=%d,T=%d,C=%d,V=%d}", op.B, op.T, op.C, op.V)
}

// Run is Kernels.EmbeddingBackwardTokens, adding into out with
// Exec.Accumulate.
func (op *EmbeddingBackwardTokensOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	run := func(dy *cuda.Buffer) error {
		return x.K.EmbeddingBackwardTokens(out, dy, a[1], op.B, op.T, op.C, cuda.VocabPart{Lo: op.Lo, V: op.Vocab}, x.Accumulate)
	}
	if seq := seqOf(op.Seq); seq > 1 {
		return x.gathered(op, a[0], seq, run)
	}
	return run(a[0])
}

// Accumulates: Run adds into out with Exec.Accumulate (the embedding's term
// of a tied wte's gradient, Accumulator).
func (op *EmbeddingBackwardTokensOp) Accumulates() bool { return true }

// EmbeddingBackwardPositionsOp is wpe's gradient (Ctx, C) from dy (B·T, C): row
// t < T is Σ_b dy[b·T+t, :], rows t ≥ T are zero. Lowered to
// Kernels.EmbeddingBackwardPositions.
type EmbeddingBackwardPositionsOp struct {
	opBase
	B, T, C, Ctx int
	Seq          int // dy is this rank's B·T/Seq rows, gathered first
}

// signature: dy (B*T/Seq, C) → (Ctx, C).
func (op *EmbeddingBackwardPositionsOp) signature() signature {
	return signature{
		args: []param{arg("dy", op.B*op.T/seqOf(op.Seq), op.C)},
		out:  result(op.Ctx, op.C),
	}
}

// String names the op and every field; WriteHash hashes it.
func (op *EmbeddingBackwardPositionsOp) String() string {
	if op.Seq != 0 {
		return fmt.Sprintf("EmbeddingBackwardPositions{B=%d,T=%d,C=%d,Ctx=%d,Seq=%d}", op.B, op.T, op.C, op.Ctx, op.Seq)
	}
	return fmt.Sprintf("EmbeddingBackwardPositions{B=%d,T=%d,C=%d,Ctx=%d}", op.B, op.T, op.C, op.Ctx)
}

// Run is Kernels.EmbeddingBackwardPositions (of the gathered dy with
// sequence parallelism).
func (op *EmbeddingBackwardPositionsOp) Run(x Exec, out *cuda.Buffer, a []*cuda.Buffer) error {
	run := func(dy *cuda.Buffer) error { return x.K.EmbeddingBackwardPositions(out, dy, op.B, op.T, op.C) }
	if seq := seqOf(op.Seq); seq > 1 {
		return x.gathered(op, a[0], seq, run)
	}
	return run(a[0])
}
