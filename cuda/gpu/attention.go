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
		"attention_probs":            "pipiiiii",
		"attention_backward_softmax": "pipiiif",
	})
}

// AttentionProbs: p = causal softmax(q·kᵀ/sqrt(C/NH)), one fused kernel
// (scores never leave the chip, as the host keeps them in fp32 scratch of
// its own).
func (d *Device) AttentionProbs(p, qkv *cuda.Buffer, B, T, C, NH int) error {
	return d.launch("AttentionProbs", cuda.Check.AttentionProbs(p, qkv, B, T, C, NH), func() *kcall { return attentionProbsCall(p, qkv, B, T, C, NH) }, p, qkv)
}

// headMatMul is one batch element's product over all NH heads, as one
// strided batch: head h's T×hd matrix of q, k, v or y is a column block
// hd wide of rows 3C (or C) apart, and the next head starts hd elements
// on.
func headMatMul(tA, tB bool, M, N, K int, a *cuda.Buffer, lda, sa int, b *cuda.Buffer, ldb, sb int, c *cuda.Buffer, ldc, sc, NH int) cuda.MatMul {
	return cuda.MatMul{TransA: tA, TransB: tB, M: M, N: N, K: K, A: a, LDA: lda, StrideA: sa, B: b, LDB: ldb, StrideB: sb,
		C: c, LDC: ldc, StrideC: sc, Batch: NH, Alpha: 1}
}

// AttentionOut: y head h = p[b, h]·v[b, h], a strided batch over heads per
// batch element.
func (d *Device) AttentionOut(y, qkv, p *cuda.Buffer, B, T, C, NH int) error {
	if err := d.begin("AttentionOut", cuda.Check.AttentionOut(y, qkv, p, B, T, C, NH), y, qkv, p); err != nil {
		return err
	}
	defer d.leave()
	hd, tt, span := C/NH, T*T, 3*C*T-2*C // span: a q, k or v part of one batch element's rows
	for b := 0; b < B; b++ {
		pb := p.View(b*NH*tt, NH*tt)
		v := qkv.View(b*T*3*C+2*C, span)
		yb := y.View(b*T*C, T*C)
		if err := d.gemm(headMatMul(false, false, T, hd, T, pb, T, tt, v, 3*C, hd, yb, C, hd, NH), skipNone); err != nil {
			return err
		}
	}
	return nil
}

// AttentionBackward follows the host: per batch element, dV = Pᵀ·dY and
// dP = dY·Vᵀ (into scratch, fp32), dS = P ⊙ (dP - rowsum(P ⊙ dP))/sqrt(hd)
// in place, then dQ = dS·K and dK = dSᵀ·Q. dS stays fp32 as on the host,
// so with 16-bit storage the last two products mix an fp32 operand with a
// 16-bit one, which cuBLAS does not take: they run on gemm_generic, which
// skips dS's zeros above the diagonal.
func (d *Device) AttentionBackward(dqkv, dy, qkv, p, scratch *cuda.Buffer, B, T, C, NH int) error {
	err := cuda.Check.AttentionBackward(dqkv, dy, qkv, p, scratch, B, T, C, NH)
	if err := d.begin("AttentionBackward", err, dqkv, dy, qkv, p, scratch); err != nil {
		return err
	}
	defer d.leave()
	hd, tt, span := C/NH, T*T, 3*C*T-2*C
	ds := scratch.View(0, NH*tt)
	for b := 0; b < B; b++ {
		pb := p.View(b*NH*tt, NH*tt)
		dyb := dy.View(b*T*C, T*C)
		q, k, v := qkv.View(b*T*3*C, span), qkv.View(b*T*3*C+C, span), qkv.View(b*T*3*C+2*C, span)
		dq, dk, dv := dqkv.View(b*T*3*C, span), dqkv.View(b*T*3*C+C, span), dqkv.View(b*T*3*C+2*C, span)
		steps := []struct {
			m    cuda.MatMul
			skip int
		}{
			{headMatMul(true, false, T, hd, T, pb, T, tt, dyb, C, hd, dv, 3*C, hd, NH), skipNone}, // dV = Pᵀ·dY
			{headMatMul(false, true, T, T, hd, dyb, C, hd, v, 3*C, hd, ds, T, tt, NH), skipNone},  // dP = dY·Vᵀ
		}
		for _, s := range steps {
			if err := d.gemm(s.m, s.skip); err != nil {
				return err
			}
		}
		if err := d.run(attentionSoftmaxBackwardCall(ds, pb, NH, T, hd)); err != nil {
			return err
		}
		steps = steps[:0]
		steps = append(steps,
			struct {
				m    cuda.MatMul
				skip int
			}{headMatMul(false, false, T, hd, T, ds, T, tt, k, 3*C, hd, dq, 3*C, hd, NH), skipLower}, // dQ = dS·K
			struct {
				m    cuda.MatMul
				skip int
			}{headMatMul(true, false, T, hd, T, ds, T, tt, q, 3*C, hd, dk, 3*C, hd, NH), skipUpper}, // dK = dSᵀ·Q
		)
		for _, s := range steps {
			if err := d.gemm(s.m, s.skip); err != nil {
				return err
			}
		}
	}
	return nil
}

func attentionProbsCall(p, qkv *cuda.Buffer, B, T, C, NH int) *kcall {
	return newCall("attention_probs", cuda.AllF64(p, qkv), attentionLaunch(B, T, NH)).
		buf(p).buf(qkv).int(int64(B)).int(int64(T)).int(int64(C)).int(int64(NH))
}

// attentionSoftmaxBackwardCall works in place on ds, the dP of one batch
// element (NH·T rows of T), with p that element's probabilities.
func attentionSoftmaxBackwardCall(ds, p *cuda.Buffer, NH, T, hd int) *kcall {
	rows := int64(NH) * int64(T)
	return newCall("attention_backward_softmax", cuda.AllF64(ds, p), perWarp(rows)).
		buf(ds).buf(p).int(rows).int(int64(T)).f64(1 / math.Sqrt(float64(hd)))
}
