package cuda

// Host kernels: elementwise, embedding, layer norm and bias kernels. Each
// exported method checks its arguments with the shared validation (check.go)
// and then runs a generic kernel in the compute type: float64 when every
// float operand is F64, float32 otherwise. Work is cut by rows, or by
// channels where a kernel reduces over rows, so that every output element
// is made by one goroutine in a fixed order.

import (
	"math"
	"slices"
	"sync/atomic"
)

const (
	elemChunk = 4096    // elements converted and computed at a time
	elemGrain = 1 << 14 // fewest elements worth a goroutine
)

// rowGrain is the fewest rows of C elements worth a goroutine.
func rowGrain(C int) int { return max(1, elemGrain/C) }

// mapElems runs f over matching chunks of y and the inputs: f(out, ins)
// writes out[i] from ins[k][i]. y may alias any input exactly.
func mapElems[F float](h *Host, y *Buffer, ins []*Buffer, f func(out []F, in [][]F)) {
	vy := mkvec[F](y)
	vin := make([]vec[F], len(ins))
	for k, b := range ins {
		vin[k] = mkvec[F](b)
	}
	h.parallel(y.Len, elemGrain, func(lo, hi int) {
		tmp := getScratch[F]((len(ins) + 1) * elemChunk)
		defer putScratch(tmp)
		in := make([][]F, len(ins))
		for c0 := lo; c0 < hi; c0 += elemChunk {
			c1 := min(c0+elemChunk, hi)
			for k := range vin {
				in[k] = vin[k].get(c0, c1, tmp[k*elemChunk:(k+1)*elemChunk])
			}
			out := vy.out(c0, c1, tmp[len(ins)*elemChunk:])
			f(out, in)
			vy.put(c0, out)
		}
	})
}

// Fill sets every element of dst to v (rounded once to dst's DType).
func (h *Host) Fill(dst *Buffer, v float32) error {
	if err := h.begin("Fill", checkFill(dst, v), dst); err != nil {
		return err
	}
	switch dst.DType {
	case F32:
		fillSlice(h, f32view(dst), v)
	case F64:
		fillSlice(h, f64view(dst), float64(v))
	case F16:
		fillSlice(h, u16view(dst), F32ToF16(v))
	case BF16:
		fillSlice(h, u16view(dst), F32ToBF16(v))
	}
	return nil
}

func fillSlice[E any](h *Host, s []E, v E) {
	h.parallel(len(s), 1<<16, func(lo, hi int) {
		for i := range s[lo:hi] {
			s[lo+i] = v
		}
	})
}

// Cast converts src into dst, correctly rounded (one rounding from the
// exact value, whatever the two types).
func (h *Host) Cast(dst, src *Buffer) error {
	if err := h.begin("Cast", checkCast(dst, src), dst, src); err != nil {
		return err
	}
	if dst.DType == src.DType {
		if dst.addr != src.addr {
			h.parallel(len(dst.host), 1<<18, func(lo, hi int) { copy(dst.host[lo:hi], src.host[lo:hi]) })
		}
		return nil
	}
	// Every float type widens to float64 exactly; encode rounds once.
	h.parallel(dst.Len, elemGrain, func(lo, hi int) {
		tmp := getScratch[float64](elemChunk)
		defer putScratch(tmp)
		for c0 := lo; c0 < hi; c0 += elemChunk {
			c1 := min(c0+elemChunk, hi)
			t := tmp[:c1-c0]
			decode(src, c0, t)
			encode(dst, c0, t)
		}
	})
	return nil
}

// Add computes y = a + b elementwise; y may alias a or b.
func (h *Host) Add(y, a, b *Buffer) error {
	if err := h.begin("Add", checkAdd(y, a, b), y, a, b); err != nil {
		return err
	}
	if allF64(y, a, b) {
		addKernel[float64](h, y, a, b)
	} else {
		addKernel[float32](h, y, a, b)
	}
	return nil
}

func addKernel[F float](h *Host, y, a, b *Buffer) {
	mapElems(h, y, []*Buffer{a, b}, func(out []F, in [][]F) {
		x, z := in[0][:len(out)], in[1][:len(out)]
		for i := range out {
			out[i] = x[i] + z[i]
		}
	})
}

// Embedding: out[b·T+t, :] = wte[tokens[b·T+t], :] + wpe[t, :].
func (h *Host) Embedding(out, tokens, wte, wpe *Buffer, B, T, C int) error {
	if err := h.begin("Embedding", checkEmbedding(out, tokens, wte, wpe, B, T, C), out, tokens, wte, wpe); err != nil {
		return err
	}
	if err := checkIDs("Embedding", "token id", i32view(tokens), T, wte.Len/C); err != nil {
		return err
	}
	if allF64(out, wte, wpe) {
		embeddingKernel[float64](h, out, tokens, wte, wpe, T, C)
	} else {
		embeddingKernel[float32](h, out, tokens, wte, wpe, T, C)
	}
	return nil
}

func embeddingKernel[F float](h *Host, out, tokens, wte, wpe *Buffer, T, C int) {
	ids := i32view(tokens)
	vo, ve, vp := mkvec[F](out), mkvec[F](wte), mkvec[F](wpe)
	h.parallel(len(ids), rowGrain(C), func(lo, hi int) {
		tmp := getScratch[F](3 * C)
		defer putScratch(tmp)
		for i := lo; i < hi; i++ {
			tok, t := int(ids[i]), i%T
			e := ve.get(tok*C, tok*C+C, tmp[:C])
			p := vp.get(t*C, t*C+C, tmp[C:2*C])
			o := vo.out(i*C, i*C+C, tmp[2*C:])
			for c := range o {
				o[c] = e[c] + p[c]
			}
			vo.put(i*C, o)
		}
	})
}

// EmbeddingBackwardTokens: dwte = 0, then dwte[tokens[i], :] += dout[i, :],
// each row summed in position order (in float64) and rounded once.
func (h *Host) EmbeddingBackwardTokens(dwte, dout, tokens *Buffer, B, T, C int) error {
	if err := h.begin("EmbeddingBackwardTokens", checkEmbeddingBackwardTokens(dwte, dout, tokens, B, T, C), dwte, dout, tokens); err != nil {
		return err
	}
	ids := i32view(tokens)
	if err := checkIDs("EmbeddingBackwardTokens", "token id", ids, T, dwte.Len/C); err != nil {
		return err
	}
	h.clear(dwte)
	// Positions grouped by token, ascending within each group.
	order := make([]int32, len(ids))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortStableFunc(order, func(a, b int32) int { return int(ids[a]) - int(ids[b]) })
	var starts []int // group boundaries in order
	for i := range order {
		if i == 0 || ids[order[i]] != ids[order[i-1]] {
			starts = append(starts, i)
		}
	}
	starts = append(starts, len(order))
	if allF64(dwte, dout) {
		embeddingBackwardTokensKernel[float64](h, dwte, dout, ids, order, starts, C)
	} else {
		embeddingBackwardTokensKernel[float32](h, dwte, dout, ids, order, starts, C)
	}
	return nil
}

func embeddingBackwardTokensKernel[F float](h *Host, dwte, dout *Buffer, ids, order []int32, starts []int, C int) {
	vw, vd := mkvec[F](dwte), mkvec[F](dout)
	groups := len(starts) - 1
	h.parallel(groups, max(1, rowGrain(C)/4), func(lo, hi int) {
		tmp := getScratch[F](2 * C)
		acc := getScratch[float64](C)
		defer putScratch(tmp)
		defer putScratch(acc)
		for g := lo; g < hi; g++ {
			clear(acc)
			for _, i := range order[starts[g]:starts[g+1]] {
				d := vd.get(int(i)*C, int(i)*C+C, tmp[:C])
				for c, v := range d {
					acc[c] += float64(v)
				}
			}
			tok := int(ids[order[starts[g]]])
			o := vw.out(tok*C, tok*C+C, tmp[C:])
			for c := range o {
				o[c] = F(acc[c])
			}
			vw.put(tok*C, o)
		}
	})
}

// clear zeroes a buffer's bytes (zero bits are +0 in every float type).
func (h *Host) clear(b *Buffer) {
	h.parallel(len(b.host), 1<<18, func(lo, hi int) { clear(b.host[lo:hi]) })
}

// EmbeddingBackwardPositions: dwpe[t, :] = Σ_b dout[b·T+t, :] (summed over b
// in order, in float64); rows t ≥ T are zero.
func (h *Host) EmbeddingBackwardPositions(dwpe, dout *Buffer, B, T, C int) error {
	if err := h.begin("EmbeddingBackwardPositions", checkEmbeddingBackwardPositions(dwpe, dout, B, T, C), dwpe, dout); err != nil {
		return err
	}
	if dwpe.Len > T*C {
		h.clear(dwpe.View(T*C, dwpe.Len-T*C))
	}
	if allF64(dwpe, dout) {
		embeddingBackwardPositionsKernel[float64](h, dwpe, dout, B, T, C)
	} else {
		embeddingBackwardPositionsKernel[float32](h, dwpe, dout, B, T, C)
	}
	return nil
}

func embeddingBackwardPositionsKernel[F float](h *Host, dwpe, dout *Buffer, B, T, C int) {
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
			o := vw.out(t*C, t*C+C, tmp[C:])
			for c := range o {
				o[c] = F(acc[c])
			}
			vw.put(t*C, o)
		}
	})
}

// LayerNormStats writes per row the mean and 1/sqrt(var+eps), var the
// biased variance, both from two passes in float64.
func (h *Host) LayerNormStats(stats, x *Buffer, N, C int, eps float32) error {
	if err := h.begin("LayerNormStats", checkLayerNormStats(stats, x, N, C, eps), stats, x); err != nil {
		return err
	}
	if allF64(stats, x) {
		layerNormStatsKernel[float64](h, stats, x, N, C, eps)
	} else {
		layerNormStatsKernel[float32](h, stats, x, N, C, eps)
	}
	return nil
}

func layerNormStatsKernel[F float](h *Host, stats, x *Buffer, N, C int, eps float32) {
	vs, vx := mkvec[F](stats), mkvec[F](x)
	h.parallel(N, rowGrain(C), func(lo, hi int) {
		tmp := getScratch[F](C + 2)
		defer putScratch(tmp)
		for i := lo; i < hi; i++ {
			xs := vx.get(i*C, i*C+C, tmp[:C])
			var sum float64
			for _, v := range xs {
				sum += float64(v)
			}
			mean := sum / float64(C)
			var ss float64
			for _, v := range xs {
				d := float64(v) - mean
				ss += d * d
			}
			st := vs.out(2*i, 2*i+2, tmp[C:])
			st[0] = F(mean)
			st[1] = F(1 / math.Sqrt(ss/float64(C)+float64(eps)))
			vs.put(2*i, st)
		}
	})
}

// LayerNorm: y = (x - mean)·rstd·w + b.
func (h *Host) LayerNorm(y, x, stats, w, b *Buffer, N, C int) error {
	if err := h.begin("LayerNorm", checkLayerNorm(y, x, stats, w, b, N, C), y, x, stats, w, b); err != nil {
		return err
	}
	if allF64(y, x, stats, w, b) {
		layerNormKernel[float64](h, y, x, stats, w, b, N, C)
	} else {
		layerNormKernel[float32](h, y, x, stats, w, b, N, C)
	}
	return nil
}

func layerNormKernel[F float](h *Host, y, x, stats, w, b *Buffer, N, C int) {
	vy, vx, vs := mkvec[F](y), mkvec[F](x), mkvec[F](stats)
	wb := getScratch[F](2 * C)
	defer putScratch(wb)
	ws := mkvec[F](w).get(0, C, wb[:C])
	bs := mkvec[F](b).get(0, C, wb[C:])
	h.parallel(N, rowGrain(C), func(lo, hi int) {
		tmp := getScratch[F](2*C + 2)
		defer putScratch(tmp)
		for i := lo; i < hi; i++ {
			st := vs.get(2*i, 2*i+2, tmp[2*C:])
			mean, rstd := st[0], st[1]
			xs := vx.get(i*C, i*C+C, tmp[:C])
			o := vy.out(i*C, i*C+C, tmp[C:2*C])
			for c := range o {
				o[c] = (xs[c]-mean)*rstd*ws[c] + bs[c]
			}
			vy.put(i*C, o)
		}
	})
}

// LayerNormBackwardX: dx = rstd·(g - mean_c(g) - xhat·mean_c(g·xhat)),
// g = dy·w, xhat = (x - mean)·rstd; the means in float64.
func (h *Host) LayerNormBackwardX(dx, dy, x, stats, w *Buffer, N, C int) error {
	if err := h.begin("LayerNormBackwardX", checkLayerNormBackwardX(dx, dy, x, stats, w, N, C), dx, dy, x, stats, w); err != nil {
		return err
	}
	if allF64(dx, dy, x, stats, w) {
		layerNormBackwardXKernel[float64](h, dx, dy, x, stats, w, N, C)
	} else {
		layerNormBackwardXKernel[float32](h, dx, dy, x, stats, w, N, C)
	}
	return nil
}

func layerNormBackwardXKernel[F float](h *Host, dx, dy, x, stats, w *Buffer, N, C int) {
	vdx, vdy, vx, vs := mkvec[F](dx), mkvec[F](dy), mkvec[F](x), mkvec[F](stats)
	wb := getScratch[F](C)
	defer putScratch(wb)
	ws := mkvec[F](w).get(0, C, wb)
	h.parallel(N, rowGrain(C), func(lo, hi int) {
		tmp := getScratch[F](3*C + 2)
		defer putScratch(tmp)
		for i := lo; i < hi; i++ {
			st := vs.get(2*i, 2*i+2, tmp[3*C:])
			mean, rstd := st[0], st[1]
			xs := vx.get(i*C, i*C+C, tmp[:C])
			ds := vdy.get(i*C, i*C+C, tmp[C:2*C])
			var sg, sgx float64
			for c := range xs {
				g := ds[c] * ws[c]
				sg += float64(g)
				sgx += float64(g * (xs[c] - mean) * rstd)
			}
			mg, mgx := F(sg/float64(C)), F(sgx/float64(C))
			o := vdx.out(i*C, i*C+C, tmp[2*C:3*C])
			for c := range o {
				xhat := (xs[c] - mean) * rstd
				o[c] = rstd * (ds[c]*ws[c] - mg - xhat*mgx)
			}
			vdx.put(i*C, o)
		}
	})
}

// columnSums runs the reductions over rows (LayerNormBackwardW, SumRows):
// channels are cut into ranges, and each range is summed over every row in
// order, in float64. term(i, c0, c1, acc) adds row i's contribution to
// channels [c0, c1) into acc (indexed from c0).
func columnSums[F float](h *Host, dst *Buffer, N, C int, term func(i, c0, c1 int, acc []float64, tmp []F)) {
	vd := mkvec[F](dst)
	h.parallel(C, 64, func(c0, c1 int) {
		acc := getScratch[float64](c1 - c0)
		tmp := getScratch[F](3 * (c1 - c0))
		defer putScratch(acc)
		defer putScratch(tmp)
		clear(acc)
		for i := 0; i < N; i++ {
			term(i, c0, c1, acc, tmp[:2*(c1-c0)])
		}
		o := vd.out(c0, c1, tmp[2*(c1-c0):])
		for c := range o {
			o[c] = F(acc[c])
		}
		vd.put(c0, o)
	})
}

// LayerNormBackwardW: dw[c] = Σ_i dy[i, c]·xhat[i, c], summed in row order
// in float64.
func (h *Host) LayerNormBackwardW(dw, dy, x, stats *Buffer, N, C int) error {
	if err := h.begin("LayerNormBackwardW", checkLayerNormBackwardW(dw, dy, x, stats, N, C), dw, dy, x, stats); err != nil {
		return err
	}
	if allF64(dw, dy, x, stats) {
		layerNormBackwardWKernel[float64](h, dw, dy, x, stats, N, C)
	} else {
		layerNormBackwardWKernel[float32](h, dw, dy, x, stats, N, C)
	}
	return nil
}

func layerNormBackwardWKernel[F float](h *Host, dw, dy, x, stats *Buffer, N, C int) {
	vdy, vx, vs := mkvec[F](dy), mkvec[F](x), mkvec[F](stats)
	columnSums(h, dw, N, C, func(i, c0, c1 int, acc []float64, tmp []F) {
		var stt [2]F
		st := vs.get(2*i, 2*i+2, stt[:])
		mean, rstd := st[0], st[1]
		n := c1 - c0
		xs := vx.get(i*C+c0, i*C+c1, tmp[:n])
		ds := vdy.get(i*C+c0, i*C+c1, tmp[n:2*n])
		for c := range acc {
			acc[c] += float64(ds[c] * ((xs[c] - mean) * rstd))
		}
	})
}

// SumRows: dst[c] = Σ_i src[i, c], in row order in float64.
func (h *Host) SumRows(dst, src *Buffer, N, C int) error {
	if err := h.begin("SumRows", checkSumRows(dst, src, N, C), dst, src); err != nil {
		return err
	}
	if allF64(dst, src) {
		sumRowsKernel[float64](h, dst, src, N, C)
	} else {
		sumRowsKernel[float32](h, dst, src, N, C)
	}
	return nil
}

func sumRowsKernel[F float](h *Host, dst, src *Buffer, N, C int) {
	vs := mkvec[F](src)
	columnSums(h, dst, N, C, func(i, c0, c1 int, acc []float64, tmp []F) {
		for c, v := range vs.get(i*C+c0, i*C+c1, tmp[:c1-c0]) {
			acc[c] += float64(v)
		}
	})
}

// AddBias: y[i, c] += b[c] in place.
func (h *Host) AddBias(y, b *Buffer, N, C int) error {
	if err := h.begin("AddBias", checkAddBias(y, b, N, C), y, b); err != nil {
		return err
	}
	if allF64(y, b) {
		addBiasKernel[float64](h, y, b, N, C)
	} else {
		addBiasKernel[float32](h, y, b, N, C)
	}
	return nil
}

func addBiasKernel[F float](h *Host, y, b *Buffer, N, C int) {
	vy := mkvec[F](y)
	bb := getScratch[F](C)
	defer putScratch(bb)
	bs := mkvec[F](b).get(0, C, bb)
	h.parallel(N, rowGrain(C), func(lo, hi int) {
		tmp := getScratch[F](C)
		defer putScratch(tmp)
		for i := lo; i < hi; i++ {
			row := vy.get(i*C, i*C+C, tmp)
			for c := range row {
				row[c] += bs[c]
			}
			vy.put(i*C, row)
		}
	})
}

// geluK is sqrt(2/π).
var geluK = math.Sqrt(2 / math.Pi)

// geluSigmoid returns σ(2u) = (1 + tanh u)/2 for GELU's u = sqrt(2/π)·(x +
// 0.044715·x³): one exponential instead of a tanh (several times slower in
// Go), with no cancellation for any x (exp overflowing to +Inf gives 0).
func geluSigmoid(x float64) float64 {
	return 1 / (1 + math.Exp(-2*geluK*(x+0.044715*x*x*x)))
}

// GELU: y = 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³))) elementwise,
// evaluated in float64 as x·σ(2u) (the same function) and rounded once.
func (h *Host) GELU(y, x *Buffer) error {
	if err := h.begin("GELU", checkGELU(y, x), y, x); err != nil {
		return err
	}
	if allF64(y, x) {
		geluKernel[float64](h, y, x)
	} else {
		geluKernel[float32](h, y, x)
	}
	return nil
}

func geluKernel[F float](h *Host, y, x *Buffer) {
	mapElems(h, y, []*Buffer{x}, func(out []F, in [][]F) {
		for i, v := range in[0][:len(out)] {
			xv := float64(v)
			out[i] = F(xv * geluSigmoid(xv))
		}
	})
}

// GELUBackward: dx = dy·GELU'(x). With s = σ(2u) = (1 + tanh u)/2,
// GELU'(x) = 0.5·(1 + tanh u) + 0.5·x·(1 - tanh² u)·u'(x) = s + 2x·s·(1-s)·u'(x),
// u'(x) = sqrt(2/π)·(1 + 3·0.044715·x²).
func (h *Host) GELUBackward(dx, dy, x *Buffer) error {
	if err := h.begin("GELUBackward", checkGELUBackward(dx, dy, x), dx, dy, x); err != nil {
		return err
	}
	if allF64(dx, dy, x) {
		geluBackwardKernel[float64](h, dx, dy, x)
	} else {
		geluBackwardKernel[float32](h, dx, dy, x)
	}
	return nil
}

func geluBackwardKernel[F float](h *Host, dx, dy, x *Buffer) {
	mapElems(h, dx, []*Buffer{dy, x}, func(out []F, in [][]F) {
		ds, xs := in[0][:len(out)], in[1][:len(out)]
		for i := range out {
			xv := float64(xs[i])
			s := geluSigmoid(xv)
			d := s + 2*xv*s*(1-s)*geluK*(1+3*0.044715*xv*xv)
			out[i] = F(float64(ds[i]) * d)
		}
	})
}

// NonFinite reports whether x holds an Inf or a NaN.
func (h *Host) NonFinite(x *Buffer) (bool, error) {
	if err := h.begin("NonFinite", checkNonFinite(x), x); err != nil {
		return false, err
	}
	var found atomic.Bool
	h.parallel(x.Len, 1<<16, func(lo, hi int) {
		if nonFiniteRange(x, lo, hi) {
			found.Store(true)
		}
	})
	return found.Load(), nil
}
