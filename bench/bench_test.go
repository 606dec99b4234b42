package bench

import (
	"context"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/train"
)

// The host config of the checkpointing measurement: 8 layers, so that full
// checkpointing's recomputation is the whole model's forward pass less the
// head, as for a real GPT-2 (the tiny preset's 2 layers leave the head a
// large share).
var hostCfg = model.Config{Name: "L8-h256", Layers: 8, Hidden: 256, Heads: 8, Vocab: 256, Context: 256}

// BenchmarkCheckpointFullVsNone measures full checkpointing against none on
// the host, fp32, b=8, s=128: each iteration runs one step of each policy
// (alternating which goes first), each on a device of its own; the metrics
// are medians, the overhead the median of the per-iteration ratios.
// Run it with enough iterations for a median: -benchtime 10x.
func BenchmarkCheckpointFullVsNone(b *testing.B) {
	s := model.Setup{Model: hostCfg, Batch: 8, Seq: 128, Precision: model.FP32, Optimizer: model.Adam, Ranks: 1, TP: 1, PP: 1}
	full := s
	full.Checkpoint = model.Checkpoint{Kind: model.CheckpointFull}
	var runs [2]*runner
	var devs [2]cuda.Device
	for i, p := range []model.Setup{s, full} {
		h, err := host.New(host.Options{})
		if err != nil {
			b.Fatal(err)
		}
		defer h.Close()
		devs[i] = h
		if runs[i], err = newRunner(h, checked(b, p), Options{}); err != nil {
			b.Fatal(err)
		}
		defer runs[i].close()
	}
	// The two policies step in turn, the first of them alternating
	// (rotation, as the sweep does).
	rot := &rotation{ctx: context.Background(), runs: runs[:], pols: []model.Checkpoint{s.Checkpoint, full.Checkpoint}}
	step := func() []train.Record {
		var recs []train.Record
		_, err := train.Loop(context.Background(), rot, 1, func(_, i int) ([]int32, []int32, error) { return runs[i].batches.Next() },
			func(_ int, r []train.Record, _ error) error { recs = r; return nil })
		if err != nil {
			b.Fatal(err)
		}
		return recs
	}
	step() // fill the caches
	var ms [2][]float64
	var recompute, ratio []float64
	for b.Loop() {
		recs := step()
		ms[0], ms[1] = append(ms[0], recs[0].StepMs), append(ms[1], recs[1].StepMs)
		recompute = append(recompute, recs[1].RecomputeMs)
		ratio = append(ratio, recs[1].StepMs/recs[0].StepMs)
	}
	actNone := devs[0].Stats().CategoryRequested[cuda.Activations].Peak
	actFull := devs[1].Stats().CategoryRequested[cuda.Activations].Peak
	e, err := full.Estimate()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(median(ms[0]), "ms/none-step")
	b.ReportMetric(median(ms[1]), "ms/full-step")
	b.ReportMetric(median(recompute), "ms/full-recompute")
	b.ReportMetric((median(ratio)-1)*100, "%overhead")
	b.ReportMetric(e.Recompute.Fraction*100, "%recompute-FLOPs")
	b.ReportMetric(float64(actNone)/(1<<20), "MiB-act-none")
	b.ReportMetric(float64(actFull)/(1<<20), "MiB-act-full")
	b.ReportMetric((1-float64(actFull)/float64(actNone))*100, "%act-saved")
}

// BenchmarkGPT2XLActivations simulates GPT-2 XL at the source articles'
// size (b=32, s=1000, fp16 mixed precision) without checkpointing and with
// full checkpointing, and reports the activations (GB = 10^9 bytes, the
// articles' unit) and each formula's error against the simulation.
func BenchmarkGPT2XLActivations(b *testing.B) {
	xl, err := model.Preset("gpt2-xl")
	if err != nil {
		b.Fatal(err)
	}
	for _, pol := range []model.Checkpoint{{Kind: model.CheckpointNone}, {Kind: model.CheckpointFull}} {
		b.Run(pol.String(), func(b *testing.B) {
			s := model.Setup{Model: xl, Batch: 32, Seq: 1000, Precision: model.FP16, Optimizer: model.Adam, Checkpoint: pol, Ranks: 1, TP: 1, PP: 1}
			e, err := s.Estimate()
			if err != nil {
				b.Fatal(err)
			}
			var act, peak int64
			for b.Loop() {
				dev := shape.New(0)
				_, st, err := train.Simulate(dev, checked(b, s), 1, nil)
				dev.Close()
				if err != nil {
					b.Fatal(err)
				}
				act, peak = st.CategoryRequested[cuda.Activations].Peak, st.AllocatedBytes.Peak
			}
			b.ReportMetric(float64(act)/1e9, "GB-act")
			b.ReportMetric(float64(peak)/1e9, "GB-peak")
			for _, f := range model.Formulas() {
				b.ReportMetric(float64(e.ActivationBytes(f)-act)/float64(act)*100, "%err-"+f.String())
			}
		})
	}
}
