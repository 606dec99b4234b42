package conformance

// The optimizer family (Adam, SGD): its tests against the float64
// references, the references themselves, and its calls with bad and good
// arguments.

import (
	"fmt"
	"math"
	"testing"

	"trainmem/cuda"
)

func init() {
	register(family{name: "optimizers", tests: []familyTest{{"Adam", testAdam}, {"Adam8bit", testAdam8bit}, {"SGD", testSGD}},
		invalid: invalidOptimizers, valid: validOptimizers})
}

func invalidOptimizers(f *fixture) []badCall {
	d := f.d
	param, grad, m, v := f.f32(10), f.f32(10), f.f32(10), f.f32(10)
	half := f.alloc(cuda.F16, 10)
	adam := cuda.AdamArgs{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, Step: 1, GradScale: 1}
	return []badCall{
		{"Adam step 0", d.Adam(param, grad, nil, m, v, cuda.AdamArgs{Beta1: 0.9, Beta2: 0.999, GradScale: 1}), []string{"Adam", "Step is 0"}},
		{"Adam GradScale 0", d.Adam(param, grad, nil, m, v, cuda.AdamArgs{Beta1: 0.9, Beta2: 0.999, Step: 1}), []string{"Adam", "GradScale is 0"}},
		{"Adam beta1 1", d.Adam(param, grad, nil, m, v, cuda.AdamArgs{Beta1: 1, Beta2: 0.999, Step: 1, GradScale: 1}), []string{"Adam", "Beta1"}},
		{"Adam fp16 param without master", d.Adam(half, grad, nil, m, v, adam), []string{"Adam", "param is fp16", "master"}},
		{"Adam short v", d.Adam(param, grad, nil, m, f.f32(9), adam), []string{"Adam", "v has 9 elements, want param's 10"}},
		{"Adam fp16 m", d.Adam(param, grad, nil, half, v, adam), []string{"Adam", "m is fp16"}},
		{"Adam8bit fp32 m", d.Adam8bit(param, grad, nil, m, f.alloc(cuda.U8, 10), f.f32(1), f.f32(1), adam), []string{"Adam8bit", "m is fp32, want uint8"}},
		{"Adam8bit scales", d.Adam8bit(param, grad, nil, f.alloc(cuda.U8, 10), f.alloc(cuda.U8, 10), f.f32(2), f.f32(1), adam), []string{"Adam8bit", "mScale has 2 elements, want ceil(n/256) = 1"}},
		{"Adam8bit step 0", d.Adam8bit(param, grad, nil, f.alloc(cuda.U8, 10), f.alloc(cuda.U8, 10), f.f32(1), f.f32(1), cuda.AdamArgs{Beta1: 0.9, Beta2: 0.999, GradScale: 1}), []string{"Adam8bit", "Step is 0"}},
		{"SGD momentum without buffer", d.SGD(param, grad, nil, nil, cuda.SGDArgs{LR: 1, Momentum: 0.9, GradScale: 1}), []string{"SGD", "mom is nil"}},
		{"SGD negative momentum", d.SGD(param, grad, nil, nil, cuda.SGDArgs{LR: 1, Momentum: -1, GradScale: 1}), []string{"SGD", "Momentum"}},
	}
}

func validOptimizers(f *fixture, dt cuda.DType) []goodCall {
	d := f.d
	st := stateType(dt)
	master, m, v := f.alloc(st, 100), f.alloc(st, 100), f.alloc(st, 100)
	param, grad := f.alloc(dt, 100), f.alloc(dt, 100)
	m8, v8, ms8, vs8 := f.alloc(cuda.U8, 100), f.alloc(cuda.U8, 100), f.f32(1), f.f32(1)
	return []goodCall{
		{"Adam", func() error {
			return d.Adam(param, grad, master, m, v, cuda.AdamArgs{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Step: 1, GradScale: 1})
		}},
		{"SGD", func() error {
			return d.SGD(param, grad, master, m, cuda.SGDArgs{LR: 1e-3, Momentum: 0.9, GradScale: 1})
		}},
		{"Adam8bit", func() error {
			return d.Adam8bit(param, grad, master, m8, v8, ms8, vs8, cuda.AdamArgs{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Step: 1, GradScale: 1})
		}},
	}
}

// masterChoices are the optimizer tests' cases without and with master
// weights for parameters of dt: 16-bit parameters need master weights.
func masterChoices(dt cuda.DType) []bool {
	if dt != cuda.F32 && dt != cuda.F64 {
		return []bool{true}
	}
	return []bool{false, true}
}

// weights are an optimizer test's parameter and gradient, n random values
// each: the weights are held by master, in the state type, with param an
// output of dt, when there are master weights, else by param. ps and gs are
// the weights and the gradient as stored; the reference updates ps.
type weights struct {
	param, master, grad *cuda.Buffer
	ps, gs              []float64
	dt                  cuda.DType
}

func (e *env) weights(dt cuda.DType, n int, withMaster bool) weights {
	e.t.Helper()
	w := weights{dt: dt}
	pv := e.randn(n)
	if withMaster {
		w.master, w.ps = e.buf(stateType(dt), pv)
		w.param = e.out(dt, n)
	} else {
		w.param, w.ps = e.buf(dt, pv)
	}
	w.grad, w.gs = e.buf(dt, e.randn(n))
	return w
}

// check compares the updated weights, master's and param's, with the
// reference's ps.
func (w weights) check(e *env, name string) {
	e.t.Helper()
	if w.master != nil {
		compare(e.t, name+": master", e.get(w.master), w.ps, tolFor(stateType(w.dt)))
	}
	compare(e.t, name+": param", e.get(w.param), w.ps, tolFor(w.dt))
}

func testAdam(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		n := 20000
		st := stateType(dt)
		for _, withMaster := range masterChoices(dt) {
			for _, decoupled := range []bool{false, true} {
				name := fmt.Sprintf("master=%t decoupled=%t", withMaster, decoupled)
				a := cuda.AdamArgs{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1,
					Decoupled: decoupled, Step: 3, GradScale: 0.5}
				w := e.weights(dt, n, withMaster)
				mv, vv := e.randn(n), e.uniform(n, 0, 1e-3)
				for i := range mv {
					mv[i] *= 0.01
				}
				m, ms := e.buf(st, mv)
				v, vs := e.buf(st, vv)
				e.must(e.d.Adam(w.param, w.grad, w.master, m, v, a))
				refAdam(w.ps, w.gs, ms, vs, adamArgsOf(a))
				w.check(e, name)
				compare(e.t, name+": m", e.get(m), ms, tolFor(st))
				compare(e.t, name+": v", e.get(v), vs, tolFor(st))
			}
		}
	})
}

// testAdam8bit runs one blockwise 8-bit update from states mid-training
// (random codes and scales, and a block of zero states, a first step's)
// against refAdam on the dequantized states, in float64: the weights
// within the weights' tolerance, the new scales within fp32's, and the
// new codes the reference's (the nearest to state/scale, a negative m
// kept negative), but for states within the compute type's rounding of a
// midpoint.
func testAdam8bit(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		n := 9*cuda.Block8 + 61
		nb := cuda.Blocks(n, cuda.Block8)
		for _, withMaster := range masterChoices(dt) {
			for _, decoupled := range []bool{false, true} {
				name := fmt.Sprintf("master=%t decoupled=%t", withMaster, decoupled)
				a := cuda.AdamArgs{LR: 1e-2, Beta1: 0.9, Beta2: 0.95, Eps: 1e-8, WeightDecay: 0.1,
					Decoupled: decoupled, Step: 3, GradScale: 0.5}
				w := e.weights(dt, n, withMaster)
				mc, vc := make([]uint8, n), make([]uint8, n)
				for i := range mc {
					mc[i], vc[i] = uint8(e.rng.IntN(256)), uint8(e.rng.IntN(256))
				}
				msv, vsv := e.uniform(nb, 1e-3, 1e-2), e.uniform(nb, 1e-6, 1e-4)
				msv[4], vsv[4] = 0, 0 // a block of zero states: every code stands for 0
				mcodes, vcodes := e.codes(mc), e.codes(vc)
				mScale, mss := e.buf(cuda.F32, msv)
				vScale, vss := e.buf(cuda.F32, vsv)
				e.must(e.d.Adam8bit(w.param, w.grad, w.master, mcodes, vcodes, mScale, vScale, a))

				mmap, vmap := mapOf(cuda.DynamicSigned), mapOf(cuda.DynamicUnsigned)
				ms, vs := make([]float64, n), make([]float64, n)
				for i := range ms {
					ms[i] = mmap[mc[i]] * mss[i/cuda.Block8]
					vs[i] = vmap[vc[i]] * vss[i/cuda.Block8]
				}
				refAdam(w.ps, w.gs, ms, vs, adamArgsOf(a))
				w.check(e, name)
				for _, st := range []struct {
					what          string
					codes, scales *cuda.Buffer
					vals, table   []float64
					signed        bool
				}{{"m", mcodes, mScale, ms, mmap, true}, {"v", vcodes, vScale, vs, vmap, false}} {
					want, amb, wantScale := refQuantize8(st.vals, st.table, func(q float64) float64 { return 4e-6 * math.Abs(q) }, st.signed) // the fp32 update's rounding, relative
					compare(e.t, name+": "+st.what+"'s scales", e.get(st.scales), wantScale, tolFor(cuda.F32))
					got := make([]uint8, n)
					e.must(e.d.Download(got, st.codes))
					gi := make([]int, n)
					for i, c := range got {
						gi[i] = int(c)
					}
					compareCodes(e.t, name+": "+st.what+"'s codes", gi, want, amb)
				}
			}
		}
	})
}

func testSGD(t *testing.T, nd NewDevice) {
	forTypes(t, nd, func(e *env, dt cuda.DType) {
		n := 20000
		st := stateType(dt)
		for _, withMaster := range masterChoices(dt) {
			for _, mu := range []float32{0, 0.9} {
				name := fmt.Sprintf("master=%t momentum=%g", withMaster, mu)
				a := cuda.SGDArgs{LR: 0.05, Momentum: mu, WeightDecay: 0.01, GradScale: 2}
				w := e.weights(dt, n, withMaster)
				var mom *cuda.Buffer
				var moms []float64
				if mu > 0 {
					mom, moms = e.buf(st, e.randn(n))
				}
				e.must(e.d.SGD(w.param, w.grad, w.master, mom, a))
				refSGD(w.ps, w.gs, moms, float64(a.LR), float64(a.Momentum), float64(a.WeightDecay), float64(a.GradScale))
				w.check(e, name)
				if mu > 0 {
					compare(e.t, name+": momentum", e.get(mom), moms, tolFor(st))
				}
			}
		}
	})
}

// adamArgs are the Adam hyperparameters in float64, from the float32
// values the device receives.
type adamArgs struct {
	lr, b1, b2, eps, wd, gs float64
	decoupled               bool
	step                    int
}

// adamArgsOf is a's hyperparameters in float64, from the float32 values
// the device receives.
func adamArgsOf(a cuda.AdamArgs) adamArgs {
	return adamArgs{lr: float64(a.LR), b1: float64(a.Beta1), b2: float64(a.Beta2), eps: float64(a.Eps), wd: float64(a.WeightDecay),
		gs: float64(a.GradScale), decoupled: a.Decoupled, step: a.Step}
}

// refAdam updates p, m and v in place.
func refAdam(p, g, m, v []float64, a adamArgs) {
	for i := range p {
		gi := g[i] * a.gs
		if !a.decoupled {
			gi += a.wd * p[i]
		}
		m[i] = a.b1*m[i] + (1-a.b1)*gi
		v[i] = a.b2*v[i] + (1-a.b2)*gi*gi
		mhat := m[i] / (1 - math.Pow(a.b1, float64(a.step)))
		vhat := v[i] / (1 - math.Pow(a.b2, float64(a.step)))
		step := mhat / (math.Sqrt(vhat) + a.eps)
		if a.decoupled {
			step += a.wd * p[i]
		}
		p[i] -= a.lr * step
	}
}

// refSGD updates p and mom in place (mom nil without momentum).
func refSGD(p, g, mom []float64, lr, mu, wd, gs float64) {
	for i := range p {
		gi := g[i]*gs + wd*p[i]
		if mom != nil {
			mom[i] = mu*mom[i] + gi
			gi = mom[i]
		}
		p[i] -= lr * gi
	}
}
