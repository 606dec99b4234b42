//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the embedding family (Embedding and the gradients of its two tables).

// The family's kernels (kernels/embedding.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"embedding":                    "pippipiiiiiiiip",
		"embedding_backward_tokens":    "pipipiiiiiip",
		"embedding_backward_positions": "pipiiii",
	})
}

// Embedding: out[b·T+t, :] = wte[tokens[b·T+t] - part.Lo, :] (zero for a
// token outside the table) + wpe[t, :] (unless part.NoPositions).
func (d *Device) Embedding(out, tokens, wte, wpe *cuda.Buffer, B, T, C int, part cuda.VocabPart) error {
	if err := d.begin("Embedding", cuda.Check.Embedding(out, tokens, wte, wpe, B, T, C, part), out, tokens, wte, wpe); err != nil {
		return err
	}
	defer d.leave()
	checked, err := d.checkIDsOnHost("Embedding", "token id", tokens, T, part.Vocab(wte.Len/C))
	if err != nil {
		return err
	}
	return d.runChecked(embeddingCall(out, tokens, wte, wpe, B, T, C, part, uintptr(d.status)), checked)
}

// runChecked runs a kernel that reads token ids; without a host copy of
// the ids it waits for the kernel and reads its finding.
func (d *Device) runChecked(c *kcall, checkedOnHost bool) error {
	if err := d.run(c); err != nil {
		return err
	}
	if checkedOnHost {
		return nil
	}
	return d.syncCheck(c.name)
}

// EmbeddingBackwardTokens: dwte = 0 (unless accumulate), then the row of
// each token the table holds the sum of its positions' rows (from the
// row's value when accumulating), in position order, in fp64 (one warp per
// token, no atomics).
func (d *Device) EmbeddingBackwardTokens(dwte, dout, tokens *cuda.Buffer, B, T, C int, part cuda.VocabPart, accumulate bool) error {
	err := cuda.Check.EmbeddingBackwardTokens(dwte, dout, tokens, B, T, C, part, accumulate)
	if err := d.begin("EmbeddingBackwardTokens", err, dwte, dout, tokens); err != nil {
		return err
	}
	defer d.leave()
	checked, err := d.checkIDsOnHost("EmbeddingBackwardTokens", "token id", tokens, T, part.Vocab(dwte.Len/C))
	if err != nil {
		return err
	}
	if !accumulate {
		if err := d.memsetZero(dwte, 0, dwte.Len); err != nil {
			return err
		}
	}
	return d.runChecked(embeddingBackwardTokensCall(dwte, dout, tokens, B, T, C, part, accumulate, uintptr(d.status)), checked)
}

// EmbeddingBackwardPositions: dwpe[t, :] = Σ_b dout[b·T+t, :]; rows t ≥ T zero.
func (d *Device) EmbeddingBackwardPositions(dwpe, dout *cuda.Buffer, B, T, C int) error {
	err := cuda.Check.EmbeddingBackwardPositions(dwpe, dout, B, T, C)
	if err := d.begin("EmbeddingBackwardPositions", err, dwpe, dout); err != nil {
		return err
	}
	defer d.leave()
	if err := d.memsetZero(dwpe, T*C, dwpe.Len-T*C); err != nil {
		return err
	}
	return d.run(embeddingBackwardPositionsCall(dwpe, dout, B, T, C))
}

// positions is 1 when an embedding adds the positions, 0 when not.
func positions(part cuda.VocabPart) int64 {
	if part.NoPositions {
		return 0
	}
	return 1
}

func embeddingCall(out, tokens, wte, wpe *cuda.Buffer, B, T, C int, part cuda.VocabPart, status uintptr) *kcall {
	N, rows := int64(B)*int64(T), wte.Len/C
	return newCall("embedding", cuda.AllF64(out, wte, wpe), gridStride(N*int64(C), elemBlock)).
		buf(out).ids(tokens).buf(wte).buf(wpe).int(N).int(int64(T)).int(int64(C)).
		int(int64(part.Vocab(rows))).int(int64(part.Lo)).int(int64(rows)).int(positions(part)).ptr(status)
}

func embeddingBackwardTokensCall(dwte, dout, tokens *cuda.Buffer, B, T, C int, part cuda.VocabPart, accumulate bool, status uintptr) *kcall {
	N, rows := int64(B)*int64(T), dwte.Len/C
	acc := int64(0)
	if accumulate {
		acc = 1
	}
	return newCall("embedding_backward_tokens", cuda.AllF64(dwte, dout), perWarp(N)).
		buf(dwte).buf(dout).ids(tokens).int(N).int(int64(C)).
		int(int64(part.Vocab(rows))).int(int64(part.Lo)).int(int64(rows)).int(acc).ptr(status)
}

func embeddingBackwardPositionsCall(dwpe, dout *cuda.Buffer, B, T, C int) *kcall {
	return newCall("embedding_backward_positions", cuda.AllF64(dwpe, dout), gridStride(int64(T)*int64(C), elemBlock)).
		buf(dwpe).buf(dout).int(int64(B)).int(int64(T)).int(int64(C))
}
