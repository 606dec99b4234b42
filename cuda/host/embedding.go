package host

// The host device's kernels: the embedding family (Embedding and the gradients of its two tables).

import (
	"slices"
	"trainmem/cuda"
)

// Embedding: out[b·T+t, :] = wte[tokens[b·T+t] - part.Lo, :] (zero for a
// token outside the table) + wpe[t, :] (unless part.NoPositions).
func (h *Device) Embedding(out, tokens, wte, wpe *cuda.Buffer, B, T, C int, part cuda.VocabPart) error {
	if err := h.begin("Embedding", cuda.Check.Embedding(out, tokens, wte, wpe, B, T, C, part), out, tokens, wte, wpe); err != nil {
		return err
	}
	if err := cuda.CheckIDs("Embedding", "token id", Int32s(tokens), T, part.Vocab(wte.Len/C)); err != nil {
		return err
	}
	instance(cuda.AllF64(out, wte, wpe), embeddingKernel[float64], embeddingKernel[float32])(h, out, tokens, wte, wpe, T, C, part)
	return nil
}

func embeddingKernel[F float](h *Device, out, tokens, wte, wpe *cuda.Buffer, T, C int, part cuda.VocabPart) {
	ids := Int32s(tokens)
	vo, ve, vp := mkvec[F](out), mkvec[F](wte), mkvec[F](wpe)
	vocab := wte.Len / C // the table's rows: a vocabulary part's
	rows(h, len(ids), rowGrain(C), 3*C, func(i int, tmp []F) {
		tok, t := int(ids[i])-part.Lo, i%T
		o := vo.out(i*C, i*C+C, tmp[2*C:])
		clear(o)
		if tok >= 0 && tok < vocab {
			copy(o, ve.get(tok*C, tok*C+C, tmp[:C]))
		}
		if !part.NoPositions {
			for c, p := range vp.get(t*C, t*C+C, tmp[C:2*C]) {
				o[c] += p
			}
		}
		vo.put(i*C, o)
	})
}

// EmbeddingBackwardTokens: dwte = 0 (unless accumulate), then
// dwte[tokens[i] - part.Lo, :] += dout[i, :] for the tokens the table
// holds, each row summed in position order (in float64, from the row's
// value when accumulating) and rounded once.
func (h *Device) EmbeddingBackwardTokens(dwte, dout, tokens *cuda.Buffer, B, T, C int, part cuda.VocabPart, accumulate bool) error {
	err := cuda.Check.EmbeddingBackwardTokens(dwte, dout, tokens, B, T, C, part, accumulate)
	if err := h.begin("EmbeddingBackwardTokens", err, dwte, dout, tokens); err != nil {
		return err
	}
	all := Int32s(tokens)
	rows := dwte.Len / C
	if err := cuda.CheckIDs("EmbeddingBackwardTokens", "token id", all, T, part.Vocab(rows)); err != nil {
		return err
	}
	if !accumulate {
		h.clear(dwte)
	}
	// Each position's row of the table (outside it for a token the table
	// does not hold), and the positions the table holds grouped by row,
	// ascending in each group.
	ids := make([]int32, len(all))
	var order []int32
	for i, id := range all {
		ids[i] = id - int32(part.Lo)
		if ids[i] >= 0 && int(ids[i]) < rows {
			order = append(order, int32(i))
		}
	}
	slices.SortStableFunc(order, func(a, b int32) int { return int(ids[a]) - int(ids[b]) })
	var starts []int // group boundaries in order
	for i := range order {
		if i == 0 || ids[order[i]] != ids[order[i-1]] {
			starts = append(starts, i)
		}
	}
	starts = append(starts, len(order))
	instance(cuda.AllF64(dwte, dout), embeddingBackwardTokensKernel[float64], embeddingBackwardTokensKernel[float32])(h, dwte, dout, ids, order, starts, C, accumulate)
	return nil
}

func embeddingBackwardTokensKernel[F float](h *Device, dwte, dout *cuda.Buffer, ids, order []int32, starts []int, C int, accumulate bool) {
	vw, vd := mkvec[F](dwte), mkvec[F](dout)
	groups := len(starts) - 1
	h.parallel(groups, max(1, rowGrain(C)/4), func(lo, hi int) {
		tmp := getScratch[F](2 * C)
		acc := getScratch[float64](C)
		defer putScratch(tmp)
		defer putScratch(acc)
		for g := lo; g < hi; g++ {
			tok := int(ids[order[starts[g]]])
			clear(acc)
			if accumulate {
				for c, v := range vw.get(tok*C, tok*C+C, tmp[:C]) {
					acc[c] = float64(v)
				}
			}
			for _, i := range order[starts[g]:starts[g+1]] {
				d := vd.get(int(i)*C, int(i)*C+C, tmp[:C])
				for c, v := range d {
					acc[c] += float64(v)
				}
			}
			vw.putSums(tok*C, acc, tmp[C:])
		}
	})
}

// clear zeroes a buffer's bytes (zero bits are +0 in every float type).
func (h *Device) clear(b *cuda.Buffer) {
	h.parallel(len(b.Host()), 1<<18, func(lo, hi int) { clear(b.Host()[lo:hi]) })
}

// EmbeddingBackwardPositions: dwpe[t, :] = Σ_b dout[b·T+t, :] (summed over b
// in order, in float64); rows t ≥ T are zero.
func (h *Device) EmbeddingBackwardPositions(dwpe, dout *cuda.Buffer, B, T, C int) error {
	if err := h.begin("EmbeddingBackwardPositions", cuda.Check.EmbeddingBackwardPositions(dwpe, dout, B, T, C), dwpe, dout); err != nil {
		return err
	}
	if dwpe.Len > T*C {
		h.clear(dwpe.View(T*C, dwpe.Len-T*C))
	}
	instance(cuda.AllF64(dwpe, dout), embeddingBackwardPositionsKernel[float64], embeddingBackwardPositionsKernel[float32])(h, dwpe, dout, B, T, C)
	return nil
}

func embeddingBackwardPositionsKernel[F float](h *Device, dwpe, dout *cuda.Buffer, B, T, C int) {
	vw, vd := mkvec[F](dwpe), mkvec[F](dout)
	h.parallel(T, max(1, rowGrain(C)/B), func(lo, hi int) {
		tmp := getScratch[F](2 * C)
		acc := getScratch[float64](C)
		defer putScratch(tmp)
		defer putScratch(acc)
		for t := lo; t < hi; t++ {
			clear(acc)
			for b := 0; b < B; b++ {
				i := b*T + t
				for c, v := range vd.get(i*C, i*C+C, tmp[:C]) {
					acc[c] += float64(v)
				}
			}
			vw.putSums(t*C, acc, tmp[C:])
		}
	})
}
