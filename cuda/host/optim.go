package host

import (
	"math"
	"trainmem/cuda"
)

// Adam updates one parameter range, elementwise:
//
//	g = grad·GradScale (+ WeightDecay·p unless Decoupled)
//	m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²
//	p -= LR·(m/(1-β1^t) / (sqrt(v/(1-β2^t)) + Eps) (+ WeightDecay·p if Decoupled))
//
// p is master when given (then param = p rounded to param's DType), else
// param itself.
func (h *Device) Adam(param, grad, master, m, v *cuda.Buffer, a cuda.AdamArgs) error {
	if err := h.begin("Adam", cuda.Check.Adam(param, grad, master, m, v, a), param, grad, master, m, v); err != nil {
		return err
	}
	if cuda.AllF64(param, grad, master, m, v) {
		adamKernel[float64](h, param, grad, master, m, v, a)
	} else {
		adamKernel[float32](h, param, grad, master, m, v, a)
	}
	return nil
}

func adamKernel[F float](h *Device, param, grad, master, m, v *cuda.Buffer, a cuda.AdamArgs) {
	pb := param
	if master != nil {
		pb = master
	}
	vp, vg, vm, vv := mkvec[F](pb), mkvec[F](grad), mkvec[F](m), mkvec[F](v)
	vparam := mkvec[F](param)
	lr, b1, b2, eps, wd, gs := F(a.LR), F(a.Beta1), F(a.Beta2), F(a.Eps), F(a.WeightDecay), F(a.GradScale)
	bc1 := F(1 - math.Pow(float64(a.Beta1), float64(a.Step)))
	bc2 := F(1 - math.Pow(float64(a.Beta2), float64(a.Step)))
	h.parallel(param.Len, elemGrain, func(lo, hi int) {
		tmp := getScratch[F](5 * elemChunk)
		defer putScratch(tmp)
		for c0 := lo; c0 < hi; c0 += elemChunk {
			c1 := min(c0+elemChunk, hi)
			ps := vp.get(c0, c1, tmp[:elemChunk])
			gr := vg.get(c0, c1, tmp[elemChunk:2*elemChunk])
			ms := vm.get(c0, c1, tmp[2*elemChunk:3*elemChunk])
			vs := vv.get(c0, c1, tmp[3*elemChunk:4*elemChunk])
			for i := range ps {
				p, g := ps[i], gr[i]*gs
				if !a.Decoupled {
					g += wd * p
				}
				mi := b1*ms[i] + (1-b1)*g
				vi := b2*vs[i] + (1-b2)*g*g
				ms[i], vs[i] = mi, vi
				upd := (mi / bc1) / (F(math.Sqrt(float64(vi/bc2))) + eps)
				if a.Decoupled {
					upd += wd * p
				}
				ps[i] = p - lr*upd
			}
			vp.put(c0, ps)
			vm.put(c0, ms)
			vv.put(c0, vs)
			if master != nil {
				out := vparam.out(c0, c1, tmp[4*elemChunk:])
				copy(out, ps)
				vparam.put(c0, out)
			}
		}
	})
}

// SGD updates one parameter range, elementwise:
//
//	g = grad·GradScale + WeightDecay·p
//	mom = Momentum·mom + g; g = mom   (when Momentum > 0)
//	p -= LR·g
//
// with p and param as for Adam.
func (h *Device) SGD(param, grad, master, mom *cuda.Buffer, a cuda.SGDArgs) error {
	if err := h.begin("SGD", cuda.Check.SGD(param, grad, master, mom, a), param, grad, master, mom); err != nil {
		return err
	}
	if a.Momentum == 0 {
		mom = nil
	}
	if cuda.AllF64(param, grad, master, mom) {
		sgdKernel[float64](h, param, grad, master, mom, a)
	} else {
		sgdKernel[float32](h, param, grad, master, mom, a)
	}
	return nil
}

func sgdKernel[F float](h *Device, param, grad, master, mom *cuda.Buffer, a cuda.SGDArgs) {
	pb := param
	if master != nil {
		pb = master
	}
	vp, vg, vm := mkvec[F](pb), mkvec[F](grad), mkvec[F](mom)
	vparam := mkvec[F](param)
	lr, mu, wd, gs := F(a.LR), F(a.Momentum), F(a.WeightDecay), F(a.GradScale)
	h.parallel(param.Len, elemGrain, func(lo, hi int) {
		tmp := getScratch[F](4 * elemChunk)
		defer putScratch(tmp)
		for c0 := lo; c0 < hi; c0 += elemChunk {
			c1 := min(c0+elemChunk, hi)
			ps := vp.get(c0, c1, tmp[:elemChunk])
			gr := vg.get(c0, c1, tmp[elemChunk:2*elemChunk])
			var ms []F
			if mom != nil {
				ms = vm.get(c0, c1, tmp[2*elemChunk:3*elemChunk])
			}
			for i := range ps {
				g := gr[i]*gs + wd*ps[i]
				if mom != nil {
					ms[i] = mu*ms[i] + g
					g = ms[i]
				}
				ps[i] -= lr * g
			}
			vp.put(c0, ps)
			if mom != nil {
				vm.put(c0, ms)
			}
			if master != nil {
				out := vparam.out(c0, c1, tmp[3*elemChunk:])
				copy(out, ps)
				vparam.put(c0, out)
			}
		}
	})
}
