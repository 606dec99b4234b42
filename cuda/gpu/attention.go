//go:build trainmem_cuda

package gpu

import (
	"math"

	"trainmem/cuda"
)

// The CUDA device's kernels: the attention family (probabilities, their product with the values, the gradient of qkv).

// The family's kernels (kernels/attention.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"attention_probs":            "pipiiiiii",
		"attention_backward_softmax": "pipiiif",
		"attention_kv_store":         "pipiiiii",
	})
}

// AttentionProbs: p = causal softmax(q·kᵀ/sqrt(C/NH)), one fused kernel
// (scores never leave the chip, as the host keeps them in fp32 scratch of
// its own).
func (d *Device) AttentionProbs(p, qkv *cuda.Buffer, B, T, C, NH, KV int) error {
	return d.launch("AttentionProbs", cuda.Check.AttentionProbs(p, qkv, B, T, C, NH, KV), func() *kcall { return attentionProbsCall(p, qkv, B, T, C, NH, KV) }, p, qkv)
}

// headMat is one operand of a product over heads: the batch's first
// matrix at element off of b, rows×cols stored ld apart, the next matrix
// stride elements on.
type headMat struct {
	b                           *cuda.Buffer
	off, ld, stride, rows, cols int
}

// view is the operand's span of b for batch matrices.
func (m headMat) view(batch int) *cuda.Buffer {
	return m.b.View(m.off, cuda.MatMulSpan(batch, m.stride, m.rows, m.ld, m.cols))
}

// headMatMul is C = op(A)·op(B) + beta·C over batch heads as one strided
// batch.
func headMatMul(tA, tB bool, M, N, K int, a, b, c headMat, batch int, beta float32) cuda.MatMul {
	return cuda.MatMul{TransA: tA, TransB: tB, M: M, N: N, K: K,
		A: a.view(batch), LDA: a.ld, StrideA: a.stride, B: b.view(batch), LDB: b.ld, StrideB: b.stride,
		C: c.view(batch), LDC: c.ld, StrideC: c.stride, Batch: batch, Alpha: 1, Beta: beta}
}

// attentionHeads are one batch element's head matrices for the products:
// the j-th query head of every group (heads j, G+j, 2G+j, …, G = NH/KV) as
// one strided batch of KV with the groups' key and value heads. A query
// head's T×hd matrix of q, y or their gradients is a column block hd wide
// of rows W (or C) apart; its probabilities a T×T block of p.
type attentionHeads struct {
	T, C, NH, KV, hd, G, W, b int
}

func newAttentionHeads(b, T, C, NH, KV int) attentionHeads {
	return attentionHeads{T: T, C: C, NH: NH, KV: KV, hd: C / NH, G: NH / KV, W: cuda.QKVWidth(C, NH, KV), b: b}
}

// q is query head j of each group in a (B·T, W) buffer (qkv or dqkv);
// k and v are the key and value heads.
func (a attentionHeads) q(buf *cuda.Buffer, j int) headMat {
	return headMat{buf, a.b*a.T*a.W + j*a.hd, a.W, a.G * a.hd, a.T, a.hd}
}
func (a attentionHeads) k(buf *cuda.Buffer) headMat {
	return headMat{buf, a.b*a.T*a.W + a.C, a.W, a.hd, a.T, a.hd}
}
func (a attentionHeads) v(buf *cuda.Buffer) headMat {
	return headMat{buf, a.b*a.T*a.W + a.C + a.KV*a.hd, a.W, a.hd, a.T, a.hd}
}

// y is query head j of each group in a (B·T, C) buffer (y or dy).
func (a attentionHeads) y(buf *cuda.Buffer, j int) headMat {
	return headMat{buf, a.b*a.T*a.C + j*a.hd, a.C, a.G * a.hd, a.T, a.hd}
}

// p is query head j of each group's T×T block of p (B, NH, T, T), or of
// one batch element's scratch when first is 0.
func (a attentionHeads) p(buf *cuda.Buffer, first, j int) headMat {
	tt := a.T * a.T
	return headMat{buf, (first*a.NH + j) * tt, a.T, a.G * tt, a.T, a.T}
}

// AttentionOut: y head h = p[b, h]·v[b, h/G], per batch element a strided
// batch over the groups for each of a group's G query heads.
func (d *Device) AttentionOut(y, qkv, p *cuda.Buffer, B, T, C, NH, KV int) error {
	if err := d.begin("AttentionOut", cuda.Check.AttentionOut(y, qkv, p, B, T, C, NH, KV), y, qkv, p); err != nil {
		return err
	}
	defer d.leave()
	for b := 0; b < B; b++ {
		a := newAttentionHeads(b, T, C, NH, KV)
		for j := range a.G {
			if err := d.gemm(headMatMul(false, false, T, a.hd, T, a.p(p, b, j), a.v(qkv), a.y(y, j), KV, 0), skipNone); err != nil {
				return err
			}
		}
	}
	return nil
}

// AttentionBackward follows the host: per batch element, dV = Pᵀ·dY and
// dP = dY·Vᵀ (into scratch, fp32), dS = P ⊙ (dP - rowsum(P ⊙ dP))/sqrt(hd)
// in place, then dQ = dS·K and dK = dSᵀ·Q, a group's first query head
// writing dV and dK and the others adding to them (Beta 1). dS stays fp32
// as on the host, so with 16-bit storage the last two products mix an fp32
// operand with a 16-bit one, which cuBLAS does not take: they run on
// gemm_generic, which skips dS's zeros above the diagonal. With 16-bit
// storage and groups of more than one query head, a group's dV and dK
// are summed in the fp32 scratch after dS (AttentionScratchLen) and
// rounded once into dqkv (attention_kv_store), as the host sums them in
// its compute type.
func (d *Device) AttentionBackward(dqkv, dy, qkv, p, scratch *cuda.Buffer, B, T, C, NH, KV int) error {
	err := cuda.Check.AttentionBackward(dqkv, dy, qkv, p, scratch, B, T, C, NH, KV)
	if err := d.begin("AttentionBackward", err, dqkv, dy, qkv, p, scratch); err != nil {
		return err
	}
	defer d.leave()
	type step struct {
		m    cuda.MatMul
		skip int
	}
	run := func(steps []step) error {
		for _, s := range steps {
			if err := d.gemm(s.m, s.skip); err != nil {
				return err
			}
		}
		return nil
	}
	hd, G := C/NH, NH/KV
	kvw := KV * hd
	summed := G > 1 && (dqkv.DType == cuda.F16 || dqkv.DType == cuda.BF16)
	var acc *cuda.Buffer // T rows of kvw: a group's dK or dV, summed in fp32
	if summed {
		acc = scratch.View(NH*T*T, T*kvw)
	}
	for b := 0; b < B; b++ {
		a := newAttentionHeads(b, T, C, NH, KV)
		// sum is where a group's dK or dV (of dqkv's kind, at(dqkv)) is
		// summed: dqkv itself, or acc as its T×kvw rows.
		sum := func(at func(*cuda.Buffer) headMat) headMat {
			if !summed {
				return at(dqkv)
			}
			return headMat{acc, 0, kvw, hd, T, hd}
		}
		store := func(off int) error { // acc into dqkv's rows at column off
			if !summed {
				return nil
			}
			return d.run(attentionKVStoreCall(dqkv.View(b*T*a.W, T*a.W), acc, T, kvw, a.W, off))
		}
		var steps []step
		for j := range G {
			add := float32(min(j, 1))
			steps = append(steps,
				step{headMatMul(true, false, T, hd, T, a.p(p, b, j), a.y(dy, j), sum(a.v), KV, add), skipNone},     // dV (+)= Pᵀ·dY
				step{headMatMul(false, true, T, T, hd, a.y(dy, j), a.v(qkv), a.p(scratch, 0, j), KV, 0), skipNone}) // dP = dY·Vᵀ
		}
		if err := run(steps); err != nil {
			return err
		}
		if err := store(C + kvw); err != nil {
			return err
		}
		if err := d.run(attentionSoftmaxBackwardCall(scratch.View(0, NH*T*T), p.View(b*NH*T*T, NH*T*T), NH, T, hd)); err != nil {
			return err
		}
		steps = steps[:0]
		for j := range G {
			add := float32(min(j, 1))
			steps = append(steps,
				step{headMatMul(false, false, T, hd, T, a.p(scratch, 0, j), a.k(qkv), a.q(dqkv, j), KV, 0), skipLower}, // dQ = dS·K
				step{headMatMul(true, false, T, hd, T, a.p(scratch, 0, j), a.q(qkv, j), sum(a.k), KV, add), skipUpper}) // dK (+)= dSᵀ·Q
		}
		if err := run(steps); err != nil {
			return err
		}
		if err := store(C); err != nil {
			return err
		}
	}
	return nil
}

// attentionKVStoreCall rounds acc, T rows of n (a group's summed key or
// value gradients), into rows of W of one batch element's dqkv at column
// off.
func attentionKVStoreCall(dqkv, acc *cuda.Buffer, T, n, W, off int) *kcall {
	rows := int64(T)
	return newCall("attention_kv_store", cuda.AllF64(dqkv, acc), gridStride(rows*int64(n), elemBlock)).
		buf(dqkv).buf(acc).int(rows).int(int64(n)).int(int64(W)).int(int64(off))
}

func attentionProbsCall(p, qkv *cuda.Buffer, B, T, C, NH, KV int) *kcall {
	return newCall("attention_probs", cuda.AllF64(p, qkv), attentionLaunch(B, T, NH)).
		buf(p).buf(qkv).int(int64(B)).int(int64(T)).int(int64(C)).int(int64(NH)).int(int64(KV))
}

// attentionSoftmaxBackwardCall works in place on ds, the dP of one batch
// element (NH·T rows of T), with p that element's probabilities.
func attentionSoftmaxBackwardCall(ds, p *cuda.Buffer, NH, T, hd int) *kcall {
	rows := int64(NH) * int64(T)
	return newCall("attention_backward_softmax", cuda.AllF64(ds, p), perWarp(rows)).
		buf(ds).buf(p).int(rows).int(int64(T)).f64(1 / math.Sqrt(float64(hd)))
}
