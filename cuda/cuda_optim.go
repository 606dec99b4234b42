//go:build trainmem_cuda

package cuda

// The CUDA device's kernels: the optimizers (Adam, SGD).

// Adam updates one parameter range (host_optim.go's formula).
func (d *CUDA) Adam(param, grad, master, m, v *Buffer, a AdamArgs) error {
	if err := d.begin("Adam", checkAdam(param, grad, master, m, v, a), param, grad, master, m, v); err != nil {
		return err
	}
	defer d.leave()
	if param.Len == 0 {
		return nil
	}
	return d.run(adamCall(param, grad, master, m, v, a))
}

// SGD updates one parameter range.
func (d *CUDA) SGD(param, grad, master, mom *Buffer, a SGDArgs) error {
	if err := d.begin("SGD", checkSGD(param, grad, master, mom, a), param, grad, master, mom); err != nil {
		return err
	}
	defer d.leave()
	if param.Len == 0 {
		return nil
	}
	return d.run(sgdCall(param, grad, master, mom, a))
}
