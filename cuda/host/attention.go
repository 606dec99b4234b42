package host

// Causal self-attention on the host. qkv is (B·T, W), each row [q | k | v]
// (cuda.AttentionKernels): query head h is the hd = C/NH channels
// h·hd..(h+1)·hd of q, and key and value head g = h/(NH/KV) the channels
// g·hd..(g+1)·hd of k and of v, so a head's T×hd matrix is a strided view
// with row stride W, which the GEMMs take as they are (lda = W): nothing is
// transposed or copied for F32 and F64 buffers. Batch elements run one after the other; within one,
// the GEMMs use the BLAS threads and the softmax rows are split over the
// cores.
//
//	S = Q·Kᵀ/sqrt(hd)            (NH GEMMs, T×T each, into p)
//	P = causal softmax(S)        (rows; j > t exactly 0)
//	Y = P·V                      (NH GEMMs into y's column blocks)
//
// where K and V are the query head's group's.
//
// Backward, with the F32 scratch of NH·T·T for dP and dS:
//
//	dV = Pᵀ·dY    dP = dY·Vᵀ    dS = P ⊙ (dP - rowsum(P ⊙ dP)) / sqrt(hd)
//	dQ = dS·K     dK = dSᵀ·Q
//
// a key or value head's dK and dV summed over its group's query heads, in
// the heads' order (the first writes, the others add).

import (
	"math"
	"trainmem/cuda"
)

// AttentionProbs: p (B, NH, T, T) = causal softmax(q·kᵀ/sqrt(C/NH)).
func (h *Device) AttentionProbs(p, qkv *cuda.Buffer, B, T, C, NH, KV int) error {
	return h.launch("AttentionProbs", cuda.Check.AttentionProbs(p, qkv, B, T, C, NH, KV), func() {
		instance(cuda.AllF64(p, qkv), attentionProbsKernel[float64], attentionProbsKernel[float32])(h, p, qkv, B, T, C, NH, KV)
	}, p, qkv)
}

// batchScratch returns a per-batch-element buffer for v's elements: nil
// when v is stored in the compute type (no copy needed).
func batchScratch[F float](v vec[F], n int) []F {
	if v.raw != nil {
		return nil
	}
	return getScratch[F](n)
}

func attentionProbsKernel[F float](h *Device, p, qkv *cuda.Buffer, B, T, C, NH, KV int) {
	hd, G, W := C/NH, NH/KV, cuda.QKVWidth(C, NH, KV)
	scale := F(1 / math.Sqrt(float64(hd)))
	vq, vp := mkvec[F](qkv), mkvec[F](p)
	rowQ, sz := T*W, NH*T*T
	tq, tp := batchScratch(vq, rowQ), batchScratch(vp, sz)
	defer putScratch(tq)
	defer putScratch(tp)
	for b := 0; b < B; b++ {
		q := vq.get(b*rowQ, (b+1)*rowQ, tq)
		pp := vp.out(b*sz, (b+1)*sz, tp)
		for hh := 0; hh < NH; hh++ {
			gemm(h.blas, false, true, T, T, hd, scale, q[hh*hd:], W, q[C+hh/G*hd:], W, 0, pp[hh*T*T:(hh+1)*T*T], T)
		}
		h.parallel(NH*T, max(1, elemGrain/T), func(lo, hi int) {
			var e [expChunk]float64
			for r := lo; r < hi; r++ {
				causalSoftmax(pp[r*T:(r+1)*T], r%T, &e)
			}
		})
		vp.put(b*sz, pp)
	}
}

// causalSoftmax turns row t of the scores into probabilities over columns
// 0..t (max-subtracted, in float64) and zeroes the columns after t; e is
// room for the exponentials, the caller's so that it is not cleared for
// every row.
func causalSoftmax[F float](row []F, t int, e *[expChunk]float64) {
	mx := float64(rowMax(row[:t+1]))
	var sums [4]float64
	for c0 := 0; c0 <= t; c0 += expChunk {
		out := row[c0:min(c0+expChunk, t+1)]
		roundInto(out, expShiftedSum(e[:], out, mx, &sums))
	}
	scaleBy(row[:t+1], 1/sum4(&sums))
	clear(row[t+1:])
}

// AttentionOut: y (B·T, C), head h's channels = p[b, h]·v[b, h].
func (h *Device) AttentionOut(y, qkv, p *cuda.Buffer, B, T, C, NH, KV int) error {
	return h.launch("AttentionOut", cuda.Check.AttentionOut(y, qkv, p, B, T, C, NH, KV), func() {
		instance(cuda.AllF64(y, qkv, p), attentionOutKernel[float64], attentionOutKernel[float32])(h, y, qkv, p, B, T, C, NH, KV)
	}, y, qkv, p)
}

func attentionOutKernel[F float](h *Device, y, qkv, p *cuda.Buffer, B, T, C, NH, KV int) {
	hd, G, W := C/NH, NH/KV, cuda.QKVWidth(C, NH, KV)
	vy, vq, vp := mkvec[F](y), mkvec[F](qkv), mkvec[F](p)
	rowQ, rowY, sz := T*W, T*C, NH*T*T
	ty, tq, tp := batchScratch(vy, rowY), batchScratch(vq, rowQ), batchScratch(vp, sz)
	defer putScratch(ty)
	defer putScratch(tq)
	defer putScratch(tp)
	for b := 0; b < B; b++ {
		q := vq.get(b*rowQ, (b+1)*rowQ, tq)
		pp := vp.get(b*sz, (b+1)*sz, tp)
		yy := vy.out(b*rowY, (b+1)*rowY, ty)
		for hh := 0; hh < NH; hh++ {
			gemm(h.blas, false, false, T, hd, T, 1, pp[hh*T*T:(hh+1)*T*T], T, q[C+(KV+hh/G)*hd:], W, 0, yy[hh*hd:], C)
		}
		vy.put(b*rowY, yy)
	}
}

// AttentionBackward: dqkv (B·T, W) from dy through p (to q and k) and v.
// scratch holds dP and dS of one batch element; an fp64 computation given
// fp32 scratch uses private fp64 scratch instead.
func (h *Device) AttentionBackward(dqkv, dy, qkv, p, scratch *cuda.Buffer, B, T, C, NH, KV int) error {
	err := cuda.Check.AttentionBackward(dqkv, dy, qkv, p, scratch, B, T, C, NH, KV)
	if err := h.begin("AttentionBackward", err, dqkv, dy, qkv, p, scratch); err != nil {
		return err
	}
	instance(cuda.AllF64(dqkv, dy, qkv, p), attentionBackwardKernel[float64], attentionBackwardKernel[float32])(h, dqkv, dy, qkv, p, scratch, B, T, C, NH, KV)
	return nil
}

func attentionBackwardKernel[F float](h *Device, dqkv, dy, qkv, p, scratch *cuda.Buffer, B, T, C, NH, KV int) {
	hd, G, W := C/NH, NH/KV, cuda.QKVWidth(C, NH, KV)
	scale := 1 / math.Sqrt(float64(hd))
	vdq, vdy, vq, vp := mkvec[F](dqkv), mkvec[F](dy), mkvec[F](qkv), mkvec[F](p)
	rowQ, rowY, sz := T*W, T*C, NH*T*T
	tdq, tdy, tq, tp := batchScratch(vdq, rowQ), batchScratch(vdy, rowY), batchScratch(vq, rowQ), batchScratch(vp, sz)
	defer putScratch(tdq)
	defer putScratch(tdy)
	defer putScratch(tq)
	defer putScratch(tp)
	ds := mkvec[F](scratch).raw
	if ds == nil {
		ds = getScratch[F](sz)
		defer putScratch(ds)
	}
	ds = ds[:sz]
	for b := 0; b < B; b++ {
		q := vq.get(b*rowQ, (b+1)*rowQ, tq)
		pp := vp.get(b*sz, (b+1)*sz, tp)
		d := vdy.get(b*rowY, (b+1)*rowY, tdy)
		dq := vdq.out(b*rowQ, (b+1)*rowQ, tdq)
		for hh := 0; hh < NH; hh++ {
			ph, dsh := pp[hh*T*T:(hh+1)*T*T], ds[hh*T*T:(hh+1)*T*T]
			v, add := C+(KV+hh/G)*hd, F(min(hh%G, 1)) // the group's first query head writes, the rest add
			// dV = Pᵀ·dY
			gemm(h.blas, true, false, T, hd, T, 1, ph, T, d[hh*hd:], C, add, dq[v:], W)
			// dP = dY·Vᵀ
			gemm(h.blas, false, true, T, T, hd, 1, d[hh*hd:], C, q[v:], W, 0, dsh, T)
		}
		h.parallel(NH*T, max(1, elemGrain/T), func(lo, hi int) {
			for r := lo; r < hi; r++ {
				t := r % T
				prow, drow := pp[r*T:(r+1)*T], ds[r*T:(r+1)*T]
				var dot float64
				for j, v := range prow[:t+1] {
					dot += float64(v) * float64(drow[j])
				}
				for j, v := range prow[:t+1] {
					drow[j] = F(float64(v) * (float64(drow[j]) - dot) * scale)
				}
				clear(drow[t+1:])
			}
		})
		for hh := 0; hh < NH; hh++ {
			dsh := ds[hh*T*T : (hh+1)*T*T]
			k, add := C+hh/G*hd, F(min(hh%G, 1))
			// dQ = dS·K
			gemm(h.blas, false, false, T, hd, T, 1, dsh, T, q[k:], W, 0, dq[hh*hd:], W)
			// dK = dSᵀ·Q
			gemm(h.blas, true, false, T, hd, T, 1, dsh, T, q[hh*hd:], W, add, dq[k:], W)
		}
		vdq.put(b*rowQ, dq)
	}
}
