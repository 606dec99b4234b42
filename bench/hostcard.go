package bench

// The host as a card of the time model, with the cost trainmem's own
// executor adds to each instruction on the host: on a GPU the kernels run
// behind the host's back, and a launch is their only overhead; on the
// host each instruction's bookkeeping (its allocations in the caching
// allocator, its slots, its threads' start) takes the CPU itself, tens of
// microseconds that a small model's step is mostly made of.

import (
	"fmt"
	"math/rand/v2"
	"time"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/train"
)

// The workload the executor's cost is timed on: the tiny preset at
// micro-batch 1 of 8 tokens, fp32, whose kernels are nearly nothing, so
// that its step is its instructions' bookkeeping.
const (
	calibBatch, calibSeq = 1, 8
	calibSteps           = 8
)

// HostCard is the host as a card (its Card: its peak, its product
// kernel's rate, its bandwidth, a kernel with nothing to do) with the
// executor's cost an instruction added to the launch: the tiny preset's
// step at b 1, s 8 trained on d, the best of 8 steps after the first, less
// its kernels' time on the card, over its instructions (about 0.2 s in
// all). A model predicted on this card is timed on the host's own terms;
// the workload is none of the presets a user would time.
func HostCard(d cuda.Carder) (cuda.Roofline, error) {
	r, err := d.Card()
	if err != nil {
		return r, err
	}
	tiny, err := model.Preset("tiny")
	if err != nil {
		return r, err
	}
	c, err := model.Setup{Model: tiny, Batch: calibBatch, Seq: calibSeq, Precision: model.FP32, Optimizer: model.Adam, Ranks: 1, TP: 1, PP: 1}.Check()
	if err != nil {
		return r, err
	}
	// Measured: the host's step.
	tr, err := train.New(d, c, train.Options{})
	if err != nil {
		return r, err
	}
	defer tr.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	tokens, targets := make([]int32, calibBatch*calibSeq), make([]int32, calibBatch*calibSeq)
	for i := range tokens {
		tokens[i], targets[i] = int32(rng.IntN(tiny.Vocab)), int32(rng.IntN(tiny.Vocab))
	}
	measured := time.Duration(1<<63 - 1)
	for i := range calibSteps + 1 {
		t := time.Now()
		if _, err := tr.Step(tokens, targets); err != nil {
			return r, err
		}
		if i > 0 {
			measured = min(measured, time.Since(t))
		}
	}
	// Predicted: the same step on the card, and its instructions.
	sd := shape.New(0)
	defer sd.Close()
	if err := sd.Model(r); err != nil {
		return r, err
	}
	p := &train.Profile{}
	st, err := train.New(sd, c, train.Options{Profile: p})
	if err != nil {
		return r, err
	}
	defer st.Close()
	var predicted time.Duration
	for range 2 {
		rec, err := st.Step(nil, nil)
		if err != nil {
			return r, err
		}
		predicted = time.Duration(rec.StepMs * float64(time.Millisecond))
	}
	var calls int
	for _, row := range p.Rows() {
		calls += row.Calls
	}
	if n := calls / p.Steps(); n > 0 && measured > predicted {
		per := (measured - predicted) / time.Duration(n)
		r.Eff.Launch += per
		r.Source += fmt.Sprintf("; %v an instruction of trainmem's executor (the tiny preset's step at b 1, s 8: %v measured, %v of kernels, %d instructions)",
			per.Round(100*time.Nanosecond), measured.Round(time.Microsecond), predicted.Round(time.Microsecond), n)
	}
	return r, nil
}
