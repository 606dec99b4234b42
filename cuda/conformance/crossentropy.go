package conformance

// The cross-entropy family: its tests against the float64 references, the
// references themselves, and its calls with bad and good arguments.

import (
	"math"
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "cross-entropy", tests: []familyTest{{"CrossEntropy", testCrossEntropy}, {"CrossEntropyPart", testCrossEntropyPart}},
		invalid: invalidCrossEntropy, valid: validCrossEntropy})
}

func invalidCrossEntropy(f *fixture) []badCall {
	d := f.d
	N, V := 6, 11
	logits, targets := f.f32(N*V), f.alloc(cuda.I32, N)
	f.must(d.Upload(targets, []int32{0, 1, 2, 3, 4, 10}))
	loss, scratch := f.f32(1), f.f32(N)
	cases := []badCall{
		{"CrossEntropy fp16 loss", d.CrossEntropy(f.alloc(cuda.F16, 1), logits, targets, scratch, N, V), []string{"CrossEntropy", "loss is fp16"}},
		{"CrossEntropy short scratch", d.CrossEntropy(loss, logits, targets, f.f32(N-1), N, V), []string{"CrossEntropy", "scratch has 5 elements, want at least N = 6"}},
		{"CrossEntropyBackward two-element dloss", d.CrossEntropyBackward(f.f32(N*V), f.f32(2), logits, targets, N, V), []string{"CrossEntropyBackward", "dloss has 2 elements, want 1"}},
		{"CrossEntropyPartMax short stats", d.CrossEntropyPartMax(f.f32(2*N), logits, N, V), []string{"CrossEntropyPartMax", "stats has 12 elements, want 3N = 18"}},
		{"CrossEntropyPartSums part past the vocabulary", d.CrossEntropyPartSums(f.f32(3*N), logits, targets, N, V, cuda.VocabPart{Lo: 5, V: 15}), []string{"CrossEntropyPartSums", "11 rows at 5", "V = 15"}},
		{"CrossEntropyPartLoss fp16 stats", d.CrossEntropyPartLoss(loss, f.alloc(cuda.F16, 3*N), N), []string{"CrossEntropyPartLoss", "stats is fp16"}},
		{"CrossEntropyPartBackward stats in dlogits", d.CrossEntropyPartBackward(logits, loss, logits, targets, logits.View(0, 3*N), N, V, cuda.VocabPart{}), []string{"CrossEntropyPartBackward", "dlogits", "stats"}},
	}
	if f.computes {
		cases = append(cases,
			badCall{"CrossEntropy target out of range", d.CrossEntropy(loss, logits, idsOf(f.env, []int32{0, 1, 2, 3, 4, 11}), scratch, N, V),
				[]string{"CrossEntropy", "target 11", "row 5", "V = 11"}},
			badCall{"CrossEntropyBackward negative target", d.CrossEntropyBackward(f.f32(N*V), loss, logits, idsOf(f.env, []int32{0, -3, 2, 3, 4, 5}), N, V),
				[]string{"CrossEntropyBackward", "target -3", "row 1"}},
			badCall{"CrossEntropyPartSums target out of the vocabulary", d.CrossEntropyPartSums(f.f32(3*N), logits, idsOf(f.env, []int32{0, 1, 2, 3, 4, 22}), N, V, cuda.VocabPart{Lo: 11, V: 22}),
				[]string{"CrossEntropyPartSums", "target 22", "row 5", "V = 22"}},
			badCall{"CrossEntropyPartBackward negative target", d.CrossEntropyPartBackward(f.f32(N*V), loss, logits, idsOf(f.env, []int32{0, -3, 2, 3, 4, 5}), f.f32(3*N), N, V, cuda.VocabPart{Lo: 11, V: 22}),
				[]string{"CrossEntropyPartBackward", "target -3", "row 1"}},
		)
	}
	return cases
}

func validCrossEntropy(f *fixture, dt cuda.DType) []goodCall {
	d := f.d
	N, V := 32, 300
	logits, loss, targets := f.alloc(dt, N*V), f.alloc(stateType(dt), 1), f.alloc(cuda.I32, N)
	scratch := f.alloc(cuda.F32, cuda.CrossEntropyScratchLen(N))
	stats := f.alloc(stateType(dt), cuda.CrossEntropyStatsLen(N))
	part := cuda.VocabPart{Lo: V, V: 3 * V}
	return []goodCall{
		{"CrossEntropy", func() error { return d.CrossEntropy(loss, logits, targets, scratch, N, V) }},
		{"CrossEntropyBackward", func() error { return d.CrossEntropyBackward(logits, loss, logits, targets, N, V) }},
		{"CrossEntropyPartMax", func() error { return d.CrossEntropyPartMax(stats, logits, N, V) }},
		{"CrossEntropyPartSums", func() error { return d.CrossEntropyPartSums(stats, logits, targets, N, V, part) }},
		{"CrossEntropyPartLoss", func() error { return d.CrossEntropyPartLoss(loss, stats, N) }},
		{"CrossEntropyPartBackward", func() error { return d.CrossEntropyPartBackward(logits, loss, logits, targets, stats, N, V, part) }},
	}
}

// randLogits is N rows of V logits, spread (×3) so that the softmax is
// far from uniform.
func randLogits(e *env, N, V int) []float64 {
	lv := e.randn(N * V)
	for i := range lv {
		lv[i] *= 3
	}
	return lv
}

func testCrossEntropy(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		N, V := 40, 1000
		st := stateType(dt)
		lv := randLogits(e, N, V)
		logits, ls := e.buf(dt, lv)
		targets, tb := e.randIDs(N, V)
		loss := e.out(st, 1)
		scratch := e.out(st, cuda.CrossEntropyScratchLen(N)+5)
		e.must(e.d.CrossEntropy(loss, logits, tb, scratch, N, V))
		compare(e.t, "CrossEntropy", e.get(loss), []float64{refCrossEntropy(ls, targets, N, V)}, tolFor(st))

		dloss, dls := e.buf(st, []float64{1.7})
		dlogits := e.out(dt, N*V)
		e.must(e.d.CrossEntropyBackward(dlogits, dloss, logits, tb, N, V))
		compare(e.t, "CrossEntropyBackward", e.get(dlogits), refCrossEntropyBackward(ls, targets, dls[0], N, V), tolFor(dt))
	})
	t.Run("large logits", func(t *testing.T) {
		// Logits of 1000 would overflow exp without the max subtracted.
		e := newEnv(t, nd)
		lv := []float64{1000, 999, 998, -1000, 0, 1000}
		logits, _ := e.buf(cuda.F32, lv)
		tb := e.ids([]int32{1, 2})
		loss, scratch := e.out(cuda.F32, 1), e.out(cuda.F32, 2)
		e.must(e.d.CrossEntropy(loss, logits, tb, scratch, 2, 3))
		compare(t, "CrossEntropy of large logits", e.get(loss), []float64{refCrossEntropy(lv, []int32{1, 2}, 2, 3)}, tolFor(cuda.F32))
	})
	t.Run("finite differences", func(t *testing.T) {
		e := newEnv(t, nd)
		N, V := 3, 7
		lv := e.randn(N * V)
		targets := []int32{0, 6, 3}
		logits, _ := e.buf(cuda.F64, lv)
		tb := e.ids(targets)
		dloss, _ := e.buf(cuda.F64, []float64{1.7})
		dlogits := e.out(cuda.F64, N*V)
		e.must(e.d.CrossEntropyBackward(dlogits, dloss, logits, tb, N, V))
		fd := FiniteDiff(lv, func() float64 { return 1.7 * refCrossEntropy(lv, targets, N, V) })
		compare(t, "CrossEntropyBackward vs finite differences", e.get(dlogits), fd, fdTol)
		compare(t, "reference vs finite differences", refCrossEntropyBackward(lv, targets, 1.7, N, V), fd, fdTol)
	})
}

// testCrossEntropyPart: the vocabulary-parallel cross entropy over a
// vocabulary split in three uneven parts, the ranks' reductions of the row
// statistics done here between the steps (the largest of the maxima, the
// sums of the sums and of the target logits), gives the whole vocabulary's
// loss, and each part's gradient is the whole gradient's columns it holds.
func testCrossEntropyPart(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		N, V := 40, 1000
		st := stateType(dt)
		_, ls := e.buf(dt, randLogits(e, N, V)) // the values as stored
		targets, tb := e.randIDs(N, V)
		targets[0], targets[1] = 0, int32(V-1) // the first and last columns
		tb = e.ids(targets)
		parts := [][2]int{{0, 333}, {333, 700}, {700, V}}
		cols := func(lo, hi int) []float64 {
			out := make([]float64, 0, N*(hi-lo))
			for i := range N {
				out = append(out, ls[i*V+lo:i*V+hi]...)
			}
			return out
		}
		bufs := make([]*cuda.Buffer, len(parts))
		stats := make([]float64, 3*N)
		for i := range N {
			stats[i] = math.Inf(-1)
		}
		for k, p := range parts {
			bufs[k], _ = e.buf(dt, cols(p[0], p[1]))
			sb := e.out(st, cuda.CrossEntropyStatsLen(N))
			e.must(e.d.CrossEntropyPartMax(sb, bufs[k], N, p[1]-p[0]))
			for i, m := range e.get(sb)[:N] {
				stats[i] = math.Max(stats[i], m)
			}
		}
		for k, p := range parts {
			sb, _ := e.buf(st, append(append([]float64(nil), stats[:N]...), make([]float64, 2*N)...))
			e.must(e.d.CrossEntropyPartSums(sb, bufs[k], tb, N, p[1]-p[0], cuda.VocabPart{Lo: p[0], V: V}))
			got := e.get(sb)
			for i := N; i < 3*N; i++ {
				stats[i] += got[i]
			}
		}
		ref := make([]float64, 3*N)
		for i := range N {
			ref[i], ref[N+i] = refSoftmaxSum(ls[i*V : (i+1)*V])
			ref[2*N+i] = ls[i*V+int(targets[i])]
		}
		compare(e.t, "CrossEntropyPartMax reduced", stats[:N], ref[:N], tolFor(st))
		compare(e.t, "CrossEntropyPartSums reduced", stats[N:2*N], ref[N:2*N], tolFor(st))
		compare(e.t, "CrossEntropyPartSums target logits", stats[2*N:], ref[2*N:], tolFor(st))
		sb, _ := e.buf(st, stats)
		loss := e.out(st, 1)
		e.must(e.d.CrossEntropyPartLoss(loss, sb, N))
		compare(e.t, "CrossEntropyPartLoss", e.get(loss), []float64{refCrossEntropy(ls, targets, N, V)}, tolFor(st))
		dloss, dls := e.buf(st, []float64{1.7})
		want := refCrossEntropyBackward(ls, targets, dls[0], N, V)
		for k, p := range parts {
			Vp := p[1] - p[0]
			d := e.out(dt, N*Vp)
			e.must(e.d.CrossEntropyPartBackward(d, dloss, bufs[k], tb, sb, N, Vp, cuda.VocabPart{Lo: p[0], V: V}))
			wp := make([]float64, 0, N*Vp)
			for i := range N {
				wp = append(wp, want[i*V+p[0]:i*V+p[1]]...)
			}
			compare(e.t, "CrossEntropyPartBackward", e.get(d), wp, tolFor(dt))
		}
	})
}

// refSoftmaxSum returns a row's largest value mx and Σ exp(v - mx), the
// denominator of its max-subtracted softmax.
func refSoftmaxSum(row []float64) (mx, s float64) {
	mx = math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, v)
	}
	for _, v := range row {
		s += math.Exp(v - mx)
	}
	return mx, s
}

// refCrossEntropy returns the mean loss over the rows.
func refCrossEntropy(logits []float64, targets []int32, N, V int) float64 {
	total := 0.0
	for i := 0; i < N; i++ {
		row := logits[i*V : (i+1)*V]
		mx, s := refSoftmaxSum(row)
		total += mx + math.Log(s) - row[targets[i]]
	}
	return total / float64(N)
}

func refCrossEntropyBackward(logits []float64, targets []int32, dloss float64, N, V int) []float64 {
	d := make([]float64, N*V)
	for i := 0; i < N; i++ {
		row := logits[i*V : (i+1)*V]
		mx, s := refSoftmaxSum(row)
		for j, v := range row {
			pj := math.Exp(v-mx) / s
			if j == int(targets[i]) {
				pj--
			}
			d[i*V+j] = pj * dloss / float64(N)
		}
	}
	return d
}
