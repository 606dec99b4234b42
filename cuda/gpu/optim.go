//go:build trainmem_cuda

package gpu

import "trainmem/cuda"

// The CUDA device's kernels: the optimizers (Adam, SGD).

// The family's kernels (kernels/optim.cuh) and their parameter kinds.
func init() {
	kernelFamily(map[string]string{
		"adam":     "pipipipipiiffffffffii",
		"adam8bit": "pipipipipipipiiffffffffii",
		"sgd":      "pipipipiiffffii",
	})
}

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

// Adam8bit updates one parameter range with 8-bit blockwise states
// (cuda/host/optim.go's adam8bitKernel).
func (d *Device) Adam8bit(param, grad, master, m, v, mScale, vScale *cuda.Buffer, a cuda.AdamArgs) error {
	if err := d.begin("Adam8bit", cuda.Check.Adam8bit(param, grad, master, m, v, mScale, vScale, a), param, grad, master, m, v, mScale, vScale); err != nil {
		return err
	}
	defer d.leave()
	if param.Len == 0 {
		return nil
	}
	return d.run(adam8bitCall(param, grad, master, m, v, mScale, vScale, a))
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

// inCompute is v rounded to the compute type (fp64 when f64, else fp32),
// as the host rounds its constants.
func inCompute(v float64, f64 bool) float64 {
	if f64 {
		return v
	}
	return float64(float32(v))
}

func adamCall(param, grad, master, m, v *cuda.Buffer, a cuda.AdamArgs) *kcall {
	f64 := cuda.AllF64(param, grad, master, m, v)
	pb := param
	if master != nil {
		pb = master
	}
	c1, c2 := a.Corrections()
	return newCall("adam", f64, gridStride(int64(param.Len), elemBlock)).
		buf(param).buf(grad).buf(pb).buf(m).buf(v).int(int64(param.Len)).
		f64(float64(a.LR)).f64(float64(a.Beta1)).f64(float64(a.Beta2)).f64(float64(a.Eps)).
		f64(float64(a.WeightDecay)).f64(float64(a.GradScale)).
		f64(inCompute(c1, f64)).f64(inCompute(c2, f64)).
		flag(a.Decoupled).flag(master != nil)
}

// adam8bitCall is a thread a block of cuda.Block8 elements.
func adam8bitCall(param, grad, master, m, v, mScale, vScale *cuda.Buffer, a cuda.AdamArgs) *kcall {
	f64 := cuda.AllF64(param, grad, master)
	pb := param
	if master != nil {
		pb = master
	}
	c1, c2 := a.Corrections()
	return newCall("adam8bit", f64, gridStride(int64(cuda.Blocks(param.Len, cuda.Block8)), quantBlock)).
		buf(param).buf(grad).buf(pb).buf(m).buf(v).buf(mScale).buf(vScale).int(int64(param.Len)).
		f64(float64(a.LR)).f64(float64(a.Beta1)).f64(float64(a.Beta2)).f64(float64(a.Eps)).
		f64(float64(a.WeightDecay)).f64(float64(a.GradScale)).
		f64(inCompute(c1, f64)).f64(inCompute(c2, f64)).
		flag(a.Decoupled).flag(master != nil)
}

func sgdCall(param, grad, master, mom *cuda.Buffer, a cuda.SGDArgs) *kcall {
	if a.Momentum == 0 {
		mom = nil
	}
	pb := param
	if master != nil {
		pb = master
	}
	c := newCall("sgd", cuda.AllF64(param, grad, master, mom), gridStride(int64(param.Len), elemBlock)).
		buf(param).buf(grad).buf(pb)
	if mom != nil {
		c.buf(mom)
	} else {
		c.ptr(0).int(int64(cuda.F32))
	}
	return c.int(int64(param.Len)).f64(float64(a.LR)).f64(float64(a.Momentum)).f64(float64(a.WeightDecay)).
		f64(float64(a.GradScale)).flag(mom != nil).flag(master != nil)
}
