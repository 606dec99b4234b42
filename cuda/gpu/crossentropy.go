//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the cross-entropy family (the mean loss and the gradient of the logits).

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
