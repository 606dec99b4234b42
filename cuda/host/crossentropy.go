package host

// The host device's kernels: the cross-entropy family (the mean loss and the gradient of the logits).

import (
	"math"
	"trainmem/cuda"
	"trainmem/cuda/host/avx2"
)

// launchTargets is launch for a kernel that reads class ids: the targets
// are checked to be in [0, vocab) (cuda.CheckIDs) once the device has
// checked that they are host memory.
func (h *Device) launchTargets(kernel string, check error, targets *cuda.Buffer, vocab int, run func(), bufs ...*cuda.Buffer) error {
	if err := h.begin(kernel, check, bufs...); err != nil {
		return err
	}
	if err := cuda.CheckIDs(kernel, "target", Int32s(targets), 0, vocab); err != nil {
		return err
	}
	run()
	return nil
}

// CrossEntropy: loss = mean over rows of -log softmax(logits[i])[targets[i]].
// Each row is max-subtracted, its exponentials summed in float64; the
// per-row losses go to scratch and are summed in row order.
func (h *Device) CrossEntropy(loss, logits, targets, scratch *cuda.Buffer, N, V int) error {
	return h.launchTargets("CrossEntropy", cuda.Check.CrossEntropy(loss, logits, targets, scratch, N, V), targets, V, func() {
		instance(cuda.AllF64(loss, logits), crossEntropyKernel[float64], crossEntropyKernel[float32])(h, loss, logits, targets, scratch, N, V)
	}, loss, logits, targets, scratch)
}

// rowMax is the largest value of a row, for the softmax's shift. Eight
// running maxima (element j in m[j%8]), compared with > (the builtin max's
// NaN and signed-zero handling costs branches per element), let the
// comparisons overlap and avx2.RowMax, its fp32 twin, keep one a lane;
// they are combined with the builtin max. A NaN is skipped unless it is
// the first value, which is harmless: the row's exponentials then hold a
// NaN, and so does everything computed from their sum, as with a NaN
// shift.
func rowMax[F float](row []F) F {
	var m [8]F
	for k := range m {
		m[k] = row[0]
	}
	j := 0
	if r, ok := f32(row); ok {
		j = avx2.RowMax(r, any(&m).(*[8]float32))
	}
	for ; j < len(row); j++ {
		if row[j] > m[j%8] {
			m[j%8] = row[j]
		}
	}
	return max(m[0], m[1], m[2], m[3], m[4], m[5], m[6], m[7])
}

// expShiftedSum sets e[j] = exp(row[j] - shift) in float64 for every
// element of row, adds e[j] to sums[j%4], and returns those len(row)
// exponentials; avx2.ExpShiftedSum is its fp32 twin. Four running sums
// (added up as (s0+s1)+(s2+s3) by sum4) let the additions overlap and the
// twin keep one a lane. row's length must be a multiple of 4 except in
// the last call for a row.
func expShiftedSum[F float](e []float64, row []F, shift float64, sums *[4]float64) []float64 {
	e = e[:len(row)]
	var twin func(lo int) int
	if r32, ok := f32(row); ok {
		twin = func(lo int) int { return lo + avx2.ExpShiftedSum(e[lo:], r32[lo:], shift, sums, &expTwin) }
	}
	withTwin(len(row), twin, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			e[j] = float64(row[j]) - shift
		}
		expLoop(e[lo:hi])
		for j := lo; j < hi; j++ {
			sums[j%4] += e[j]
		}
	})
	return e
}

// roundInto sets out[j] = F(e[j]); avx2.Round is its fp32 twin.
func roundInto[F float](out []F, e []float64) {
	j := 0
	if o, ok := f32(out); ok {
		j = avx2.Round(o, e)
	}
	for ; j < len(out); j++ {
		out[j] = F(e[j])
	}
}

// scaleBy sets out[j] = F(float64(out[j]) * s); avx2.Scale is its fp32
// twin.
func scaleBy[F float](out []F, s float64) {
	j := 0
	if o, ok := f32(out); ok {
		j = avx2.Scale(o, s)
	}
	for ; j < len(out); j++ {
		out[j] = F(float64(out[j]) * s)
	}
}

func crossEntropyKernel[F float](h *Device, loss, logits, targets, scratch *cuda.Buffer, N, V int) {
	tg := Int32s(targets)
	vl := mkvec[F](logits)
	losses := mkvec[F](scratch).raw
	if losses == nil {
		losses = getScratch[F](N)
		defer putScratch(losses)
	}
	losses = losses[:N]
	h.parallel(N, max(1, elemGrain/V), func(lo, hi int) {
		tmp := batchScratch(vl, V)
		defer putScratch(tmp)
		for i := lo; i < hi; i++ {
			row := vl.get(i*V, (i+1)*V, tmp)
			mx := float64(rowMax(row))
			var sums [4]float64
			var e [expChunk]float64
			for c0 := 0; c0 < V; c0 += expChunk {
				expShiftedSum(e[:], row[c0:min(c0+expChunk, V)], mx, &sums)
			}
			losses[i] = F(math.Log(sum4(&sums)) + mx - float64(row[tg[i]]))
		}
	})
	var total float64
	for _, l := range losses {
		total += float64(l)
	}
	vo := mkvec[F](loss)
	var one [1]F
	out := vo.out(0, 1, one[:])
	out[0] = F(total / float64(N))
	vo.put(0, out)
}

// CrossEntropyBackward: dlogits = (softmax(logits) - onehot(targets))·dloss/N.
// dlogits may be logits itself.
func (h *Device) CrossEntropyBackward(dlogits, dloss, logits, targets *cuda.Buffer, N, V int) error {
	return h.launchTargets("CrossEntropyBackward", cuda.Check.CrossEntropyBackward(dlogits, dloss, logits, targets, N, V), targets, V, func() {
		instance(cuda.AllF64(dlogits, dloss, logits), crossEntropyBackwardKernel[float64], crossEntropyBackwardKernel[float32])(h, dlogits, dloss, logits, targets, N, V)
	}, dlogits, dloss, logits, targets)
}

func crossEntropyBackwardKernel[F float](h *Device, dlogits, dloss, logits, targets *cuda.Buffer, N, V int) {
	tg := Int32s(targets)
	g := lossGrad(dloss, N)
	eachLogitsRow(h, dlogits, logits, N, V, func(i int, row, out []F) {
		mx := float64(rowMax(row))
		t := int(tg[i])
		// out may be row itself: each element is read before it is
		// written.
		var sums [4]float64
		var et float64
		var e [expChunk]float64
		for c0 := 0; c0 < V; c0 += expChunk {
			es := expShiftedSum(e[:], row[c0:min(c0+expChunk, V)], mx, &sums)
			roundInto(out[c0:c0+len(es)], es)
			if t >= c0 && t < c0+len(es) {
				et = es[t-c0]
			}
		}
		sum := sum4(&sums)
		scaleBy(out, g/sum)
		out[t] = F((et/sum - 1) * g)
	})
}

// lossGrad is a mean loss's gradient of each of its N rows' terms:
// dloss[0]/N.
func lossGrad(dloss *cuda.Buffer, N int) float64 {
	var d [1]float64
	Decode(dloss, 0, d[:])
	return d[0] / float64(N)
}

// eachLogitsRow runs f on each row of logits (N, V) and the row of dlogits
// its gradient goes to (which may be the row itself), rows in parallel,
// and stores what f wrote.
func eachLogitsRow[F float](h *Device, dlogits, logits *cuda.Buffer, N, V int, f func(i int, row, out []F)) {
	vl, vd := mkvec[F](logits), mkvec[F](dlogits)
	h.parallel(N, max(1, elemGrain/V), func(lo, hi int) {
		tin, tout := batchScratch(vl, V), batchScratch(vd, V)
		defer putScratch(tin)
		defer putScratch(tout)
		for i := lo; i < hi; i++ {
			row := vl.get(i*V, (i+1)*V, tin)
			out := vd.out(i*V, (i+1)*V, tout)
			f(i, row, out)
			vd.put(i*V, out)
		}
	})
}

// The vocabulary-parallel cross entropy (cuda.CrossEntropyKernels): a
// rank's part of the logits, the row statistics reduced over the ranks
// between the steps.

// CrossEntropyPartMax: stats[i] = the largest logit of row i.
func (h *Device) CrossEntropyPartMax(stats, logits *cuda.Buffer, N, V int) error {
	return h.launch("CrossEntropyPartMax", cuda.Check.CrossEntropyPartMax(stats, logits, N, V), func() {
		instance(cuda.AllF64(stats, logits), crossEntropyPartMaxKernel[float64], crossEntropyPartMaxKernel[float32])(h, stats, logits, N, V)
	}, stats, logits)
}

func crossEntropyPartMaxKernel[F float](h *Device, stats, logits *cuda.Buffer, N, V int) {
	vl := mkvec[F](logits)
	mx := make([]F, N)
	h.parallel(N, max(1, elemGrain/V), func(lo, hi int) {
		tmp := batchScratch(vl, V)
		defer putScratch(tmp)
		for i := lo; i < hi; i++ {
			mx[i] = rowMax(vl.get(i*V, (i+1)*V, tmp))
		}
	})
	Encode(stats, 0, mx)
}

// CrossEntropyPartSums: stats[N+i] = Σ_j exp(logits[i, j] - stats[i]), in
// float64 as CrossEntropy sums, and stats[2N+i] the target's logit where
// the part holds the target, else 0.
func (h *Device) CrossEntropyPartSums(stats, logits, targets *cuda.Buffer, N, V int, part cuda.VocabPart) error {
	return h.launchTargets("CrossEntropyPartSums", cuda.Check.CrossEntropyPartSums(stats, logits, targets, N, V, part), targets, part.Vocab(V), func() {
		instance(cuda.AllF64(stats, logits), crossEntropyPartSumsKernel[float64], crossEntropyPartSumsKernel[float32])(h, stats, logits, targets, N, V, part)
	}, stats, logits, targets)
}

func crossEntropyPartSumsKernel[F float](h *Device, stats, logits, targets *cuda.Buffer, N, V int, part cuda.VocabPart) {
	tg := Int32s(targets)
	vl := mkvec[F](logits)
	mx := make([]float64, N)
	Decode(stats, 0, mx)
	out := make([]F, 2*N)
	h.parallel(N, max(1, elemGrain/V), func(lo, hi int) {
		tmp := batchScratch(vl, V)
		defer putScratch(tmp)
		for i := lo; i < hi; i++ {
			row := vl.get(i*V, (i+1)*V, tmp)
			var sums [4]float64
			var e [expChunk]float64
			for c0 := 0; c0 < V; c0 += expChunk {
				expShiftedSum(e[:], row[c0:min(c0+expChunk, V)], mx[i], &sums)
			}
			out[i] = F(sum4(&sums))
			if t := int(tg[i]) - part.Lo; t >= 0 && t < V {
				out[N+i] = row[t]
			}
		}
	})
	Encode(stats, N, out)
}

// CrossEntropyPartLoss: loss = Σ_i (log stats[N+i] + stats[i] -
// stats[2N+i]) / N, in float64 in row order.
func (h *Device) CrossEntropyPartLoss(loss, stats *cuda.Buffer, N int) error {
	if err := h.begin("CrossEntropyPartLoss", cuda.Check.CrossEntropyPartLoss(loss, stats, N), loss, stats); err != nil {
		return err
	}
	st := make([]float64, cuda.CrossEntropyStatsLen(N))
	Decode(stats, 0, st)
	var total float64
	for i := range N {
		total += math.Log(st[N+i]) + st[i] - st[2*N+i]
	}
	Encode(loss, 0, []float64{total / float64(N)})
	return nil
}

// CrossEntropyPartBackward: dlogits = (exp(logits - max)/sum -
// onehot)·dloss/N, each element computed in float64 and rounded once.
// dlogits may be logits itself.
func (h *Device) CrossEntropyPartBackward(dlogits, dloss, logits, targets, stats *cuda.Buffer, N, V int, part cuda.VocabPart) error {
	return h.launchTargets("CrossEntropyPartBackward", cuda.Check.CrossEntropyPartBackward(dlogits, dloss, logits, targets, stats, N, V, part), targets, part.Vocab(V), func() {
		instance(cuda.AllF64(dlogits, dloss, logits), crossEntropyPartBackwardKernel[float64], crossEntropyPartBackwardKernel[float32])(h, dlogits, dloss, logits, targets, stats, N, V, part)
	}, dlogits, dloss, logits, targets, stats)
}

func crossEntropyPartBackwardKernel[F float](h *Device, dlogits, dloss, logits, targets, stats *cuda.Buffer, N, V int, part cuda.VocabPart) {
	tg := Int32s(targets)
	g := lossGrad(dloss, N)
	st := make([]float64, cuda.CrossEntropyStatsLen(N))
	Decode(stats, 0, st)
	eachLogitsRow(h, dlogits, logits, N, V, func(i int, row, out []F) {
		mx, scale, t := st[i], g/st[N+i], int(tg[i])-part.Lo
		// out may be row itself: each element is read before it is
		// written.
		for j, v := range row {
			p := math.Exp(float64(v)-mx) * scale
			if j == t {
				p -= g
			}
			out[j] = F(p)
		}
	})
}
