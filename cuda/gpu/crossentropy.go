//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the cross-entropy family (the mean loss and the gradient of the logits).

// The family's kernels (kernels/crossentropy.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"cross_entropy_rows":     "pipipiip",
		"cross_entropy_mean":     "pipii",
		"cross_entropy_backward": "pipipipiip",
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
	err := cuda.Check.CrossEntropyBackward(dlogits, dloss, logits, targets, N, V)
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
