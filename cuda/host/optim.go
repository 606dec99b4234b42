package host

import (
	"math"
	"trainmem/cuda"
	"trainmem/cuda/host/avx2"
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
	return h.launch("Adam", cuda.Check.Adam(param, grad, master, m, v, a), func() {
		instance(cuda.AllF64(param, grad, master, m, v), adamKernel[float64], adamKernel[float32])(h, param, grad, master, m, v, a)
	}, param, grad, master, m, v)
}

func adamKernel[F float](h *Device, param, grad, master, m, v *cuda.Buffer, a cuda.AdamArgs) {
	s := adamScalarsOf[F](a)
	k := s.twin()
	optimizerStep(h, param, grad, master, []*cuda.Buffer{m, v}, func(ps, gr []F, state [][]F) {
		ms, vs := state[0], state[1]
		done := 0
		if p32, ok := f32(ps); ok {
			g32, _ := f32(gr)
			m32, _ := f32(ms)
			v32, _ := f32(vs)
			done = avx2.Adam(p32, g32, m32, v32, &k)
		}
		s.loop(ps[done:], gr[done:], ms[done:], vs[done:])
	})
}

// adamScalars are Adam's hyperparameters in the compute type F, with 1-β1,
// 1-β2 and the corrections worked out once.
type adamScalars[F float] struct {
	lr, b1, omb1, b2, omb2, eps, wd, gs, c1, c2 F
	decoupled                                   bool
}

func adamScalarsOf[F float](a cuda.AdamArgs) adamScalars[F] {
	s := adamScalars[F]{lr: F(a.LR), b1: F(a.Beta1), b2: F(a.Beta2), eps: F(a.Eps), wd: F(a.WeightDecay), gs: F(a.GradScale), decoupled: a.Decoupled}
	c1, c2 := a.Corrections()
	s.c1, s.c2 = F(c1), F(c2)
	s.omb1, s.omb2 = 1-s.b1, 1-s.b2
	return s
}

// twin is s for avx2.Adam, which runs only when F is float32 (so that
// these are the loop's own values).
func (s adamScalars[F]) twin() avx2.AdamConsts {
	k := avx2.AdamConsts{GS: float32(s.gs), WD: float32(s.wd), B1: float32(s.b1), OneMinusB1: float32(s.omb1), B2: float32(s.b2), OneMinusB2: float32(s.omb2),
		C1: float32(s.c1), C2: float32(s.c2), Eps: float32(s.eps), LR: float32(s.lr)}
	if s.decoupled {
		k.Decoupled = 1
	}
	return k
}

// loop is Adam's update of ps, ms and vs from gr, element by element;
// avx2.Adam is its fp32 twin.
func (s adamScalars[F]) loop(ps, gr, ms, vs []F) {
	lr, b1, omb1, b2, omb2, eps, wd, gs, c1, c2 := s.lr, s.b1, s.omb1, s.b2, s.omb2, s.eps, s.wd, s.gs, s.c1, s.c2
	dec := s.decoupled // locals the loop keeps in registers
	gr, ms, vs = gr[:len(ps)], ms[:len(ps)], vs[:len(ps)]
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
}

// Adam8bit is Adam with m and v stored blockwise in 8 bits (bitsandbytes'
// kOptimizerStatic8bit2StateBlockwise), a block of cuda.Block8 elements
// at a time: its states dequantized, the block updated by Adam's loop,
// its new scales the largest |m| and v, its states requantized
// (requantize8).
func (h *Device) Adam8bit(param, grad, master, m, v, mScale, vScale *cuda.Buffer, a cuda.AdamArgs) error {
	return h.launch("Adam8bit", cuda.Check.Adam8bit(param, grad, master, m, v, mScale, vScale, a), func() {
		instance(cuda.AllF64(param, grad, master), adam8bitKernel[float64], adam8bitKernel[float32])(h, param, grad, master, m, v, mScale, vScale, a)
	}, param, grad, master, m, v, mScale, vScale)
}

func adam8bitKernel[F float](h *Device, param, grad, master, m, v, mScale, vScale *cuda.Buffer, a cuda.AdamArgs) {
	s := adamScalarsOf[F](a)
	pb := param
	if master != nil {
		pb = master
	}
	n := param.Len
	mc, vc, msc, vsc := Uint8s(m), Uint8s(v), view[float32](mScale), view[float32](vScale)
	mmap, vmap := cuda.DynamicSigned.Values(), cuda.DynamicUnsigned.Values()
	h.parallel(cuda.Blocks(n, cuda.Block8), 4, func(lo, hi int) {
		var ps, gs, ms, vs [cuda.Block8]F
		for b := lo; b < hi; b++ {
			i0 := b * cuda.Block8
			k := min(cuda.Block8, n-i0)
			Decode(pb, i0, ps[:k])
			Decode(grad, i0, gs[:k])
			for j := range k {
				ms[j] = F(mmap[mc[i0+j]]) * F(msc[b])
				vs[j] = F(vmap[vc[i0+j]]) * F(vsc[b])
			}
			s.loop(ps[:k], gs[:k], ms[:k], vs[:k])
			Encode(pb, i0, ps[:k])
			if master != nil {
				Encode(param, i0, ps[:k])
			}
			msc[b] = requantize8(mc[i0:i0+k], ms[:k], mmap, true)
			vsc[b] = requantize8(vc[i0:i0+k], vs[:k], vmap, false)
		}
	})
}

// requantize8 stores a block's new states in codes of code, and returns
// its new scale, their largest magnitude in fp32: each state's code is the
// nearest to state/scale in fp32 (a block of zeros: the code of 0); with
// signed, a state whose code has the other sign takes the next code
// toward its own (bitsandbytes keeps a small negative m from rounding to
// +0).
func requantize8[F float](codes []uint8, states []F, code *[256]float32, signed bool) float32 {
	var mx float32
	for _, x := range states {
		mx = max(mx, float32(math.Abs(float64(x))))
	}
	for j, x := range states {
		var q float32
		if mx != 0 {
			q = float32(x) / mx
		}
		c := quantize8(code, q)
		if signed && math.Signbit(float64(code[c])) != math.Signbit(float64(x)) {
			if x > 0 {
				c++
			} else {
				c--
			}
		}
		codes[j] = c
	}
	return mx
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
