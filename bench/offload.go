package bench

// The offload device's side of a rank under optimizer offload
// (model.OffloadOptimizer): what trainmem's formula counts in host memory
// beside the simulation and the measurement, and the step's PCIe copies.

import (
	"fmt"
	"io"

	"trainmem/model"
	"trainmem/train"
)

// offloadSource names what the offload follows.
const offloadSource = "ZeRO-Offload (Ren et al. 2021, Section 4) as DeepSpeed's offload_optimizer=cpu runs it: the fp32 master weights, m and v of the parameters a rank updates on the CPU, which runs the update, beside a copy of their gradients and of their working weights"

// writeOffload writes rank 0's offload device: each category in host
// memory by the formula beside the step's record sim under label
// ("simulated", or "measured" for a run that measures alone) and, when
// meas is not nil, the measured one; its peak and the step's PCIe bytes.
func writeOffload(w io.Writer, s model.Setup, label string, sim, meas *train.OffloadRecord) {
	if s.Offload == model.OffloadNone || sim == nil {
		return
	}
	e, err := s.Estimate()
	if err != nil {
		return
	}
	f := e.Offloaded
	head := []string{"offload device, host memory: " + sim.Device, "trainmem", label}
	if meas != nil {
		head[0] = "offload device, host memory: " + meas.Device
		head = append(head, "measured")
	}
	var t Table
	t.Add(head...)
	for _, c := range f.Named() {
		r := []string{"  " + c.Cat.String(), model.GiB(c.Bytes), model.GiB(sim.Memory.PeakRequested[c.Cat])}
		if meas != nil {
			r = append(r, model.GiB(meas.Memory.PeakRequested[c.Cat]))
		}
		t.Add(r...)
	}
	r := []string{"  total (the runs: peak allocated)", model.GiB(f.Total()), model.GiB(sim.PeakAllocatedBytes)}
	if meas != nil {
		r = append(r, model.GiB(meas.PeakAllocatedBytes))
	}
	t.Add(r...)
	r = []string{"PCIe a step, to host (the gradients)", model.GiB(e.PCIe.ToHost), model.GiB(sim.ToHostBytes)}
	if meas != nil {
		r = append(r, model.GiB(meas.ToHostBytes))
	}
	t.Add(r...)
	r = []string{"PCIe a step, to the device (the weights)", model.GiB(e.PCIe.ToDevice), model.GiB(sim.ToDeviceBytes)}
	if meas != nil {
		r = append(r, model.GiB(meas.ToDeviceBytes))
	}
	t.Add(r...)
	fmt.Fprintln(w)
	t.Write(w)
	count := f.Grads / s.GradSize() // the parameters the rank updates: the host copies their gradients
	if s.Offload == model.OffloadParams {
		fmt.Fprintf(w, "  the device keeps its gradients and the gathered units; the host the %s parameters of this rank's shard at %d bytes each (%d of weights, %d of gradients, 12 of fp32 weights, m and v), and the step copies %s of gradients down and the weight shard up at each gather, %s (twice a step: the forward pass's and the backward pass's)\n",
			model.Comma(count), f.Total()/max(count, 1), s.Precision.Size(), s.GradSize(), model.Bytes(e.PCIe.ToHost), model.Bytes(e.PCIe.ToDevice))
		if sim.ToDeviceBytes < e.PCIe.ToDevice {
			fmt.Fprintf(w, "  the simulation copies %s less up: a unit whose weights the backward pass does not read (untied embeddings) is gathered once\n", model.Bytes(e.PCIe.ToDevice-sim.ToDeviceBytes))
		}
		fmt.Fprintf(w, "  source: %s; the weights as ZeRO-Infinity's offload_param (Rajbhandari et al. 2021, DeepSpeed's offload_param=cpu) keeps them\n", offloadSource)
		return
	}
	fmt.Fprintf(w, "  the device keeps its params and grads; the host the %s parameters this rank updates at %d bytes each (%d of weights, %d of gradients, 12 of fp32 weights, m and v), and the step copies %s down and %s up\n",
		model.Comma(count), f.Total()/max(count, 1), s.Precision.Size(), s.GradSize(), model.Bytes(e.PCIe.ToHost), model.Bytes(e.PCIe.ToDevice))
	fmt.Fprintf(w, "  source: %s\n", offloadSource)
}
