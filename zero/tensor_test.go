package zero

import (
	"fmt"
	"math"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/train"
)

// A tensor-parallel layout simulated on shape-only ranks allocates, rank by
// rank, what measured host ranks do (every allocator statistic) and sends
// the same traffic; each rank holds its part's weights, and its tensor
// group's all-reduces (two a block forward, two backward, four for the
// vocabulary-parallel embedding and cross entropy) are counted on every
// rank.
func TestSimulateTensorParallel(t *testing.T) {
	tok := make([]int32, 2*16)
	for _, tc := range []struct {
		tp, dp int
		set    Setting
		pol    model.CheckpointKind
		sp     bool
	}{
		{2, 1, Setting{}, model.CheckpointNone, false},
		{4, 1, Setting{}, model.CheckpointFull, false},
		{2, 3, Setting{Stage: 1}, model.CheckpointNone, false},
		{2, 2, Setting{Stage: 3, Prefetch: true}, model.CheckpointSelective, false},
		{2, 1, Setting{}, model.CheckpointNone, true},
		{4, 2, Setting{Stage: 2}, model.CheckpointFull, true},
	} {
		s := setupOf(tinyCfg, 2, 16, tc.dp, tc.set.Stage, model.BF16, model.AdamW)
		s.TP, s.Checkpoint, s.SequenceParallel = tc.tp, model.Checkpoint{Kind: tc.pol}, tc.sp
		name := fmt.Sprintf("tp %d dp %d %s %s sequence-parallel %t", tc.tp, tc.dp, tc.set, s.Checkpoint, tc.sp)
		res, err := Simulate(func() cuda.Device { return shape.New(0) }, checked(t, s), tc.set, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		meas, err := Measure(hosts(t, tc.tp*tc.dp), s, tc.set, train.Options{}, model.InitParams(tinyCfg, 1), 2,
			func(int, int) ([]int32, []int32, error) { return tok, tok, nil })
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != tc.tp*tc.dp {
			t.Fatalf("%s: %d ranks simulated, want all %d", name, len(res), tc.tp*tc.dp)
		}
		part, _ := tinyCfg.TensorRank(tc.tp, 0)
		for r := range res {
			if res[r].Stats != meas[r].Stats {
				t.Errorf("%s rank %d: simulated %+v, measured %+v", name, r, res[r].Stats, meas[r].Stats)
			}
			if res[r].Traffic != meas[r].Traffic {
				t.Errorf("%s rank %d: traffic simulated %+v, measured %+v", name, r, res[r].Traffic, meas[r].Traffic)
			}
			if tc.dp == 1 {
				if got, want := res[r].Stats.CategoryRequested[cuda.Params].Current, 2*part.NumParams(); got != want {
					t.Errorf("%s rank %d: params %d bytes, want its part's %d", name, r, got, want)
				}
			}
			// Per block: the two row-parallel products forward, the two
			// column-parallel input gradients backward; full recomputation
			// runs the attention's projection again (the second residual's
			// input, which ln2's gradient reads), not the MLP's (no
			// backward op reads the block's output). Outside the blocks:
			// the embedding's lookups, the cross entropy's maxima and
			// sums, and the head's input gradient.
			calls := int64(4*tinyCfg.Layers + 4)
			if tc.pol == model.CheckpointFull {
				calls += int64(tinyCfg.Layers)
			}
			if got := res[r].Traffic[AllReduce].Calls; tc.dp == 1 && !tc.sp && got != calls {
				t.Errorf("%s rank %d: %d all-reduces a step, want %d", name, r, got, calls)
			}
		}
	}
}

// The implementation-exact formula (model/exact.go) of a tensor-parallel
// rank's part equals the simulated rank's activation peak to the byte,
// across shapes, tensor-parallel sizes (some not dividing the vocabulary),
// precisions and checkpoint policies.
func TestExactFormulaEqualsTensorParallelSimulation(t *testing.T) {
	custom := model.Config{Name: "custom", Layers: 5, Hidden: 96, Heads: 6, Vocab: 1000, Context: 300, Untied: true}
	gpt2, _ := model.Preset("gpt2")
	n := 0
	for _, tc := range []struct {
		cfg  model.Config
		B, T int
		tps  []int
	}{
		{tinyCfg, 3, 17, []int{2, 4}},
		{custom, 2, 300, []int{2, 3, 6}},
		{gpt2, 1, 256, []int{4}},
		{llamaLike(custom), 2, 300, []int{2, 3}},
		{llamaLike(tinyCfg), 3, 16, []int{2}},
		{grouped(llamaLike(custom), 3), 2, 300, []int{3}},
		{grouped(llamaLike(tinyCfg), 2), 3, 16, []int{2}},
		{grouped(custom, 1), 2, 64, []int{1}},
		{flashOf(grouped(llamaLike(tinyCfg), 2)), 3, 16, []int{2}},
	} {
		for _, tp := range tc.tps {
			for j, pol := range []string{"none", "full", "every:2", "sqrt", "selective"} {
				prec := []model.Precision{model.FP32, model.FP16, model.BF16}[(tp+j)%3]
				ck, _ := model.ParseCheckpoint(pol)
				s := setupOf(tc.cfg, tc.B, tc.T, 1, 0, prec, model.Adam)
				s.TP, s.Checkpoint = tp, ck
				s.SequenceParallel = (tc.B*tc.T)%tp == 0 && j%2 == 1 // every other policy, where the rows divide
				res, err := Simulate(func() cuda.Device { return shape.New(0) }, checked(t, s), Setting{}, 2, nil)
				if err != nil {
					t.Fatal(err)
				}
				// The whole setup's estimate is rank 0's part's.
				if e, err := s.Estimate(); err != nil || e.ActivationBytes(model.Exact) != res[0].Stats.CategoryRequested[cuda.Activations].Peak {
					t.Errorf("%s tp %d %s: the whole setup's trainmem formula %d bytes (%v), rank 0's simulation %d", tc.cfg.Name, tp, pol, e.ActivationBytes(model.Exact), err, res[0].Stats.CategoryRequested[cuda.Activations].Peak)
				}
				for _, r := range res {
					// Each rank's own part: the first V mod t ranks hold a
					// row of the vocabulary more.
					part, err := checked(t, s).TensorRank(r.Rank)
					if err != nil {
						t.Fatal(err)
					}
					e, err := part.Estimate()
					if err != nil {
						t.Fatal(err)
					}
					want := e.ActivationBytes(model.Exact)
					if got := r.Stats.CategoryRequested[cuda.Activations].Peak; got != want {
						t.Errorf("%s b=%d s=%d tp %d %s %s rank %d: simulated activation peak %d bytes, formula %d (%+d)", tc.cfg.Name, tc.B, tc.T, tp, prec, pol, r.Rank, got, want, want-got)
					}
				}
				n++
			}
		}
	}
	t.Logf("%d combinations agree", n)
}

// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
// Transformer Models", Table 2) give the activation bytes a transformer
// layer keeps, 16-bit values, per tensor-parallel rank: sbh(34 + 5as/h)
// with no parallelism, sbh(10 + 24/t + 5as/(ht)) with tensor parallelism,
// sbh(10 + 24/t) with it and selective recomputation, and 2sbh with full
// recomputation. For its 22B shape (Table 3: a=64, h=6144, 48 layers;
// s=2048, b=4, t=8), a layer of this GPT-2, simulated on the tensor-parallel
// ranks (the growth of the activation peak from one layer to two and from
// two to three), keeps what the table says but for three stated
// differences: no dropout, so neither of the two s·b·h masks of 1 byte
// (-2sbh) nor the attention's mask and dropped-out copy (-3as²b/t: the
// softmax output is the one score tensor kept); and the layer norms' fp32
// statistics, a mean and 1/std a row for each of the two (+16sb). Full
// recomputation keeps the table's 2sbh exactly. Sequence parallelism, the
// table's other two rows, is not run yet.
func TestKorthikantiTable2(t *testing.T) {
	const a, h, s, b, tp, V = 64, 6144, 2048, 4, 8, 51200
	sbh, as2b := int64(s*b*h), int64(a)*s*s*b
	for _, tc := range []struct {
		name    string
		tp      int
		ck      string
		table   int64 // Table 2's bytes a layer
		differs int64 // what this GPT-2 keeps beside it
	}{
		{"no parallelism", 1, "none", sbh*34 + 5*as2b, -2*sbh - 3*as2b + 16*s*b},
		{"tensor parallel", tp, "none", sbh*10 + sbh*24/tp + 5*as2b/tp, -2*sbh - 3*as2b/tp + 16*s*b},
		{"tensor parallel + selective recompute", tp, "selective", sbh*10 + sbh*24/tp, -2*sbh + 16*s*b},
		{"full recompute", tp, "full", 2 * sbh, 0},
		{"tensor + sequence parallel", -tp, "none", sbh*34/tp + 5*as2b/tp, -2*sbh/tp - 3*as2b/tp + 16*s*b/tp},
		{"tensor + sequence parallel + selective recompute", -tp, "selective", sbh * 34 / tp, -2*sbh/tp + 16*s*b/tp},
	} {
		var peaks [4]int64
		for L := 1; L <= 3; L++ {
			cfg := model.Config{Name: "22b", Layers: L, Hidden: h, Heads: a, Vocab: V, Context: s}
			st := setupOf(cfg, b, s, 1, 0, model.BF16, model.Adam)
			st.TP, st.Checkpoint = tc.tp, model.Checkpoint{Kind: model.CheckpointNone}
			if tc.tp < 0 { // sequence parallel
				st.TP, st.SequenceParallel = -tc.tp, true
			}
			var err error
			if st.Checkpoint, err = model.ParseCheckpoint(tc.ck); err != nil {
				t.Fatal(err)
			}
			res, err := Simulate(func() cuda.Device { return shape.New(0) }, checked(t, st), Setting{}, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			peaks[L] = res[0].Stats.CategoryRequested[cuda.Activations].Peak
		}
		for L := 2; L <= 3; L++ {
			if got, want := peaks[L]-peaks[L-1], tc.table+tc.differs; got != want {
				t.Errorf("%s: a layer keeps %d bytes (layers %d to %d), Table 2 %d, with the stated differences %d (%+d)", tc.name, got, L-1, L, tc.table, want, got-want)
			}
		}
		// Without recomputation a layer is Korthikanti et al.'s list less
		// its dropout tensors (KorthikantiLayerNoDropout) and the layer
		// norms' fp32 statistics, which no formula counts.
		if tc.ck == "none" {
			t2, sp := tc.tp, tc.tp < 0
			if sp {
				t2 = -tc.tp
			}
			nd, err := model.KorthikantiLayerNoDropout(s, b, h, a, 2, int64(t2), sp)
			if err != nil {
				t.Fatal(err)
			}
			stats := int64(16 * s * b)
			if sp {
				stats /= int64(t2)
			}
			if got := peaks[2] - peaks[1]; got != nd.Total()+stats {
				t.Errorf("%s: a layer keeps %d bytes, Korthikanti's without dropout %d and the statistics %d", tc.name, got, nd.Total(), stats)
			}
		}
		t.Logf("%s: Table 2 %s a layer, this GPT-2 %s (%+.1f%%)", tc.name, model.GiB(tc.table), model.GiB(peaks[2]-peaks[1]), 100*float64(peaks[2]-peaks[1]-tc.table)/float64(tc.table))
	}
}

// A 14M-parameter config (6 layers, h 384, 6 heads, a vocabulary of 8192)
// over tp 2 and tp 3 (with sequence parallelism), pp 2 and 3 under both
// schedules and tp 2 × pp 2, in float64: one step's loss equals one rank's
// of the same rows to 1e-12 and the weights agree to a float32 unit, as
// for tiny (TestLayoutTrainsAsOneRank gives the reasons).
func TestLayout14M(t *testing.T) {
	cfg := model.Config{Name: "14m", Layers: 6, Hidden: 384, Heads: 6, Vocab: 8192, Context: 256}
	const b, T = 1, 48
	init := model.InitParams(cfg, 5)
	opts := train.Options{Optimizer: train.DefaultOptimizer(model.AdamW), Float64: true}
	for _, tc := range []struct {
		tp, pp, m int
		sched     model.PipelineSchedule
		sp        bool
	}{{2, 1, 1, 0, false}, {3, 1, 1, 0, true}, {1, 2, 2, model.OneFOneB, false}, {1, 3, 3, model.GPipe, false}, {2, 2, 3, model.OneFOneB, false}} {
		name := fmt.Sprintf("tp %d pp %d m %d %s sequence-parallel %t", tc.tp, tc.pp, tc.m, tc.sched, tc.sp)
		tok := make([]int32, tc.m*b*T)
		for i := range tok {
			tok[i] = int32(i * 7919 % cfg.Vocab)
		}
		ref, err := train.New(hosts(t, 1)[0], checked(t, setupOf(cfg, tc.m*b, T, 1, 0, model.FP32, model.AdamW)), opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := ref.SetParams(init); err != nil {
			t.Fatal(err)
		}
		want, err := ref.Step(tok, tok)
		if err != nil {
			t.Fatal(err)
		}
		wp, _ := ref.Params()
		ref.Close()
		s := setupOf(cfg, b, T, 1, 0, model.FP32, model.AdamW)
		s.TP, s.PP, s.MicroBatches, s.Pipeline, s.SequenceParallel = tc.tp, tc.pp, tc.m, tc.sched, tc.sp
		g, _ := NewGroup(hosts(t, tc.tp*tc.pp))
		rk, err := NewRanks(g, checked(t, s), Setting{}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := rk.SetParams(init); err != nil {
			t.Fatal(err)
		}
		recs, err := rk.Step(func(int) ([]int32, []int32) { return tok, tok })
		if err != nil {
			t.Fatal(err)
		}
		if d := math.Abs(recs[0].Loss - want.Loss); d > 1e-12*want.Loss {
			t.Errorf("%s: loss %.15f, one rank's %.15f", name, recs[0].Loss, want.Loss)
		}
		gp, err := rk.Params()
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) { sameWeights(t, wp, gp, true, model.FP32, 1, opts.Optimizer.LR) })
		t.Logf("%s: loss %.12f (one rank %.12f)", name, recs[0].Loss, want.Loss)
		rk.Close()
	}
}

// sameWeights holds the weights gp of a layout's ranks, put together, to
// wp, one rank's after steps steps at learning rate lr: in float64 each to
// a float32 unit (or 1e-12 near zero); in fp32 by at most 2·lr·steps (AdamW
// may turn an update near a zero gradient either way) and 1e-6 on average;
// in a 16-bit precision a few bf16 units more, 2⁻¹⁰ on average.
func sameWeights(t *testing.T, wp, gp []float32, float64s bool, prec model.Precision, steps int, lr float32) {
	t.Helper()
	bound, meanBound := 2*float64(steps)*float64(lr), 1e-6
	switch {
	case float64s:
		bound, meanBound = 0, 0 // a float32 unit of each weight, below
	case prec != model.FP32:
		bound, meanBound = bound+4*0x1p-8, 0x1p-10
	}
	var worst, sum float64
	for i := range wp {
		d := math.Abs(float64(gp[i]) - float64(wp[i]))
		ulp := float64(math.Nextafter32(float32(math.Abs(float64(wp[i]))), math.MaxFloat32)) - math.Abs(float64(wp[i]))
		if float64s && d > ulp && d > 1e-12 {
			t.Fatalf("weight %d: %.9g, one rank's %.9g: more than a float32 unit apart", i, gp[i], wp[i])
		}
		worst = max(worst, d)
		sum += d
	}
	mean := sum / float64(len(wp))
	t.Logf("weights differ from one rank's by up to %.3g (mean %.3g)", worst, mean)
	if !float64s && (worst > bound || mean > meanBound) {
		t.Errorf("weights differ from one rank's by up to %g (mean %g), want at most %g (mean %g)", worst, mean, bound, meanBound)
	}
}

// grouped is cfg with kv key and value heads (grouped-query attention;
// 1 is multi-query).
func grouped(cfg model.Config, kv int) model.Config {
	cfg.Name += fmt.Sprintf("-kv%d", kv)
	cfg.KVHeads = kv
	return cfg
}

// flashOf is cfg with flash attention.
func flashOf(cfg model.Config) model.Config {
	cfg.Name += "-flash"
	cfg.Attention = model.AttentionFlash
	return cfg
}

// llamaLike is cfg with LLaMA's norm, no linear biases, a SwiGLU MLP of
// 3h (which 2, 3, 4 and 6 tensor-parallel ranks divide) and rotary
// positions.
func llamaLike(cfg model.Config) model.Config {
	cfg.Name += "-llama-blocks"
	cfg.Norm, cfg.NoBias, cfg.MLP, cfg.FFN, cfg.Positions = model.NormRMS, true, model.MLPSwiGLU, 3*cfg.Hidden, model.PosRoPE
	return cfg
}
