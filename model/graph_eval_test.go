package model

// A naive float64 interpreter of Build's graph, for tests only: every op is
// evaluated with the semantics its doc comment (and the cuda.Kernels method it
// is lowered to) states. Comparing it with the reference checks the graph's
// wiring, the backward graph's wiring, and that the documented semantics are
// GPT-2's, independently of package train's executor.

import (
	"fmt"
	"math"
	"trainmem/cuda"
	"trainmem/cuda/conformance"

	G "gorgonia.org/gorgonia"
)

// evalGraph runs gr in float64 and returns the loss and the flat gradient.
func evalGraph(gr *Graph, params []float64, tokens, targets []int32, dloss float64) (float64, []float64, error) {
	order, err := Order(gr.G)
	if err != nil {
		return 0, nil, err
	}
	val := map[*G.Node][]float64{}
	ints := func(v []int32) []float64 {
		f := make([]float64, len(v))
		for i, x := range v {
			f[i] = float64(x)
		}
		return f
	}
	val[gr.Tokens] = ints(tokens)
	val[gr.Targets] = ints(targets)
	val[gr.DLoss] = []float64{dloss}
	for i, p := range gr.Config.Params() {
		val[gr.Params[i]] = params[p.Offset : p.Offset+p.Count]
	}
	for _, n := range order {
		if n.Op() == nil {
			if _, ok := val[n]; !ok {
				return 0, nil, fmt.Errorf("input %s is not bound", n.Name())
			}
			continue
		}
		var in [][]float64
		for _, a := range Args(n) {
			v, ok := val[a]
			if !ok {
				return 0, nil, fmt.Errorf("%s: argument %s not computed", n.Name(), a.Name())
			}
			in = append(in, v)
		}
		out, err := evalOp(n.Op(), in)
		if err != nil {
			return 0, nil, fmt.Errorf("%s: %w", n.Name(), err)
		}
		if len(out) != n.Shape().TotalSize() && !(len(out) == 1 && n.Shape().IsScalar()) {
			return 0, nil, fmt.Errorf("%s: %d values for shape %v", n.Name(), len(out), n.Shape())
		}
		val[n] = out
	}
	grads := make([]float64, 0, len(params))
	for _, d := range gr.Grads {
		grads = append(grads, val[d]...)
	}
	return val[gr.Loss][0], grads, nil
}

func evalOp(op G.Op, in [][]float64) ([]float64, error) {
	switch op := op.(type) {
	case *EmbeddingOp:
		tok, wte, wpe := in[0], in[1], in[2]
		C := op.C
		y := make([]float64, op.B*op.T*C)
		for i := range op.B * op.T {
			id, t := int(tok[i]), i%op.T
			for c := range C {
				y[i*C+c] = wte[id*C+c] + wpe[t*C+c]
			}
		}
		return y, nil
	case *EmbeddingBackwardTokensOp:
		dy, tok := in[0], in[1]
		C := op.C
		d := make([]float64, op.V*C)
		for i := range op.B * op.T {
			id := int(tok[i])
			for c := range C {
				d[id*C+c] += dy[i*C+c]
			}
		}
		return d, nil
	case *EmbeddingBackwardPositionsOp:
		dy, C := in[0], op.C
		d := make([]float64, op.Ctx*C)
		for i := range op.B * op.T {
			t := i % op.T
			for c := range C {
				d[t*C+c] += dy[i*C+c]
			}
		}
		return d, nil
	case *NormStatsOp:
		x, N, C, k := in[0], op.N, op.C, op.Kind.Stats()
		s := make([]float64, k*N)
		for i := range N {
			row := x[i*C : (i+1)*C]
			var m, v float64
			if op.Kind.Centred() {
				for _, a := range row {
					m += a
				}
				m /= float64(C)
				s[2*i] = m
			}
			for _, a := range row {
				v += (a - m) * (a - m)
			}
			v /= float64(C)
			s[k*i+k-1] = 1 / math.Sqrt(v+float64(op.Eps))
		}
		return s, nil
	case *NormOp:
		x, s, w := in[0], in[1], in[2]
		y := make([]float64, op.N*op.C)
		for i := range op.N {
			m, r := evalRowStats(op.Kind, s, i)
			for c := range op.C {
				y[i*op.C+c] = (x[i*op.C+c] - m) * r * w[c]
				if op.Kind.Bias() {
					y[i*op.C+c] += in[3][c]
				}
			}
		}
		return y, nil
	case *NormBackwardXOp:
		dy, x, s, w := in[0], in[1], in[2], in[3]
		N, C := op.N, op.C
		dx := make([]float64, N*C)
		for i := range N {
			m, r := evalRowStats(op.Kind, s, i)
			var mg, mgx float64
			for c := range C {
				g := dy[i*C+c] * w[c]
				xh := (x[i*C+c] - m) * r
				mg += g
				mgx += g * xh
			}
			mg /= float64(C)
			mgx /= float64(C)
			if !op.Kind.Bias() {
				mg = 0
			}
			for c := range C {
				g := dy[i*C+c] * w[c]
				xh := (x[i*C+c] - m) * r
				dx[i*C+c] = r * (g - mg - xh*mgx)
			}
		}
		return dx, nil
	case *NormBackwardWOp:
		dy, x, s := in[0], in[1], in[2]
		dw := make([]float64, op.C)
		for i := range op.N {
			m, r := evalRowStats(op.Kind, s, i)
			for c := range op.C {
				dw[c] += dy[i*op.C+c] * (x[i*op.C+c] - m) * r
			}
		}
		return dw, nil
	case *SumRowsOp:
		d := make([]float64, op.C)
		for i := range op.N {
			for c := range op.C {
				d[c] += in[0][i*op.C+c]
			}
		}
		return d, nil
	case *LinearOp:
		// x (N, In), w (Out, In): y = x·wᵀ (+ bias), (N, Out).
		var bias []float64
		if op.Bias {
			bias = in[2]
		}
		return matMul(op.N, op.Out, op.In, rowMajor(in[0], op.In), colMajor(in[1], op.In), bias), nil
	case *LinearBackwardXOp:
		// dy (N, Out), w (Out, In): dx = dy·w, (N, In).
		return matMul(op.N, op.In, op.Out, rowMajor(in[0], op.Out), rowMajor(in[1], op.In), nil), nil
	case *LinearBackwardWOp:
		// dy (N, Out), x (N, In): dw = dyᵀ·x, (Out, In).
		return matMul(op.Out, op.In, op.N, colMajor(in[0], op.Out), rowMajor(in[1], op.In), nil), nil
	case *AttentionProbsOp:
		return conformance.RefAttentionProbs(in[0], op.B, op.T, op.C, op.NH, op.KV), nil
	case *AttentionOutOp:
		qkv, p := in[0], in[1]
		B, T, C, NH := op.B, op.T, op.C, op.NH
		hs, G, W := C/NH, op.NH/op.KV, cuda.QKVWidth(op.C, op.NH, op.KV)
		y := make([]float64, B*T*C)
		for b := range B {
			for h := range NH {
				for t := range T {
					for s := range T {
						pr := p[((b*NH+h)*T+t)*T+s]
						for e := range hs {
							y[(b*T+t)*C+h*hs+e] += pr * qkv[(b*T+s)*W+C+(op.KV+h/G)*hs+e]
						}
					}
				}
			}
		}
		return y, nil
	case *AttentionBackwardOp:
		dy, qkv, p := in[0], in[1], in[2]
		B, T, C, NH := op.B, op.T, op.C, op.NH
		hs, G, W := C/NH, op.NH/op.KV, cuda.QKVWidth(op.C, op.NH, op.KV)
		scale := 1 / math.Sqrt(float64(hs))
		d := make([]float64, B*T*W)
		q := func(b, t, h, e int) int { return (b*T+t)*W + h*hs + e }
		k := func(b, t, h, e int) int { return (b*T+t)*W + C + h/G*hs + e }
		v := func(b, t, h, e int) int { return (b*T+t)*W + C + (op.KV+h/G)*hs + e }
		for b := range B {
			for h := range NH {
				for t := range T {
					// dP[t, s] = dy[t]·v[s]; dS = P∘(dP - Σ P∘dP)
					dp := make([]float64, T)
					var dot float64
					for s := range T {
						pr := p[((b*NH+h)*T+t)*T+s]
						for e := range hs {
							dp[s] += dy[(b*T+t)*C+h*hs+e] * qkv[v(b, s, h, e)]
							d[v(b, s, h, e)] += pr * dy[(b*T+t)*C+h*hs+e] // dv
						}
						dot += pr * dp[s]
					}
					for s := range T {
						ds := p[((b*NH+h)*T+t)*T+s] * (dp[s] - dot) * scale
						for e := range hs {
							d[q(b, t, h, e)] += ds * qkv[k(b, s, h, e)] // dq
							d[k(b, s, h, e)] += ds * qkv[q(b, t, h, e)] // dk
						}
					}
				}
			}
		}
		return d, nil
	case *GELUOp:
		y := make([]float64, len(in[0]))
		for i, x := range in[0] {
			y[i] = 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
		}
		return y, nil
	case *GELUBackwardOp:
		dy, x := in[0], in[1]
		d := make([]float64, len(x))
		k := math.Sqrt(2 / math.Pi)
		for i, v := range x {
			u := k * (v + 0.044715*v*v*v)
			th := math.Tanh(u)
			du := k * (1 + 3*0.044715*v*v)
			d[i] = dy[i] * (0.5*(1+th) + 0.5*v*(1-th*th)*du)
		}
		return d, nil
	case *AddOp:
		y := make([]float64, len(in[0]))
		for i := range y {
			y[i] = in[0][i] + in[1][i]
		}
		return y, nil
	case *CrossEntropyOp:
		logits, tg := in[0], in[1]
		var loss float64
		for i := range op.N {
			row := logits[i*op.V : (i+1)*op.V]
			loss += logSumExp(row) - row[int(tg[i])]
		}
		return []float64{loss / float64(op.N)}, nil
	case *CrossEntropyBackwardOp:
		dl, logits, tg := in[0][0], in[1], in[2]
		d := make([]float64, op.N*op.V)
		for i := range op.N {
			row := logits[i*op.V : (i+1)*op.V]
			lse := logSumExp(row)
			for v := range op.V {
				pr := math.Exp(row[v] - lse)
				if v == int(tg[i]) {
					pr--
				}
				d[i*op.V+v] = pr * dl / float64(op.N)
			}
		}
		return d, nil
	}
	if IsGradAccumulation(op) {
		y := make([]float64, len(in[0]))
		for i := range y {
			y[i] = in[0][i] + in[1][i]
		}
		return y, nil
	}
	return nil, fmt.Errorf("no evaluation for op %v (%T)", op, op)
}

// matrix is a view of a flat slice as a matrix: element (r, c) is
// v[r*rs+c*cs].
type matrix struct {
	v      []float64
	rs, cs int
}

// rowMajor is v as a matrix of rows of n elements; colMajor is its
// transpose.
func rowMajor(v []float64, n int) matrix { return matrix{v, n, 1} }
func colMajor(v []float64, n int) matrix { return matrix{v, 1, n} }

func (m matrix) at(r, c int) float64 { return m.v[r*m.rs+c*m.cs] }

// matMul is the product a·b of an I×K matrix a and a K×J matrix b as a
// row-major I×J slice, plus bias[j] in every row where bias is not nil
// (added first, then the products in the order of k).
func matMul(I, J, K int, a, b matrix, bias []float64) []float64 {
	y := make([]float64, I*J)
	for i := range I {
		for j := range J {
			var s float64
			if bias != nil {
				s = bias[j]
			}
			for k := range K {
				s += a.at(i, k) * b.at(k, j)
			}
			y[i*J+j] = s
		}
	}
	return y
}

func logSumExp(row []float64) float64 {
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, v)
	}
	var s float64
	for _, v := range row {
		s += math.Exp(v - mx)
	}
	return mx + math.Log(s)
}

// evalRowStats is row i's (mean, rstd) of a norm's statistics: RMSNorm's
// mean is 0.
func evalRowStats(n Norm, s []float64, i int) (mean, rstd float64) {
	if n.Centred() {
		return s[2*i], s[2*i+1]
	}
	return 0, s[i]
}
