// Package reference is trainmem's reference GPT-2, a helper of its tests and
// benchmarks (no command links it).
package reference

// The reference GPT-2: the same model as Build's, written only with
// gorgonia's built-in ops, differentiated by gorgonia.Grad and run on
// gorgonia's TapeMachine. It shares nothing with trainmem's ops or executor
// but the parameter table, so it is the independent check of the executor
// (loss and every gradient) and the baseline of the speed benchmark. It is an
// ordinary gorgonia program on purpose: no fused ops, no tricks. It is not fast
// and allocates fresh values on every step (the TapeMachine does).

import (
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"trainmem/model"
)

// Model is GPT-2 on gorgonia's TapeMachine for one batch shape.
type Model struct {
	Config model.Config
	B, T   int
	Dtype  tensor.Dtype

	g       *G.ExprGraph
	tokens  *G.Node // Int (B·T): ByIndices wants tensor.Int indices
	onehot  *G.Node // (B·T, V): one-hot targets, bound every step
	params  []*G.Node
	loss    *G.Node
	grads   G.Nodes
	machine G.VM
}

// New builds the reference graph of cfg for batches of B sequences
// of T tokens (T ≤ cfg.Context), in dt (tensor.Float32 or tensor.Float64).
func New(cfg model.Config, B, T int, dt tensor.Dtype) (r *Model, err error) {
	if err := model.CheckGraph(cfg, B, T, dt); err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	// gorgonia reports some errors by panicking (NewTapeMachine, shape
	// mismatches deep inside ops): return them as errors.
	defer func() {
		if p := recover(); p != nil {
			r, err = nil, fmt.Errorf("reference: building the reference graph: gorgonia panicked: %v", p)
		}
	}()
	r = &Model{Config: cfg, B: B, T: T, Dtype: dt, g: G.NewGraph()}
	if err := r.build(); err != nil {
		return nil, fmt.Errorf("reference: building the reference graph: %w", err)
	}
	r.machine = G.NewTapeMachine(r.g)
	return r, nil
}

// refBuilder threads the first error through the graph construction so that
// the model reads as a formula.
type refBuilder struct {
	g   *G.ExprGraph
	dt  tensor.Dtype
	err error
}

func (b *refBuilder) do(f func() (*G.Node, error)) *G.Node {
	if b.err != nil {
		return nil
	}
	n, err := f()
	if err != nil {
		b.err = err
	}
	return n
}

// scalar is a constant of the graph's dtype.
func (b *refBuilder) scalar(v float64) *G.Node {
	if b.dt == tensor.Float32 {
		return G.NewConstant(float32(v))
	}
	return G.NewConstant(v)
}

func (r *Model) build() error {
	cfg, B, T := r.Config, r.B, r.T
	N, C, V, NH := B*T, cfg.Hidden, cfg.Vocab, cfg.Heads
	hs := C / NH
	b := &refBuilder{g: r.g, dt: r.Dtype}
	g := r.g

	r.tokens = G.NewVector(g, tensor.Int, G.WithShape(N), G.WithName("tokens"))
	r.onehot = G.NewMatrix(g, r.Dtype, G.WithShape(N, V), G.WithName("onehot_targets"))
	byName := map[string]*G.Node{}
	for _, p := range cfg.Params() {
		n := G.NewTensor(g, r.Dtype, len(p.Shape), G.WithShape(p.Shape...), G.WithName(p.Name))
		r.params = append(r.params, n)
		byName[p.Name] = n
	}
	P := func(name string) *G.Node { return byName[name] }

	// Causal mask added to the attention scores: 0 on and below the
	// diagonal, -1e9 above it (exp underflows to exactly 0).
	mask := make([]float64, B*NH*T*T)
	for i := range mask {
		t, s := (i/T)%T, i%T
		if s > t {
			mask[i] = -1e9
		}
	}
	maskNode := G.NewConstant(r.tensorOf([]int{B * NH, T, T}, mask), G.WithName("causal_mask"))

	// x = wte[tokens] + wpe[positions]: (N, C)
	tok := b.do(func() (*G.Node, error) { return G.ByIndices(P("wte"), r.tokens, 0) })
	x := tok
	if cfg.Positions == model.PosLearned {
		// Position ids 0..T-1 for each sequence of the batch.
		pos := make([]int, N)
		for i := range pos {
			pos[i] = i % T
		}
		posIDs := G.NewConstant(tensor.New(tensor.WithShape(N), tensor.WithBacking(pos)), G.WithName("positions"))
		pe := b.do(func() (*G.Node, error) { return G.ByIndices(P("wpe"), posIDs, 0) })
		x = b.do(func() (*G.Node, error) { return G.Add(tok, pe) })
	}

	layerNorm := func(x, w, bias *G.Node) *G.Node {
		mean := b.do(func() (*G.Node, error) { return G.Mean(x, 1) })                                         // (N)
		xc := b.do(func() (*G.Node, error) { return G.BroadcastSub(x, mean, nil, []byte{1}) })                // (N, C)
		sq := b.do(func() (*G.Node, error) { return G.Square(xc) })                                           // (N, C)
		variance := b.do(func() (*G.Node, error) { return G.Mean(sq, 1) })                                    // (N)
		ve := b.do(func() (*G.Node, error) { return G.Add(variance, b.scalar(float64(float32(cfg.Eps())))) }) // (N)
		rstd := b.do(func() (*G.Node, error) { return G.Pow(ve, b.scalar(-0.5)) })                            // (N), not InverseSqrt: its gradient is wrong
		xhat := b.do(func() (*G.Node, error) { return G.BroadcastHadamardProd(xc, rstd, nil, []byte{1}) })    // (N, C)
		y := b.do(func() (*G.Node, error) { return G.BroadcastHadamardProd(xhat, w, nil, []byte{0}) })        // (N, C)
		return b.do(func() (*G.Node, error) { return G.BroadcastAdd(y, bias, nil, []byte{0}) })
	}
	rmsNorm := func(x, w *G.Node) *G.Node {
		sq := b.do(func() (*G.Node, error) { return G.Square(x) })                                        // (N, C)
		ms := b.do(func() (*G.Node, error) { return G.Mean(sq, 1) })                                      // (N)
		ve := b.do(func() (*G.Node, error) { return G.Add(ms, b.scalar(float64(float32(cfg.Eps())))) })   // (N)
		rstd := b.do(func() (*G.Node, error) { return G.Pow(ve, b.scalar(-0.5)) })                        // (N)
		xhat := b.do(func() (*G.Node, error) { return G.BroadcastHadamardProd(x, rstd, nil, []byte{1}) }) // (N, C)
		return b.do(func() (*G.Node, error) { return G.BroadcastHadamardProd(xhat, w, nil, []byte{0}) })
	}
	norm := func(x *G.Node, name string) *G.Node {
		if cfg.Norm == model.NormRMS {
			return rmsNorm(x, P(name+".w"))
		}
		return layerNorm(x, P(name+".w"), P(name+".b"))
	}
	linear := func(x, w, bias *G.Node) *G.Node { // x (N, in), w (out, in); bias nil: none
		in, out := w.Shape()[1], w.Shape()[0]
		x3 := b.do(func() (*G.Node, error) { return G.Reshape(x, tensor.Shape{1, N, in}) })
		w3 := b.do(func() (*G.Node, error) { return G.Reshape(w, tensor.Shape{1, out, in}) })
		y := b.do(func() (*G.Node, error) { return G.BatchedMatMul(x3, w3, false, true) }) // (1, N, out)
		y = b.do(func() (*G.Node, error) { return G.Reshape(y, tensor.Shape{N, out}) })
		if bias == nil {
			return y
		}
		return b.do(func() (*G.Node, error) { return G.BroadcastAdd(y, bias, nil, []byte{0}) })
	}
	// rope rotates q or k (N, C) as Hugging Face's apply_rotary_pos_emb:
	// x·cos + rotate_half(x)·sin, rotate_half(x) = [−x2, x1] of a head's
	// halves, the angle t·θ^(-2i/hs) of the row's position t and the
	// channel's pair i, the cosines and sines constants of the graph.
	var cosC, sinC *G.Node
	if cfg.Positions == model.PosRoPE {
		M := N * NH
		cv, sv := make([]float64, M*hs), make([]float64, M*hs)
		for m := range M {
			t := float64((m / NH) % T)
			for j := range hs {
				ang := t * math.Pow(cfg.Theta(), -2*float64(j%(hs/2))/float64(hs))
				cv[m*hs+j], sv[m*hs+j] = math.Cos(ang), math.Sin(ang)
			}
		}
		cosC = G.NewConstant(r.tensorOf([]int{M, hs}, cv), G.WithName("rope_cos"))
		sinC = G.NewConstant(r.tensorOf([]int{M, hs}, sv), G.WithName("rope_sin"))
	}
	rope := func(x *G.Node) *G.Node {
		M := N * NH
		halves := b.do(func() (*G.Node, error) { return G.Reshape(x, tensor.Shape{M, 2, hs / 2}) })
		x1 := b.do(func() (*G.Node, error) { return G.Slice(halves, nil, G.S(0)) }) // by index (see mlp)
		x2 := b.do(func() (*G.Node, error) { return G.Slice(halves, nil, G.S(1)) })
		nx2 := b.do(func() (*G.Node, error) { return G.Neg(x2) })
		rot := b.do(func() (*G.Node, error) { return G.Concat(1, nx2, x1) }) // (M, hs)
		xf := b.do(func() (*G.Node, error) { return G.Reshape(x, tensor.Shape{M, hs}) })
		a := b.do(func() (*G.Node, error) { return G.HadamardProd(xf, cosC) })
		c := b.do(func() (*G.Node, error) { return G.HadamardProd(rot, sinC) })
		y := b.do(func() (*G.Node, error) { return G.Add(a, c) })
		return b.do(func() (*G.Node, error) { return G.Reshape(y, tensor.Shape{N, C}) })
	}
	// repeat gives each query head its group's key or value head, x (N,
	// KV, hs) → (N, NH, hs), as Hugging Face's repeat_kv, written as the
	// product with a constant 0/1 matrix E (KV, NH), E[g, h] = 1 where
	// query head h is of group g: its gradient sums over the group.
	KV := cfg.KV()
	var groupsC *G.Node
	if KV != NH {
		ev := make([]float64, KV*NH)
		for h := range NH {
			ev[h/(NH/KV)*NH+h] = 1
		}
		groupsC = G.NewConstant(r.tensorOf([]int{KV, NH}, ev), G.WithName("kv_groups"))
	}
	repeat := func(x *G.Node) *G.Node {
		if groupsC == nil {
			return x
		}
		xt := b.do(func() (*G.Node, error) { return G.Transpose(x, 0, 2, 1) })                // (N, hs, KV)
		xt = b.do(func() (*G.Node, error) { return G.Reshape(xt, tensor.Shape{N * hs, KV}) }) // rows
		e := b.do(func() (*G.Node, error) { return G.Mul(xt, groupsC) })                      // (N·hs, NH)
		e = b.do(func() (*G.Node, error) { return G.Reshape(e, tensor.Shape{N, hs, NH}) })
		return b.do(func() (*G.Node, error) { return G.Transpose(e, 0, 2, 1) }) // (N, NH, hs)
	}
	// heads is part 0 (q), 1 (k) or 2 (v) of qkv (N, (NH + 2·KV)·hs) as
	// (B·NH, T, hs): the part's heads taken as a range of qkv seen as (N,
	// NH + 2·KV, hs), in heads rather than channels (see mlp; head counts
	// are below 256), a key or value head repeated over its group, the
	// rotation applied to q and the repeated k (rotating a head and then
	// repeating it is repeating and then rotating it).
	heads := func(qkv *G.Node, part int) *G.Node { // → (B·NH, T, hs)
		q3 := b.do(func() (*G.Node, error) { return G.Reshape(qkv, tensor.Shape{N, NH + 2*KV, hs}) })
		lo, hi := [3]int{0, NH, NH + KV}[part], [3]int{NH, NH + KV, NH + 2*KV}[part]
		s := b.do(func() (*G.Node, error) { return G.Slice(q3, nil, G.S(lo, hi)) })
		s = b.do(func() (*G.Node, error) { return G.Reshape(s, tensor.Shape{N, hi - lo, hs}) }) // (N, heads, hs): a range of one head drops the axis
		if part > 0 {
			s = repeat(s)
		}
		if cosC != nil && part < 2 {
			s = rope(s)
		}
		s = b.do(func() (*G.Node, error) { return G.Reshape(s, tensor.Shape{B, T, NH, hs}) })     // (B, T, NH, hs)
		s = b.do(func() (*G.Node, error) { return G.Transpose(s, 0, 2, 1, 3) })                   // (B, NH, T, hs)
		return b.do(func() (*G.Node, error) { return G.Reshape(s, tensor.Shape{B * NH, T, hs}) }) // (B·NH, T, hs)
	}
	attention := func(qkv *G.Node) *G.Node {
		q, k, v := heads(qkv, 0), heads(qkv, 1), heads(qkv, 2)
		att := b.do(func() (*G.Node, error) { return G.BatchedMatMul(q, k, false, true) })            // (B·NH, T, T)
		att = b.do(func() (*G.Node, error) { return G.Mul(att, b.scalar(1/math.Sqrt(float64(hs)))) }) // scaled
		att = b.do(func() (*G.Node, error) { return G.Add(att, maskNode) })                           // causal
		att = b.do(func() (*G.Node, error) { return G.Reshape(att, tensor.Shape{B * NH * T, T}) })    // rows
		att = b.do(func() (*G.Node, error) { return G.SoftMax(att, 1) })                              // over keys
		att = b.do(func() (*G.Node, error) { return G.Reshape(att, tensor.Shape{B * NH, T, T}) })     // (B·NH, T, T)
		y := b.do(func() (*G.Node, error) { return G.BatchedMatMul(att, v) })                         // (B·NH, T, hs)
		y = b.do(func() (*G.Node, error) { return G.Reshape(y, tensor.Shape{B, NH, T, hs}) })         // (B, NH, T, hs)
		y = b.do(func() (*G.Node, error) { return G.Transpose(y, 0, 2, 1, 3) })                       // (B, T, NH, hs)
		return b.do(func() (*G.Node, error) { return G.Reshape(y, tensor.Shape{N, C}) })              // (N, C)
	}
	gelu := func(x *G.Node) *G.Node { // 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³)))
		x3 := b.do(func() (*G.Node, error) { return G.Cube(x) })
		in := b.do(func() (*G.Node, error) { return G.Mul(x3, b.scalar(0.044715)) })
		in = b.do(func() (*G.Node, error) { return G.Add(x, in) })
		in = b.do(func() (*G.Node, error) { return G.Mul(in, b.scalar(math.Sqrt(2/math.Pi))) })
		th := b.do(func() (*G.Node, error) { return G.Tanh(in) })
		th = b.do(func() (*G.Node, error) { return G.Add(th, b.scalar(1)) })
		y := b.do(func() (*G.Node, error) { return G.HadamardProd(x, th) })
		return b.do(func() (*G.Node, error) { return G.Mul(y, b.scalar(0.5)) })
	}

	// mlp is the block's MLP on h: GPT-2's proj(gelu(fc(h))), or SwiGLU's
	// proj(silu(gate)·up), gate and up the two halves of fc's rows, each
	// its own product. The halves are taken as index 0 and 1 of fc.w seen
	// as (2, F, C): gorgonia v0.9.18's sliceOp hashes its start and end as
	// one byte each, so S(0, F) and S(F, 2F) of F = 256 hash alike and the
	// graph merges the two slices into one node.
	mlp := func(h *G.Node, p string) *G.Node {
		w, bias := P(p+"mlp.fc.w"), P(p+"mlp.fc.b")
		if cfg.MLP != model.MLPSwiGLU {
			return linear(gelu(linear(h, w, bias)), P(p+"mlp.proj.w"), P(p+"mlp.proj.b"))
		}
		F := w.Shape()[0] / 2
		w2 := b.do(func() (*G.Node, error) { return G.Reshape(w, tensor.Shape{2, F, C}) })
		var b2 *G.Node
		if bias != nil {
			b2 = b.do(func() (*G.Node, error) { return G.Reshape(bias, tensor.Shape{2, F}) })
		}
		half := func(i int) *G.Node {
			wh := b.do(func() (*G.Node, error) { return G.Slice(w2, G.S(i)) })
			var bh *G.Node
			if b2 != nil {
				bh = b.do(func() (*G.Node, error) { return G.Slice(b2, G.S(i)) })
			}
			return linear(h, wh, bh)
		}
		g, u := half(0), half(1)
		// σ(g) = (1 + e^(-g))^-1 from ops whose gradients were probed
		// against finite differences (design.md).
		e := b.do(func() (*G.Node, error) { return G.Exp(b.do(func() (*G.Node, error) { return G.Neg(g) })) })
		d := b.do(func() (*G.Node, error) { return G.Add(e, b.scalar(1)) })
		sg := b.do(func() (*G.Node, error) { return G.Pow(d, b.scalar(-1)) })
		silu := b.do(func() (*G.Node, error) { return G.HadamardProd(g, sg) })
		y := b.do(func() (*G.Node, error) { return G.HadamardProd(silu, u) })
		return linear(y, P(p+"mlp.proj.w"), P(p+"mlp.proj.b"))
	}

	for l := 0; l < cfg.Layers; l++ {
		p := fmt.Sprintf("h%d.", l)
		h := norm(x, p+"ln1")
		qkv := linear(h, P(p+"attn.qkv.w"), P(p+"attn.qkv.b"))
		a := linear(attention(qkv), P(p+"attn.proj.w"), P(p+"attn.proj.b"))
		x = b.do(func() (*G.Node, error) { return G.Add(x, a) })
		h = norm(x, p+"ln2")
		m := mlp(h, p)
		x = b.do(func() (*G.Node, error) { return G.Add(x, m) })
	}
	h := norm(x, "lnf")
	head := P("wte")
	if cfg.Untied {
		head = P("lm_head.w")
	}
	logits := linear(h, head, nil)                                                        // (N, V)
	logp := b.do(func() (*G.Node, error) { return G.LogSoftMax(logits, 1) })              // (N, V)
	picked := b.do(func() (*G.Node, error) { return G.HadamardProd(logp, r.onehot) })     // (N, V)
	sum := b.do(func() (*G.Node, error) { return G.Sum(picked) })                         // scalar
	r.loss = b.do(func() (*G.Node, error) { return G.Mul(sum, b.scalar(-1/float64(N))) }) // mean NLL
	r.grads = G.Nodes{}
	if b.err != nil {
		return b.err
	}
	grads, err := G.Grad(r.loss, r.params...)
	if err != nil {
		return err
	}
	r.grads = grads
	return nil
}

// tensorOf makes a dense tensor of the reference's dtype from float64 values.
func (r *Model) tensorOf(shape []int, v []float64) *tensor.Dense {
	if r.Dtype == tensor.Float32 {
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x)
		}
		return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(f))
	}
	return tensor.New(tensor.WithShape(shape...), tensor.WithBacking(append([]float64(nil), v...)))
}

// SetParams binds the flat parameter vector (Config.Params() order),
// converted to the reference's dtype. It stays bound for every Run until the
// next SetParams.
func (r *Model) SetParams(params []float64) error {
	if want := r.Config.NumParams(); int64(len(params)) != want {
		return fmt.Errorf("reference: %d parameters, want %d for %s", len(params), want, r.Config.Name)
	}
	for i, p := range r.Config.Params() {
		if err := G.Let(r.params[i], r.tensorOf(p.Shape, params[p.Offset:p.Offset+p.Count])); err != nil {
			return fmt.Errorf("reference: binding %s: %w", p.Name, err)
		}
	}
	return nil
}

// SetParams32 is SetParams for float32 parameters, the executor's format
// (the conversion through float64 is exact).
func (r *Model) SetParams32(params []float32) error {
	p := make([]float64, len(params))
	for i, v := range params {
		p[i] = float64(v)
	}
	return r.SetParams(p)
}

// Run runs one forward and backward pass on the bound parameters: tokens
// and targets are B·T ids in [0, V). It returns the mean cross-entropy; the
// gradients are then available from Grads.
func (r *Model) Run(tokens, targets []int32) (loss float64, err error) {
	N, V := r.B*r.T, r.Config.Vocab
	if len(tokens) != N || len(targets) != N {
		return 0, fmt.Errorf("reference: %d tokens and %d targets, want B·T = %d of each", len(tokens), len(targets), N)
	}
	ids := make([]int, N)
	onehot := make([]float64, N*V)
	for i := range N {
		if t := tokens[i]; t < 0 || int(t) >= V {
			return 0, fmt.Errorf("reference: token id %d at position %d is outside the vocabulary [0, %d)", t, i, V)
		}
		if t := targets[i]; t < 0 || int(t) >= V {
			return 0, fmt.Errorf("reference: target id %d at position %d is outside the vocabulary [0, %d)", t, i, V)
		}
		ids[i] = int(tokens[i])
		onehot[i*V+int(targets[i])] = 1
	}
	for _, p := range r.params {
		if p.Value() == nil {
			return 0, fmt.Errorf("reference: no parameters bound (call SetParams first)")
		}
	}
	defer func() {
		if p := recover(); p != nil {
			loss, err = 0, fmt.Errorf("reference: gorgonia panicked: %v", p)
		}
	}()
	if err := G.Let(r.tokens, tensor.New(tensor.WithShape(N), tensor.WithBacking(ids))); err != nil {
		return 0, fmt.Errorf("reference: binding tokens: %w", err)
	}
	if err := G.Let(r.onehot, r.tensorOf([]int{N, V}, onehot)); err != nil {
		return 0, fmt.Errorf("reference: binding targets: %w", err)
	}
	defer r.machine.Reset()
	if err := r.machine.RunAll(); err != nil {
		return 0, fmt.Errorf("reference: %w", err)
	}
	if loss, err = scalarOf(r.loss.Value()); err != nil {
		return 0, fmt.Errorf("reference: loss: %w", err)
	}
	return loss, nil
}

// Grads returns the flat gradient (Config.Params() order) of the last Run.
func (r *Model) Grads() ([]float64, error) {
	grads := make([]float64, r.Config.NumParams())
	for i, p := range r.Config.Params() {
		if err := copyValue(grads[p.Offset:p.Offset+p.Count], r.grads[i].Value()); err != nil {
			return nil, fmt.Errorf("reference: gradient of %s: %w", p.Name, err)
		}
	}
	return grads, nil
}

// Step is SetParams, Run and Grads: one forward and backward pass at params
// (flat, Config.Params() order), returning the mean cross-entropy and the
// flat gradient in the same order.
func (r *Model) Step(params []float64, tokens, targets []int32) (loss float64, grads []float64, err error) {
	return r.step(r.SetParams(params), tokens, targets)
}

// Step32 is Step for float32 parameters.
func (r *Model) Step32(params []float32, tokens, targets []int32) (loss float64, grads []float64, err error) {
	return r.step(r.SetParams32(params), tokens, targets)
}

// step is Run and Grads once the parameters are bound (bound: the binding's
// error).
func (r *Model) step(bound error, tokens, targets []int32) (loss float64, grads []float64, err error) {
	if bound != nil {
		return 0, nil, bound
	}
	if loss, err = r.Run(tokens, targets); err != nil {
		return 0, nil, err
	}
	if grads, err = r.Grads(); err != nil {
		return 0, nil, err
	}
	return loss, grads, nil
}

// Close releases the TapeMachine.
func (r *Model) Close() error {
	if r.machine != nil {
		return r.machine.Close()
	}
	return nil
}

func scalarOf(v G.Value) (float64, error) {
	switch x := v.Data().(type) {
	case float32:
		return float64(x), nil
	case float64:
		return x, nil
	case []float32:
		if len(x) == 1 {
			return float64(x[0]), nil
		}
	case []float64:
		if len(x) == 1 {
			return x[0], nil
		}
	}
	return 0, fmt.Errorf("value %v (%T) is not a float scalar", v, v.Data())
}

func copyValue(dst []float64, v G.Value) error {
	if v == nil {
		return fmt.Errorf("no value computed")
	}
	if d, ok := v.(*tensor.Dense); ok && d.RequiresIterator() {
		// a transposed or sliced view: its backing is not in logical order
		v = d.Materialize().(*tensor.Dense)
	}
	switch x := v.Data().(type) {
	case []float32:
		if len(x) != len(dst) {
			return fmt.Errorf("%d values, want %d", len(x), len(dst))
		}
		for i, f := range x {
			dst[i] = float64(f)
		}
	case []float64:
		if len(x) != len(dst) {
			return fmt.Errorf("%d values, want %d", len(x), len(dst))
		}
		copy(dst, x)
	default:
		return fmt.Errorf("value of type %T, want []float32 or []float64", v.Data())
	}
	return nil
}
