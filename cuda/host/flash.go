package host

// The host device's kernels: the flash-attention family (cuda/flash.go).
// Each batch element's rows are split over the cores; a query row streams
// its keys one at a time, each score a float64 dot product of the compute
// type's q and k, so no row of scores is held. The CUDA kernels
// (kernels/flash.cuh) do the same, a warp to a row.

import (
	"math"

	"trainmem/cuda"
)

// flashLayout is one call's sizes: hd channels a head, G query heads a
// group, rows W wide.
type flashLayout struct {
	T, C, NH, KV, hd, G, W int
	scale                  float64
}

func newFlashLayout(T, C, NH, KV int) flashLayout {
	hd := C / NH
	return flashLayout{T: T, C: C, NH: NH, KV: KV, hd: hd, G: NH / KV, W: cuda.QKVWidth(C, NH, KV), scale: 1 / math.Sqrt(float64(hd))}
}

// q, k and v are the channels of query head h, or key and value head g,
// at row t of one batch element's qkv rows.
func flashQ[F float](l flashLayout, x []F, t, h int) []F { return x[t*l.W+h*l.hd:][:l.hd] }
func flashK[F float](l flashLayout, x []F, t, g int) []F { return x[t*l.W+l.C+g*l.hd:][:l.hd] }
func flashV[F float](l flashLayout, x []F, t, g int) []F {
	return x[t*l.W+l.C+(l.KV+g)*l.hd:][:l.hd]
}

// flashY is query head h's channels of row t of a (T, C) buffer.
func flashY[F float](l flashLayout, x []F, t, h int) []F { return x[t*l.C+h*l.hd:][:l.hd] }

func dot64[F float](a, b []F) float64 {
	var s float64
	for i, x := range a {
		s += float64(x) * float64(b[i])
	}
	return s
}

// FlashAttentionStats: lse[b, h, t] = log Σ_{s ≤ t} exp(q_t·k_s·scale), the
// running maximum and sum of exponentials kept as the keys stream past
// (Dao et al. 2022, Algorithm 1's m and ℓ).
func (h *Device) FlashAttentionStats(lse, qkv *cuda.Buffer, B, T, C, NH, KV int) error {
	if err := h.begin("FlashAttentionStats", cuda.Check.FlashAttentionStats(lse, qkv, B, T, C, NH, KV), lse, qkv); err != nil {
		return err
	}
	instance(cuda.AllF64(lse, qkv), flashStatsKernel[float64], flashStatsKernel[float32])(h, lse, qkv, B, T, C, NH, KV)
	return nil
}

func flashStatsKernel[F float](h *Device, lse, qkv *cuda.Buffer, B, T, C, NH, KV int) {
	l := newFlashLayout(T, C, NH, KV)
	vq, vl := mkvec[F](qkv), mkvec[F](lse)
	rowQ, rows := T*l.W, NH*T
	tq, tl := batchScratch(vq, rowQ), batchScratch(vl, rows)
	defer putScratch(tq)
	defer putScratch(tl)
	for b := range B {
		q := vq.get(b*rowQ, (b+1)*rowQ, tq)
		out := vl.out(b*rows, (b+1)*rows, tl)
		h.parallel(rows, max(1, elemGrain/(T*l.hd)), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				hh, t := r/T, r%T
				qt := flashQ(l, q, t, hh)
				m, sum := math.Inf(-1), 0.0
				for s := 0; s <= t; s++ {
					sc := dot64(qt, flashK(l, q, s, hh/l.G)) * l.scale
					if sc > m {
						sum *= math.Exp(m - sc)
						m = sc
					}
					sum += math.Exp(sc - m)
				}
				out[r] = F(m + math.Log(sum))
			}
		})
		vl.put(b*rows, out)
	}
}

// FlashAttentionOut: y's query head h of row t = Σ_{s ≤ t} p_s·v_s with
// p_s = exp(q_t·k_s·scale − lse), summed in float64.
func (h *Device) FlashAttentionOut(y, qkv, lse *cuda.Buffer, B, T, C, NH, KV int) error {
	if err := h.begin("FlashAttentionOut", cuda.Check.FlashAttentionOut(y, qkv, lse, B, T, C, NH, KV), y, qkv, lse); err != nil {
		return err
	}
	instance(cuda.AllF64(y, qkv, lse), flashOutKernel[float64], flashOutKernel[float32])(h, y, qkv, lse, B, T, C, NH, KV)
	return nil
}

func flashOutKernel[F float](h *Device, y, qkv, lse *cuda.Buffer, B, T, C, NH, KV int) {
	l := newFlashLayout(T, C, NH, KV)
	vy, vq, vl := mkvec[F](y), mkvec[F](qkv), mkvec[F](lse)
	rowQ, rowY, rows := T*l.W, T*C, NH*T
	ty, tq, tl := batchScratch(vy, rowY), batchScratch(vq, rowQ), batchScratch(vl, rows)
	defer putScratch(ty)
	defer putScratch(tq)
	defer putScratch(tl)
	for b := range B {
		q := vq.get(b*rowQ, (b+1)*rowQ, tq)
		ls := vl.get(b*rows, (b+1)*rows, tl)
		out := vy.out(b*rowY, (b+1)*rowY, ty)
		h.parallel(rows, max(1, elemGrain/(T*l.hd)), func(lo, hi int) {
			acc := make([]float64, l.hd)
			for r := lo; r < hi; r++ {
				hh, t := r/T, r%T
				g := hh / l.G
				qt, L := flashQ(l, q, t, hh), float64(ls[r])
				clear(acc)
				for s := 0; s <= t; s++ {
					p := math.Exp(dot64(qt, flashK(l, q, s, g))*l.scale - L)
					for d, v := range flashV(l, q, s, g) {
						acc[d] += p * float64(v)
					}
				}
				o := flashY(l, out, t, hh)
				for d := range o {
					o[d] = F(acc[d])
				}
			}
		})
		vy.put(b*rowY, out)
	}
}

// FlashAttentionBackward: D = rowsum(dy ⊙ y) into scratch; then each query
// row's dQ = scale·Σ_{s ≤ t} dS_ts·k_s; then each key row's dK =
// scale·Σ dS_ts·q_t and dV = Σ p_ts·dy_t over its group's query heads and
// the rows t ≥ s, with p = exp(q·k·scale − lse) and dS = p·(dy_t·v_s − D).
// Every output row has one writer.
func (h *Device) FlashAttentionBackward(dqkv, dy, qkv, y, lse, scratch *cuda.Buffer, B, T, C, NH, KV int) error {
	err := cuda.Check.FlashAttentionBackward(dqkv, dy, qkv, y, lse, scratch, B, T, C, NH, KV)
	if err := h.begin("FlashAttentionBackward", err, dqkv, dy, qkv, y, lse, scratch); err != nil {
		return err
	}
	instance(cuda.AllF64(dqkv, dy, qkv, y, lse), flashBackwardKernel[float64], flashBackwardKernel[float32])(h, dqkv, dy, qkv, y, lse, scratch, B, T, C, NH, KV)
	return nil
}

func flashBackwardKernel[F float](h *Device, dqkv, dy, qkv, y, lse, scratch *cuda.Buffer, B, T, C, NH, KV int) {
	l := newFlashLayout(T, C, NH, KV)
	vdq, vdy, vq, vy, vl := mkvec[F](dqkv), mkvec[F](dy), mkvec[F](qkv), mkvec[F](y), mkvec[F](lse)
	rowQ, rowY, rows := T*l.W, T*C, NH*T
	tdq, tdy, tq, ty, tl := batchScratch(vdq, rowQ), batchScratch(vdy, rowY), batchScratch(vq, rowQ), batchScratch(vy, rowY), batchScratch(vl, rows)
	for _, s := range [][]F{tdq, tdy, tq, ty, tl} {
		defer putScratch(s)
	}
	D := mkvec[F](scratch).raw // the scratch in the compute type, or private room for it
	if D == nil {
		D = getScratch[F](B * rows)
		defer putScratch(D)
	}
	grain := max(1, elemGrain/(T*l.hd))
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
		// dS of query head hh's row t and key row s.
		dS := func(hh, t, s int, qt, dyt []F) (p, ds float64) {
			g := hh / l.G
			p = math.Exp(dot64(qt, flashK(l, q, s, g))*l.scale - float64(ls[hh*T+t]))
			return p, p * (dot64(dyt, flashV(l, q, s, g)) - float64(Db[hh*T+t]))
		}
		h.parallel(rows, grain, func(lo, hi int) { // dQ, by query rows
			acc := make([]float64, l.hd)
			for r := lo; r < hi; r++ {
				hh, t := r/T, r%T
				qt, dyt := flashQ(l, q, t, hh), flashY(l, d, t, hh)
				clear(acc)
				for s := 0; s <= t; s++ {
					_, ds := dS(hh, t, s, qt, dyt)
					for c, k := range flashK(l, q, s, hh/l.G) {
						acc[c] += ds * float64(k)
					}
				}
				out := flashQ(l, dq, t, hh)
				for c := range out {
					out[c] = F(acc[c] * l.scale)
				}
			}
		})
		h.parallel(KV*T, grain, func(lo, hi int) { // dK and dV, by key rows
			dk, dv := make([]float64, l.hd), make([]float64, l.hd)
			for r := lo; r < hi; r++ {
				g, s := r/T, r%T
				clear(dk)
				clear(dv)
				for hh := g * l.G; hh < (g+1)*l.G; hh++ {
					for t := s; t < T; t++ {
						qt, dyt := flashQ(l, q, t, hh), flashY(l, d, t, hh)
						p, ds := dS(hh, t, s, qt, dyt)
						for c := range dk {
							dk[c] += ds * float64(qt[c])
							dv[c] += p * float64(dyt[c])
						}
					}
				}
				kk, vv := flashK(l, dq, s, g), flashV(l, dq, s, g)
				for c := range kk {
					kk[c], vv[c] = F(dk[c]*l.scale), F(dv[c])
				}
			}
		})
		vdq.put(b*rowQ, dq)
	}
}
