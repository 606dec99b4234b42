package conformance

// The attention family's naive variant: its tests against the float64
// references, the references themselves, and its calls with bad and good
// arguments.

import (
	"math"
	"testing"

	"trainmem/cuda"
)

// The attention is one family of two variants, naive and flash (flash.go),
// which compute the same function: one registration, each variant's tests
// and calls.
func init() {
	register(family{name: "attention", tests: []familyTest{{"Attention", testAttention}, {"FlashAttention", testFlash}},
		invalid: func(f *fixture) []badCall { return append(invalidAttention(f), invalidFlash(f)...) },
		valid: func(f *fixture, dt cuda.DType) []goodCall {
			return append(validAttention(f, dt), validFlash(f, dt)...)
		}})
}

func invalidAttention(f *fixture) []badCall {
	d := f.d
	B, T, C, NH, KV := 2, 3, 8, 2, 2
	qkv, p, y := f.f32(B*T*3*C), f.f32(B*NH*T*T), f.f32(B*T*C)
	scratch := f.f32(cuda.AttentionScratchLen(T, C, NH, KV))
	return []badCall{
		{"AttentionProbs C % NH", d.AttentionProbs(f.f32(B*3*T*T), f.f32(B*T*3*9), B, T, 9, 3+1, 4), []string{"AttentionProbs", "C = 9 is not a multiple of NH = 4"}},
		{"AttentionProbs NH % KV", d.AttentionProbs(p, qkv, B, T, C, NH, 3), []string{"AttentionProbs", "KV = 3 key and value heads do not divide NH = 2 query heads"}},
		{"AttentionProbs KV 0", d.AttentionProbs(p, qkv, B, T, C, NH, 0), []string{"AttentionProbs", "KV"}},
		{"AttentionProbs short p", d.AttentionProbs(f.f32(5), qkv, B, T, C, NH, KV), []string{"AttentionProbs", "p has 5 elements, want B·NH·T·T = 36"}},
		{"AttentionProbs grouped qkv", d.AttentionProbs(p, qkv, B, T, C, NH, 1), []string{"AttentionProbs", "qkv has 144 elements, want B·T·W = 96"}},
		{"AttentionOut y overlaps qkv", d.AttentionOut(qkv.View(0, B*T*C), qkv, p, B, T, C, NH, KV), []string{"AttentionOut", "overlaps"}},
		{"AttentionBackward short scratch", d.AttentionBackward(f.f32(B*T*3*C), y, qkv, p, f.f32(5), B, T, C, NH, KV), []string{"AttentionBackward", "scratch has 5 elements, want at least NH·T·T = 18"}},
		{"AttentionBackward dqkv is qkv", d.AttentionBackward(qkv, y, qkv, p, scratch, B, T, C, NH, KV), []string{"AttentionBackward", "dqkv", "overlaps qkv"}},
		{"AttentionBackward fp16 scratch", d.AttentionBackward(f.f32(B*T*3*C), y, qkv, p, f.alloc(cuda.F16, 18), B, T, C, NH, KV), []string{"AttentionBackward", "scratch is fp16"}},
	}
}

func validAttention(f *fixture, dt cuda.DType) []goodCall {
	d := f.d
	B, T, C, NH, KV := 2, 16, 64, 4, 2
	N, W := B*T, cuda.QKVWidth(C, NH, KV)
	y, dy := f.alloc(dt, N*C), f.alloc(dt, N*C)
	qkv, dqkv, p := f.alloc(dt, N*W), f.alloc(dt, N*W), f.alloc(dt, B*NH*T*T)
	scratch := f.alloc(cuda.F32, cuda.AttentionScratchLen(T, C, NH, KV))
	return []goodCall{
		{"AttentionProbs", func() error { return d.AttentionProbs(p, qkv, B, T, C, NH, KV) }},
		{"AttentionOut", func() error { return d.AttentionOut(y, qkv, p, B, T, C, NH, KV) }},
		{"AttentionBackward", func() error { return d.AttentionBackward(dqkv, dy, qkv, p, scratch, B, T, C, NH, KV) }},
	}
}

func testAttention(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		// multi-head, grouped (3 query heads a key and value head) and
		// multi-query attention
		for _, KV := range []int{6, 2, 1} {
			B, T, C, NH := 2, 33, 48, 6
			W := cuda.QKVWidth(C, NH, KV)
			qkv, qkvs := e.buf(dt, e.randn(B*T*W))
			p := e.out(dt, B*NH*T*T)
			e.must(e.d.AttentionProbs(p, qkv, B, T, C, NH, KV))
			got := e.get(p)
			compare(e.t, "AttentionProbs", got, RefAttentionProbs(qkvs, B, T, C, NH, KV), tolFor(dt))
			for r := 0; r < B*NH*T; r++ {
				for s := r%T + 1; s < T; s++ {
					if v := got[r*T+s]; v != 0 {
						e.t.Fatalf("KV %d: p[row %d, col %d] = %g above the diagonal, want exactly 0", KV, r, s, v)
					}
				}
			}

			p, ps := e.buf(dt, RefAttentionProbs(qkvs, B, T, C, NH, KV))
			y := e.out(dt, B*T*C)
			e.must(e.d.AttentionOut(y, qkv, p, B, T, C, NH, KV))
			compare(e.t, "AttentionOut", e.get(y), refAttentionOut(qkvs, ps, B, T, C, NH, KV), tolFor(dt))

			dy, dys := e.buf(dt, e.randn(B*T*C))
			scratch := e.out(stateType(dt), cuda.AttentionScratchLen(T, C, NH, KV))
			dqkv := e.out(dt, B*T*W)
			e.must(e.d.AttentionBackward(dqkv, dy, qkv, p, scratch, B, T, C, NH, KV))
			compare(e.t, "AttentionBackward", e.get(dqkv), refAttentionBackward(dys, qkvs, ps, nil, B, T, C, NH, KV), tolFor(dt))
		}
	})
	t.Run("finite differences", func(t *testing.T) {
		for _, KV := range []int{4, 2} {
			e := newEnv(t, nd)
			B, T, C, NH := 2, 4, 8, 4
			W := cuda.QKVWidth(C, NH, KV)
			qv, dyv := e.randn(B*T*W), e.randn(B*T*C)
			qkv, _ := e.buf(cuda.F64, qv)
			dy, _ := e.buf(cuda.F64, dyv)
			p := e.out(cuda.F64, B*NH*T*T)
			e.must(e.d.AttentionProbs(p, qkv, B, T, C, NH, KV))
			scratch := e.out(cuda.F64, cuda.AttentionScratchLen(T, C, NH, KV))
			dqkv := e.out(cuda.F64, len(qv))
			e.must(e.d.AttentionBackward(dqkv, dy, qkv, p, scratch, B, T, C, NH, KV))
			fd := FiniteDiff(qv, func() float64 {
				return dot(dyv, refAttentionOut(qv, RefAttentionProbs(qv, B, T, C, NH, KV), B, T, C, NH, KV))
			})
			compare(t, "AttentionBackward vs finite differences", e.get(dqkv), fd, fdTol)
			compare(t, "reference vs finite differences", refAttentionBackward(dyv, qv, RefAttentionProbs(qv, B, T, C, NH, KV), nil, B, T, C, NH, KV), fd, fdTol)
		}
	})
}

// qkvAt indexes q (part 0) of query head h, or k (1) or v (2) of key and
// value head h, channel d, at batch b and time t, in a (B·T, W) buffer
// of NH query heads and KV key and value heads of hd channels.
func qkvAt(part, b, t, h, d, T, NH, KV, hd int) int {
	W := (NH + 2*KV) * hd
	off := [3]int{0, NH * hd, (NH + KV) * hd}[part]
	return (b*T+t)*W + off + h*hd + d
}

// RefAttentionProbs is the float64 reference of Kernels.AttentionProbs:
// the causal softmax of q·kᵀ/sqrt(C/NH) per query head, with the key head
// of its group. Package model's graph
// evaluator computes its attention with it too.
func RefAttentionProbs(qkv []float64, B, T, C, NH, KV int) []float64 {
	hd, G := C/NH, NH/KV
	p := make([]float64, B*NH*T*T)
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			for t := 0; t < T; t++ {
				row := p[((b*NH+h)*T+t)*T : ((b*NH+h)*T+t+1)*T]
				mx := math.Inf(-1)
				for s := 0; s <= t; s++ {
					sc := 0.0
					for d := 0; d < hd; d++ {
						sc += qkv[qkvAt(0, b, t, h, d, T, NH, KV, hd)] * qkv[qkvAt(1, b, s, h/G, d, T, NH, KV, hd)]
					}
					row[s] = sc / math.Sqrt(float64(hd))
					mx = math.Max(mx, row[s])
				}
				sum := 0.0
				for s := 0; s <= t; s++ {
					row[s] = math.Exp(row[s] - mx)
					sum += row[s]
				}
				for s := 0; s <= t; s++ {
					row[s] /= sum
				}
			}
		}
	}
	return p
}

func refAttentionOut(qkv, p []float64, B, T, C, NH, KV int) []float64 {
	hd, G := C/NH, NH/KV
	y := make([]float64, B*T*C)
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			for t := 0; t < T; t++ {
				for d := 0; d < hd; d++ {
					s := 0.0
					for u := 0; u < T; u++ {
						s += p[((b*NH+h)*T+t)*T+u] * qkv[qkvAt(2, b, u, h/G, d, T, NH, KV, hd)]
					}
					y[(b*T+t)*C+h*hd+d] = s
				}
			}
		}
	}
	return y
}

// refAttentionBackward is the gradient of refAttentionOut(qkv,
// RefAttentionProbs(qkv)) with respect to qkv, given dy, written out by
// hand through the softmax.
//
// With y, the attention's stored output, the softmax's row term
// Σ_s P·dP is taken as flash attention takes it, D = Σ_d dY·y (equal to it
// for the exact y; Dao et al. 2022, Algorithm 2, line 19's D_i).
func refAttentionBackward(dy, qkv, p, y []float64, B, T, C, NH, KV int) []float64 {
	hd, G := C/NH, NH/KV
	scale := 1 / math.Sqrt(float64(hd))
	dqkv := make([]float64, len(qkv))
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			g := h / G // the key and value head, whose gradients sum over the group
			P := func(t, s int) float64 { return p[((b*NH+h)*T+t)*T+s] }
			dY := func(t, d int) float64 { return dy[(b*T+t)*C+h*hd+d] }
			for t := 0; t < T; t++ {
				// dP[t, s] = Σ_d dY[t, d]·v[s, d]; dS = P·(dP - Σ_s P·dP)
				dP := make([]float64, T)
				for s := 0; s <= t; s++ {
					for d := 0; d < hd; d++ {
						dP[s] += dY(t, d) * qkv[qkvAt(2, b, s, g, d, T, NH, KV, hd)]
					}
				}
				avg := 0.0
				for s := 0; s <= t; s++ {
					avg += P(t, s) * dP[s]
				}
				if y != nil {
					avg = 0
					for d := 0; d < hd; d++ {
						avg += dY(t, d) * y[(b*T+t)*C+h*hd+d]
					}
				}
				for s := 0; s <= t; s++ {
					dS := P(t, s) * (dP[s] - avg) * scale
					for d := 0; d < hd; d++ {
						dqkv[qkvAt(0, b, t, h, d, T, NH, KV, hd)] += dS * qkv[qkvAt(1, b, s, g, d, T, NH, KV, hd)]
						dqkv[qkvAt(1, b, s, g, d, T, NH, KV, hd)] += dS * qkv[qkvAt(0, b, t, h, d, T, NH, KV, hd)]
					}
				}
				// dV[s, d] += P[t, s]·dY[t, d]
				for s := 0; s <= t; s++ {
					for d := 0; d < hd; d++ {
						dqkv[qkvAt(2, b, s, g, d, T, NH, KV, hd)] += P(t, s) * dY(t, d)
					}
				}
			}
		}
	}
	return dqkv
}
