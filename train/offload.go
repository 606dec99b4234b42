package train

// Optimizer offload (model.OffloadOptimizer, ZeRO-Offload: Ren et al.
// 2021, DeepSpeed's offload_optimizer=cpu): the fp32 master weights and
// moments of the parameters a rank updates live on a second device, host
// memory, beside the host's copies of their gradients and working
// weights. The update copies a piece's gradients down, runs on the host,
// and copies the updated working weights up; the copies are counted.

import (
	"trainmem/cuda"
	"trainmem/model"
)

// offload is the trainer's offload device and its buffers of the
// layout's States length: the gradients copied down and the working
// weights the host's update writes (nil when the weights themselves are
// offloaded: the params buffer is the host's). dev is nil without offload.
type offload struct {
	dev           cuda.Device
	grads, params *cuda.Buffer
	pcie          model.PCIe // this step's copies
	// stage32 and stage64 are copyAcross's host staging, kept from step
	// to step (a piece's gradients, a unit's shard).
	stage32 []float32
	stage64 []float64
}

// begin starts a step's books.
func (o *offload) begin() {
	if o.dev != nil {
		o.dev.ResetPeakStats()
		o.pcie = model.PCIe{}
	}
}

// ParamsOffloaded reports whether this rank's shard of the working weights
// lives on the offload device (model.OffloadParams): a policy gathering
// them copies it up first (FetchParams).
func (t *Trainer) ParamsOffloaded() bool { return t.setup.Offload == model.OffloadParams }

// paramsDevice is where the params buffer lives.
func (t *Trainer) paramsDevice() cuda.Device {
	if t.ParamsOffloaded() {
		return t.offloaded.dev
	}
	return t.dev
}

// FetchParams copies n elements of the params buffer from off into dst
// on the trainer's device, counting the copy when the weights are
// offloaded (a gather's shard, copied up over PCIe).
func (t *Trainer) FetchParams(dst *cuda.Buffer, off, n int) error {
	src := t.params.View(off, n)
	if err := t.offloaded.copyAcross(dst, t.dev, src, t.paramsDevice()); err != nil {
		return err
	}
	if t.ParamsOffloaded() {
		t.offloaded.pcie.ToDevice += src.Bytes()
	}
	return nil
}

// statesDevice is where master, m and v live.
func (t *Trainer) statesDevice() cuda.Device {
	if t.offloaded.dev != nil {
		return t.offloaded.dev
	}
	return t.dev
}

// updateBuffers is the device piece p's update runs on and its weights and
// gradients there: the trainer's device and views of its buffers, or under
// offload the host with the piece's gradients copied down.
func (t *Trainer) updateBuffers(p Piece) (cuda.Device, *cuda.Buffer, *cuda.Buffer, error) {
	w := p.Hi - p.Lo
	params, grads := t.params.View(p.Param, w), t.grads.View(p.Grad, w)
	if t.offloaded.dev == nil {
		return t.dev, params, grads, nil
	}
	down := t.offloaded.grads.View(p.State, w)
	if err := t.offloaded.copyAcross(down, t.offloaded.dev, grads, t.dev); err != nil {
		return nil, nil, nil, err
	}
	t.offloaded.pcie.ToHost += grads.Bytes()
	if t.ParamsOffloaded() {
		return t.offloaded.dev, params, down, nil // the host's shard, updated in place
	}
	return t.offloaded.dev, t.offloaded.params.View(p.State, w), down, nil
}

// updated copies piece p's updated working weights up from the host under
// optimizer offload (params is where updateBuffers had the update write
// them); offloaded weights stay where they are.
func (t *Trainer) updated(p Piece, params *cuda.Buffer) error {
	if t.offloaded.dev == nil || t.ParamsOffloaded() {
		return nil
	}
	up := t.params.View(p.Param, p.Hi-p.Lo)
	if err := t.offloaded.copyAcross(up, t.dev, params, t.offloaded.dev); err != nil {
		return err
	}
	t.offloaded.pcie.ToDevice += up.Bytes()
	return nil
}

// copyAcross copies src on device from into dst on device to, through
// host memory (values are exact in the staging type: fp32 holds every
// 16-bit value); nothing moves when either device only keeps books.
func (o *offload) copyAcross(dst *cuda.Buffer, to cuda.Device, src *cuda.Buffer, from cuda.Device) error {
	if !to.Computes() || !from.Computes() {
		return nil
	}
	var stage any
	if src.DType == cuda.F64 || dst.DType == cuda.F64 {
		if cap(o.stage64) < src.Len {
			o.stage64 = make([]float64, src.Len)
		}
		stage = o.stage64[:src.Len]
	} else {
		if cap(o.stage32) < src.Len {
			o.stage32 = make([]float32, src.Len)
		}
		stage = o.stage32[:src.Len]
	}
	if err := from.Download(stage, src); err != nil {
		return err
	}
	return to.Upload(dst, stage)
}

// OffloadDevice is the device holding the offloaded optimizer's states,
// nil without offload.
func (t *Trainer) OffloadDevice() cuda.Device { return t.offloaded.dev }
