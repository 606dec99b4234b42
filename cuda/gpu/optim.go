//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the optimizers (Adam, SGD).

// Adam updates one parameter range (cuda/host/optim.go's formula).
func (d *Device) Adam(param, grad, master, m, v *cuda.Buffer, a cuda.AdamArgs) error {
	if err := d.begin("Adam", cuda.Check.Adam(param, grad, master, m, v, a), param, grad, master, m, v); err != nil {
		return err
	}
	defer d.leave()
	if param.Len == 0 {
		return nil
	}
	return d.run(adamCall(param, grad, master, m, v, a))
}

// SGD updates one parameter range.
func (d *Device) SGD(param, grad, master, mom *cuda.Buffer, a cuda.SGDArgs) error {
	if err := d.begin("SGD", cuda.Check.SGD(param, grad, master, mom, a), param, grad, master, mom); err != nil {
		return err
	}
	defer d.leave()
	if param.Len == 0 {
		return nil
	}
	return d.run(sgdCall(param, grad, master, mom, a))
}
