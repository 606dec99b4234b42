package conformance

// float64 references, written from the definitions in cuda.Kernels as
// plainly as possible: loops over the index space, no reuse of the
// devices' code. They are slow and that is fine: the suite's sizes are
// small.

import "math"

func refEmbedding(tokens []int32, wte, wpe []float64, B, T, C int) []float64 {
	out := make([]float64, B*T*C)
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			tok := int(tokens[b*T+t])
			for c := 0; c < C; c++ {
				out[(b*T+t)*C+c] = wte[tok*C+c] + wpe[t*C+c]
			}
		}
	}
	return out
}

func refEmbeddingBackwardTokens(dout []float64, tokens []int32, V, C int) []float64 {
	dwte := make([]float64, V*C)
	for i, tok := range tokens {
		for c := 0; c < C; c++ {
			dwte[int(tok)*C+c] += dout[i*C+c]
		}
	}
	return dwte
}

func refEmbeddingBackwardPositions(dout []float64, rows, B, T, C int) []float64 {
	dwpe := make([]float64, rows*C)
	for b := 0; b < B; b++ {
		for t := 0; t < T; t++ {
			for c := 0; c < C; c++ {
				dwpe[t*C+c] += dout[(b*T+t)*C+c]
			}
		}
	}
	return dwpe
}

// refLayerNormStats returns per row (mean, 1/sqrt(biased var + eps)).
func refLayerNormStats(x []float64, N, C int, eps float64) []float64 {
	st := make([]float64, 2*N)
	for i := 0; i < N; i++ {
		row := x[i*C : (i+1)*C]
		mean := 0.0
		for _, v := range row {
			mean += v
		}
		mean /= float64(C)
		vr := 0.0
		for _, v := range row {
			vr += (v - mean) * (v - mean)
		}
		vr /= float64(C)
		st[2*i], st[2*i+1] = mean, 1/math.Sqrt(vr+eps)
	}
	return st
}

func refLayerNorm(x, st, w, b []float64, N, C int) []float64 {
	y := make([]float64, N*C)
	for i := 0; i < N; i++ {
		for c := 0; c < C; c++ {
			y[i*C+c] = (x[i*C+c]-st[2*i])*st[2*i+1]*w[c] + b[c]
		}
	}
	return y
}

// refLayerNormBackward returns dx and dw from the formulas in the
// contract.
func refLayerNormBackward(dy, x, st, w []float64, N, C int) (dx, dw []float64) {
	dx = make([]float64, N*C)
	dw = make([]float64, C)
	for i := 0; i < N; i++ {
		mean, rstd := st[2*i], st[2*i+1]
		mg, mgx := 0.0, 0.0
		for c := 0; c < C; c++ {
			xhat := (x[i*C+c] - mean) * rstd
			g := dy[i*C+c] * w[c]
			mg += g / float64(C)
			mgx += g * xhat / float64(C)
			dw[c] += dy[i*C+c] * xhat
		}
		for c := 0; c < C; c++ {
			xhat := (x[i*C+c] - mean) * rstd
			dx[i*C+c] = rstd * (dy[i*C+c]*w[c] - mg - xhat*mgx)
		}
	}
	return dx, dw
}

func refSumRows(src []float64, N, C int) []float64 {
	d := make([]float64, C)
	for i := 0; i < N; i++ {
		for c := 0; c < C; c++ {
			d[c] += src[i*C+c]
		}
	}
	return d
}

// mm is a MatMul in plain numbers, with every default filled in.
type mm struct {
	tA, tB                    bool
	M, N, K                   int
	lda, ldb, ldc             int
	strideA, strideB, strideC int
	batch                     int
	alpha, beta               float64
}

// refMatMul returns C after C = alpha·op(A)·op(B) + beta·C; elements of C
// outside the M×N matrices are kept. With beta = 0, C is not read.
func refMatMul(m mm, a, b, c []float64) []float64 {
	out := append([]float64(nil), c...)
	for p := 0; p < m.batch; p++ {
		for i := 0; i < m.M; i++ {
			for j := 0; j < m.N; j++ {
				s := 0.0
				for k := 0; k < m.K; k++ {
					var av, bv float64
					if m.tA {
						av = a[p*m.strideA+k*m.lda+i]
					} else {
						av = a[p*m.strideA+i*m.lda+k]
					}
					if m.tB {
						bv = b[p*m.strideB+j*m.ldb+k]
					} else {
						bv = b[p*m.strideB+k*m.ldb+j]
					}
					s += av * bv
				}
				at := p*m.strideC + i*m.ldc + j
				if m.beta == 0 {
					out[at] = m.alpha * s
				} else {
					out[at] = m.alpha*s + m.beta*c[at]
				}
			}
		}
	}
	return out
}

const geluA = 0.044715

func refGELU(x []float64) []float64 {
	y := make([]float64, len(x))
	k := math.Sqrt(2 / math.Pi)
	for i, v := range x {
		y[i] = 0.5 * v * (1 + math.Tanh(k*(v+geluA*v*v*v)))
	}
	return y
}

// refGELUBackward differentiates refGELU by hand: with u = k·(x + a·x³),
// d/dx [x/2·(1+tanh u)] = (1+tanh u)/2 + x/2·sech²(u)·k·(1 + 3a·x²).
func refGELUBackward(dy, x []float64) []float64 {
	dx := make([]float64, len(x))
	k := math.Sqrt(2 / math.Pi)
	for i, v := range x {
		u := k * (v + geluA*v*v*v)
		sech := 1 / math.Cosh(u)
		dx[i] = dy[i] * ((1+math.Tanh(u))/2 + v/2*sech*sech*k*(1+3*geluA*v*v))
	}
	return dx
}

// qkvAt indexes q (part 0), k (1) or v (2) of head h, channel d, at batch
// b and time t, in a (B·T, 3C) buffer.
func qkvAt(part, b, t, h, d, T, C, hd int) int {
	return (b*T+t)*3*C + part*C + h*hd + d
}

// RefAttentionProbs is the float64 reference of Kernels.AttentionProbs:
// the causal softmax of q·kᵀ/sqrt(C/NH) per head. Package model's graph
// evaluator computes its attention with it too.
func RefAttentionProbs(qkv []float64, B, T, C, NH int) []float64 {
	hd := C / NH
	p := make([]float64, B*NH*T*T)
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			for t := 0; t < T; t++ {
				row := p[((b*NH+h)*T+t)*T : ((b*NH+h)*T+t+1)*T]
				mx := math.Inf(-1)
				for s := 0; s <= t; s++ {
					sc := 0.0
					for d := 0; d < hd; d++ {
						sc += qkv[qkvAt(0, b, t, h, d, T, C, hd)] * qkv[qkvAt(1, b, s, h, d, T, C, hd)]
					}
					row[s] = sc / math.Sqrt(float64(hd))
					mx = math.Max(mx, row[s])
				}
				sum := 0.0
				for s := 0; s <= t; s++ {
					row[s] = math.Exp(row[s] - mx)
					sum += row[s]
				}
				for s := 0; s <= t; s++ {
					row[s] /= sum
				}
			}
		}
	}
	return p
}

func refAttentionOut(qkv, p []float64, B, T, C, NH int) []float64 {
	hd := C / NH
	y := make([]float64, B*T*C)
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			for t := 0; t < T; t++ {
				for d := 0; d < hd; d++ {
					s := 0.0
					for u := 0; u < T; u++ {
						s += p[((b*NH+h)*T+t)*T+u] * qkv[qkvAt(2, b, u, h, d, T, C, hd)]
					}
					y[(b*T+t)*C+h*hd+d] = s
				}
			}
		}
	}
	return y
}

// refAttentionBackward is the gradient of refAttentionOut(qkv,
// RefAttentionProbs(qkv)) with respect to qkv, given dy, written out by
// hand through the softmax.
func refAttentionBackward(dy, qkv, p []float64, B, T, C, NH int) []float64 {
	hd := C / NH
	scale := 1 / math.Sqrt(float64(hd))
	dqkv := make([]float64, len(qkv))
	for b := 0; b < B; b++ {
		for h := 0; h < NH; h++ {
			P := func(t, s int) float64 { return p[((b*NH+h)*T+t)*T+s] }
			dY := func(t, d int) float64 { return dy[(b*T+t)*C+h*hd+d] }
			for t := 0; t < T; t++ {
				// dP[t, s] = Σ_d dY[t, d]·v[s, d]; dS = P·(dP - Σ_s P·dP)
				dP := make([]float64, T)
				for s := 0; s <= t; s++ {
					for d := 0; d < hd; d++ {
						dP[s] += dY(t, d) * qkv[qkvAt(2, b, s, h, d, T, C, hd)]
					}
				}
				avg := 0.0
				for s := 0; s <= t; s++ {
					avg += P(t, s) * dP[s]
				}
				for s := 0; s <= t; s++ {
					dS := P(t, s) * (dP[s] - avg) * scale
					for d := 0; d < hd; d++ {
						dqkv[qkvAt(0, b, t, h, d, T, C, hd)] += dS * qkv[qkvAt(1, b, s, h, d, T, C, hd)]
						dqkv[qkvAt(1, b, s, h, d, T, C, hd)] += dS * qkv[qkvAt(0, b, t, h, d, T, C, hd)]
					}
				}
				// dV[s, d] += P[t, s]·dY[t, d]
				for s := 0; s <= t; s++ {
					for d := 0; d < hd; d++ {
						dqkv[qkvAt(2, b, s, h, d, T, C, hd)] += P(t, s) * dY(t, d)
					}
				}
			}
		}
	}
	return dqkv
}

// refSoftmaxSum returns a row's largest value mx and Σ exp(v - mx), the
// denominator of its max-subtracted softmax.
func refSoftmaxSum(row []float64) (mx, s float64) {
	mx = math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, v)
	}
	for _, v := range row {
		s += math.Exp(v - mx)
	}
	return mx, s
}

// refCrossEntropy returns the mean loss over the rows.
func refCrossEntropy(logits []float64, targets []int32, N, V int) float64 {
	total := 0.0
	for i := 0; i < N; i++ {
		row := logits[i*V : (i+1)*V]
		mx, s := refSoftmaxSum(row)
		total += mx + math.Log(s) - row[targets[i]]
	}
	return total / float64(N)
}

func refCrossEntropyBackward(logits []float64, targets []int32, dloss float64, N, V int) []float64 {
	d := make([]float64, N*V)
	for i := 0; i < N; i++ {
		row := logits[i*V : (i+1)*V]
		mx, s := refSoftmaxSum(row)
		for j, v := range row {
			pj := math.Exp(v-mx) / s
			if j == int(targets[i]) {
				pj--
			}
			d[i*V+j] = pj * dloss / float64(N)
		}
	}
	return d
}

// adamArgs are the Adam hyperparameters in float64, from the float32
// values the device receives.
type adamArgs struct {
	lr, b1, b2, eps, wd, gs float64
	decoupled               bool
	step                    int
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
