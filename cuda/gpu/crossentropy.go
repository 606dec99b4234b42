//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the cross-entropy family (the mean loss and the gradient of the logits).

// The family's kernels (kernels/crossentropy.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"cross_entropy_rows":          "pipipiip",
		"cross_entropy_mean":          "pipii",
		"cross_entropy_backward":      "pipipipiip",
		"cross_entropy_part_max":      "pipiii",
		"cross_entropy_part_sums":     "pipipiiiip",
		"cross_entropy_part_loss":     "pipii",
		"cross_entropy_part_backward": "pipipippiiiiip",
	})
}

// CrossEntropy: per-row losses into scratch (fp64 sums), then their mean.
func (d *Device) CrossEntropy(loss, logits, targets, scratch *cuda.Buffer, N, V int) error {
	err := cuda.Check.CrossEntropy(loss, logits, targets, scratch, N, V)
	if err := d.begin("CrossEntropy", err, loss, logits, targets, scratch); err != nil {
		return err
	}
	defer d.leave()
	checked, err := d.checkIDsOnHost("CrossEntropy", "target", targets, 0, V)
	if err != nil {
		return err
	}
	f64 := cuda.AllF64(loss, logits)
	if err := d.runChecked(crossEntropyRowsCall(scratch, logits, targets, N, V, f64, uintptr(d.status)), checked); err != nil {
		return err
	}
	return d.run(crossEntropyMeanCall(loss, scratch, N, f64))
}

// CrossEntropyBackward: dlogits = (softmax - onehot)·dloss/N; dlogits may
// be logits.
func (d *Device) CrossEntropyBackward(dlogits, dloss, logits, targets *cuda.Buffer, N, V int) error {
	return d.launchTargets("CrossEntropyBackward", cuda.Check.CrossEntropyBackward(dlogits, dloss, logits, targets, N, V), targets, V, func() *kcall {
		return crossEntropyBackwardCall(dlogits, dloss, logits, targets, N, V, uintptr(d.status))
	}, dlogits, dloss, logits, targets)
}

func crossEntropyRowsCall(losses, logits, targets *cuda.Buffer, N, V int, f64 bool, status uintptr) *kcall {
	return newCall("cross_entropy_rows", f64, perRow(int64(N), rowBlock)).
		buf(losses).buf(logits).ids(targets).int(int64(N)).int(int64(V)).ptr(status)
}

func crossEntropyMeanCall(loss, losses *cuda.Buffer, N int, f64 bool) *kcall {
	return newCall("cross_entropy_mean", f64, launch{grid: [3]int{1, 1, 1}, block: [3]int{256, 1, 1}}).
		buf(loss).buf(losses).int(int64(N))
}

func crossEntropyBackwardCall(dlogits, dloss, logits, targets *cuda.Buffer, N, V int, status uintptr) *kcall {
	return newCall("cross_entropy_backward", cuda.AllF64(dlogits, dloss, logits), perRow(int64(N), rowBlock)).
		buf(dlogits).buf(dloss).buf(logits).ids(targets).int(int64(N)).int(int64(V)).ptr(status)
}

// CrossEntropyPartMax: a block per row, its largest logit.
func (d *Device) CrossEntropyPartMax(stats, logits *cuda.Buffer, N, V int) error {
	if err := d.begin("CrossEntropyPartMax", cuda.Check.CrossEntropyPartMax(stats, logits, N, V), stats, logits); err != nil {
		return err
	}
	defer d.leave()
	return d.run(crossEntropyPartMaxCall(stats, logits, N, V))
}

// CrossEntropyPartSums: a block per row, its exponentials' sum (fp64) and
// its target's logit where the part holds it.
func (d *Device) CrossEntropyPartSums(stats, logits, targets *cuda.Buffer, N, V int, part cuda.VocabPart) error {
	return d.launchTargets("CrossEntropyPartSums", cuda.Check.CrossEntropyPartSums(stats, logits, targets, N, V, part), targets, part.Vocab(V), func() *kcall {
		return crossEntropyPartSumsCall(stats, logits, targets, N, V, part, uintptr(d.status))
	}, stats, logits, targets)
}

// CrossEntropyPartLoss: one block, the rows' mean loss from their
// statistics (fp64).
func (d *Device) CrossEntropyPartLoss(loss, stats *cuda.Buffer, N int) error {
	if err := d.begin("CrossEntropyPartLoss", cuda.Check.CrossEntropyPartLoss(loss, stats, N), loss, stats); err != nil {
		return err
	}
	defer d.leave()
	return d.run(crossEntropyPartLossCall(loss, stats, N))
}

// CrossEntropyPartBackward: dlogits = (softmax - onehot)·dloss/N from the
// rows' statistics, an element a thread; dlogits may be logits.
func (d *Device) CrossEntropyPartBackward(dlogits, dloss, logits, targets, stats *cuda.Buffer, N, V int, part cuda.VocabPart) error {
	return d.launchTargets("CrossEntropyPartBackward", cuda.Check.CrossEntropyPartBackward(dlogits, dloss, logits, targets, stats, N, V, part), targets, part.Vocab(V), func() *kcall {
		return crossEntropyPartBackwardCall(dlogits, dloss, logits, targets, stats, N, V, part, uintptr(d.status))
	}, dlogits, dloss, logits, targets, stats)
}

func crossEntropyPartMaxCall(stats, logits *cuda.Buffer, N, V int) *kcall {
	return newCall("cross_entropy_part_max", cuda.AllF64(stats, logits), perRow(int64(N), rowBlock)).
		buf(stats).buf(logits).int(int64(N)).int(int64(V))
}

func crossEntropyPartSumsCall(stats, logits, targets *cuda.Buffer, N, V int, part cuda.VocabPart, status uintptr) *kcall {
	return newCall("cross_entropy_part_sums", cuda.AllF64(stats, logits), perRow(int64(N), rowBlock)).
		buf(stats).buf(logits).ids(targets).int(int64(N)).int(int64(V)).int(int64(part.Vocab(V))).int(int64(part.Lo)).ptr(status)
}

func crossEntropyPartLossCall(loss, stats *cuda.Buffer, N int) *kcall {
	return newCall("cross_entropy_part_loss", cuda.AllF64(loss, stats), launch{grid: [3]int{1, 1, 1}, block: [3]int{256, 1, 1}}).
		buf(loss).buf(stats).int(int64(N))
}

func crossEntropyPartBackwardCall(dlogits, dloss, logits, targets, stats *cuda.Buffer, N, V int, part cuda.VocabPart, status uintptr) *kcall {
	return newCall("cross_entropy_part_backward", cuda.AllF64(dlogits, dloss, logits), gridStride(int64(N)*int64(V), elemBlock)).
		buf(dlogits).buf(dloss).buf(logits).ids(targets).buf(stats).int(int64(N)).int(int64(V)).int(int64(part.Vocab(V))).int(int64(part.Lo)).ptr(status)
}
