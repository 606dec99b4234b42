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
// with the bias corrections applied as cuda.AdamArgs.Corrections says.
//
// p is master when given (then param = p rounded to param's DType), else
// param itself.
func (h *Device) Adam(param, grad, master, m, v *cuda.Buffer, a cuda.AdamArgs) error {
	if err := h.begin("Adam", cuda.Check.Adam(param, grad, master, m, v, a), param, grad, master, m, v); err != nil {
		return err
	}
	instance(cuda.AllF64(param, grad, master, m, v), adamKernel[float64], adamKernel[float32])(h, param, grad, master, m, v, a)
	return nil
}

func adamKernel[F float](h *Device, param, grad, master, m, v *cuda.Buffer, a cuda.AdamArgs) {
	lr, b1, b2, eps, wd, gs := F(a.LR), F(a.Beta1), F(a.Beta2), F(a.Eps), F(a.WeightDecay), F(a.GradScale)
	c1d, c2d := a.Corrections()
	c1, c2 := F(c1d), F(c2d)
	omb1, omb2, decoupled := 1-b1, 1-b2, a.Decoupled
	optimizerStep(h, param, grad, master, []*cuda.Buffer{m, v}, func(ps, gr []F, state [][]F) {
		gr, ms, vs := gr[:len(ps)], state[0][:len(ps)], state[1][:len(ps)]
		dec := decoupled // a local the loop keeps in a register
		for i, p := range ps {
			g := gr[i] * gs
			if !dec {
				g += wd * p
			}
			mi := b1*ms[i] + omb1*g
			vi := b2*vs[i] + omb2*g*g
			ms[i], vs[i] = mi, vi
			// float32(math.Sqrt(float64(x))) is one fp32 square root.
			upd := (mi * c1) / (F(math.Sqrt(float64(vi)))*c2 + eps)
			if dec {
				upd += wd * p
			}
			ps[i] = p - lr*upd
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
	instance(cuda.AllF64(param, grad, master, mom), sgdKernel[float64], sgdKernel[float32])(h, param, grad, master, mom, a)
	return nil
}

func sgdKernel[F float](h *Device, param, grad, master, mom *cuda.Buffer, a cuda.SGDArgs) {
	lr, mu, wd, gs := F(a.LR), F(a.Momentum), F(a.WeightDecay), F(a.GradScale)
	var state []*cuda.Buffer
	if mom != nil {
		state = []*cuda.Buffer{mom}
	}
	optimizerStep(h, param, grad, master, state, func(ps, gr []F, state [][]F) {
		var ms []F
		if mom != nil {
			ms = state[0]
		}
		for i := range ps {
			g := gr[i]*gs + wd*ps[i]
			if mom != nil {
				ms[i] = mu*ms[i] + g
				g = ms[i]
			}
			ps[i] -= lr * g
		}
	})
}

// optimizerStep runs an optimizer's elementwise update over param in
// chunks: the weights p (master when given, else param), the gradient and
// the state buffers (none nil) are read in the compute type, update
// changes p and the state in place, and they are stored back; with master,
// param is then p rounded to param's DType.
func optimizerStep[F float](h *Device, param, grad, master *cuda.Buffer, state []*cuda.Buffer, update func(ps, gr []F, state [][]F)) {
	pb := param
	if master != nil {
		pb = master
	}
	vp, vg, vparam := mkvec[F](pb), mkvec[F](grad), mkvec[F](param)
	vst := make([]vec[F], len(state))
	for k, b := range state {
		vst[k] = mkvec[F](b)
	}
	// Scratch chunks: p, the gradient, the state buffers, param's copy.
	chunks := 3 + len(state)
	h.parallel(param.Len, elemGrain, func(lo, hi int) {
		tmp := getScratch[F](chunks * elemChunk)
		defer putScratch(tmp)
		chunk := func(k int) []F { return tmp[k*elemChunk : (k+1)*elemChunk] }
		st := make([][]F, len(vst))
		for c0 := lo; c0 < hi; c0 += elemChunk {
			c1 := min(c0+elemChunk, hi)
			ps := vp.get(c0, c1, chunk(0))
			gr := vg.get(c0, c1, chunk(1))
			for k := range vst {
				st[k] = vst[k].get(c0, c1, chunk(2+k))
			}
			update(ps, gr, st)
			vp.put(c0, ps)
			for k := range vst {
				vst[k].put(c0, st[k])
			}
			if master != nil {
				out := vparam.out(c0, c1, chunk(chunks-1))
				copy(out, ps)
				vparam.put(c0, out)
			}
		}
	})
}
