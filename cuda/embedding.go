package cuda

// The embedding family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/embedding.go and cuda/gpu/embedding.go implement it).

import "fmt"

// EmbeddingKernels are the embedding family: the token and position
// tables and their gradients.
type EmbeddingKernels interface {
	// Embedding: out[b·T+t, :] = wte[tokens[b·T+t] - part.Lo, :] (zero
	// for a token outside the table's rows) + wpe[t, :] (unless
	// part.NoPositions). tokens is I32 of length B·T with ids in [0, V),
	// V = part's vocabulary (the table's rows for the whole one); wpe has
	// at least T rows, or is nil with part.NoPositions (a model without
	// learned positions); out is (B·T, C).
	Embedding(out, tokens, wte, wpe *Buffer, B, T, C int, part VocabPart) error
	// EmbeddingBackwardTokens: dwte = 0 (unless accumulate: dwte keeps
	// what it holds, an earlier term of the gradient), then
	// dwte[tokens[i] - part.Lo, :] += dout[i, :] for the tokens the
	// table's rows hold, each row's sum rounded once.
	EmbeddingBackwardTokens(dwte, dout, tokens *Buffer, B, T, C int, part VocabPart, accumulate bool) error
	// EmbeddingBackwardPositions: dwpe[t, :] = Σ_b dout[b·T+t, :] for t < T;
	// rows t ≥ T of dwpe are zero.
	EmbeddingBackwardPositions(dwpe, dout *Buffer, B, T, C int) error
}

// VocabPart is which rows of the vocabulary a token table holds, and
// whether an embedding adds the positions: a tensor-parallel rank's table
// holds the ids [Lo, Lo + its rows) of a vocabulary of V (model/tensor.go),
// a token outside them embedding to zero, and one rank of the group alone
// adds the positions (NoPositions on the others), so that the ranks' sum is
// the whole embedding. The zero value is the whole vocabulary (V the
// table's rows), the positions added.
type VocabPart struct {
	Lo, V       int
	NoPositions bool
}

// Vocab is the vocabulary the ids are checked against: V, or a whole
// table's rows.
func (p VocabPart) Vocab(rows int) int {
	if p.V == 0 {
		return rows
	}
	return p.V
}

// vocabPart checks that a table of rows rows is part of the vocabulary.
func (c *checker) vocabPart(p VocabPart, rows int) {
	switch {
	case p.Lo < 0 || p.V < 0:
		c.fail("vocabulary part at %d of %d: negative", p.Lo, p.V)
	case p.V == 0 && p.Lo != 0:
		c.fail("vocabulary part at %d of the table's own %d rows: a part starting past 0 needs its vocabulary V", p.Lo, rows)
	case p.V > 0 && p.Lo+rows > p.V:
		c.fail("vocabulary part of %d rows at %d is past the vocabulary of V = %d", rows, p.Lo, p.V)
	}
}

func (Checks) Embedding(out, tokens, wte, wpe *Buffer, B, T, C int, part VocabPart) error {
	c := check("Embedding")
	c.positive("B", B, "T", T, "C", C)
	c.floats("out", out, B*T*C, "B·T·C")
	c.ids("tokens", tokens, B*T, "B·T")
	c.floatRows("wte", wte, C, 1, "V")
	if wpe != nil || !part.NoPositions { // a model without learned positions has no wpe
		c.floatRows("wpe", wpe, C, T, "T")
	}
	if c.err == nil {
		c.vocabPart(part, wte.Len/C)
	}
	return c.err
}

func (Checks) EmbeddingBackwardTokens(dwte, dout, tokens *Buffer, B, T, C int, part VocabPart, accumulate bool) error {
	c := check("EmbeddingBackwardTokens")
	c.positive("B", B, "T", T, "C", C)
	c.floatRows("dwte", dwte, C, 1, "V")
	c.floats("dout", dout, B*T*C, "B·T·C")
	c.ids("tokens", tokens, B*T, "B·T")
	c.disjoint("dwte", dwte, "dout", dout)
	if c.err == nil {
		c.vocabPart(part, dwte.Len/C)
	}
	return c.err
}

func (Checks) EmbeddingBackwardPositions(dwpe, dout *Buffer, B, T, C int) error {
	c := check("EmbeddingBackwardPositions")
	c.positive("B", B, "T", T, "C", C)
	c.floatRows("dwpe", dwpe, C, T, "T")
	c.floats("dout", dout, B*T*C, "B·T·C")
	c.disjoint("dwpe", dwpe, "dout", dout)
	return c.err
}

// CheckIDs checks token ids or targets against the vocabulary on devices
// that hold the data. what is "token id" or "target"; T > 0 names the
// position as (b, t).
func CheckIDs(kernel, what string, ids []int32, T, V int) error {
	for i, id := range ids {
		if id < 0 || int(id) >= V {
			where := fmt.Sprintf("row %d", i)
			if T > 0 {
				where = fmt.Sprintf("position %d (b=%d, t=%d)", i, i/T, i%T)
			}
			return fmt.Errorf("cuda: %s: %s %d at %s is outside [0, V) with V = %d", kernel, what, id, where, V)
		}
	}
	return nil
}
