//go:build trainmem_cuda

package cuda

// The CUDA device's kernels: each checks its arguments with the shared
// validation (check.go) exactly as Host and Shape do, then queues its
// kernel calls (cuda_calls.go) or cuBLAS products on the device's stream.

import "fmt"

// Fill sets every element of dst to v (rounded once to dst's type).
func (d *CUDA) Fill(dst *Buffer, v float32) error {
	if err := d.begin("Fill", checkFill(dst, v), dst); err != nil {
		return err
	}
	defer d.leave()
	if dst.Len == 0 {
		return nil
	}
	return d.run(fillCall(dst, v))
}

// Cast converts src into dst, correctly rounded; a same-type cast copies.
func (d *CUDA) Cast(dst, src *Buffer) error {
	if err := d.begin("Cast", checkCast(dst, src), dst, src); err != nil {
		return err
	}
	defer d.leave()
	if dst.Len == 0 {
		return nil
	}
	if dst.DType == src.DType {
		if dst.addr == src.addr {
			return nil
		}
		return cuErr(fmt.Sprintf("cuMemcpyDtoDAsync(%s ← %s)", dst, src), memcpyDtoD(d, dst, src))
	}
	return d.run(castCall(dst, src))
}

// Add computes y = a + b; y may alias a or b.
func (d *CUDA) Add(y, a, b *Buffer) error {
	if err := d.begin("Add", checkAdd(y, a, b), y, a, b); err != nil {
		return err
	}
	defer d.leave()
	if y.Len == 0 {
		return nil
	}
	return d.run(addCall(y, a, b))
}

// Embedding: out[b·T+t, :] = wte[tokens[b·T+t], :] + wpe[t, :].
func (d *CUDA) Embedding(out, tokens, wte, wpe *Buffer, B, T, C int) error {
	if err := d.begin("Embedding", checkEmbedding(out, tokens, wte, wpe, B, T, C), out, tokens, wte, wpe); err != nil {
		return err
	}
	defer d.leave()
	checked, err := d.checkIDsOnHost("Embedding", "token id", tokens, T, wte.Len/C)
	if err != nil {
		return err
	}
	return d.runChecked(embeddingCall(out, tokens, wte, wpe, B, T, C, uintptr(d.status)), checked)
}

// runChecked runs a kernel that reads token ids; without a host copy of
// the ids it waits for the kernel and reads its finding.
func (d *CUDA) runChecked(c *kcall, checkedOnHost bool) error {
	if err := d.run(c); err != nil {
		return err
	}
	if checkedOnHost {
		return nil
	}
	return d.syncCheck(c.name)
}

// EmbeddingBackwardTokens: dwte = 0, then each token's row the sum of its
// positions' rows, in position order, in fp64 (one warp per token, no
// atomics).
func (d *CUDA) EmbeddingBackwardTokens(dwte, dout, tokens *Buffer, B, T, C int) error {
	err := checkEmbeddingBackwardTokens(dwte, dout, tokens, B, T, C)
	if err := d.begin("EmbeddingBackwardTokens", err, dwte, dout, tokens); err != nil {
		return err
	}
	defer d.leave()
	checked, err := d.checkIDsOnHost("EmbeddingBackwardTokens", "token id", tokens, T, dwte.Len/C)
	if err != nil {
		return err
	}
	if err := d.memsetZero(dwte, 0, dwte.Len); err != nil {
		return err
	}
	return d.runChecked(embeddingBackwardTokensCall(dwte, dout, tokens, B, T, C, uintptr(d.status)), checked)
}

// EmbeddingBackwardPositions: dwpe[t, :] = Σ_b dout[b·T+t, :]; rows t ≥ T zero.
func (d *CUDA) EmbeddingBackwardPositions(dwpe, dout *Buffer, B, T, C int) error {
	err := checkEmbeddingBackwardPositions(dwpe, dout, B, T, C)
	if err := d.begin("EmbeddingBackwardPositions", err, dwpe, dout); err != nil {
		return err
	}
	defer d.leave()
	if err := d.memsetZero(dwpe, T*C, dwpe.Len-T*C); err != nil {
		return err
	}
	return d.run(embeddingBackwardPositionsCall(dwpe, dout, B, T, C))
}

// LayerNormStats writes per row the mean and 1/sqrt(var+eps), two passes in fp64.
func (d *CUDA) LayerNormStats(stats, x *Buffer, N, C int, eps float32) error {
	if err := d.begin("LayerNormStats", checkLayerNormStats(stats, x, N, C, eps), stats, x); err != nil {
		return err
	}
	defer d.leave()
	return d.run(layerNormStatsCall(stats, x, N, C, eps))
}

// LayerNorm: y = (x - mean)·rstd·w + b.
func (d *CUDA) LayerNorm(y, x, stats, w, b *Buffer, N, C int) error {
	if err := d.begin("LayerNorm", checkLayerNorm(y, x, stats, w, b, N, C), y, x, stats, w, b); err != nil {
		return err
	}
	defer d.leave()
	return d.run(layerNormCall(y, x, stats, w, b, N, C))
}

// LayerNormBackwardX: dx = rstd·(g - mean(g) - xhat·mean(g·xhat)), the
// means in fp64.
func (d *CUDA) LayerNormBackwardX(dx, dy, x, stats, w *Buffer, N, C int) error {
	err := checkLayerNormBackwardX(dx, dy, x, stats, w, N, C)
	if err := d.begin("LayerNormBackwardX", err, dx, dy, x, stats, w); err != nil {
		return err
	}
	defer d.leave()
	return d.run(layerNormBackwardXCall(dx, dy, x, stats, w, N, C))
}

// LayerNormBackwardW: dw[c] = Σ_i dy[i, c]·xhat[i, c], in fp64, in a fixed
// order (column sums, no atomics).
func (d *CUDA) LayerNormBackwardW(dw, dy, x, stats *Buffer, N, C int) error {
	err := checkLayerNormBackwardW(dw, dy, x, stats, N, C)
	if err := d.begin("LayerNormBackwardW", err, dw, dy, x, stats); err != nil {
		return err
	}
	defer d.leave()
	return d.run(layerNormBackwardWCall(dw, dy, x, stats, N, C))
}

// SumRows: dst[c] = Σ_i src[i, c], in fp64, in a fixed order.
func (d *CUDA) SumRows(dst, src *Buffer, N, C int) error {
	if err := d.begin("SumRows", checkSumRows(dst, src, N, C), dst, src); err != nil {
		return err
	}
	defer d.leave()
	return d.run(sumRowsCall(dst, src, N, C))
}

// AddBias: y[i, c] += b[c].
func (d *CUDA) AddBias(y, b *Buffer, N, C int) error {
	if err := d.begin("AddBias", checkAddBias(y, b, N, C), y, b); err != nil {
		return err
	}
	defer d.leave()
	return d.run(addBiasCall(y, b, N, C))
}

// MatMul runs C = Alpha·op(A)·op(B) + Beta·C on cuBLAS (16-bit inputs
// with fp32 accumulation, fp32, fp64), or on gemm_generic for operand
// types cuBLAS does not combine.
func (d *CUDA) MatMul(m MatMul) error {
	n, err := checkMatMul(m)
	if err := d.begin("MatMul", err, m.A, m.B, m.C); err != nil {
		return err
	}
	defer d.leave()
	return d.gemm(n, skipNone)
}

// GELU: y = x·σ(2u), in fp64, rounded once.
func (d *CUDA) GELU(y, x *Buffer) error {
	if err := d.begin("GELU", checkGELU(y, x), y, x); err != nil {
		return err
	}
	defer d.leave()
	if y.Len == 0 {
		return nil
	}
	return d.run(geluCall(y, x))
}

// GELUBackward: dx = dy·GELU'(x), in fp64.
func (d *CUDA) GELUBackward(dx, dy, x *Buffer) error {
	if err := d.begin("GELUBackward", checkGELUBackward(dx, dy, x), dx, dy, x); err != nil {
		return err
	}
	defer d.leave()
	if dx.Len == 0 {
		return nil
	}
	return d.run(geluBackwardCall(dx, dy, x))
}

// AttentionProbs: p = causal softmax(q·kᵀ/sqrt(C/NH)), one fused kernel
// (scores never leave the chip, as the host keeps them in fp32 scratch of
// its own).
func (d *CUDA) AttentionProbs(p, qkv *Buffer, B, T, C, NH int) error {
	if err := d.begin("AttentionProbs", checkAttentionProbs(p, qkv, B, T, C, NH), p, qkv); err != nil {
		return err
	}
	defer d.leave()
	return d.run(attentionProbsCall(p, qkv, B, T, C, NH))
}

// headMatMul is one batch element's product over all NH heads, as one
// strided batch: head h's T×hd matrix of q, k, v or y is a column block
// hd wide of rows 3C (or C) apart, and the next head starts hd elements
// on.
func headMatMul(tA, tB bool, M, N, K int, a *Buffer, lda, sa int, b *Buffer, ldb, sb int, c *Buffer, ldc, sc, NH int) MatMul {
	return MatMul{TransA: tA, TransB: tB, M: M, N: N, K: K, A: a, LDA: lda, StrideA: sa, B: b, LDB: ldb, StrideB: sb,
		C: c, LDC: ldc, StrideC: sc, Batch: NH, Alpha: 1}
}

// AttentionOut: y head h = p[b, h]·v[b, h], a strided batch over heads per
// batch element.
func (d *CUDA) AttentionOut(y, qkv, p *Buffer, B, T, C, NH int) error {
	if err := d.begin("AttentionOut", checkAttentionOut(y, qkv, p, B, T, C, NH), y, qkv, p); err != nil {
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
func (d *CUDA) AttentionBackward(dqkv, dy, qkv, p, scratch *Buffer, B, T, C, NH int) error {
	err := checkAttentionBackward(dqkv, dy, qkv, p, scratch, B, T, C, NH)
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
			m    MatMul
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
				m    MatMul
				skip int
			}{headMatMul(false, false, T, hd, T, ds, T, tt, k, 3*C, hd, dq, 3*C, hd, NH), skipLower}, // dQ = dS·K
			struct {
				m    MatMul
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

// CrossEntropy: per-row losses into scratch (fp64 sums), then their mean.
func (d *CUDA) CrossEntropy(loss, logits, targets, scratch *Buffer, N, V int) error {
	err := checkCrossEntropy(loss, logits, targets, scratch, N, V)
	if err := d.begin("CrossEntropy", err, loss, logits, targets, scratch); err != nil {
		return err
	}
	defer d.leave()
	checked, err := d.checkIDsOnHost("CrossEntropy", "target", targets, 0, V)
	if err != nil {
		return err
	}
	f64 := allF64(loss, logits)
	if err := d.runChecked(crossEntropyRowsCall(scratch, logits, targets, N, V, f64, uintptr(d.status)), checked); err != nil {
		return err
	}
	return d.run(crossEntropyMeanCall(loss, scratch, N, f64))
}

// CrossEntropyBackward: dlogits = (softmax - onehot)·dloss/N; dlogits may
// be logits.
func (d *CUDA) CrossEntropyBackward(dlogits, dloss, logits, targets *Buffer, N, V int) error {
	err := checkCrossEntropyBackward(dlogits, dloss, logits, targets, N, V)
	if err := d.begin("CrossEntropyBackward", err, dlogits, dloss, logits, targets); err != nil {
		return err
	}
	defer d.leave()
	checked, err := d.checkIDsOnHost("CrossEntropyBackward", "target", targets, 0, V)
	if err != nil {
		return err
	}
	return d.runChecked(crossEntropyBackwardCall(dlogits, dloss, logits, targets, N, V, uintptr(d.status)), checked)
}

// Adam updates one parameter range (host_optim.go's formula).
func (d *CUDA) Adam(param, grad, master, m, v *Buffer, a AdamArgs) error {
	if err := d.begin("Adam", checkAdam(param, grad, master, m, v, a), param, grad, master, m, v); err != nil {
		return err
	}
	defer d.leave()
	if param.Len == 0 {
		return nil
	}
	return d.run(adamCall(param, grad, master, m, v, a))
}

// SGD updates one parameter range.
func (d *CUDA) SGD(param, grad, master, mom *Buffer, a SGDArgs) error {
	if err := d.begin("SGD", checkSGD(param, grad, master, mom, a), param, grad, master, mom); err != nil {
		return err
	}
	defer d.leave()
	if param.Len == 0 {
		return nil
	}
	return d.run(sgdCall(param, grad, master, mom, a))
}

// NonFinite reports whether x holds an Inf or a NaN; it waits for the
// device.
func (d *CUDA) NonFinite(x *Buffer) (bool, error) {
	if err := d.begin("NonFinite", checkNonFinite(x), x); err != nil {
		return false, err
	}
	defer d.leave()
	if x.Len == 0 {
		return false, nil
	}
	flag := d.status + statusFlag
	if err := cuErr("cuMemsetD8Async(NonFinite flag)", memsetD8(d, flag, 4)); err != nil {
		return false, err
	}
	if err := d.run(nonFiniteCall(x, uintptr(flag))); err != nil {
		return false, err
	}
	var f [1]int32
	if err := cuErr("cuMemcpyDtoHAsync(NonFinite flag)", readInt32s(d, f[:], flag)); err != nil {
		return false, err
	}
	if err := d.syncCheck("non_finite"); err != nil {
		return false, err
	}
	return f[0] != 0, nil
}
