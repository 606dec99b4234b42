package host

// The host device's kernels: the cross-entropy family (the mean loss and the gradient of the logits).

import (
	"math"
	"trainmem/cuda"
)

// CrossEntropy: loss = mean over rows of -log softmax(logits[i])[targets[i]].
// Each row is max-subtracted, its exponentials summed in float64; the
// per-row losses go to scratch and are summed in row order.
func (h *Device) CrossEntropy(loss, logits, targets, scratch *cuda.Buffer, N, V int) error {
	err := cuda.Check.CrossEntropy(loss, logits, targets, scratch, N, V)
	if err := h.begin("CrossEntropy", err, loss, logits, targets, scratch); err != nil {
		return err
	}
	if err := cuda.CheckIDs("CrossEntropy", "target", Int32s(targets), 0, V); err != nil {
		return err
	}
	instance(cuda.AllF64(loss, logits), crossEntropyKernel[float64], crossEntropyKernel[float32])(h, loss, logits, targets, scratch, N, V)
	return nil
}

// rowMax is the largest value of a row.
func rowMax[F float](row []F) F {
	mx := row[0]
	for _, v := range row[1:] {
		mx = max(mx, v)
	}
	return mx
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
			var sum float64
			for _, v := range row {
				sum += math.Exp(float64(v) - mx)
			}
			losses[i] = F(math.Log(sum) + mx - float64(row[tg[i]]))
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
	err := cuda.Check.CrossEntropyBackward(dlogits, dloss, logits, targets, N, V)
	if err := h.begin("CrossEntropyBackward", err, dlogits, dloss, logits, targets); err != nil {
		return err
	}
	if err := cuda.CheckIDs("CrossEntropyBackward", "target", Int32s(targets), 0, V); err != nil {
		return err
	}
	instance(cuda.AllF64(dlogits, dloss, logits), crossEntropyBackwardKernel[float64], crossEntropyBackwardKernel[float32])(h, dlogits, dloss, logits, targets, N, V)
	return nil
}

func crossEntropyBackwardKernel[F float](h *Device, dlogits, dloss, logits, targets *cuda.Buffer, N, V int) {
	tg := Int32s(targets)
	var d [1]float64
	Decode(dloss, 0, d[:])
	g := d[0] / float64(N)
	vl, vd := mkvec[F](logits), mkvec[F](dlogits)
	h.parallel(N, max(1, elemGrain/V), func(lo, hi int) {
		tin, tout := batchScratch(vl, V), batchScratch(vd, V)
		defer putScratch(tin)
		defer putScratch(tout)
		for i := lo; i < hi; i++ {
			row := vl.get(i*V, (i+1)*V, tin)
			mx := float64(rowMax(row))
			et := math.Exp(float64(row[tg[i]]) - mx)
			out := vd.out(i*V, (i+1)*V, tout)
			// out may be row itself: each element is read before it is
			// written.
			var sum float64
			for j, v := range row {
				e := math.Exp(float64(v) - mx)
				sum += e
				out[j] = F(e)
			}
			scale := g / sum
			for j, e := range out {
				out[j] = F(float64(e) * scale)
			}
			out[tg[i]] = F((et/sum - 1) * g)
			vd.put(i*V, out)
		}
	})
}
