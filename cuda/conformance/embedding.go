package conformance

// The embedding family: its tests against the float64 references, the
// references themselves, and its calls with bad and good arguments.

import (
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "embedding", tests: []familyTest{{"Embedding", testEmbedding}},
		invalid: invalidEmbedding, valid: validEmbedding})
}

func invalidEmbedding(f *fixture) []badCall {
	d := f.d
	B, T, C, V := 2, 3, 8, 11
	y := f.f32(B * T * C)
	tokens := f.alloc(cuda.I32, B*T)
	f.must(d.Upload(tokens, []int32{0, 1, 2, 3, 4, 5}))
	wte, wpe := f.f32(V*C), f.f32(T*C)
	cases := []badCall{
		{"Embedding fp32 tokens", d.Embedding(y, f.f32(B*T), wte, wpe, B, T, C, cuda.VocabPart{}), []string{"Embedding", "tokens is fp32, want int32"}},
		{"Embedding short wpe", d.Embedding(y, tokens, wte, f.f32((T-1)*C), B, T, C, cuda.VocabPart{}), []string{"Embedding", "wpe", "at least T = 3"}},
		{"Embedding ragged wte", d.Embedding(y, tokens, f.f32(V*C+1), wpe, B, T, C, cuda.VocabPart{}), []string{"Embedding", "wte", "rows of C = 8"}},
		{"Embedding zero B", d.Embedding(y, tokens, wte, wpe, 0, T, C, cuda.VocabPart{}), []string{"Embedding", "B is 0"}},
		{"EmbeddingBackwardTokens int dwte", d.EmbeddingBackwardTokens(f.alloc(cuda.I32, V*C), y, tokens, B, T, C, cuda.VocabPart{}, false), []string{"EmbeddingBackwardTokens", "dwte is int32"}},
		{"EmbeddingBackwardPositions short dout", d.EmbeddingBackwardPositions(wpe, f.f32(3), B, T, C), []string{"EmbeddingBackwardPositions", "dout has 3 elements, want B·T·C = 48"}},
		{"Embedding part past the vocabulary", d.Embedding(y, tokens, wte, wpe, B, T, C, cuda.VocabPart{Lo: 10, V: 20}), []string{"Embedding", "11 rows at 10", "V = 20"}},
		{"Embedding part without its vocabulary", d.Embedding(y, tokens, wte, wpe, B, T, C, cuda.VocabPart{Lo: 4}), []string{"Embedding", "at 4", "needs its vocabulary V"}},
		{"EmbeddingBackwardTokens negative part", d.EmbeddingBackwardTokens(wte, y, tokens, B, T, C, cuda.VocabPart{Lo: -1, V: 20}, false), []string{"EmbeddingBackwardTokens", "at -1", "negative"}},
	}
	if f.computes {
		cases = append(cases,
			badCall{"Embedding token out of range", d.Embedding(y, idsOf(f.env, []int32{0, 1, 2, 3, 11, 5}), wte, wpe, B, T, C, cuda.VocabPart{}),
				[]string{"Embedding", "token id 11", "position 4 (b=1, t=1)", "V = 11"}},
			badCall{"Embedding negative token", d.Embedding(y, idsOf(f.env, []int32{-1, 1, 2, 3, 4, 5}), wte, wpe, B, T, C, cuda.VocabPart{}),
				[]string{"Embedding", "token id -1", "position 0"}},
			badCall{"EmbeddingBackwardTokens token out of range", d.EmbeddingBackwardTokens(wte, y, idsOf(f.env, []int32{0, 1, 2, 30, 4, 5}), B, T, C, cuda.VocabPart{}, true),
				[]string{"EmbeddingBackwardTokens", "token id 30", "V = 11"}},
			badCall{"Embedding part's token out of the vocabulary", d.Embedding(y, idsOf(f.env, []int32{0, 1, 2, 3, 25, 5}), wte, wpe, B, T, C, cuda.VocabPart{Lo: 11, V: 22}),
				[]string{"Embedding", "token id 25", "V = 22"}},
			badCall{"EmbeddingBackwardTokens part's token out of the vocabulary", d.EmbeddingBackwardTokens(wte, y, idsOf(f.env, []int32{0, 1, 2, 3, 4, 22}), B, T, C, cuda.VocabPart{Lo: 11, V: 22}, false),
				[]string{"EmbeddingBackwardTokens", "token id 22", "V = 22"}},
		)
	}
	return cases
}

func validEmbedding(f *fixture, dt cuda.DType) []goodCall {
	d := f.d
	B, T, C, V := 2, 16, 64, 300
	x, dy := f.alloc(dt, B*T*C), f.alloc(dt, B*T*C)
	tokens := f.alloc(cuda.I32, B*T)
	wte, wpe := f.alloc(dt, V*C), f.alloc(dt, 2*T*C)
	part := cuda.VocabPart{Lo: V, V: 2*V + 1, NoPositions: true} // the middle of three parts
	return []goodCall{
		{"Embedding", func() error { return d.Embedding(x, tokens, wte, wpe, B, T, C, cuda.VocabPart{}) }},
		{"Embedding part", func() error { return d.Embedding(x, tokens, wte, wpe, B, T, C, part) }},
		{"EmbeddingBackwardTokens", func() error { return d.EmbeddingBackwardTokens(wte, dy, tokens, B, T, C, cuda.VocabPart{}, false) }},
		{"EmbeddingBackwardTokens part", func() error { return d.EmbeddingBackwardTokens(wte, dy, tokens, B, T, C, part, false) }},
		{"EmbeddingBackwardTokens accumulating", func() error { return d.EmbeddingBackwardTokens(wte, dy, tokens, B, T, C, part, true) }},
		{"EmbeddingBackwardPositions", func() error { return d.EmbeddingBackwardPositions(wpe, dy, B, T, C) }},
	}
}

func testEmbedding(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		B, T, C, V, P := 3, 40, 256, 50, 45 // P > T positions in wpe
		tokens, tb := e.randIDs(B*T, V)
		tokens[7] = tokens[3] // repeated ids accumulate
		tb = e.ids(tokens)
		wte, wtes := e.buf(dt, e.randn(V*C))
		wpe, wpes := e.buf(dt, e.randn(P*C))
		out := e.out(dt, B*T*C)
		e.must(e.d.Embedding(out, tb, wte, wpe, B, T, C, cuda.VocabPart{}))
		compare(e.t, "Embedding", e.get(out), refEmbedding(tokens, wtes, wpes, B, T, C), tolFor(dt))

		dout, douts := e.buf(dt, e.randn(B*T*C))
		dwte := e.out(dt, V*C)
		e.must(e.d.EmbeddingBackwardTokens(dwte, dout, tb, B, T, C, cuda.VocabPart{}, false))
		compare(e.t, "EmbeddingBackwardTokens", e.get(dwte), refEmbeddingBackwardTokens(douts, tokens, V, C), tolFor(dt))

		// Accumulating (a tied table's second gradient term): every row
		// keeps what it held, the rows of the tokens get their sums added
		// (tokens below V/2 only, so that some rows are untouched).
		half := make([]int32, len(tokens))
		for i, tok := range tokens {
			half[i] = tok % int32(V/2)
		}
		prior, priors := e.buf(dt, e.randn(V*C)) // priors as stored, rounded to dt
		e.must(e.d.EmbeddingBackwardTokens(prior, dout, e.ids(half), B, T, C, cuda.VocabPart{}, true))
		want := refEmbeddingBackwardTokens(douts, half, V, C)
		for i := range want {
			want[i] += priors[i]
		}
		compare(e.t, "EmbeddingBackwardTokens accumulating", e.get(prior), want, tolFor(dt))

		dwpe := e.out(dt, P*C)
		e.must(e.d.EmbeddingBackwardPositions(dwpe, dout, B, T, C))
		compare(e.t, "EmbeddingBackwardPositions", e.get(dwpe), refEmbeddingBackwardPositions(douts, P, B, T, C), tolFor(dt))

		// A vocabulary split in three uneven parts (a tensor-parallel
		// rank's table each): a part embeds the tokens it holds, zero for
		// the others, the first alone adding the positions, so the parts
		// sum to the whole embedding; a part's table gradient is the
		// whole one's rows it holds.
		whole := refEmbedding(tokens, wtes, wpes, B, T, C)
		wantBack := refEmbeddingBackwardTokens(douts, tokens, V, C)
		sum := make([]float64, B*T*C)
		for _, r := range [][2]int{{0, 17}, {17, 34}, {34, V}} {
			lo, rows := r[0], r[1]-r[0]
			part := cuda.VocabPart{Lo: lo, V: V, NoPositions: lo > 0}
			ptab, _ := e.buf(dt, wtes[lo*C:(lo+rows)*C])
			pout := e.out(dt, B*T*C)
			e.must(e.d.Embedding(pout, tb, ptab, wpe, B, T, C, part))
			got := e.get(pout)
			want := make([]float64, B*T*C)
			for i, tok := range tokens {
				for c := 0; c < C; c++ {
					if int(tok) >= lo && int(tok) < lo+rows {
						want[i*C+c] = wtes[int(tok)*C+c]
					}
					if lo == 0 {
						want[i*C+c] += wpes[(i%T)*C+c]
					}
				}
			}
			compare(e.t, "Embedding part", got, want, tolFor(dt))
			for k := range sum {
				sum[k] += got[k]
			}
			pd := e.out(dt, rows*C)
			e.must(e.d.EmbeddingBackwardTokens(pd, dout, tb, B, T, C, part, false))
			compare(e.t, "EmbeddingBackwardTokens part", e.get(pd), wantBack[lo*C:(lo+rows)*C], tolFor(dt))
		}
		compare(e.t, "Embedding parts summed", sum, whole, tolFor(dt))
	})
}

func refEmbedding(tokens []int32, wte, wpe []float64, B, T, C int) []float64 {
	out := make([]float64, B*T*C)
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			tok := int(tokens[b*T+t])
			for c := 0; c < C; c++ {
				out[(b*T+t)*C+c] = wte[tok*C+c] + wpe[t*C+c]
			}
		}
	}
	return out
}

func refEmbeddingBackwardTokens(dout []float64, tokens []int32, V, C int) []float64 {
	dwte := make([]float64, V*C)
	for i, tok := range tokens {
		for c := 0; c < C; c++ {
			dwte[int(tok)*C+c] += dout[i*C+c]
		}
	}
	return dwte
}

func refEmbeddingBackwardPositions(dout []float64, rows, B, T, C int) []float64 {
	dwpe := make([]float64, rows*C)
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			for c := 0; c < C; c++ {
				dwpe[t*C+c] += dout[(b*T+t)*C+c]
			}
		}
	}
	return dwpe
}
