package conformance

// The attention family: its tests against the float64 references, the
// references themselves, and its calls with bad and good arguments.

import (
	"math"
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "attention", tests: []familyTest{{"Attention", testAttention}},
		invalid: invalidAttention, valid: validAttention})
}

func invalidAttention(f *fixture) []badCall {
	d := f.d
	B, T, C, NH := 2, 3, 8, 2
	qkv, p, y := f.f32(B*T*3*C), f.f32(B*NH*T*T), f.f32(B*T*C)
	scratch := f.f32(cuda.AttentionScratchLen(T, NH))
	return []badCall{
		{"AttentionProbs C % NH", d.AttentionProbs(f.f32(B*3*T*T), f.f32(B*T*3*9), B, T, 9, 3+1), []string{"AttentionProbs", "C = 9 is not a multiple of NH = 4"}},
		{"AttentionProbs short p", d.AttentionProbs(f.f32(5), qkv, B, T, C, NH), []string{"AttentionProbs", "p has 5 elements, want B·NH·T·T = 36"}},
		{"AttentionOut y overlaps qkv", d.AttentionOut(qkv.View(0, B*T*C), qkv, p, B, T, C, NH), []string{"AttentionOut", "overlaps"}},
		{"AttentionBackward short scratch", d.AttentionBackward(f.f32(B*T*3*C), y, qkv, p, f.f32(5), B, T, C, NH), []string{"AttentionBackward", "scratch has 5 elements, want at least NH·T·T = 18"}},
		{"AttentionBackward dqkv is qkv", d.AttentionBackward(qkv, y, qkv, p, scratch, B, T, C, NH), []string{"AttentionBackward", "dqkv", "overlaps qkv"}},
		{"AttentionBackward fp16 scratch", d.AttentionBackward(f.f32(B*T*3*C), y, qkv, p, f.alloc(cuda.F16, 18), B, T, C, NH), []string{"AttentionBackward", "scratch is fp16"}},
	}
}

func validAttention(f *fixture, dt cuda.DType) []goodCall {
	d := f.d
	B, T, C, NH := 2, 16, 64, 4
	N := B * T
	y, dy := f.alloc(dt, N*C), f.alloc(dt, N*C)
	qkv, dqkv, p := f.alloc(dt, N*3*C), f.alloc(dt, N*3*C), f.alloc(dt, B*NH*T*T)
	scratch := f.alloc(cuda.F32, cuda.AttentionScratchLen(T, NH))
	return []goodCall{
		{"AttentionProbs", func() error { return d.AttentionProbs(p, qkv, B, T, C, NH) }},
		{"AttentionOut", func() error { return d.AttentionOut(y, qkv, p, B, T, C, NH) }},
		{"AttentionBackward", func() error { return d.AttentionBackward(dqkv, dy, qkv, p, scratch, B, T, C, NH) }},
	}
}

func testAttention(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		B, T, C, NH := 2, 33, 48, 4
		qkv, qkvs := e.buf(dt, e.randn(B*T*3*C))
		p := e.out(dt, B*NH*T*T)
		e.must(e.d.AttentionProbs(p, qkv, B, T, C, NH))
		got := e.get(p)
		compare(e.t, "AttentionProbs", got, RefAttentionProbs(qkvs, B, T, C, NH), tolFor(dt))
		for r := 0; r < B*NH*T; r++ {
			for s := r%T + 1; s < T; s++ {
				if v := got[r*T+s]; v != 0 {
					e.t.Fatalf("p[row %d, col %d] = %g above the diagonal, want exactly 0", r, s, v)
				}
			}
		}

		p, ps := e.buf(dt, RefAttentionProbs(qkvs, B, T, C, NH))
		y := e.out(dt, B*T*C)
		e.must(e.d.AttentionOut(y, qkv, p, B, T, C, NH))
		compare(e.t, "AttentionOut", e.get(y), refAttentionOut(qkvs, ps, B, T, C, NH), tolFor(dt))

		dy, dys := e.buf(dt, e.randn(B*T*C))
		scratch := e.out(stateType(dt), cuda.AttentionScratchLen(T, NH))
		dqkv := e.out(dt, B*T*3*C)
		e.must(e.d.AttentionBackward(dqkv, dy, qkv, p, scratch, B, T, C, NH))
		compare(e.t, "AttentionBackward", e.get(dqkv), refAttentionBackward(dys, qkvs, ps, B, T, C, NH), tolFor(dt))
	})
	t.Run("finite differences", func(t *testing.T) {
		e := newEnv(t, nd)
		B, T, C, NH := 2, 4, 6, 2
		qv, dyv := e.randn(B*T*3*C), e.randn(B*T*C)
		qkv, _ := e.buf(cuda.F64, qv)
		dy, _ := e.buf(cuda.F64, dyv)
		p := e.out(cuda.F64, B*NH*T*T)
		e.must(e.d.AttentionProbs(p, qkv, B, T, C, NH))
		scratch := e.out(cuda.F64, cuda.AttentionScratchLen(T, NH))
		dqkv := e.out(cuda.F64, len(qv))
		e.must(e.d.AttentionBackward(dqkv, dy, qkv, p, scratch, B, T, C, NH))
		fd := FiniteDiff(qv, func() float64 {
			return dot(dyv, refAttentionOut(qv, RefAttentionProbs(qv, B, T, C, NH), B, T, C, NH))
		})
		compare(t, "AttentionBackward vs finite differences", e.get(dqkv), fd, fdTol)
		compare(t, "reference vs finite differences", refAttentionBackward(dyv, qv, RefAttentionProbs(qv, B, T, C, NH), B, T, C, NH), fd, fdTol)
	})
}

// qkvAt indexes q (part 0), k (1) or v (2) of head h, channel d, at batch
// b and time t, in a (B·T, 3C) buffer.
func qkvAt(part, b, t, h, d, T, C, hd int) int {
	return (b*T+t)*3*C + part*C + h*hd + d
}

// RefAttentionProbs is the float64 reference of Kernels.AttentionProbs:
// the causal softmax of q·kᵀ/sqrt(C/NH) per head. Package model's graph
// evaluator computes its attention with it too.
func RefAttentionProbs(qkv []float64, B, T, C, NH int) []float64 {
	hd := C / NH
	p := make([]float64, B*NH*T*T)
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			for t := 0; t < T; t++ {
				row := p[((b*NH+h)*T+t)*T : ((b*NH+h)*T+t+1)*T]
				mx := math.Inf(-1)
				for s := 0; s <= t; s++ {
					sc := 0.0
					for d := 0; d < hd; d++ {
						sc += qkv[qkvAt(0, b, t, h, d, T, C, hd)] * qkv[qkvAt(1, b, s, h, d, T, C, hd)]
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

func refAttentionOut(qkv, p []float64, B, T, C, NH int) []float64 {
	hd := C / NH
	y := make([]float64, B*T*C)
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			for t := 0; t < T; t++ {
				for d := 0; d < hd; d++ {
					s := 0.0
					for u := 0; u < T; u++ {
						s += p[((b*NH+h)*T+t)*T+u] * qkv[qkvAt(2, b, u, h, d, T, C, hd)]
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
func refAttentionBackward(dy, qkv, p []float64, B, T, C, NH int) []float64 {
	hd := C / NH
	scale := 1 / math.Sqrt(float64(hd))
	dqkv := make([]float64, len(qkv))
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			P := func(t, s int) float64 { return p[((b*NH+h)*T+t)*T+s] }
			dY := func(t, d int) float64 { return dy[(b*T+t)*C+h*hd+d] }
			for t := 0; t < T; t++ {
				// dP[t, s] = Σ_d dY[t, d]·v[s, d]; dS = P·(dP - Σ_s P·dP)
				dP := make([]float64, T)
				for s := 0; s <= t; s++ {
					for d := 0; d < hd; d++ {
						dP[s] += dY(t, d) * qkv[qkvAt(2, b, s, h, d, T, C, hd)]
					}
				}
				avg := 0.0
				for s := 0; s <= t; s++ {
					avg += P(t, s) * dP[s]
				}
				for s := 0; s <= t; s++ {
					dS := P(t, s) * (dP[s] - avg) * scale
					for d := 0; d < hd; d++ {
						dqkv[qkvAt(0, b, t, h, d, T, C, hd)] += dS * qkv[qkvAt(1, b, s, h, d, T, C, hd)]
						dqkv[qkvAt(1, b, s, h, d, T, C, hd)] += dS * qkv[qkvAt(0, b, t, h, d, T, C, hd)]
					}
				}
				// dV[s, d] += P[t, s]·dY[t, d]
				for s := 0; s <= t; s++ {
					for d := 0; d < hd; d++ {
						dqkv[qkvAt(2, b, s, h, d, T, C, hd)] += P(t, s) * dY(t, d)
					}
				}
			}
		}
	}
	return dqkv
}
