package conformance

// The attention family's flash variant: its tests against the float64
// references of the naive attention (flash attention computes the same
// function), the log-sum-exp's own reference, and its calls with bad and
// good arguments; registered with the naive variant's (attention.go).

import (
	"math"
	"testing"

	"trainmem/cuda"
)

func invalidFlash(f *fixture) []badCall {
	d := f.d
	B, T, C, NH, KV := 2, 3, 8, 2, 1
	W := cuda.QKVWidth(C, NH, KV)
	qkv, lse, y := f.f32(B*T*W), f.f32(B*NH*T), f.f32(B*T*C)
	scratch := f.f32(cuda.FlashScratchLen(B, T, NH))
	wide := 2 * (cuda.FlashHeadDimMax + 2) // two heads wider than the kernels take
	return []badCall{
		{"FlashAttentionStats NH % KV", d.FlashAttentionStats(lse, qkv, B, T, C, NH, 3), []string{"FlashAttentionStats", "KV = 3 key and value heads do not divide NH = 2"}},
		{"FlashAttentionStats wide heads", d.FlashAttentionStats(lse, f.f32(B*T*3*wide), B, T, wide, 2, 2), []string{"FlashAttentionStats", "heads of 258 channels", "at most 256"}},
		{"FlashAttentionStats fp16 lse", d.FlashAttentionStats(f.alloc(cuda.F16, B*NH*T), qkv, B, T, C, NH, KV), []string{"FlashAttentionStats", "lse is fp16"}},
		{"FlashAttentionStats short lse", d.FlashAttentionStats(f.f32(5), qkv, B, T, C, NH, KV), []string{"FlashAttentionStats", "lse has 5 elements, want B·NH·T = 12"}},
		{"FlashAttentionOut y overlaps qkv", d.FlashAttentionOut(qkv.View(0, B*T*C), qkv, lse, B, T, C, NH, KV), []string{"FlashAttentionOut", "overlaps"}},
		{"FlashAttentionOut short qkv", d.FlashAttentionOut(y, f.f32(7), lse, B, T, C, NH, KV), []string{"FlashAttentionOut", "qkv has 7 elements, want B·T·W = 96"}},
		{"FlashAttentionBackward short scratch", d.FlashAttentionBackward(f.f32(B*T*W), y, qkv, f.f32(B*T*C), lse, f.f32(5), B, T, C, NH, KV), []string{"FlashAttentionBackward", "scratch has 5 elements, want at least B·NH·T = 12"}},
		{"FlashAttentionBackward dqkv is qkv", d.FlashAttentionBackward(qkv, y, qkv, f.f32(B*T*C), lse, scratch, B, T, C, NH, KV), []string{"FlashAttentionBackward", "dqkv", "overlaps qkv"}},
	}
}

func validFlash(f *fixture, dt cuda.DType) []goodCall {
	d := f.d
	B, T, C, NH, KV := 2, 16, 64, 4, 2
	N, W := B*T, cuda.QKVWidth(C, NH, KV)
	y, dy := f.alloc(dt, N*C), f.alloc(dt, N*C)
	qkv, dqkv := f.alloc(dt, N*W), f.alloc(dt, N*W)
	lse, scratch := f.alloc(cuda.F32, B*NH*T), f.alloc(cuda.F32, cuda.FlashScratchLen(B, T, NH))
	return []goodCall{
		{"FlashAttentionStats", func() error { return d.FlashAttentionStats(lse, qkv, B, T, C, NH, KV) }},
		{"FlashAttentionOut", func() error { return d.FlashAttentionOut(y, qkv, lse, B, T, C, NH, KV) }},
		{"FlashAttentionBackward", func() error { return d.FlashAttentionBackward(dqkv, dy, qkv, y, lse, scratch, B, T, C, NH, KV) }},
	}
}

func testFlash(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		// multi-head, grouped and multi-query attention; a head of 40
		// channels (not a multiple of a warp) and of 8
		for _, tc := range []struct{ C, NH, KV int }{{48, 6, 6}, {48, 6, 2}, {80, 2, 1}, {32, 4, 2}} {
			B, T, C, NH, KV := 2, 33, tc.C, tc.NH, tc.KV
			W := cuda.QKVWidth(C, NH, KV)
			qkv, qkvs := e.buf(dt, e.randn(B*T*W))
			st := stateType(dt)
			lse := e.out(st, B*NH*T)
			e.must(e.d.FlashAttentionStats(lse, qkv, B, T, C, NH, KV))
			compare(e.t, "FlashAttentionStats", e.get(lse), refFlashLSE(qkvs, B, T, C, NH, KV), tolFor(st))

			probs := RefAttentionProbs(qkvs, B, T, C, NH, KV)
			lse, _ = e.buf(st, refFlashLSE(qkvs, B, T, C, NH, KV))
			y := e.out(dt, B*T*C)
			e.must(e.d.FlashAttentionOut(y, qkv, lse, B, T, C, NH, KV))
			ys := refAttentionOut(qkvs, probs, B, T, C, NH, KV)
			compare(e.t, "FlashAttentionOut", e.get(y), ys, tolFor(dt))

			dy, dys := e.buf(dt, e.randn(B*T*C))
			yb, yst := e.buf(dt, ys) // the output as stored, which D is taken from
			scratch := e.out(st, cuda.FlashScratchLen(B, T, NH))
			dqkv := e.out(dt, B*T*W)
			e.must(e.d.FlashAttentionBackward(dqkv, dy, qkv, yb, lse, scratch, B, T, C, NH, KV))
			compare(e.t, "FlashAttentionBackward", e.get(dqkv), refAttentionBackward(dys, qkvs, probs, yst, B, T, C, NH, KV), tolFor(dt))
		}
	})
	t.Run("finite differences", func(t *testing.T) {
		for _, KV := range []int{4, 2} {
			e := newEnv(t, nd)
			B, T, C, NH := 2, 5, 8, 4
			W := cuda.QKVWidth(C, NH, KV)
			qv, dyv := e.randn(B*T*W), e.randn(B*T*C)
			qkv, _ := e.buf(cuda.F64, qv)
			dy, _ := e.buf(cuda.F64, dyv)
			lse, y := e.out(cuda.F64, B*NH*T), e.out(cuda.F64, B*T*C)
			e.must(e.d.FlashAttentionStats(lse, qkv, B, T, C, NH, KV))
			e.must(e.d.FlashAttentionOut(y, qkv, lse, B, T, C, NH, KV))
			scratch := e.out(cuda.F64, cuda.FlashScratchLen(B, T, NH))
			dqkv := e.out(cuda.F64, len(qv))
			e.must(e.d.FlashAttentionBackward(dqkv, dy, qkv, y, lse, scratch, B, T, C, NH, KV))
			fd := FiniteDiff(qv, func() float64 {
				return dot(dyv, refAttentionOut(qv, RefAttentionProbs(qv, B, T, C, NH, KV), B, T, C, NH, KV))
			})
			compare(t, "FlashAttentionBackward vs finite differences", e.get(dqkv), fd, fdTol)
		}
	})
}

// refFlashLSE is the float64 reference of Kernels.FlashAttentionStats:
// log Σ_{s ≤ t} exp(q_t·k_s/sqrt(hd)) per query head and row, the maximum
// taken out first.
func refFlashLSE(qkv []float64, B, T, C, NH, KV int) []float64 {
	hd, G := C/NH, NH/KV
	lse := make([]float64, B*NH*T)
	for b := range B {
		for h := range NH {
			for t := range T {
				sc := make([]float64, t+1)
				mx := math.Inf(-1)
				for s := range sc {
					for d := range hd {
						sc[s] += qkv[qkvAt(0, b, t, h, d, T, NH, KV, hd)] * qkv[qkvAt(1, b, s, h/G, d, T, NH, KV, hd)]
					}
					sc[s] /= math.Sqrt(float64(hd))
					mx = math.Max(mx, sc[s])
				}
				sum := 0.0
				for _, v := range sc {
					sum += math.Exp(v - mx)
				}
				lse[(b*NH+h)*T+t] = mx + math.Log(sum)
			}
		}
	}
	return lse
}
