package train

import (
	"math"
	"strings"
	"testing"
	"time"

	"gorgonia.org/tensor"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/model/reference"
	"trainmem/train/data"
)

var tinyCfg = model.Config{Name: "tiny", Layers: 2, Hidden: 64, Heads: 4, Vocab: 256, Context: 64}

// mustPreset is the named preset.
func mustPreset(t testing.TB, name string) model.Config {
	t.Helper()
	c, err := model.Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// oneRank is one rank of cfg at batch B and sequence T: fp32, AdamW, no
// checkpointing.
func oneRank(cfg model.Config, B, T int) model.Setup {
	return model.Setup{Model: cfg, Batch: B, Seq: T, Optimizer: model.AdamW, Ranks: 1, TP: 1, PP: 1}
}

func withPrecision(s model.Setup, p model.Precision) model.Setup {
	s.Precision = p
	return s
}

// checked is s checked, as the layers above give it.
var checked = reference.Checked

func newTrainer(t testing.TB, dev cuda.Device, s model.Setup, opts Options) *Trainer {
	t.Helper()
	tr, err := New(dev, checked(t, s), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func batch(t testing.TB, cfg model.Config, B, T int, seed uint64) (tokens, targets []int32) {
	t.Helper()
	ds, err := data.DefaultDataset(256)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Vocab < 256 {
		ids := make([]int32, ds.Len())
		if err := ds.ReadAt(ids, 0); err != nil {
			t.Fatal(err)
		}
		for i := range ids {
			ids[i] %= int32(cfg.Vocab)
		}
		ds = data.FromTokens(ds.Source, ids)
	}
	l, err := data.NewLoader(ds, B, T, seed)
	if err != nil {
		t.Fatal(err)
	}
	tokens, targets, err = l.Batch()
	if err != nil {
		t.Fatal(err)
	}
	return tokens, targets
}

// stepBoth runs step number step on host and on shape and fails t unless
// the two devices' allocator statistics are equal after it.
func stepBoth(t *testing.T, step int, host, shape *Trainer, tokens, targets []int32) (hr, sr Record) {
	t.Helper()
	hr, err := host.Step(tokens, targets)
	if err != nil {
		t.Fatal(err)
	}
	sr, err = shape.Step(tokens, targets)
	if err != nil {
		t.Fatal(err)
	}
	if hs, ss := host.Device().Stats(), shape.Device().Stats(); hs != ss {
		t.Fatalf("step %d: host stats\n%+v\nshape stats\n%+v", step, hs, ss)
	}
	return hr, sr
}

// hostGrads runs one forward and backward pass of s with params (as
// SetParams takes them) on a new host trainer and returns the loss and the
// gradient.
func hostGrads(t *testing.T, s model.Setup, params any, tokens, targets []int32) (float64, []float64) {
	t.Helper()
	tr := newTrainer(t, reference.NewHost(t), s, Options{})
	if err := tr.SetParams(params); err != nil {
		t.Fatal(err)
	}
	r, err := tr.ForwardBackward(tokens, targets)
	if err != nil {
		t.Fatal(err)
	}
	g, err := tr.Grads()
	if err != nil {
		t.Fatal(err)
	}
	return r.Loss, g
}

// One host step in fp32 matches gorgonia's TapeMachine running the same
// GPT-2 built from gorgonia's own ops (reference.Model): the loss and every
// parameter's gradient within 1e-5 relative. The two differ only in fp32
// summation order.
func TestHostMatchesTapeMachine(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  model.Config
		B, T int
	}{
		{"tiny", tinyCfg, 2, 16},
		{"untied", model.Config{Name: "untied", Layers: 1, Hidden: 32, Heads: 2, Vocab: 50, Context: 16, Untied: true}, 3, 8},
		{"rmsnorm", model.Config{Name: "rmsnorm", Layers: 2, Hidden: 32, Heads: 2, Vocab: 50, Context: 16, Norm: model.NormRMS}, 2, 8},
		{"no-bias", model.Config{Name: "no-bias", Layers: 2, Hidden: 32, Heads: 2, Vocab: 50, Context: 16, NoBias: true}, 2, 8},
		// SwiGLU at LLaMA's width for h 32, F = 256: the gate and the up
		// halves of fc 256 rows apart (the reference's slices of them once
		// merged in gorgonia's graph, reference.go's mlp).
		{"swiglu", model.Config{Name: "swiglu", Layers: 2, Hidden: 32, Heads: 2, Vocab: 50, Context: 16, MLP: model.MLPSwiGLU}, 2, 8},
		{"rope", model.Config{Name: "rope", Layers: 2, Hidden: 32, Heads: 2, Vocab: 50, Context: 16, Positions: model.PosRoPE}, 2, 8},
		{"rmsnorm, no bias, untied, swiglu of 80, rope θ 500", model.Config{Name: "llama-like", Layers: 2, Hidden: 32, Heads: 4, Vocab: 50, Context: 16,
			Norm: model.NormRMS, NoBias: true, Untied: true, MLP: model.MLPSwiGLU, FFN: 80, Positions: model.PosRoPE, RopeTheta: 500}, 3, 8},
		// Grouped-query attention: 2 query heads a key and value head, and
		// multi-query (one for all), with and without rotary positions.
		{"gqa 4 heads over 2", model.Config{Name: "gqa", Layers: 2, Hidden: 32, Heads: 4, KVHeads: 2, Vocab: 50, Context: 16}, 2, 8},
		{"mqa, rope", model.Config{Name: "mqa", Layers: 2, Hidden: 32, Heads: 4, KVHeads: 1, Vocab: 50, Context: 16, Positions: model.PosRoPE}, 2, 8},
		{"tiny-llama", mustPreset(t, "tiny-llama"), 2, 16},
		// Flash attention: the same function as the reference's
		// probabilities, computed without them.
		{"flash", func() model.Config { c := tinyCfg; c.Attention = model.AttentionFlash; return c }(), 2, 16},
		{"tiny-llama, flash", func() model.Config { c := mustPreset(t, "tiny-llama"); c.Attention = model.AttentionFlash; return c }(), 3, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params := model.InitParams(tc.cfg, 7)
			tokens, targets := batch(t, tc.cfg, tc.B, tc.T, 1)

			ref := reference.MustNew(t, tc.cfg, tc.B, tc.T, tensor.Float32)
			wantLoss, wantGrads, err := ref.Step32(params, tokens, targets)
			if err != nil {
				t.Fatal(err)
			}

			loss, grads := hostGrads(t, oneRank(tc.cfg, tc.B, tc.T), params, tokens, targets)
			if e := math.Abs(loss-wantLoss) / wantLoss; e > 1e-5 {
				t.Errorf("loss %v, TapeMachine %v (relative error %.2e > 1e-5)", loss, wantLoss, e)
			}
			worst := 0.0
			for _, p := range tc.cfg.Params() {
				a := grads[p.Offset : p.Offset+p.Count]
				b := wantGrads[p.Offset : p.Offset+p.Count]
				e := reference.MaxRelErr(a, b)
				worst = math.Max(worst, e)
				if e > 1e-5 {
					t.Errorf("%s: gradient relative error %.2e > 1e-5", p.Name, e)
				}
			}
			t.Logf("loss %.7f vs %.7f; worst gradient relative error %.2e", loss, wantLoss, worst)
		})
	}
}

// A float64 central-difference check of the whole model through trainmem's
// executor on the host: for a sample of coordinates of every parameter
// tensor, (L(θ+h) - L(θ-h))/2h against the backward pass, h = 1e-5. In
// float64 the truncation error is O(h²) ≈ 1e-10 and the rounding error
// ≈ 1e-16/h ≈ 1e-11, so a relative tolerance of 1e-6 leaves a wide margin.
func TestFiniteDifferences(t *testing.T) {
	gpt2 := model.Config{Name: "fd", Layers: 2, Hidden: 16, Heads: 2, Vocab: 32, Context: 8}
	llama := gpt2
	llama.Name, llama.Norm, llama.NoBias, llama.Untied = "fd-llama", model.NormRMS, true, true
	llama.MLP, llama.FFN, llama.Positions = model.MLPSwiGLU, 0, model.PosRoPE
	gqa := llama // 4 query heads over 2 key and value heads
	gqa.Name, gqa.Heads, gqa.KVHeads = "fd-gqa", 4, 2
	flash := gqa
	flash.Name, flash.Attention = "fd-gqa-flash", model.AttentionFlash
	// Fine-tunes: LoRA on every linear layer of each architecture (the
	// query, key and value columns of LLaMA's stacked projection adapted
	// apart, GPT-2's c_attn as one), and frozen blocks.
	loraGPT2 := gpt2
	loraGPT2.Name, loraGPT2.LoRA = "fd-lora", model.LoRA{Rank: 2, Alpha: 3, Targets: model.TargetQKV | model.TargetO | model.TargetFC | model.TargetDown}
	loraLlama := gqa
	loraLlama.Name, loraLlama.LoRA = "fd-gqa-lora", model.LoRA{Rank: 3, Alpha: 4, Targets: model.TargetQ | model.TargetK | model.TargetV | model.TargetO | model.TargetGate | model.TargetUp | model.TargetDown}
	loraQV := llama
	loraQV.Name, loraQV.LoRA = "fd-lora-qv", model.LoRA{Rank: 2, Alpha: 4, Targets: model.TargetQ | model.TargetV}
	frozen := gqa
	frozen.Name, frozen.Freeze = "fd-gqa-layers:1", model.Freeze{Embeddings: true, Blocks: 1}
	// QLoRA: the base's linear weights in NF4, dequantized exactly into
	// float64 where each op reads them.
	qlora := loraLlama
	qlora.Name, qlora.Quantize = "fd-gqa-qlora", model.QuantNF4
	for _, cfg := range []model.Config{gpt2, llama, gqa, flash, loraGPT2, loraLlama, loraQV, frozen, qlora} {
		t.Run(cfg.Name, func(t *testing.T) { finiteDifferences(t, cfg) })
	}
}

func finiteDifferences(t *testing.T, cfg model.Config) {
	B, T := 2, 8
	p32 := model.InitParams(cfg, 3)
	params := make([]float64, len(p32))
	for i, v := range p32 {
		params[i] = float64(v) * 5 // larger weights: gradients well away from zero
	}
	for _, p := range cfg.Params() {
		if strings.HasSuffix(p.Name, ".lora_b") { // B starts at 0, and A's gradient with it
			for i := p.Offset; i < p.Offset+p.Count; i++ {
				params[i] = 0.3 * math.Sin(float64(i))
			}
		}
	}
	tokens, targets := batch(t, cfg, B, T, 2)
	tr := newTrainer(t, reference.NewHost(t), oneRank(cfg, B, T), Options{Float64: true})
	loss := func(p []float64) float64 {
		if err := tr.SetParams(p); err != nil {
			t.Fatal(err)
		}
		r, err := tr.ForwardBackward(tokens, targets)
		if err != nil {
			t.Fatal(err)
		}
		return r.Loss
	}
	loss(params)
	grads, err := tr.Grads()
	if err != nil {
		t.Fatal(err)
	}
	const h, tol = 1e-5, 1e-6
	checked := 0
	for _, p := range cfg.Params() {
		if p.Frozen {
			continue // no gradient: Grads holds the trained rows, at Param.Store
		}
		for k := 0; k < 4; k++ {
			j := (int64(k)*p.Count*7/13 + int64(k)) % p.Count
			i := p.Offset + j
			save := params[i]
			params[i] = save + h
			up := loss(params)
			params[i] = save - h
			down := loss(params)
			params[i] = save
			fd := (up - down) / (2 * h)
			if g := grads[p.Store+j]; math.Abs(fd-g) > tol*math.Max(1, math.Abs(fd)) {
				t.Errorf("%s[%d]: backward %.10g, finite difference %.10g", p.Name, j, g, fd)
			}
			checked++
		}
	}
	t.Logf("%d coordinates agree within %g", checked, tol)
}

// Simulate equals measure: the shape-only device runs the same schedule
// through the same allocator, so every allocator statistic of every step,
// per category, equals the host's exactly.
func TestSimulateEqualsMeasure(t *testing.T) {
	for _, tc := range []struct {
		cfg  model.Config
		B, T int
		pol  model.Checkpoint
	}{
		{tinyCfg, 4, 64, model.Checkpoint{}},
		{tinyCfg, 2, 32, model.Checkpoint{Kind: model.CheckpointFull}},
		// About 10M parameters (10,844,160).
		{model.Config{Name: "10m", Layers: 6, Hidden: 384, Heads: 6, Vocab: 256, Context: 256}, 2, 128, model.Checkpoint{}},
	} {
		t.Run(tc.cfg.Name, func(t *testing.T) {
			tokens, targets := batch(t, tc.cfg, tc.B, tc.T, 5)
			s := oneRank(tc.cfg, tc.B, tc.T)
			s.Checkpoint = tc.pol
			host := newTrainer(t, reference.NewHost(t), s, Options{})
			if err := host.SetParams(model.InitParams(tc.cfg, 1)); err != nil {
				t.Fatal(err)
			}
			shape := newTrainer(t, shape.New(0), s, Options{})
			for step := 1; step <= 2; step++ {
				hr, sr := stepBoth(t, step, host, shape, tokens, targets)
				if hr.PeakAllocatedBytes != sr.PeakAllocatedBytes {
					t.Fatalf("step %d: peaks %d vs %d", step, hr.PeakAllocatedBytes, sr.PeakAllocatedBytes)
				}
				hs := host.Device().Stats()
				t.Logf("step %d: peak allocated %d bytes, reserved %d, %d allocations", step, hs.AllocatedBytes.Peak, hs.ReservedBytes.Peak, hs.NumAllocs)
			}
		})
	}
}

// Checkpointing changes when values are computed, never what: in fp32 the
// gradients with every policy are bit-identical to those without.
func TestCheckpointGradientsBitIdentical(t *testing.T) {
	cfg := model.Config{Name: "c4", Layers: 4, Hidden: 32, Heads: 4, Vocab: 64, Context: 16}
	B, T := 2, 16
	params := model.InitParams(cfg, 11)
	tokens, targets := batch(t, cfg, B, T, 3)
	run := func(pol model.Checkpoint) ([]float64, float64) {
		s := oneRank(cfg, B, T)
		s.Checkpoint = pol
		loss, g := hostGrads(t, s, params, tokens, targets)
		return g, loss
	}
	want, wantLoss := run(model.Checkpoint{})
	for name, pol := range policies {
		got, loss := run(pol)
		if loss != wantLoss {
			t.Errorf("%s: loss %v, want %v", name, loss, wantLoss)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: gradient %d is %v, want %v bit for bit", name, i, got[i], want[i])
				break
			}
		}
	}
}

// trainTiny trains the tiny preset on the default corpus and returns the
// losses.
func trainTiny(t *testing.T, steps int, prec model.Precision) []float64 {
	t.Helper()
	return trainShape(t, tinyCfg, steps, prec)
}

// trainShape trains cfg on the default corpus from seed 42 (AdamW, lr
// 1e-3, b 8, s 64) and returns the losses of its steps.
func trainShape(t *testing.T, cfg model.Config, steps int, prec model.Precision) []float64 {
	t.Helper()
	const B, T = 8, 64
	ds, err := data.DefaultDataset(cfg.Vocab)
	if err != nil {
		t.Fatal(err)
	}
	l, err := data.NewLoader(ds, B, T, 42)
	if err != nil {
		t.Fatal(err)
	}
	opt := DefaultOptimizer(model.AdamW)
	opt.LR = 1e-3
	s := withPrecision(oneRank(cfg, B, T), prec)
	s.Optimizer = opt.Kind
	tr := newTrainer(t, reference.NewHost(t), s, Options{Optimizer: opt})
	if err := tr.SetParams(model.InitParams(cfg, 42)); err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for range steps {
		tokens, targets, err := l.Batch()
		if err != nil {
			t.Fatal(err)
		}
		r, err := tr.Step(tokens, targets)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, r.Loss)
	}
	return losses
}

// On the default corpus the tiny preset's loss falls below half its
// starting value within 200 steps (the bar; the start is ln 256 ≈
// 5.55 for a byte-level model at initialisation).
func TestTinyLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("trains 200 steps")
	}
	// LLaMA's norm, no linear biases, an untied head, SwiGLU at LLaMA's
	// width, rotary positions and 2 key and value heads for 4 query heads
	for _, cfg := range []model.Config{tinyCfg, mustPreset(t, "tiny-llama")} {
		t.Run(cfg.Name, func(t *testing.T) { learns(t, trainShape(t, cfg, 200, model.FP32)) })
	}
}

// Flash attention trains as the naive attention does: the same losses to
// fp32 summation order (1e-5 relative) over 20 steps of tiny-llama, and
// activations lower by exactly the score terms: each layer keeps the fp32
// row log-sum-exp (4·a·b·s bytes) instead of the probabilities
// (e·a·b·s²), in the formula and the simulation alike.
func TestFlashAttention(t *testing.T) {
	naive := mustPreset(t, "tiny-llama")
	flash := naive
	flash.Attention = model.AttentionFlash
	a, b := trainShape(t, naive, 20, model.FP32), trainShape(t, flash, 20, model.FP32)
	for i := range a {
		if rel := math.Abs(a[i]-b[i]) / a[i]; !(rel <= 1e-5) {
			t.Errorf("step %d: loss %.7f with flash attention, %.7f naive (relative %.1e)", i+1, b[i], a[i], rel)
		}
	}
	t.Logf("losses at step 20: naive %.7f, flash %.7f", a[len(a)-1], b[len(b)-1])
	const B, T = 4, 64
	for _, prec := range []model.Precision{model.FP32, model.BF16} {
		var act [2]int64
		for i, cfg := range []model.Config{naive, flash} {
			s := withPrecision(oneRank(cfg, B, T), prec)
			e, err := s.Estimate()
			if err != nil {
				t.Fatal(err)
			}
			_, st, err := Simulate(shape.New(0), checked(t, s), 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := st.CategoryRequested[cuda.Activations].Peak, e.ActivationBytes(model.Exact); got != want {
				t.Errorf("%s %s: simulated activations %d, formula %d", cfg.Attention, prec, got, want)
			}
			act[i] = e.ActivationBytes(model.Exact)
		}
		L, NH := int64(naive.Layers), int64(naive.Heads)
		want := L * (NH*B*T*T*prec.Size() - NH*B*T*4)
		if act[0]-act[1] != want {
			t.Errorf("%s: naive keeps %d activation bytes, flash %d: %d fewer, want L·(a·b·s²·e − 4·a·b·s) = %d", prec, act[0], act[1], act[0]-act[1], want)
		}
	}
}

// learns checks that the loss falls below half its first value.
func learns(t *testing.T, losses []float64) {
	first := losses[0]
	best := math.Inf(1)
	at := -1
	for i, l := range losses {
		if l < first/2 && at < 0 {
			at = i + 1
		}
		best = math.Min(best, l)
	}
	if at < 0 {
		t.Fatalf("loss %.3f at step 1 never fell below half (best %.3f, last %.3f)", first, best, losses[len(losses)-1])
	}
	t.Logf("loss %.3f at step 1, below half at step %d, %.3f at step %d", first, at, losses[len(losses)-1], len(losses))
}

// The same seed gives bit-identical losses run after run: the host's
// kernels partition work the same way every time and the loader is seeded.
func TestDeterministic(t *testing.T) {
	a := trainTiny(t, 10, model.FP32)
	b := trainTiny(t, 10, model.FP32)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("step %d: loss %v then %v", i+1, a[i], b[i])
		}
	}
}

// The profile's forward arithmetic is the estimate's forward FLOPs, F =
// L·(24·b·s·h² + 4·b·s²·h) + 2·b·s·h·V (model.Recompute.Forward), exactly;
// the backward's is twice it; its rows' times add up to the profiled time,
// and every instruction of the profiled steps is a call.
func TestProfile(t *testing.T) {
	cfg, _ := model.Preset("tiny")
	s := oneRank(cfg, 2, 32)
	tr := newTrainer(t, reference.NewHost(t), s, Options{})
	p := &Profile{}
	tr.Profile(p)
	tokens, targets := batch(t, cfg, 2, 32, 1)
	for range 3 {
		if _, err := tr.Step(tokens, targets); err != nil {
			t.Fatal(err)
		}
	}
	e, err := s.Estimate()
	if err != nil {
		t.Fatal(err)
	}
	var fwd, bwd float64
	var sum time.Duration
	calls := 0
	for _, r := range p.Rows() {
		switch r.Phase {
		case "forward":
			fwd += r.FLOPs
		case "backward":
			bwd += r.FLOPs
		}
		sum += r.Time
		calls += r.Calls
	}
	if p.Steps() != 2 {
		t.Errorf("%d steps profiled, want the 2 after the first", p.Steps())
	}
	if fwd != 2*e.Recompute.Forward || bwd != 4*e.Recompute.Forward {
		t.Errorf("profiled forward %g and backward %g FLOPs over 2 steps; the estimate's F = %g", fwd, bwd, e.Recompute.Forward)
	}
	if sum != p.StepTime() || calls != 2*(len(tr.sched.Instrs)+1) {
		t.Errorf("rows sum to %v of %v, %d calls for %d instructions a step", sum, p.StepTime(), calls, len(tr.sched.Instrs))
	}
}
