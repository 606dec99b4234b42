package zero

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/train"
)

// TestLayoutTrainsAsOneRank: a layout of d data-parallel replicas (under
// ZeRO-0 to 3), t tensor-parallel ranks (Megatron-LM's split of the
// blocks, model/tensor.go, with or without sequence parallelism) and p
// pipeline stages running M micro-batches of b (GPipe or 1F1B;
// model/pipeline.go) trains as one rank of batch d·M·b: the same loss on
// every rank of a replica (a pipeline's stages learn the last stage's),
// the one rank's mean loss over the replicas, and the whole model's
// weights, put together from the ranks' parts (a tied embedding's two
// copies, a whole row's t copies equal), those of the one rank.
//
// The tolerances: in float64 the layout changes only the order of the
// sums (a row-parallel product's K/t partial sums added across the ranks,
// a column-parallel input gradient's t parts, a gradient summed over the
// M micro-batches in order where one rank sums every row at once, the
// loss a mean of the micro-batches' means), an error near 1e-16 relative:
// the losses agree to 1e-12 and the weights (read back as float32) to a
// float32 unit in the last place (or 1e-12 for a weight whose gradient is
// zero but for rounding, as the key bias's is: softmax ignores a shift of
// every score of a query). In fp32 the same reordering errors are near
// 1e-7, the losses agree to 1e-5, and AdamW may turn an update near a zero
// gradient either way, by at most lr a step (2·lr·steps between the two
// runs). In bf16 each rank's part of a row-parallel product is rounded to
// bf16 before the ranks sum it (as Megatron-LM's bf16 all-reduce does),
// and each micro-batch's gradient before it is added (as PyTorch adds a
// new gradient to .grad in the parameter's type), once more than one
// rank's whole product or gradient: the losses agree to a bf16 unit of
// the loss (2⁻⁸ relative), the weights to a few bf16 units and on average
// to 2⁻¹⁰.
func TestLayoutTrainsAsOneRank(t *testing.T) {
	const b, T, steps = 2, 16, 3
	cfg := tinyCfg
	cfg.Layers = 4
	for _, tc := range []struct {
		pp, m, tp, dp int
		sched         model.PipelineSchedule
		set           Setting
		prec          model.Precision
		pol           model.CheckpointKind
		opt           model.Optimizer
		float64       bool
		untied        bool
		sp            bool
		backoff       bool // fp16's first step overflows: the scale backs off to 2^14
		llama         bool // RMSNorm, no linear biases, SwiGLU (llamaLike), grouped-query attention
		fp32Grads     bool // --main-grads fp32 on the layout (the reference keeps 16-bit gradients)
		flash         bool // flash attention
	}{
		// LLaMA's blocks: each RMSNorm's gain gradient summed over the
		// tensor group under sequence parallelism, SwiGLU's gate and up
		// split alike across the ranks.
		{tp: 2, dp: 1, opt: model.SGD, float64: true, sp: true, llama: true},
		{tp: 2, dp: 2, set: Setting{Stage: 3}, float64: true, sp: true, llama: true},
		{pp: 2, m: 2, tp: 2, dp: 1, float64: true, untied: true, llama: true},
		{tp: 2, dp: 2, set: Setting{Stage: 2}, float64: true, llama: true, flash: true},
		// Tensor parallel, with and without sequence parallelism.
		{tp: 2, dp: 1, opt: model.SGD, float64: true, sp: true},
		{tp: 4, dp: 1, pol: model.CheckpointFull, float64: true, sp: true},
		{tp: 2, dp: 2, set: Setting{Stage: 2}, pol: model.CheckpointSelective, float64: true, sp: true},
		{tp: 2, dp: 2, set: Setting{Stage: 3}, prec: model.BF16, sp: true},
		{tp: 2, dp: 1, opt: model.SGD, float64: true},
		{tp: 4, dp: 1, float64: true},
		{tp: 2, dp: 2, set: Setting{Stage: 1}, pol: model.CheckpointFull, float64: true},
		{tp: 2, dp: 1},
		{tp: 4, dp: 1, pol: model.CheckpointSelective},
		{tp: 2, dp: 2, set: Setting{Stage: 0, BucketBytes: 64 << 10}},
		{tp: 2, dp: 2, set: Setting{Stage: 3}},
		{tp: 2, dp: 1, prec: model.BF16, pol: model.CheckpointFull},
		{tp: 2, dp: 2, set: Setting{Stage: 2}, prec: model.BF16},
		// Pipelines, alone and beside the other two axes.
		{pp: 1, m: 4, tp: 1, dp: 1, float64: true}, // gradient accumulation
		{pp: 2, m: 1, tp: 1, dp: 1, float64: true},
		{pp: 2, m: 4, tp: 1, dp: 1, float64: true},
		{pp: 2, m: 4, tp: 1, dp: 1, sched: model.GPipe, float64: true},
		{pp: 4, m: 4, tp: 1, dp: 1, float64: true, pol: model.CheckpointFull},
		{pp: 4, m: 6, tp: 1, dp: 1, sched: model.GPipe, float64: true, untied: true},
		{pp: 3, m: 2, tp: 1, dp: 1, float64: true}, // 4 blocks over 3 stages: 2, 1, 1
		{pp: 2, m: 2, tp: 2, dp: 2, float64: true, set: Setting{Stage: 1}},
		{pp: 2, m: 2, tp: 2, dp: 2, pol: model.CheckpointSelective},
		{pp: 2, m: 4, tp: 1, dp: 2, set: Setting{Stage: 0, BucketBytes: 64 << 10}},
		{pp: 4, m: 4, tp: 1, dp: 1, sched: model.GPipe},
		{pp: 2, m: 4, tp: 1, dp: 1, prec: model.BF16, pol: model.CheckpointFull},
		{pp: 2, m: 3, tp: 1, dp: 1, prec: model.FP16, opt: model.SGD, backoff: true}, // every stage unscales by the step's loss scale
		// fp32 main gradients: accumulated and reduced in fp32, sharded
		// at ZeRO-2 and 3 as the gradients are.
		{pp: 1, m: 4, tp: 1, dp: 1, prec: model.BF16, fp32Grads: true},
		{tp: 1, dp: 2, set: Setting{Stage: 2}, prec: model.BF16, fp32Grads: true},
		{tp: 2, dp: 2, set: Setting{Stage: 3}, prec: model.FP16, fp32Grads: true},
		{pp: 2, m: 2, tp: 1, dp: 2, set: Setting{Stage: 1}, prec: model.BF16, fp32Grads: true},
	} {
		tc.pp, tc.m = max(tc.pp, 1), max(tc.m, 1)
		if tc.opt == 0 {
			tc.opt = model.AdamW
		}
		name := fmt.Sprintf("tp=%d/dp=%d/pp=%d/m=%d/%s/%s/%s/%s/%s", tc.tp, tc.dp, tc.pp, tc.m, tc.sched, tc.set, tc.opt, tc.prec, model.Checkpoint{Kind: tc.pol})
		for _, f := range []struct {
			on  bool
			tag string
		}{{tc.float64, "float64"}, {tc.untied, "untied"}, {tc.sp, "sequence-parallel"}, {tc.llama, "llama-blocks"}, {tc.flash, "flash"}, {tc.fp32Grads, "fp32-main-grads"}} {
			if f.on {
				name += "/" + f.tag
			}
		}
		t.Run(name, func(t *testing.T) {
			c := cfg
			c.Untied = tc.untied
			if tc.llama {
				c = grouped(llamaLike(c), c.Heads/2) // and 2 query heads a key and value head, split over the tensor ranks
			}
			if tc.flash {
				c.Attention = model.AttentionFlash
			}
			if tc.pp == 1 {
				c.Layers = 2 // tensor and data parallel alone: the two blocks of tiny
			}
			opt := train.DefaultOptimizer(tc.opt)
			opt.LR = 1e-2
			opts := train.Options{Optimizer: opt, Float64: tc.float64}
			if tc.backoff {
				opts.LossScale = train.LossScaleOptions{Init: 1 << 20, Backoff: 1.0 / 64}
			}
			init := model.InitParams(c, 3)
			rows := tc.dp * tc.m * b // one rank's batch
			one := setupOf(c, rows, T, 1, 0, tc.prec, tc.opt)
			one.Checkpoint = model.Checkpoint{Kind: tc.pol}
			ref, err := train.New(hosts(t, 1)[0], checked(t, one), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			if err := ref.SetParams(init); err != nil {
				t.Fatal(err)
			}
			s := setupOf(c, b, T, tc.dp, tc.set.Stage, tc.prec, tc.opt)
			s.TP, s.PP, s.MicroBatches, s.Pipeline, s.SequenceParallel = tc.tp, tc.pp, tc.m, tc.sched, tc.sp
			if tc.fp32Grads {
				s.MainGrads = model.GradsFP32
			}
			s.Checkpoint = model.Checkpoint{Kind: tc.pol}
			lay := Layout{DP: tc.dp, TP: tc.tp, PP: tc.pp}
			g, err := NewGroup(hosts(t, lay.Size()))
			if err != nil {
				t.Fatal(err)
			}
			rk, err := NewRanks(g, checked(t, s), tc.set, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer rk.Close()
			if err := rk.SetParams(init); err != nil {
				t.Fatal(err)
			}
			lossTol := 1e-5
			switch {
			case tc.float64:
				lossTol = 1e-12
			case tc.prec != model.FP32:
				lossTol = 0x1p-8
			}
			big := loaderBatches(t, rows, T)
			per := tc.m * b * T // a replica's tokens a step
			for step := range steps {
				tok, tgt := make([]int32, rows*T), make([]int32, rows*T)
				if err := big.Next(tok, tgt); err != nil {
					t.Fatal(err)
				}
				want, err := ref.Step(tok, tgt)
				if err != nil {
					t.Fatal(err)
				}
				recs, err := rk.Step(func(i int) ([]int32, []int32) {
					d := lay.Coord(i)[DataAxis]
					return tok[d*per : (d+1)*per], tgt[d*per : (d+1)*per]
				})
				if err != nil {
					t.Fatal(err)
				}
				mean := 0.0
				for i, r := range recs {
					if first := recs[lay.Group(TensorAxis, i)[0]].Loss; r.Loss != first {
						t.Errorf("step %d: rank %d's loss %.9g, its tensor group's first rank's %.9g", step+1, i, r.Loss, first)
					}
					if tc.pp*tc.m == 1 {
						mean += r.Loss / float64(len(recs))
						continue
					}
					if r.MicroBatches != tc.m {
						t.Errorf("rank %d: %d micro-batches in its record, want %d", i, r.MicroBatches, tc.m)
					}
					stage := lay.Coord(i)[PipelineAxis]
					inFlight := tc.m
					if tc.sched == model.OneFOneB {
						inFlight = min(tc.pp-stage, tc.m)
					}
					if r.InFlight != inFlight {
						t.Errorf("rank %d (stage %d): %d micro-batches in flight, want %d", i, stage, r.InFlight, inFlight)
					}
					mean += r.Loss / float64(len(recs))
				}
				if math.Abs(mean-want.Loss) > lossTol*math.Abs(want.Loss) {
					t.Errorf("step %d: the ranks' mean loss %.12f, one rank's %.12f", step+1, mean, want.Loss)
				}
			}
			wp, err := ref.Params()
			if err != nil {
				t.Fatal(err)
			}
			gp, err := rk.Params()
			if err != nil {
				t.Fatal(err)
			}
			sameWeights(t, wp, gp, tc.float64, tc.prec, steps, opt.LR)
		})
	}
}

// A pipeline layout simulated on shape-only ranks allocates, rank by rank,
// what measured host ranks do (every allocator statistic) and sends the
// same traffic. Each stage's point-to-point traffic is the schedule's: M
// inputs received and M input gradients sent by every stage but the
// first, M outputs sent and M output gradients received by every stage but
// the last, each b·s·h values, and the tied embedding's gradient (its V·h
// part) both ways between the first and the last stage. Without
// recomputation a stage's activations peak at its micro-batches in flight
// times one micro-batch's: 1F1B's stage r keeps min(P-r, M), GPipe's M.
func TestSimulatePipeline(t *testing.T) {
	cfg := tinyCfg
	cfg.Layers = 4
	const b, T = 2, 16
	tok := make([]int32, 8*b*T)
	for _, tc := range []struct {
		pp, m, tp, dp int
		sched         model.PipelineSchedule
		set           Setting
		pol           model.CheckpointKind
		untied        bool
	}{
		{pp: 2, m: 4, tp: 1, dp: 1},
		{pp: 4, m: 4, tp: 1, dp: 1},
		{pp: 4, m: 4, tp: 1, dp: 1, sched: model.GPipe},
		{pp: 4, m: 6, tp: 1, dp: 1, untied: true},
		{pp: 2, m: 3, tp: 1, dp: 1, pol: model.CheckpointFull},
		{pp: 3, m: 5, tp: 1, dp: 2, set: Setting{Stage: 1}, pol: model.CheckpointSelective},
		{pp: 2, m: 2, tp: 2, dp: 2, set: Setting{Stage: 0, BucketBytes: 16 << 10}},
		{pp: 1, m: 4, tp: 1, dp: 2},
	} {
		c := cfg
		c.Untied = tc.untied
		s := setupOf(c, b, T, tc.dp, tc.set.Stage, model.BF16, model.AdamW)
		s.TP, s.PP, s.MicroBatches, s.Pipeline = tc.tp, tc.pp, tc.m, tc.sched
		s.Checkpoint = model.Checkpoint{Kind: tc.pol}
		lay := LayoutOf(s)
		name := fmt.Sprintf("%v m %d %s %s %s untied %t", lay, tc.m, tc.sched, tc.set, s.Checkpoint, tc.untied)
		res, err := Simulate(func() cuda.Device { return shape.New(0) }, checked(t, s), tc.set, 2, nil)
		if err != nil {
			t.Fatal(name, err)
		}
		meas, err := Measure(hosts(t, lay.Size()), s, tc.set, train.Options{}, model.InitParams(c, 1), 2,
			func(int, int) ([]int32, []int32, error) { return tok[:tc.m*b*T], tok[:tc.m*b*T], nil })
		if err != nil {
			t.Fatal(name, err)
		}
		if len(res) != lay.Size() {
			t.Fatalf("%s: %d ranks simulated, want all %d", name, len(res), lay.Size())
		}
		// One micro-batch's activations, by stage: a run of M = 1.
		one := s
		one.MicroBatches, one.Ranks, one.ZeRO = 1, 1, 0
		single, err := Simulate(func() cuda.Device { return shape.New(0) }, checked(t, one), Setting{}, 2, nil)
		if err != nil {
			t.Fatal(name, err)
		}
		for r := range res {
			if res[r].Stats != meas[r].Stats {
				t.Errorf("%s rank %d: simulated %+v, measured %+v", name, r, res[r].Stats, meas[r].Stats)
			}
			if res[r].Traffic != meas[r].Traffic {
				t.Errorf("%s rank %d: traffic simulated %+v, measured %+v", name, r, res[r].Traffic, meas[r].Traffic)
			}
			co := lay.Coord(r)
			st := co[PipelineAxis]
			part, _ := c.TensorRank(tc.tp, co[TensorAxis])
			part, _ = part.PipelineStage(tc.pp, st)
			stream := int64(b * T * c.Hidden * 2) // bf16
			var sent, recv int64
			if st > 0 {
				sent, recv = sent+int64(tc.m)*stream, recv+int64(tc.m)*stream
			}
			if st < tc.pp-1 {
				sent, recv = sent+int64(tc.m)*stream, recv+int64(tc.m)*stream
			}
			if !tc.untied && tc.pp > 1 && (st == 0 || st == tc.pp-1) {
				w, _ := part.ParamByName("wte")
				sent, recv = sent+2*w.Count, recv+2*w.Count
			}
			p2p := res[r].AxisTraffic[PipelineAxis][SendRecv]
			if p2p.SentBytes != sent || p2p.RecvBytes != recv {
				t.Errorf("%s rank %d (stage %d): send_recv sent %d and received %d bytes, want %d and %d", name, r, st, p2p.SentBytes, p2p.RecvBytes, sent, recv)
			}
			if got, want := res[r].Stats.CategoryRequested[cuda.Params].Current, 2*part.NumParams(); tc.dp == 1 && got != want {
				t.Errorf("%s rank %d: params %d bytes, want its stage's %d", name, r, got, want)
			}
			if tc.pol != model.CheckpointNone {
				continue
			}
			inFlight := tc.m
			if tc.sched == model.OneFOneB {
				inFlight = min(tc.pp-st, tc.m)
			}
			if res[r].Record.InFlight != inFlight {
				t.Errorf("%s rank %d: %d micro-batches in flight, want %d", name, r, res[r].Record.InFlight, inFlight)
			}
			oneAct := single[st*tc.tp+co[TensorAxis]].Stats.CategoryRequested[cuda.Activations].Peak
			if got := res[r].Stats.CategoryRequested[cuda.Activations].Peak; got != int64(inFlight)*oneAct {
				t.Errorf("%s rank %d (stage %d): activations peak at %d bytes, want %d in flight × %d", name, r, st, got, inFlight, oneAct)
			}
		}
	}
}

// A stage that fails in the middle of a step (its device runs out of
// memory while its neighbours wait on it in their sends and receives) ends
// the step on every rank of every group it is in, each naming it: none
// waits forever.
func TestPipelineRankFails(t *testing.T) {
	cfg := tinyCfg
	cfg.Layers = 4
	s := setupOf(cfg, 2, 16, 2, 0, model.FP32, model.AdamW)
	s.PP, s.MicroBatches = 2, 4
	tok := make([]int32, 4*2*16)
	batch := func(int, int) ([]int32, []int32, error) { return tok, tok, nil }
	full, err := Measure(hosts(t, 4), s, Setting{}, train.Options{}, model.InitParams(cfg, 1), 1, batch)
	if err != nil {
		t.Fatal(err)
	}
	// Rank 3 (stage 1 of replica 1) gets room for its model states and
	// less than its step's peak.
	states := full[3].Stats.AllocatedBytes.Current
	peak := full[3].Stats.AllocatedBytes.Peak
	devs := hosts(t, 3)
	small, err := host.New(host.Options{Threads: 1, BLAS: host.BLASGo, Capacity: (states + peak) / 2})
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	g, err := NewGroup(append(devs, small))
	if err != nil {
		t.Fatal(err)
	}
	rk, err := NewRanks(g, checked(t, s), Setting{}, train.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rk.Close()
	if err := rk.SetParams(model.InitParams(cfg, 1)); err != nil {
		t.Fatal(err)
	}
	_, err = rk.Step(func(int) ([]int32, []int32) { return tok, tok })
	var oom *cuda.OutOfMemoryError
	if err == nil || !errors.As(err, &oom) {
		t.Fatalf("a stage out of memory: %v, want its out-of-memory error", err)
	}
	// Every other rank's error names rank 3: its pipeline peer (rank 1)
	// waiting on it, its data-parallel peer (rank 2), and rank 0 through
	// them.
	for r := range 4 {
		var line string
		for _, l := range strings.Split(err.Error(), "\n") {
			if strings.HasPrefix(l, fmt.Sprintf("rank %d: ", r)) {
				line = l
			}
		}
		if !strings.Contains(line, "rank 3 left the group (it failed (rank 3: train: forward") && !(r == 3 && strings.HasPrefix(line, "rank 3: train: forward")) {
			t.Errorf("rank %d: %q, want it to name rank 3 and its failure", r, line)
		}
	}
	t.Logf("%v", err)
}

// The trainmem formula of a pipeline stage (model.Checked.StageRank, its
// TrainmemActivations; the estimate's of its reported stage) equals every
// simulated stage's activation peak to the byte: tied and untied heads, 2 and 3 stages (5 blocks split unevenly),
// 1 to 5 micro-batches under both schedules, every checkpoint policy, every
// precision, with tensor parallelism and sequence parallelism too.
func TestExactFormulaEqualsPipelineSimulation(t *testing.T) {
	five := model.Config{Name: "five", Layers: 5, Hidden: 64, Heads: 4, Vocab: 256, Context: 64}
	untied := model.Config{Name: "untied", Layers: 5, Hidden: 96, Heads: 6, Vocab: 300, Context: 64, Untied: true}
	n := 0
	for _, cfg := range []model.Config{five, untied, llamaLike(untied)} {
		for _, pp := range []int{2, 3} {
			for _, m := range []int{1, 3, 5} {
				for j, pol := range []string{"none", "full", "every:2", "sqrt", "selective"} {
					ck, _ := model.ParseCheckpoint(pol)
					s := setupOf(cfg, 2, 16, 1, 0, []model.Precision{model.FP32, model.FP16, model.BF16}[(m+j)%3], model.Adam)
					s.PP, s.MicroBatches, s.Checkpoint = pp, m, ck
					s.Pipeline = []model.PipelineSchedule{model.OneFOneB, model.GPipe}[(pp+j)%2]
					if j%2 == 1 {
						s.TP, s.SequenceParallel = 2, m > 1
					}
					res, err := Simulate(func() cuda.Device { return shape.New(0) }, checked(t, s), Setting{}, 2, nil)
					if err != nil {
						t.Fatal(err)
					}
					lay := LayoutOf(s)
					// The whole setup's estimate is its reported stage's
					// (tensor rank 0's) part's.
					e, err := s.Estimate()
					if err != nil {
						t.Fatal(err)
					}
					if got := res[lay.Rank(Coord{PipelineAxis: e.Stage})].Stats.CategoryRequested[cuda.Activations].Peak; e.ActivationBytes(model.Exact) != got {
						t.Errorf("%s pp %d m %d %s: the estimate's trainmem formula %d bytes (stage %d), its simulation %d", cfg.Name, pp, m, pol, e.ActivationBytes(model.Exact), e.Stage, got)
					}
					for _, r := range res {
						co := lay.Coord(r.Rank)
						part, err := checked(t, s).TensorRank(co[TensorAxis])
						if err == nil {
							part, err = part.StageRank(co[PipelineAxis])
						}
						if err != nil {
							t.Fatal(err)
						}
						a, err := part.TrainmemActivations()
						if err != nil {
							t.Fatal(err)
						}
						if got := r.Stats.CategoryRequested[cuda.Activations].Peak; got != a.Total {
							t.Errorf("%s pp %d m %d %s %s %s tp %d sp %t rank %d (stage %d): simulated activation peak %d bytes, formula %d (%+d)",
								cfg.Name, pp, m, s.Pipeline, pol, s.Precision, s.TP, s.SequenceParallel, r.Rank, co[PipelineAxis], got, a.Total, a.Total-got)
						}
					}
					n++
				}
			}
		}
	}
	t.Logf("%d combinations agree on every stage", n)
}
