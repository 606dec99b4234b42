package cuda

// The embedding family of the device contract: its kernels (the Kernels
// interface embeds them), their argument checks (Checks) and what a caller
// must know of them (cuda/host/embedding.go and cuda/gpu/embedding.go implement it).

import "fmt"

// EmbeddingKernels are the embedding family: the token and position
// tables and their gradients.
type EmbeddingKernels interface {
	// Embedding: out[b·T+t, :] = wte[tokens[b·T+t], :] + wpe[t, :].
	// tokens is I32 of length B·T with ids in [0, V) where V = wte.Len/C;
	// wpe has at least T rows; out is (B·T, C).
	Embedding(out, tokens, wte, wpe *Buffer, B, T, C int) error
	// EmbeddingBackwardTokens: dwte = 0, then dwte[tokens[i], :] += dout[i, :].
	EmbeddingBackwardTokens(dwte, dout, tokens *Buffer, B, T, C int) error
	// EmbeddingBackwardPositions: dwpe[t, :] = Σ_b dout[b·T+t, :] for t < T;
	// rows t ≥ T of dwpe are zero.
	EmbeddingBackwardPositions(dwpe, dout *Buffer, B, T, C int) error
}

func (Checks) Embedding(out, tokens, wte, wpe *Buffer, B, T, C int) error {
	c := check("Embedding")
	c.positive("B", B, "T", T, "C", C)
	c.floats("out", out, B*T*C, "B·T·C")
	c.ids("tokens", tokens, B*T, "B·T")
	c.floatRows("wte", wte, C, 1, "V")
	c.floatRows("wpe", wpe, C, T, "T")
	return c.err
}

func (Checks) EmbeddingBackwardTokens(dwte, dout, tokens *Buffer, B, T, C int) error {
	c := check("EmbeddingBackwardTokens")
	c.positive("B", B, "T", T, "C", C)
	c.floatRows("dwte", dwte, C, 1, "V")
	c.floats("dout", dout, B*T*C, "B·T·C")
	c.ids("tokens", tokens, B*T, "B·T")
	c.disjoint("dwte", dwte, "dout", dout)
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
