package host

// The host device's kernels: the flash-attention family (cuda/flash.go).
// The host's tiles are flashBlock query (or key) rows of scores against the
// keys (or queries) they meet, each product one BLAS call (its threads the
// host's parallelism), in its own scratch, so that no head's T×T scores
// are held; the CUDA kernels (kernels/flash.cuh) stream one key at a time
// through a warp's row. Both compute the passes of cuda/flash.go in the
// same order: statistics, output; D, dQ by query rows, dK and dV by key
// rows.

import (
	"math"

	"trainmem/cuda"
)

// flashLayout is one call's sizes: C query channels, KV key and value
// heads, hd channels a head, G query heads a group, rows W wide.
type flashLayout struct {
	C, KV, hd, G, W int
	scale           float64
}

func newFlashLayout(C, NH, KV int) flashLayout {
	hd := C / NH
	return flashLayout{C: C, KV: KV, hd: hd, G: NH / KV, W: cuda.QKVWidth(C, NH, KV), scale: 1 / math.Sqrt(float64(hd))}
}

// flashY is query head h's channels of row t of a (T, C) buffer.
func flashY[F float](l flashLayout, x []F, t, h int) []F { return x[t*l.C+h*l.hd:][:l.hd] }

// dot64 is a·b in float64, four running sums (as the CUDA kernels' lanes
// hold partial sums, in another order) added at the end.
func dot64[F float](a, b []F) float64 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float64
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += float64(a[i]) * float64(b[i])
		s1 += float64(a[i+1]) * float64(b[i+1])
		s2 += float64(a[i+2]) * float64(b[i+2])
		s3 += float64(a[i+3]) * float64(b[i+3])
	}
	for ; i < len(a); i++ {
		s0 += float64(a[i]) * float64(b[i])
	}
	return (s0 + s1) + (s2 + s3)
}

// flashBlock is the query rows (or key rows) a tile holds: a tile is
// flashBlock rows of scores against the keys (or queries) they meet, at
// most flashBlock × T values of the compute type, the host's own scratch.
const flashBlock = 64

// flashScores fills tile (n rows of m) with scale·a·bᵀ for a's n head rows
// and b's m head rows, both of row stride W: the tile's scores, one BLAS
// product.
func flashScores[F float](h *Device, l flashLayout, tile, a, b []F, n, m int) {
	gemm(h.blas, false, true, n, m, l.hd, F(l.scale), a, l.W, b, l.W, 0, tile[:n*m], m)
}

// FlashAttentionStats: lse[b, h, t] = log Σ_{s ≤ t} exp(q_t·k_s·scale), a
// tile of query rows' scores at a time, each row's maximum taken out
// before the sum in float64 (Dao et al. 2022, Algorithm 1's m and ℓ).
func (h *Device) FlashAttentionStats(lse, qkv *cuda.Buffer, B, T, C, NH, KV int) error {
	return h.launch("FlashAttentionStats", cuda.Check.FlashAttentionStats(lse, qkv, B, T, C, NH, KV), func() {
		instance(cuda.AllF64(lse, qkv), flashStatsKernel[float64], flashStatsKernel[float32])(h, lse, qkv, B, T, C, NH, KV)
	}, lse, qkv)
}

func flashStatsKernel[F float](h *Device, lse, qkv *cuda.Buffer, B, T, C, NH, KV int) {
	l := newFlashLayout(C, NH, KV)
	vq, vl := mkvec[F](qkv), mkvec[F](lse)
	rowQ, rows := T*l.W, NH*T
	tq, tl := batchScratch(vq, rowQ), batchScratch(vl, rows)
	tile := getScratch[F](flashBlock * T)
	defer putScratch(tq)
	defer putScratch(tl)
	defer putScratch(tile)
	var e [expChunk]float64
	for b := range B {
		q := vq.get(b*rowQ, (b+1)*rowQ, tq)
		out := vl.out(b*rows, (b+1)*rows, tl)
		for hh := range NH {
			for i0 := 0; i0 < T; i0 += flashBlock {
				n, m := min(flashBlock, T-i0), min(i0+flashBlock, T) // rows, and the keys they meet
				flashScores(h, l, tile, q[i0*l.W+hh*l.hd:], q[l.C+hh/l.G*l.hd:], n, m)
				for r := range n {
					t := i0 + r
					row := tile[r*m : r*m+t+1]
					mx := float64(rowMax(row))
					out[hh*T+t] = F(mx + math.Log(expRow(row, mx, &e)))
				}
			}
		}
		vl.put(b*rows, out)
	}
}

// expRow replaces row with exp(row − shift), rounded to the compute type,
// and returns their float64 sum (the vectorized exponentials of the
// softmax, causalSoftmax's).
func expRow[F float](row []F, shift float64, e *[expChunk]float64) float64 {
	var sums [4]float64
	for c0 := 0; c0 < len(row); c0 += expChunk {
		out := row[c0:min(c0+expChunk, len(row))]
		roundInto(out, expShiftedSum(e[:], out, shift, &sums))
	}
	return sum4(&sums)
}

// flashProbs turns a tile of scores (n query rows from i0, m keys) into
// probabilities exp(s − lse) over the keys s ≤ t, exact zeros after.
func flashProbs[F float](tile []F, ls []F, i0, n, m int) {
	var e [expChunk]float64
	for r := range n {
		t := i0 + r
		row := tile[r*m : (r+1)*m]
		expRow(row[:t+1], float64(ls[t]), &e)
		clear(row[t+1:])
	}
}

// FlashAttentionOut: y's query head h = P·V, P = exp(q·kᵀ·scale − lse) a
// tile of query rows at a time, each tile's product one BLAS call.
func (h *Device) FlashAttentionOut(y, qkv, lse *cuda.Buffer, B, T, C, NH, KV int) error {
	return h.launch("FlashAttentionOut", cuda.Check.FlashAttentionOut(y, qkv, lse, B, T, C, NH, KV), func() {
		instance(cuda.AllF64(y, qkv, lse), flashOutKernel[float64], flashOutKernel[float32])(h, y, qkv, lse, B, T, C, NH, KV)
	}, y, qkv, lse)
}

func flashOutKernel[F float](h *Device, y, qkv, lse *cuda.Buffer, B, T, C, NH, KV int) {
	l := newFlashLayout(C, NH, KV)
	vy, vq, vl := mkvec[F](y), mkvec[F](qkv), mkvec[F](lse)
	rowQ, rowY, rows := T*l.W, T*C, NH*T
	ty, tq, tl := batchScratch(vy, rowY), batchScratch(vq, rowQ), batchScratch(vl, rows)
	tile := getScratch[F](flashBlock * T)
	for _, s := range [][]F{ty, tq, tl, tile} {
		defer putScratch(s)
	}
	for b := range B {
		q := vq.get(b*rowQ, (b+1)*rowQ, tq)
		ls := vl.get(b*rows, (b+1)*rows, tl)
		out := vy.out(b*rowY, (b+1)*rowY, ty)
		for hh := range NH {
			g := hh / l.G
			for i0 := 0; i0 < T; i0 += flashBlock {
				n, m := min(flashBlock, T-i0), min(i0+flashBlock, T)
				flashScores(h, l, tile, q[i0*l.W+hh*l.hd:], q[l.C+g*l.hd:], n, m)
				flashProbs(tile, ls[hh*T:], i0, n, m)
				gemm(h.blas, false, false, n, l.hd, m, 1, tile, m, q[l.C+(l.KV+g)*l.hd:], l.W, 0, out[i0*C+hh*l.hd:], C)
			}
		}
		vy.put(b*rowY, out)
	}
}

// FlashAttentionBackward: D = rowsum(dy ⊙ y) into scratch; then, a tile of
// query rows at a time, dQ = scale·dS·K with dS = P ⊙ (dy·Vᵀ − D); then, a
// tile of key rows at a time, dK = scale·dSᵀ·Q and dV = Pᵀ·dy over the
// group's query heads and the rows t ≥ s (the tile's scores as key rows
// against query rows, k·qᵀ). Every output is written by one tile's
// products, a group's query heads adding in turn (Beta 1).
func (h *Device) FlashAttentionBackward(dqkv, dy, qkv, y, lse, scratch *cuda.Buffer, B, T, C, NH, KV int) error {
	err := cuda.Check.FlashAttentionBackward(dqkv, dy, qkv, y, lse, scratch, B, T, C, NH, KV)
	if err := h.begin("FlashAttentionBackward", err, dqkv, dy, qkv, y, lse, scratch); err != nil {
		return err
	}
	instance(cuda.AllF64(dqkv, dy, qkv, y, lse), flashBackwardKernel[float64], flashBackwardKernel[float32])(h, dqkv, dy, qkv, y, lse, scratch, B, T, C, NH, KV)
	return nil
}

func flashBackwardKernel[F float](h *Device, dqkv, dy, qkv, y, lse, scratch *cuda.Buffer, B, T, C, NH, KV int) {
	l := newFlashLayout(C, NH, KV)
	vdq, vdy, vq, vy, vl := mkvec[F](dqkv), mkvec[F](dy), mkvec[F](qkv), mkvec[F](y), mkvec[F](lse)
	rowQ, rowY, rows := T*l.W, T*C, NH*T
	tdq, tdy, tq, ty, tl := batchScratch(vdq, rowQ), batchScratch(vdy, rowY), batchScratch(vq, rowQ), batchScratch(vy, rowY), batchScratch(vl, rows)
	ps, dps := getScratch[F](flashBlock*T), getScratch[F](flashBlock*T) // a tile's P and dP, then dS
	for _, s := range [][]F{tdq, tdy, tq, ty, tl, ps, dps} {
		defer putScratch(s)
	}
	D := mkvec[F](scratch).raw // the scratch in the compute type, or private room for it
	if D == nil {
		D = getScratch[F](B * rows)
		defer putScratch(D)
	}
	for b := range B {
		q := vq.get(b*rowQ, (b+1)*rowQ, tq)
		d := vdy.get(b*rowY, (b+1)*rowY, tdy)
		o := vy.get(b*rowY, (b+1)*rowY, ty)
		ls := vl.get(b*rows, (b+1)*rows, tl)
		Db := D[b*rows : (b+1)*rows]
		dq := vdq.out(b*rowQ, (b+1)*rowQ, tdq)
		h.parallel(rows, max(1, elemGrain/l.hd), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				Db[r] = F(dot64(flashY(l, d, r%T, r/T), flashY(l, o, r%T, r/T)))
			}
		})
		for hh := range NH { // dQ, a tile of query rows at a time
			g := hh / l.G
			for i0 := 0; i0 < T; i0 += flashBlock {
				n, m := min(flashBlock, T-i0), min(i0+flashBlock, T)
				flashScores(h, l, ps, q[i0*l.W+hh*l.hd:], q[l.C+g*l.hd:], n, m)
				flashProbs(ps, ls[hh*T:], i0, n, m)
				gemm(h.blas, false, true, n, m, l.hd, 1, d[i0*C+hh*l.hd:], C, q[l.C+(l.KV+g)*l.hd:], l.W, 0, dps[:n*m], m) // dP = dy·Vᵀ
				for r := range n {
					Dr := float64(Db[hh*T+i0+r])
					for j, p := range ps[r*m : (r+1)*m] {
						dps[r*m+j] = F(float64(p) * (float64(dps[r*m+j]) - Dr))
					}
				}
				gemm(h.blas, false, false, n, l.hd, m, F(l.scale), dps, m, q[l.C+g*l.hd:], l.W, 0, dq[i0*l.W+hh*l.hd:], l.W) // dQ = scale·dS·K
			}
		}
		for g := range KV { // dK and dV, a tile of key rows at a time
			kOff, vOff := l.C+g*l.hd, l.C+(l.KV+g)*l.hd
			for j0 := 0; j0 < T; j0 += flashBlock {
				n, m := min(flashBlock, T-j0), T-j0 // key rows, and the query rows t ≥ j0 they meet
				for hh := g * l.G; hh < (g+1)*l.G; hh++ {
					add := F(min(hh-g*l.G, 1))                                                                           // the group's first query head writes, the others add
					flashScores(h, l, ps, q[j0*l.W+kOff:], q[j0*l.W+hh*l.hd:], n, m)                                     // k·qᵀ
					gemm(h.blas, false, true, n, m, l.hd, 1, q[j0*l.W+vOff:], l.W, d[j0*C+hh*l.hd:], C, 0, dps[:n*m], m) // v·dyᵀ
					for r := range n {
						s := j0 + r
						for j := range m {
							t := j0 + j
							if t < s {
								ps[r*m+j], dps[r*m+j] = 0, 0
								continue
							}
							p := math.Exp(float64(ps[r*m+j]) - float64(ls[hh*T+t]))
							ps[r*m+j] = F(p)
							dps[r*m+j] = F(p * (float64(dps[r*m+j]) - float64(Db[hh*T+t])))
						}
					}
					gemm(h.blas, false, false, n, l.hd, m, 1, ps, m, d[j0*C+hh*l.hd:], C, add, dq[j0*l.W+vOff:], l.W)               // dV (+)= Pᵀ·dy
					gemm(h.blas, false, false, n, l.hd, m, F(l.scale), dps, m, q[j0*l.W+hh*l.hd:], l.W, add, dq[j0*l.W+kOff:], l.W) // dK (+)= scale·dSᵀ·Q
				}
			}
		}
		vdq.put(b*rowQ, dq)
	}
}
