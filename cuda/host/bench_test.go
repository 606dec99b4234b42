package host_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/model"
)

// GPT-2 (124M) at B·T = 256 tokens: the linear layers' shapes as
// (out features, in features), in the order of a block, then the LM head.
var gpt2Linears = []struct {
	name    string
	out, in int
}{
	{"attn.proj", 768, 768},
	{"attn.qkv", 2304, 768},
	{"mlp.fc", 3072, 768},
	{"mlp.proj", 768, 3072},
	{"lm_head", 50257, 768},
}

const benchTokens = 256

var peakOnce = sync.OnceValues(host.PeakGFLOPS)

// BenchmarkMatMul runs the model's fp32 GEMMs with each BLAS backend:
// forward y = x·Wᵀ (M = tokens, N = out, K = in), and the backward
// dx = dy·W (N = in, K = out) and dW = dyᵀ·x (M = out, N = in, K = tokens).
// It reports GFLOP/s and the fraction of the cores' fp32 peak
// (PeakGFLOPS; the reasoning is logged).
func BenchmarkMatMul(b *testing.B) {
	peak, how := peakOnce()
	b.Logf("fp32 peak %.1f GFLOP/s: %s", peak, how)
	for _, be := range benchBackends(b) {
		h, err := host.New(host.Options{BLAS: be})
		if err != nil {
			b.Fatal(err)
		}
		for _, l := range gpt2Linears {
			for _, pass := range []string{"fwd", "bwd-data", "bwd-weight"} {
				m := cuda.MatMul{Alpha: 1}
				var na, nb, nc int
				switch pass {
				case "fwd":
					m.TransB, m.M, m.N, m.K = true, benchTokens, l.out, l.in
					na, nb, nc = benchTokens*l.in, l.out*l.in, benchTokens*l.out
				case "bwd-data":
					m.M, m.N, m.K = benchTokens, l.in, l.out
					na, nb, nc = benchTokens*l.out, l.out*l.in, benchTokens*l.in
				case "bwd-weight":
					m.TransA, m.M, m.N, m.K = true, l.out, l.in, benchTokens
					na, nb, nc = benchTokens*l.out, benchTokens*l.in, l.out*l.in
				}
				name := fmt.Sprintf("%s/%s/%s/%dx%dx%d", be, l.name, pass, m.M, m.N, m.K)
				b.Run(name, func(b *testing.B) {
					m.A, m.B, m.C = benchBuf(b, h, cuda.F32, na), benchBuf(b, h, cuda.F32, nb), benchBuf(b, h, cuda.F32, nc)
					defer func() { h.Free(m.A); h.Free(m.B); h.Free(m.C) }()
					for b.Loop() {
						if err := h.MatMul(m); err != nil {
							b.Fatal(err)
						}
					}
					gflops := 2 * float64(m.M) * float64(m.N) * float64(m.K) * float64(b.N) / b.Elapsed().Seconds() / 1e9
					b.ReportMetric(gflops, "GFLOP/s")
					if peak > 0 {
						b.ReportMetric(gflops/peak, "peak-frac")
					}
				})
			}
		}
		h.Close()
	}
}

func benchBackends(b *testing.B) []string {
	bs := []string{host.BLASGo}
	if host.OpenBLASAvailable() == nil {
		bs = append([]string{host.BLASOpenBLAS}, bs...)
	}
	return bs
}

func benchBuf(b *testing.B, d cuda.Device, dt cuda.DType, n int) *cuda.Buffer {
	b.Helper()
	buf, err := d.Alloc(cuda.Temporaries, dt, n)
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, uint64(n)))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	if err := d.Upload(buf, v); err != nil {
		b.Fatal(err)
	}
	return buf
}

// BenchmarkKernels times the host's other kernels at GPT-2 (124M) sizes,
// B = 4, T = 64, in fp32 and bf16.
func BenchmarkKernels(b *testing.B) {
	B, T, C, NH, V := 4, 64, 768, 12, 50257
	N := B * T
	peak, _ := peakOnce()
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16} {
		h, err := host.New(host.Options{})
		if err != nil {
			b.Fatal(err)
		}
		buf := func(dt cuda.DType, n int) *cuda.Buffer { return benchBuf(b, h, dt, n) }
		ids := func(n, V int) *cuda.Buffer {
			t, _ := h.Alloc(cuda.Temporaries, cuda.I32, n)
			v := make([]int32, n)
			for i := range v {
				v[i] = int32((i * 7919) % V)
			}
			h.Upload(t, v)
			return t
		}
		x, y, dy, dx := buf(dt, N*C), buf(dt, N*C), buf(dt, N*C), buf(dt, N*C)
		stats, w, bias, dw := buf(cuda.F32, 2*N), buf(dt, C), buf(dt, C), buf(dt, C)
		h4, dh4, db4 := buf(dt, N*4*C), buf(dt, N*4*C), buf(dt, 4*C)
		qkv, dqkv, p := buf(dt, N*3*C), buf(dt, N*3*C), buf(dt, B*NH*T*T)
		logits, targets := buf(dt, N*V), ids(N, V)
		loss, dloss := buf(cuda.F32, 1), buf(cuda.F32, 1)
		ascratch, cscratch := buf(cuda.F32, cuda.AttentionScratchLen(T, C, NH, NH)), buf(cuda.F32, cuda.CrossEntropyScratchLen(N))
		tokens, wte, wte2, wpe := ids(N, V), buf(dt, V*C), buf(dt, V*C), buf(dt, 1024*C)
		nAdam := 1 << 22
		param, grad, master, m, v := buf(dt, nAdam), buf(dt, nAdam), buf(cuda.F32, nAdam), buf(cuda.F32, nAdam), buf(cuda.F32, nAdam)
		adam := cuda.AdamArgs{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.1, Decoupled: true, Step: 1, GradScale: 1}
		bufs := func(bs ...*cuda.Buffer) []*cuda.Buffer { return bs }
		sh := model.AttentionShape{B: B, T: T, C: C, NH: NH, KV: NH}
		probs, out, back := model.AttentionProbsOp{AttentionShape: sh}, model.AttentionOutOp{AttentionShape: sh}, model.AttentionBackwardOp{AttentionShape: sh}
		lse, fscratch := buf(cuda.F32, B*NH*T), buf(cuda.F32, cuda.FlashScratchLen(B, T, NH))
		fstats, fout, fback := model.FlashAttentionStatsOp{AttentionShape: sh}, model.FlashAttentionOutOp{AttentionShape: sh}, model.FlashAttentionBackwardOp{AttentionShape: sh}
		// moved: the buffers each call reads and writes, as train
		// --profile counts them (inputs read, the output written; an
		// output updated in place twice; none for the embeddings, which
		// touch only the rows their tokens name), and the attention
		// products' FLOPs, for GB/s and GFLOP/s against the peak. CopyWTE,
		// a copy of the token embeddings (154 MB in fp32, beyond any
		// cache), is the memory's pace the memory-bound kernels' GB/s
		// compare with.
		for _, k := range []struct {
			name  string
			f     func() error
			moved []*cuda.Buffer
			flops float64
		}{
			{"Embedding", func() error { return h.Embedding(x, tokens, wte, wpe, B, T, C, cuda.VocabPart{}) }, nil, 0},
			{"EmbeddingBackwardTokens", func() error { return h.EmbeddingBackwardTokens(wte, dy, tokens, B, T, C, cuda.VocabPart{}, false) }, nil, 0},
			{"LayerNormStats", func() error { return h.NormStats(cuda.NormLayer, stats, x, N, C, 1e-5) }, bufs(stats, x), 0},
			{"LayerNorm", func() error { return h.Norm(cuda.NormLayer, y, x, stats, w, bias, N, C) }, bufs(y, x, stats, w, bias), 0},
			{"LayerNormBackwardX", func() error { return h.NormBackwardX(cuda.NormLayer, dx, dy, x, stats, w, N, C) }, bufs(dx, dy, x, stats, w), 0},
			{"LayerNormBackwardW", func() error { return h.NormBackwardW(cuda.NormLayer, dw, dy, x, stats, N, C) }, bufs(dw, dy, x, stats), 0},
			{"SumRows", func() error { return h.SumRows(dw, dy, N, C) }, bufs(dw, dy), 0},
			{"SumRows4C", func() error { return h.SumRows(db4, dh4, N, 4*C) }, bufs(db4, dh4), 0},
			{"GELU", func() error { return h.GELU(dh4, h4) }, bufs(dh4, h4), 0},
			{"GELUBackward", func() error { return h.GELUBackward(dh4, dh4, h4) }, bufs(dh4, dh4, h4), 0},
			{"AttentionProbs", func() error { return h.AttentionProbs(p, qkv, B, T, C, NH, NH) }, bufs(p, qkv), probs.FLOPs()},
			{"AttentionOut", func() error { return h.AttentionOut(y, qkv, p, B, T, C, NH, NH) }, bufs(y, qkv, p), out.FLOPs()},
			{"AttentionBackward", func() error { return h.AttentionBackward(dqkv, dy, qkv, p, ascratch, B, T, C, NH, NH) }, bufs(dqkv, dy, qkv, p), back.FLOPs()},
			// Flash attention of the same shape: the same function, no
			// probabilities stored (compare with the three above).
			{"FlashAttentionStats", func() error { return h.FlashAttentionStats(lse, qkv, B, T, C, NH, NH) }, bufs(lse, qkv), fstats.FLOPs()},
			{"FlashAttentionOut", func() error { return h.FlashAttentionOut(y, qkv, lse, B, T, C, NH, NH) }, bufs(y, qkv, lse), fout.FLOPs()},
			{"FlashAttentionBackward", func() error { return h.FlashAttentionBackward(dqkv, dy, qkv, y, lse, fscratch, B, T, C, NH, NH) }, bufs(dqkv, dy, qkv, y, lse), fback.FLOPs()},
			{"CrossEntropy", func() error { return h.CrossEntropy(loss, logits, targets, cscratch, N, V) }, bufs(loss, logits, targets), 0},
			{"CrossEntropyBackward", func() error { return h.CrossEntropyBackward(logits, dloss, logits, targets, N, V) }, bufs(logits, dloss, logits, targets), 0},
			{"Adam4M", func() error { return h.Adam(param, grad, master, m, v, adam) }, bufs(param, grad, master, master, m, m, v, v), 0},
			// The divergence check train runs on the gradients every step,
			// beside the update it guards.
			{"NonFinite4M", func() error { _, err := h.NonFinite(grad); return err }, bufs(grad), 0},
			{"CopyWTE", func() error { return h.Cast(wte2, wte) }, bufs(wte2, wte), 0},
		} {
			b.Run(dt.String()+"/"+k.name, func(b *testing.B) {
				for b.Loop() {
					if err := k.f(); err != nil {
						b.Fatal(err)
					}
				}
				per := b.Elapsed().Seconds() / float64(b.N)
				var bytes int64
				for _, m := range k.moved {
					bytes += m.Bytes()
				}
				if bytes > 0 {
					b.ReportMetric(float64(bytes)/per/1e9, "GB/s")
				}
				if k.flops > 0 {
					b.ReportMetric(k.flops/per/1e9, "GFLOP/s")
					if peak > 0 {
						b.ReportMetric(k.flops/per/1e9/peak, "peak-frac")
					}
				}
			})
		}
		h.Close()
	}
}
