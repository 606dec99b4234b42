package model

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func preset(t *testing.T, name string) Config {
	t.Helper()
	c, err := Preset(name)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// xl is the source articles' setup: GPT-2 XL, batch 32, sequence 1000,
// mixed fp16 Adam, one GPU.
func xl(t *testing.T) Setup {
	return Setup{Model: preset(t, "gpt2-xl"), Batch: 32, Seq: 1000, Precision: FP16, Optimizer: Adam, Ranks: 1, TP: 1, PP: 1}
}

func estimate(t *testing.T, s Setup) Estimate {
	t.Helper()
	e, err := s.Estimate()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func term(t *testing.T, a Activations, name string) int64 {
	t.Helper()
	for _, x := range a.Terms {
		if x.Name == name {
			return x.Bytes
		}
	}
	t.Fatalf("%s has no term %q (terms %v)", a.Formula, name, a.Terms)
	return 0
}

func activations(t *testing.T, e Estimate, formula Formula) Activations {
	t.Helper()
	for _, a := range e.Activations {
		if a.Formula == formula {
			return a
		}
	}
	t.Fatalf("no %s activations", formula)
	return Activations{}
}

// Source articles ("Where did the GPU memory go", ../shared/sources.md):
// GPT-2 XL's 1.5B parameters take about 3 GB in 16 bits; mixed-precision
// Adam holds 2Φ + 2Φ + 4Φ + 4Φ + 4Φ = 16Φ bytes, "about 24 GB" (16 · 1.5e9).
// With the exact count Φ = 1,557,611,200 (config.go) that is 24.92 GB.
func TestArticleGPT2XLModelStates(t *testing.T) {
	e := estimate(t, xl(t))
	const phi = 1557611200
	want := States{Params: 2 * phi, Grads: 2 * phi, Master: 4 * phi, AdamM: 4 * phi, AdamV: 4 * phi}
	if e.States != want {
		t.Errorf("states = %+v, want %+v", e.States, want)
	}
	if e.States.Params != 3115222400 { // "about 3 GB" of fp16 weights
		t.Errorf("fp16 weights = %d bytes, want 3,115,222,400", e.States.Params)
	}
	if e.States.Total() != 24921779200 { // 16Φ
		t.Errorf("model states = %d bytes, want 24,921,779,200 (16Φ)", e.States.Total())
	}
	if got := GB(e.States.Total()); got != "24.92 GB" {
		t.Errorf("GB(16Φ) = %s", got)
	}
	// The article's own round figure: 16 bytes × 1.5e9 parameters = 24 GB.
	s, err := ZeROStates(1500000000, FP16, Adam, 1, 0)
	if err != nil || s.Total() != 24000000000 {
		t.Errorf("16 × 1.5e9 = %d (%v), want 24e9", s.Total(), err)
	}
}

// Source articles and the ZeRO paper (Section 3.2): GPT-2 1.5B at batch
// 32, sequence 1000 stores 12 · h · b · s · L = 12 · 1600 · 32 · 1000 · 48 =
// 29.49e9 values, "about 60 GB" in 16 bits.
func TestArticleZeROPaperActivations(t *testing.T) {
	e := estimate(t, xl(t))
	const values = 12 * 1600 * 32 * 1000 * 48
	if values != 29491200000 {
		t.Fatalf("12hbsL = %d", int64(values))
	}
	if got := e.ActivationBytes(ZeROPaper); got != 2*values {
		t.Errorf("zero_paper activations = %d, want %d (2 bytes × %d values)", got, 2*values, int64(values))
	}
	if got := GB(e.ActivationBytes(ZeROPaper)); got != "58.98 GB" {
		t.Errorf("GB = %s, want 58.98 GB", got)
	}
	// fp32 training stores 4-byte values: twice as much.
	s := xl(t)
	s.Precision = FP32
	if got := estimate(t, s).ActivationBytes(ZeROPaper); got != 4*values {
		t.Errorf("fp32 zero_paper activations = %d, want %d", got, 4*values)
	}
}

// Source articles ("GPU memory analysis"): a 6B model's fp32 weights take
// 6e9 · 4 / 1024³ ≈ 22 GiB. The 6b preset has 6,059,909,120 parameters:
// 24,239,636,480 bytes, 22.57 GiB; the article's round 6e9 gives 22.35 GiB.
func TestArticle6BFP32Weights(t *testing.T) {
	s := Setup{Model: preset(t, "6b"), Batch: 1, Seq: 1, Precision: FP32, Optimizer: Adam, Ranks: 1, TP: 1, PP: 1}
	e := estimate(t, s)
	if e.Params != 6059909120 {
		t.Fatalf("6b parameters = %d", e.Params)
	}
	if e.States.Params != 4*6059909120 {
		t.Errorf("fp32 weights = %d, want %d", e.States.Params, 4*6059909120)
	}
	if got := GiB(e.States.Params); got != "22.57 GiB" {
		t.Errorf("GiB = %s, want 22.57 GiB", got)
	}
	// "gradients the same; Adam keeps m and v, twice more": 16 bytes a parameter.
	if e.States.Grads != e.States.Params || e.States.AdamM+e.States.AdamV != 2*e.States.Params || e.States.Master != 0 {
		t.Errorf("fp32 Adam states = %+v", e.States)
	}
	round, err := ZeROStates(6000000000, FP32, Adam, 1, 0)
	if err != nil || GiB(round.Params) != "22.35 GiB" {
		t.Errorf("6e9 fp32 weights = %s (%v), want 22.35 GiB", GiB(round.Params), err)
	}
}

// ZeRO paper (Rajbhandari et al. 2020), Table 1: Ψ = 7.5B, K = 12, GB =
// 10^9 bytes. Baseline 120 GB; N = 64: 31.4 / 16.6 / 1.88 GB; N = 4: 52.5 /
// 41.25 / 30 GB for stages 1 / 2 / 3. Exact: 7.5e9/64 = 117,187,500.
func TestZeROPaperTable1(t *testing.T) {
	for _, tc := range []struct {
		n, stage int
		want     int64
	}{
		{1, 0, 120000000000},
		{64, 0, 120000000000},
		{64, 1, 31406250000}, // 15 + 15 + 12 · 0.1171875
		{64, 2, 16640625000}, // 15 + 14 · 0.1171875
		{64, 3, 1875000000},  // 16 · 0.1171875
		{4, 1, 52500000000},
		{4, 2, 41250000000},
		{4, 3, 30000000000},
	} {
		s, err := ZeROStates(7500000000, FP16, Adam, tc.n, tc.stage)
		if err != nil {
			t.Fatal(err)
		}
		if s.Total() != tc.want {
			t.Errorf("N=%d stage %d: %d bytes, want %d", tc.n, tc.stage, s.Total(), tc.want)
		}
	}
	// The same through a parameter-only setup, as `--params 7.5e9` runs.
	e, err := Setup{Params: 7500000000, Precision: FP16, Optimizer: Adam, Ranks: 64, ZeRO: 1, TP: 1, PP: 1}.Estimate()
	if err != nil || e.Total(Korthikanti) != 31406250000 || len(e.Activations) != 0 {
		t.Errorf("params-only ZeRO-1 N=64: %d, %d activation formulas, %v", e.Total(Korthikanti), len(e.Activations), err)
	}
}

// A shard is ceil(Φ/N) parameters on every rank, so N shards cover Φ.
func TestZeROShardRoundsUp(t *testing.T) {
	s, err := ZeROStates(10, FP16, Adam, 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	if s.Params != 2*4 || s.AdamV != 4*4 { // ceil(10/3) = 4
		t.Errorf("shard states = %+v, want 4 parameters' worth", s)
	}
}

// Bytes a parameter per precision and optimizer (ZeRO paper Section 3.1 for
// mixed Adam; the momentum buffer is the "first moment", adam_m).
func TestPerParam(t *testing.T) {
	for _, tc := range []struct {
		p    Precision
		o    Optimizer
		want States
	}{
		{FP16, Adam, States{2, 2, 4, 4, 4, 0, 0}},
		{BF16, AdamW, States{2, 2, 4, 4, 4, 0, 0}},
		{FP32, Adam, States{4, 4, 0, 4, 4, 0, 0}},
		{FP32, AdamW, States{4, 4, 0, 4, 4, 0, 0}},
		{FP32, SGD, States{4, 4, 0, 0, 0, 0, 0}},
		{FP32, Momentum, States{4, 4, 0, 4, 0, 0, 0}},
		{FP16, SGD, States{2, 2, 4, 0, 0, 0, 0}},
		{BF16, Momentum, States{2, 2, 4, 4, 0, 0, 0}},
	} {
		if got := PerParam(tc.p, tc.o); got != tc.want {
			t.Errorf("%v %v: %+v, want %+v", tc.p, tc.o, got, tc.want)
		}
	}
	if PerParam(FP16, Adam).Total() != 16 || PerParam(FP32, Adam).Total() != 16 || PerParam(FP32, SGD).Total() != 8 {
		t.Error("16Φ / 16Φ / 8Φ broken")
	}
}

// Korthikanti et al. 2022, Section 4.1 and Table 2, with 16-bit values and
// 1-byte masks, checked term by term for several shapes including the
// paper's own (GPT-3 175B: a=96, h=12288, s=2048; Table 3) and gpt2-xl.
func TestKorthikantiTable2(t *testing.T) {
	shapes := []struct{ s, b, h, a, t int64 }{
		{2048, 1, 12288, 96, 8}, // GPT-3 175B, t=8 (Table 3)
		{2048, 1, 20480, 128, 8},
		{1000, 32, 1600, 25, 1}, // gpt2-xl at the articles' size
		{1000, 32, 1600, 25, 5},
		{64, 3, 64, 4, 2},
	}
	for _, x := range shapes {
		sbh := x.s * x.b * x.h
		as2b := x.a * x.s * x.s * x.b
		name := fmt.Sprintf("s=%d b=%d h=%d a=%d t=%d", x.s, x.b, x.h, x.a, x.t)
		one, err := KorthikantiLayer(x.s, x.b, x.h, x.a, 2, 1, false)
		if err != nil {
			t.Fatal(err)
		}
		// Eq. 1: sbh(34 + 5as/h) = 34sbh + 5as²b; split 11sbh + 5as²b, 19sbh, 4sbh.
		if one.Total() != 34*sbh+5*as2b {
			t.Errorf("%s: no parallelism %d, want sbh(34+5as/h) = %d", name, one.Total(), 34*sbh+5*as2b)
		}
		if one.Attention+one.Scores != 11*sbh+5*as2b || one.MLP != 19*sbh || one.LayerNorms != 4*sbh {
			t.Errorf("%s: split %+v, want attention 11sbh+5as²b, MLP 19sbh, layer norms 4sbh", name, one)
		}
		tp, _ := KorthikantiLayer(x.s, x.b, x.h, x.a, 2, x.t, false)
		// Table 2, tensor parallel: sbh(10 + 24/t + 5as/(ht)).
		if want := 10*sbh + 24*sbh/x.t + 5*as2b/x.t; tp.Total() != want {
			t.Errorf("%s: tensor parallel %d, want sbh(10+24/t+5as/(ht)) = %d", name, tp.Total(), want)
		}
		// Table 2, tensor + selective: sbh(10 + 24/t).
		if want := 10*sbh + 24*sbh/x.t; tp.Total()-tp.Scores != want {
			t.Errorf("%s: tensor parallel + selective %d, want sbh(10+24/t) = %d", name, tp.Total()-tp.Scores, want)
		}
		sp, _ := KorthikantiLayer(x.s, x.b, x.h, x.a, 2, x.t, true)
		// Table 2, tensor + sequence parallel: sbh(34 + 5as/h)/t; + selective: 34sbh/t.
		if want := (34*sbh + 5*as2b) / x.t; sp.Total() != want {
			t.Errorf("%s: sequence parallel %d, want sbh(34+5as/h)/t = %d", name, sp.Total(), want)
		}
		if want := 34 * sbh / x.t; sp.Total()-sp.Scores != want {
			t.Errorf("%s: sequence parallel + selective %d, want 34sbh/t = %d", name, sp.Total()-sp.Scores, want)
		}
		// Without dropout, the paper's list less its dropout tensors (the
		// masks and the softmax's dropout output), written out by hand:
		// sbh(8 + 24/t) + 2as²b/t; with sequence parallelism sbh·32/t +
		// 2as²b/t; sbh·32 + 2as²b with no parallelism.
		nd, _ := KorthikantiLayerNoDropout(x.s, x.b, x.h, x.a, 2, 1, false)
		if want := 32*sbh + 2*as2b; nd.Total() != want || nd.Scores != 2*as2b {
			t.Errorf("%s: no dropout %d (scores %d), want 32sbh + 2as²b = %d (scores 2as²b)", name, nd.Total(), nd.Scores, want)
		}
		ndTP, _ := KorthikantiLayerNoDropout(x.s, x.b, x.h, x.a, 2, x.t, false)
		if want := 8*sbh + 24*sbh/x.t + 2*as2b/x.t; ndTP.Total() != want {
			t.Errorf("%s: no dropout, tensor parallel %d, want sbh(8+24/t) + 2as²b/t = %d", name, ndTP.Total(), want)
		}
		ndSP, _ := KorthikantiLayerNoDropout(x.s, x.b, x.h, x.a, 2, x.t, true)
		if want := 32*sbh/x.t + 2*as2b/x.t; ndSP.Total() != want {
			t.Errorf("%s: no dropout, sequence parallel %d, want sbh·32/t + 2as²b/t = %d", name, ndSP.Total(), want)
		}
		// The e-byte generalisation: values 16sbh + 2as²b of e bytes, masks
		// 2sbh + as²b bytes; fp32 gives 66sbh + 9as²b.
		f32, _ := KorthikantiLayer(x.s, x.b, x.h, x.a, 4, 1, false)
		if want := 66*sbh + 9*as2b; f32.Total() != want {
			t.Errorf("%s: fp32 %d, want 66sbh+9as²b = %d", name, f32.Total(), want)
		}
	}
}

// Korthikanti et al. Table 2, full recomputation: 2sbh a layer (each
// layer's input), plus one layer recomputed at a time, plus Section 4.3's
// embedding and output terms.
func TestKorthikantiFullRecompute(t *testing.T) {
	s := xl(t)
	s.Checkpoint = Checkpoint{Kind: CheckpointFull}
	e := estimate(t, s)
	k := activations(t, e, Korthikanti)
	const sbh = 1000 * 32 * 1600
	if got := term(t, k, "checkpoints"); got != 48*2*sbh {
		t.Errorf("checkpoints = %d, want L·2sbh = %d", got, 48*2*sbh)
	}
	layer, _ := KorthikantiLayer(1000, 32, 1600, 25, 2, 1, false)
	if got := term(t, k, "recompute_segment"); got != layer.Total() {
		t.Errorf("recompute segment = %d, want one layer, %d", got, layer.Total())
	}
	// Section 4.3: embedding dropout mask sbh (p=1, t=1), final layer norm
	// 2sbh, output projection 2sbh, fp32 logits 4sbv.
	for _, tc := range []struct {
		name string
		want int64
	}{
		{"embedding_dropout", sbh},
		{"final_layer_norm", 2 * sbh},
		{"output_projection", 2 * sbh},
		{"logits", 4 * 1000 * 32 * 50257},
	} {
		if got := term(t, k, tc.name); got != tc.want {
			t.Errorf("%s = %d, want %d", tc.name, got, tc.want)
		}
	}
	// Section 4.3's sum with p = 1, t = 1: sbh + 4sbh(1 + v/h).
	out := term(t, k, "embedding_dropout") + term(t, k, "final_layer_norm") + term(t, k, "output_projection") + term(t, k, "logits")
	if want := int64(sbh + 4*sbh + 4*1000*32*50257); out != want {
		t.Errorf("Section 4.3 terms = %d, want sbh + 4sbh(1+v/h) = %d", out, want)
	}
	// The ZeRO paper's count with full checkpointing: one h·b·s value a
	// layer plus one layer's 12·h·b·s.
	if got := e.ActivationBytes(ZeROPaper); got != (48+12)*2*sbh {
		t.Errorf("zero_paper full = %d, want (L+12)·2hbs = %d", got, (48+12)*2*sbh)
	}
}

// The checkpoint policies against each other for gpt2-xl at the articles'
// size: none > selective > every:K variants > full in memory, and the
// recompute price (Narayanan et al. 2021 / Korthikanti et al. Appendix A
// FLOPs) of full is one forward of the layers, just under a third of a step
// (the articles' "25-30% more compute"; ZeRO paper Section 3.2: 33%).
func TestCheckpointPolicies(t *testing.T) {
	s := xl(t)
	bytes := map[string]int64{}
	frac := map[string]float64{}
	for _, p := range []string{"none", "selective", "sqrt", "every:4", "full", "every:48"} {
		c, err := ParseCheckpoint(p)
		if err != nil {
			t.Fatal(err)
		}
		s.Checkpoint = c
		e := estimate(t, s)
		bytes[p] = e.ActivationBytes(Korthikanti)
		frac[p] = e.Recompute.Fraction
	}
	if !(bytes["none"] > bytes["selective"] && bytes["selective"] > bytes["sqrt"] && bytes["sqrt"] > bytes["every:4"] && bytes["every:4"] > bytes["full"]) {
		t.Errorf("policy order broken: %v", bytes)
	}
	// every:L keeps one checkpoint and recomputes everything: more than none.
	if bytes["every:48"] <= bytes["none"] {
		t.Errorf("every:48 = %d, not above none = %d", bytes["every:48"], bytes["none"])
	}
	// F = L(24bsh² + 4bs²h) + 2bshV; full recomputes L(24bsh² + 4bs²h).
	b, sq, h, v, L := 32.0, 1000.0, 1600.0, 50257.0, 48.0
	layers := L * (24*b*sq*h*h + 4*b*sq*sq*h)
	want := layers / (3 * (layers + 2*b*sq*h*v))
	if math.Abs(frac["full"]-want) > 1e-12 || frac["full"] < 0.30 || frac["full"] > 1.0/3 {
		t.Errorf("full recompute fraction %.4f, want %.4f (just under 1/3)", frac["full"], want)
	}
	if frac["none"] != 0 || frac["sqrt"] != frac["full"] || !(frac["selective"] > 0 && frac["selective"] < 0.05) {
		t.Errorf("recompute fractions %v", frac)
	}
	// Chen et al. 2016: K = ceil(sqrt(L)).
	for _, tc := range []struct{ l, k int }{{48, 7}, {49, 7}, {50, 8}, {1, 1}, {2, 2}, {12, 4}, {16, 4}} {
		if got := (Checkpoint{Kind: CheckpointSqrt}).Segment(tc.l); got != tc.k {
			t.Errorf("sqrt segment for %d layers = %d, want %d", tc.l, got, tc.k)
		}
	}
}

// Megatron-LM tensor parallelism (Shoeybi et al. 2019, Section 3): a block
// on one of t ranks holds 12h²/t + 7h/t + 6h parameters; with t = 1 and one
// stage a rank holds the whole model, Φ.
func TestTensorAndPipelineParams(t *testing.T) {
	for _, name := range PresetNames() {
		c := preset(t, name)
		s := Setup{Model: c, Batch: 1, Seq: 1, Precision: FP16, Optimizer: Adam, Ranks: 1, TP: 1, PP: 1}
		if e := estimate(t, s); e.RankParams != c.NumParams() {
			t.Errorf("%s: one rank holds %d, want Φ = %d", name, e.RankParams, c.NumParams())
		}
	}
	c := preset(t, "gpt2-xl")
	h := int64(1600)
	for _, tp := range []int{5, 25} {
		s := Setup{Model: c, Batch: 1, Seq: 1, Precision: FP16, Optimizer: Adam, Ranks: 1, TP: tp, PP: 1}
		tt := int64(tp)
		want := 48*(12*h*h/tt+7*h/tt+6*h) + (50257+tt-1)/tt*h + 1024*h + 2*h
		if e := estimate(t, s); e.RankParams != want {
			t.Errorf("tp=%d: rank holds %d, want %d", tp, e.RankParams, want)
		}
	}
	// Pipeline stages: the stages together hold Φ, plus the last stage's
	// copy of the tied embedding (Megatron-LM keeps one there).
	for _, pp := range []int{2, 4, 48} {
		s := Setup{Model: c, Batch: 1, Seq: 1, Precision: FP16, Optimizer: Adam, Ranks: 1, TP: 1, PP: pp}
		var calc calc
		sum := int64(0)
		for st := 0; st < pp; st++ {
			sum += s.stageParams(st, &calc)
		}
		if want := c.NumParams() + 50257*h; sum != want {
			t.Errorf("pp=%d: stages hold %d, want Φ + V·h = %d", pp, sum, want)
		}
	}
}

// Pipeline parallelism with 1F1B (Korthikanti et al. 2022, Section 4.2): the
// first stage holds P micro-batches of L/P layers, L layers' worth.
func TestPipelineFirstStage(t *testing.T) {
	s := xl(t)
	s.PP = 4
	e, err := s.EstimateBy(Korthikanti)
	if err != nil {
		t.Fatal(err)
	}
	if e.Stage != 0 {
		t.Errorf("reported stage %d, want the first", e.Stage)
	}
	one := estimate(t, xl(t))
	k1, k4 := activations(t, one, Korthikanti), activations(t, e, Korthikanti)
	for _, name := range []string{"attention", "attention_scores", "mlp", "layer_norms"} {
		if term(t, k1, name) != term(t, k4, name) {
			t.Errorf("%s: first of 4 stages %d, one stage %d", name, term(t, k4, name), term(t, k1, name))
		}
	}
	if got, want := term(t, k4, "embedding_dropout"), 4*term(t, k1, "embedding_dropout"); got != want {
		t.Errorf("embedding dropout on the first stage = %d, want p·sbh = %d", got, want)
	}
	for _, a := range k4.Terms {
		if a.Name == "logits" {
			t.Error("first of 4 stages holds the logits")
		}
	}
}

// Data-parallel communication per rank per step (ZeRO paper Section 7):
// 2Φ for data parallel and ZeRO-1/2, 3Φ for ZeRO-3, in the gradient dtype;
// a ring sends (N-1) shards of ceil(Φ/N) per pass.
func TestCommunication(t *testing.T) {
	base := Setup{Params: 7500000000, Precision: FP16, Optimizer: Adam, Ranks: 64, TP: 1, PP: 1}
	for z, want := range []int64{2, 2, 2, 3} {
		s := base
		s.ZeRO = z
		e, err := s.Estimate()
		if err != nil {
			t.Fatal(err)
		}
		if e.Comm.Elements != want*7500000000 || e.Comm.Bytes != 2*want*7500000000 {
			t.Errorf("ZeRO-%d: %d elements, %d bytes, want %dΦ", z, e.Comm.Elements, e.Comm.Bytes, want)
		}
		if ring := want * 63 * 117187500 * 2; e.Comm.RingBytes != ring {
			t.Errorf("ZeRO-%d: ring %d bytes, want %d", z, e.Comm.RingBytes, ring)
		}
	}
	// fp32 main gradients: the gradients' passes (2 at stage 0, one
	// reduce-scatter at 1 to 3) at 4 bytes, the weights' at 2.
	for z, want := range []struct{ grads, weights int64 }{{2, 0}, {1, 1}, {1, 1}, {1, 2}} {
		s := base
		s.ZeRO, s.MainGrads = z, GradsFP32
		e, err := s.Estimate()
		if err != nil {
			t.Fatal(err)
		}
		if b := (4*want.grads + 2*want.weights) * 7500000000; e.Comm.Bytes != b || e.Comm.Elements != (want.grads+want.weights)*7500000000 {
			t.Errorf("ZeRO-%d, fp32 main gradients: %d elements, %d bytes, want %d bytes", z, e.Comm.Elements, e.Comm.Bytes, b)
		}
		if ring := (4*want.grads + 2*want.weights) * 63 * 117187500; e.Comm.RingBytes != ring {
			t.Errorf("ZeRO-%d, fp32 main gradients: ring %d bytes, want %d", z, e.Comm.RingBytes, ring)
		}
	}
	base.Ranks = 1
	if e, _ := base.Estimate(); e.Comm.Bytes != 0 || e.Comm.Collective != "none" {
		t.Errorf("one rank communicates: %+v", e.Comm)
	}
}

// fp32 main gradients (Megatron-LM's main_grad): 4 bytes a gradient, so
// 18 bytes a parameter under mixed precision (Megatron-LM's
// theoretical_memory_usage.py counts 18 without the distributed
// optimizer), sharded at stages 2 and 3 as the gradients are: 7.5B over 64
// ranks, ceil(Φ/64) = 117,187,500 a shard; fp32 training unchanged.
func TestMainGradsStates(t *testing.T) {
	const phi, shard = 7500000000, 117187500
	for _, tc := range []struct {
		prec  Precision
		stage int
		grads int64
		total int64
	}{
		{FP16, 0, 4 * phi, 18 * phi},
		{BF16, 1, 4 * phi, 2*phi + 4*phi + 12*shard},
		{FP16, 2, 4 * shard, 2*phi + 16*shard},
		{BF16, 3, 4 * shard, 18 * shard},
		{FP32, 0, 4 * phi, 16 * phi},
	} {
		s := Setup{Params: phi, Precision: tc.prec, Optimizer: Adam, Ranks: 64, ZeRO: tc.stage, TP: 1, PP: 1, MainGrads: GradsFP32}
		if tc.stage == 0 {
			s.Ranks = 1
		}
		st, err := s.RankStates(phi, tc.stage)
		if err != nil {
			t.Fatal(err)
		}
		if st.Grads != tc.grads || st.Total() != tc.total {
			t.Errorf("%s ZeRO-%d: grads %d, total %d; want %d and %d", tc.prec, tc.stage, st.Grads, st.Total(), tc.grads, tc.total)
		}
		paper, err := ZeROStates(phi, tc.prec, Adam, s.Ranks, tc.stage)
		if err != nil {
			t.Fatal(err)
		}
		if d := st.Total() - paper.Total(); tc.prec.Mixed() && d != tc.grads/2 {
			t.Errorf("%s ZeRO-%d: %d bytes more than the paper's, want half the gradients, %d", tc.prec, tc.stage, d, tc.grads/2)
		}
	}
	for _, v := range []string{"weights", "fp32"} {
		if g, err := ParseMainGrads(v); err != nil || g.String() != v {
			t.Errorf("ParseMainGrads(%q) = %v, %v", v, g, err)
		}
	}
	if _, err := ParseMainGrads("fp16"); err == nil || !strings.Contains(err.Error(), `"fp16"`) || !strings.Contains(err.Error(), "weights, fp32") {
		t.Errorf("ParseMainGrads(fp16): %v", err)
	}
	if err := (Setup{Params: 10, Ranks: 1, TP: 1, PP: 1, MainGrads: 7}).Validate(); err == nil || !strings.Contains(err.Error(), "valid: weights, fp32") {
		t.Errorf("main gradients 7: %v", err)
	}
}

func TestGatheredZeRO3(t *testing.T) {
	s := xl(t)
	s.Ranks, s.ZeRO = 8, 3
	e := estimate(t, s)
	// gpt2-xl's tied embeddings, (V + ctx)·h, stay gathered through the
	// forward pass (the head reads wte at its end) beside a block,
	// 12h² + 13h, in fp16; both divide by 8 and 64 ranks, so no padding.
	// 225,580,800 bytes at N = 64 is what the simulation holds
	// (zero.TestGatheredFormulaEqualsSimulation checks the rule on shapes
	// small enough to simulate in a test).
	want := int64(2 * ((50257+1024)*1600 + 12*1600*1600 + 13*1600))
	if e.Gathered != want {
		t.Errorf("gathered = %d, want %d", e.Gathered, want)
	}
	s.Ranks = 64
	if e := estimate(t, s); e.Gathered != 225_580_800 {
		t.Errorf("gathered over 64 ranks = %d, want 225,580,800", e.Gathered)
	}
	if e.Total(Korthikanti) != e.States.Total()+e.Gathered+e.ActivationBytes(Korthikanti) {
		t.Error("total does not add up")
	}
}

func TestSetupValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Setup)
		want string
	}{
		{"heads", func(s *Setup) { s.Model.Heads = 7 }, "does not divide"},
		{"layers", func(s *Setup) { s.Model.Layers = -1 }, "layers"},
		{"batch", func(s *Setup) { s.Batch = 0 }, "batch 0"},
		{"seq", func(s *Setup) { s.Seq = 1025 }, "sequence length 1025"},
		{"ranks", func(s *Setup) { s.Ranks = 0 }, "ranks 0"},
		{"zero", func(s *Setup) { s.ZeRO = 4 }, "valid: 0, 1, 2, 3"},
		{"tp", func(s *Setup) { s.TP = 2 }, "do not divide the 25 heads"},
		{"pp", func(s *Setup) { s.PP = 49 }, "49 pipeline stages for 48 layers (valid: 1 to 48)"},
		{"micro-batches", func(s *Setup) { s.MicroBatches = -1 }, "micro-batches -1"},
		{"every:0", func(s *Setup) { s.Checkpoint = Checkpoint{Kind: CheckpointEvery} }, "every:0"},
		{"every:49", func(s *Setup) { s.Checkpoint = Checkpoint{Kind: CheckpointEvery, Every: 49} }, "every:49"},
		{"precision", func(s *Setup) { s.Precision = 9 }, "precision"},
	} {
		s := xl(t)
		tc.edit(&s)
		_, err := s.Estimate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	for _, bad := range []string{"every:0", "every:x", "every:-1", "half", ""} {
		if _, err := ParseCheckpoint(bad); err == nil {
			t.Errorf("checkpoint %q accepted", bad)
		}
	}
	if _, err := ParsePrecision("fp8"); err == nil {
		t.Error("fp8 accepted")
	}
	if _, err := ParseOptimizer("lion"); err == nil {
		t.Error("lion accepted")
	}
	if _, err := (Setup{Params: 1e9, Ranks: 1, TP: 2, PP: 1}).Estimate(); err == nil {
		t.Error("tensor parallelism without a shape accepted")
	}
}

func TestOverflowIsAnError(t *testing.T) {
	s := Setup{Model: Config{Name: "huge", Layers: MaxLayers, Hidden: MaxHidden, Heads: 1, Vocab: MaxVocab, Context: MaxContext},
		Batch: 1 << 20, Seq: MaxContext, Precision: FP32, Optimizer: Adam, Ranks: 1, TP: 1, PP: 1}
	if _, err := s.Estimate(); !errors.Is(err, ErrOverflow) {
		t.Errorf("err = %v, want ErrOverflow", err)
	}
	if _, err := ZeROStates(math.MaxInt64/2, FP16, Adam, 1, 0); !errors.Is(err, ErrOverflow) {
		t.Errorf("ZeROStates err = %v, want ErrOverflow", err)
	}
}

func TestMaxBatch(t *testing.T) {
	s := xl(t)
	s.Seq = 1024
	const memory = 80 << 30
	for _, p := range FitPolicies() {
		s.Checkpoint = p
		b, e, err := s.MaxBatch(memory, Korthikanti)
		if err != nil {
			t.Fatal(err)
		}
		if b < 1 {
			t.Fatalf("%v: nothing fits in 80 GiB", p)
		}
		if e.Total(Korthikanti) > memory {
			t.Errorf("%v: batch %d needs %d > %d", p, b, e.Total(Korthikanti), int64(memory))
		}
		next := s
		next.Batch = b + 1
		if ne, err := next.Estimate(); err == nil && ne.Total(Korthikanti) <= memory {
			t.Errorf("%v: batch %d fits too", p, b+1)
		}
	}
	// Nothing fits when model states alone exceed the memory: 0, not an error.
	if b, e, err := s.MaxBatch(20e9, Korthikanti); b != 0 || err != nil || e.States.Total() <= 20e9 {
		t.Errorf("20 GB: batch %d, states %d, err %v; want 0", b, e.States.Total(), err)
	}
}

func TestMinRanksAndLowestStage(t *testing.T) {
	s := Setup{Params: 7500000000, Precision: FP16, Optimizer: Adam, Ranks: 1, TP: 1, PP: 1}
	const memory = 32e9 // ZeRO paper Section 1: a 32 GB V100
	// ZeRO-0 never fits (120 GB on every rank); ZeRO-1 needs 15 + 15 +
	// 90/N ≤ 32, N ≥ 45, but ceil(7.5e9/45) pads the shard by 4 bytes: 46;
	// ZeRO-2 15 + 105/N ≤ 32: 7; ZeRO-3 120/N ≤ 32: 4.
	want := []int{0, 46, 7, 4}
	for z := range 4 {
		s.ZeRO = z
		n, e, err := s.MinRanks(memory, Korthikanti)
		if err != nil {
			t.Fatal(err)
		}
		if n != want[z] {
			t.Errorf("ZeRO-%d: fewest ranks %d, want %d (total %d)", z, n, want[z], e.Total(Korthikanti))
		}
	}
	s.Ranks = 64
	if z, e, err := s.LowestStage(memory, Korthikanti); z != 1 || err != nil || e.Total(Korthikanti) != 31406250000 {
		t.Errorf("64 ranks: lowest stage %d (%d, %v), want 1 (31.4 GB)", z, e.Total(Korthikanti), err)
	}
	s.Ranks = 2
	if z, _, _ := s.LowestStage(memory, Korthikanti); z != -1 {
		t.Errorf("2 ranks: lowest stage %d, want none (-1)", z)
	}
}

func BenchmarkEstimate(b *testing.B) {
	c, _ := Preset("gpt2-xl")
	s := Setup{Model: c, Batch: 32, Seq: 1000, Precision: FP16, Optimizer: Adam, Ranks: 8, ZeRO: 2, TP: 5, PP: 4, Checkpoint: Checkpoint{Kind: CheckpointSqrt}}
	for b.Loop() {
		if _, err := s.Estimate(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMaxBatch(b *testing.B) {
	c, _ := Preset("gpt2-xl")
	s := Setup{Model: c, Batch: 1, Seq: 1024, Precision: FP16, Optimizer: Adam, Ranks: 8, ZeRO: 1, TP: 1, PP: 1}
	for b.Loop() {
		if _, _, err := s.MaxBatch(80<<30, Korthikanti); err != nil {
			b.Fatal(err)
		}
	}
}

// The implementation-exact formula's peak moment, worked out by hand for
// GPT-2 XL (48 blocks) at batch 32, sequence 1000, fp16 (N = 32,000 rows,
// nh = N·h·e = 102.4 MB): a block keeps 16·nh + a·b·s²·e + 16·N = 3,238.9 MB,
// the head (final layer norm, logits N·V·e, targets) 3,319.2 MB, the
// embedding and token ids 102.5 MB. The end of the forward pass holds, under
// full, the embedding, 48 checkpoints and the head (8,337.0 MB); block 47's
// recomputation the embedding, 47 checkpoints and the block less its
// output (8,051.8 MB): the end of the forward pass wins. With a 64-token
// vocabulary the head is 102.9 MB and the recomputation wins. Under every:5
// the segment of blocks 40-44 (8 checkpoints, 5 blocks: 17,014 MB) beats the
// last one (blocks 45-47: 3 blocks) and the end of the forward pass.
// Selective keeps every block but its probabilities at the end of the
// forward pass; block 47's recomputation frees the head and the block's
// rest but for ln1 and qkv (4·nh + 8·N) and adds its probabilities
// (1,600 MB): it wins only when the head is small.
func TestExactPeakMoment(t *testing.T) {
	for _, tc := range []struct {
		policy string
		vocab  int
		want   Moment
		words  string
	}{
		{"none", 0, Moment{Kind: EndOfForward}, "the end of the forward pass"},
		{"full", 0, Moment{Kind: EndOfForward}, "the end of the forward pass"},
		{"full", 64, Moment{Kind: RecomputedSegment, First: 47, Last: 47}, "the recomputation of block 47"},
		{"every:5", 0, Moment{Kind: RecomputedSegment, First: 40, Last: 44}, "the recomputation of blocks 40-44"},
		{"selective", 0, Moment{Kind: EndOfForward}, "the end of the forward pass"},
		{"selective", 64, Moment{Kind: RecomputedProbs, First: 47, Last: 47}, "the recomputation of block 47's attention probabilities"},
	} {
		s := xl(t)
		if tc.vocab > 0 {
			s.Model.Vocab = tc.vocab
		}
		c, err := ParseCheckpoint(tc.policy)
		if err != nil {
			t.Fatal(err)
		}
		s.Checkpoint = c
		e := estimate(t, s)
		if a := activations(t, e, Exact); a.At != tc.want || a.At.String() != tc.words {
			t.Errorf("%s, vocabulary %d: peak at %+v (%q), want %+v (%q)", tc.policy, s.Model.Vocab, a.At, a.At, tc.want, tc.words)
		}
		if k := activations(t, e, Korthikanti); k.At != (Moment{}) {
			t.Errorf("%s: Korthikanti's formula has a moment %+v; it does not follow the schedule", tc.policy, k.At)
		}
	}
}

// The formulas are a typed enum whose names are the JSON keys: every name
// parses back to its formula, an unknown name or value is refused naming
// the valid ones.
func TestFormulaNames(t *testing.T) {
	want := []string{"zero_paper", "korthikanti", "trainmem"}
	for i, f := range Formulas() {
		b, err := f.MarshalText()
		if err != nil || string(b) != want[i] || f.String() != want[i] {
			t.Errorf("formula %d: %q, %v; want %q", i, b, err, want[i])
		}
		var g Formula
		if err := g.UnmarshalText(b); err != nil || g != f {
			t.Errorf("%s reads back as %v, %v", b, g, err)
		}
		if f.Source() == "" {
			t.Errorf("%s has no source", f)
		}
	}
	if _, err := ParseFormula("korthikanti2022"); err == nil || !strings.Contains(err.Error(), "zero_paper, korthikanti, trainmem") {
		t.Errorf("an unknown name: %v", err)
	}
	if _, err := Formula(7).MarshalText(); err == nil {
		t.Error("Formula(7) has a name")
	}
	s := Setup{Model: MustPreset(t, "tiny"), Batch: 1, Seq: 8, Ranks: 1, TP: 1, PP: 1}
	if _, err := s.EstimateBy(Formula(7)); err == nil || !strings.Contains(err.Error(), "Formula(7)") {
		t.Errorf("EstimateBy(Formula(7)): %v", err)
	}
}

// A Checked is made only by Setup.Check: a setup Validate refuses is not
// checked, the zero Checked is refused by the estimate (and by the layers
// that take one), and the setup a Checked gives is a copy, so changing it
// leaves the checked setup as it was.
func TestChecked(t *testing.T) {
	tiny, _ := Preset("tiny")
	s := Setup{Model: tiny, Batch: 2, Seq: 64, Ranks: 1, TP: 1, PP: 1}
	c, err := s.Check()
	if err != nil {
		t.Fatal(err)
	}
	got := c.Setup()
	got.Batch = 0
	if c.Setup().Batch != 2 || c.Err() != nil {
		t.Errorf("a changed copy changed the checked setup: batch %d, %v", c.Setup().Batch, c.Err())
	}
	want, err := s.Estimate()
	if err != nil {
		t.Fatal(err)
	}
	if e, err := c.Estimate(); err != nil || e.Total(Korthikanti) != want.Total(Korthikanti) {
		t.Errorf("the checked estimate %v, %v; the setup's %d", e.Total(Korthikanti), err, want.Total(Korthikanti))
	}
	bad := s
	bad.Seq = 65
	if _, err := bad.Check(); err == nil || !strings.Contains(err.Error(), "sequence length 65") {
		t.Errorf("Check of sequence 65: %v, want Validate's error", err)
	}
	if _, err := (Checked{}).Estimate(); err == nil || !strings.Contains(err.Error(), "not checked") || (Checked{}).Err() == nil {
		t.Errorf("the zero Checked: %v, want it refused", err)
	}
}

// Korthikanti et al.'s count and its variants for gpt2-xl at b 32, s 1000,
// fp16: the paper's sbh·(34 + 5as/h) a layer; with flash attention (no
// a·s²·b terms) sbh·34; without dropout its dropout tensors go: the 1-byte
// masks (2sbh + as²b a layer, 2sbh with flash, and the embedding's sbh)
// and the softmax's 2-byte dropout output (2as²b a layer): sbh·(32 + 2as/h)
// a layer, sbh·32 with flash.
func TestKorthikantiVariants(t *testing.T) {
	c := preset(t, "gpt2-xl")
	L, s, b, h, a := int64(48), int64(1000), int64(32), int64(1600), int64(25)
	sbh, as2b := s*b*h, a*s*s*b
	outside := sbh + 2*sbh*2 + 4*s*b*int64(c.Vocab) // embedding dropout, lnf and projection inputs, fp32 logits
	for _, tc := range []struct {
		attn           Attention
		total, noDrop  int64
		perLayer, drop int64
	}{
		{AttentionNaive, 282247296000, 162080896000, 34*sbh + 5*as2b, 2*sbh + 3*as2b},
		{AttentionFlash, 90247296000, 85280896000, 34 * sbh, 2 * sbh},
	} {
		m := c
		m.Attention = tc.attn
		e := estimate(t, Setup{Model: m, Batch: 32, Seq: 1000, Precision: FP16, Optimizer: Adam, Ranks: 1, TP: 1, PP: 1})
		k := e.Activations[Korthikanti]
		if k.Formula != Korthikanti {
			t.Fatalf("activations[%d] is %v", Korthikanti, k.Formula)
		}
		if want := L*tc.perLayer + outside; k.Total != tc.total || want != tc.total {
			t.Errorf("%s: korthikanti %d, want %d (the paper's expression: %d)", tc.attn, k.Total, tc.total, want)
		}
		if want := tc.total - L*tc.drop - sbh; k.NoDropout() != tc.noDrop || want != tc.noDrop {
			t.Errorf("%s: korthikanti without dropout %d, want %d (%d)", tc.attn, k.NoDropout(), tc.noDrop, want)
		}
	}
}

// Optimizer offload (ZeRO-Offload, Ren et al. 2021): a 7.5B model over 64
// ranks at ZeRO-2 keeps 2Φ of weights and 2Φ/N of gradients on the device
// and, in host memory, 16 bytes for each of the ceil(Φ/N) = 117,187,500
// parameters a rank updates (fp32 master, m, v and 2-byte copies of their
// gradients and weights), copying 2 bytes of each down and up a step; fp32
// main gradients make the copies down 4 bytes; fp32 training is refused.
func TestOffloadStates(t *testing.T) {
	const phi, shard = 7500000000, 117187500
	s := Setup{Params: phi, Precision: BF16, Optimizer: Adam, Ranks: 64, ZeRO: 2, TP: 1, PP: 1, Offload: OffloadOptimizer}
	e, err := s.Estimate()
	if err != nil {
		t.Fatal(err)
	}
	if want := (States{Params: 2 * phi, Grads: 2 * shard}); e.States != want {
		t.Errorf("device: %+v, want %+v", e.States, want)
	}
	if want := (States{Params: 2 * shard, Grads: 2 * shard, Master: 4 * shard, AdamM: 4 * shard, AdamV: 4 * shard}); e.Offloaded != want {
		t.Errorf("host: %+v, want %+v", e.Offloaded, want)
	}
	if e.PCIe != (PCIe{ToHost: 2 * shard, ToDevice: 2 * shard}) {
		t.Errorf("PCIe: %+v", e.PCIe)
	}
	s.MainGrads = GradsFP32
	if e, err := s.Estimate(); err != nil || e.PCIe.ToHost != 4*shard || e.Offloaded.Grads != 4*shard || e.States.Grads != 4*shard {
		t.Errorf("fp32 main gradients: %+v, %+v (%v)", e.Offloaded, e.PCIe, err)
	}
	s.Precision, s.MainGrads = FP32, GradsLikeWeights
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "valid: fp16 or bf16") {
		t.Errorf("fp32 offload: %v", err)
	}
	if _, err := ParseOffload("disk"); err == nil || !strings.Contains(err.Error(), "none, optimizer, params") {
		t.Errorf("ParseOffload(disk): %v", err)
	}
	// ZeRO-Infinity's offload_param at ZeRO-3: the device keeps its
	// gradients' shard alone; the host adds the weight shard, gathered up
	// twice a step.
	s = Setup{Params: phi, Precision: BF16, Optimizer: Adam, Ranks: 64, ZeRO: 3, TP: 1, PP: 1, Offload: OffloadParams}
	e, err = s.Estimate()
	if err != nil {
		t.Fatal(err)
	}
	if e.States != (States{Grads: 2 * shard}) || e.Offloaded.Total() != 16*shard || e.Offloaded.Params != 2*shard || e.PCIe != (PCIe{ToHost: 2 * shard, ToDevice: 4 * shard}) {
		t.Errorf("offload params: device %+v, host %+v, PCIe %+v", e.States, e.Offloaded, e.PCIe)
	}
	s.ZeRO = 2
	if err := s.Validate(); err == nil || !strings.Contains(err.Error(), "valid: ZeRO stage 3") {
		t.Errorf("offload params at ZeRO-2: %v", err)
	}
}
