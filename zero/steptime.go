package zero

// The step's time by formula: every product of a transformer block at its
// shape on the card (cuda.Roofline.Matmul: tiles, waves, the measured
// fraction of the peak), the block's memory-bound kernels at the card's
// bandwidth, the tensor-parallel collectives on the critical path, the
// pipeline's sends and bubble, the data-parallel reduction (overlapped
// with the backward pass, or after it), the optimizer's pass over the
// states and offload's copies; the step's model FLOPs over its time and
// the GPUs' peak is its MFU, with the recomputation its HFU (Korthikanti
// et al. 2022, Appendix A).

import (
	"errors"
	"fmt"
	"math"
	"time"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/train"
)

// TimeOptions are what the step-time formula needs beside the setup.
type TimeOptions struct {
	Card    cuda.Roofline
	Network Network
	// Interleave is the virtual stages a pipeline rank runs (Megatron-LM's
	// interleaved 1F1B, Narayanan et al. 2021 Section 2.2.2): the bubble
	// shrinks by that factor. 0 or 1: none. The memory formulas and the
	// simulation know no interleaving; it is here for the published runs
	// that used it.
	Interleave int
	// Dropout adds dropout's kernels (Megatron-LM's default hidden and
	// attention dropout, 0.1): a mask written beside each dropped
	// tensor, read again in the backward pass. trainmem's models have no
	// dropout; the published runs did.
	Dropout bool
	// SerialGrads has the data-parallel reduction wait for the end of the
	// backward pass (Megatron-LM in 2021) instead of overlapping it, in
	// buckets, with the backward pass as DDP and ZeRO-2 do.
	SerialGrads bool
}

// StepTime is the formula's time of a step: the busiest pipeline stage's
// work for one micro-batch, and the step's parts.
type StepTime struct {
	Setup   model.Setup
	Card    string
	Network string
	GPUs    int
	// One micro-batch on the busiest stage: its kernels' time forward,
	// backward and recomputing, the tensor-parallel collectives, and the
	// sends to the neighbouring stages.
	Forward, Backward, Recompute time.Duration
	TensorComm, PipelineComm     time.Duration
	// The step: the micro-batches' work, the pipeline's bubble, the
	// data-parallel collectives (all of them, and the part not hidden
	// behind the backward pass), the optimizer's step and offload's
	// copies over PCIe.
	Compute, Bubble           time.Duration
	DataComm, DataExposed     time.Duration
	Optimizer, Offload        time.Duration
	Step                      time.Duration
	ModelFLOPs, HardwareFLOPs float64 // the step's, every GPU's together
	TokensPerSecond           float64
	MFU, HFU                  float64
}

// work is a list of kernels' times and collective times, summed.
type work struct {
	kernels, comm time.Duration
}

// StepTimeOf is the formula's step time of the setup on opts' card and
// network: the GPUs a node are the network's.
func StepTimeOf(c model.Checked, opts TimeOptions) (StepTime, error) {
	if err := c.Err(); err != nil {
		return StepTime{}, err
	}
	s := c.Setup()
	if s.ParamsOnly() {
		return StepTime{}, errors.New("zero: a step's time needs a model's shape (--preset or --layers...), not --params")
	}
	if err := opts.Card.Check(); err != nil {
		return StepTime{}, err
	}
	if opts.Network.GPUsPerNode < 1 {
		return StepTime{}, fmt.Errorf("zero: network %q has %d GPUs a node", opts.Network.Name, opts.Network.GPUsPerNode)
	}
	e, err := c.Estimate()
	if err != nil {
		return StepTime{}, err
	}
	lay := LayoutOf(s)
	nw, card := opts.Network, opts.Card
	dt := train.WorkingDType(s.Precision)
	st := StepTime{Setup: s, Card: card.Name, Network: nw.Name, GPUs: lay.Size()}
	tp := lay.GroupOf(TensorAxis, nw.GPUsPerNode)
	pp := lay.GroupOf(PipelineAxis, nw.GPUsPerNode)
	dp := lay.GroupOf(DataAxis, nw.GPUsPerNode)

	// The busiest stage: the most blocks, and the first and last
	// stages' ends; each stage is costed and the slowest sets the pace.
	blk := blockTimes(s, card, nw, tp, dt, opts.Dropout)
	m := max(1, s.MicroBatches)
	var slow struct {
		fwd, bwd, rec, tpc time.Duration
	}
	for r := range s.PP {
		_, n := model.StageBlocks(s.Model.Layers, s.PP, r)
		fwd, bwd, rec := scale(blk.fwd, n), scale(blk.bwd, n), scale(blk.rec, n)
		if r == 0 {
			fwd, bwd = add(fwd, blk.embedFwd), add(bwd, blk.embedBwd)
		}
		if r == s.PP-1 {
			fwd, bwd = add(fwd, blk.headFwd), add(bwd, blk.headBwd)
		}
		tot := fwd.kernels + fwd.comm + bwd.kernels + bwd.comm + rec.kernels + rec.comm
		if tot > slow.fwd+slow.bwd+slow.rec+slow.tpc {
			slow.fwd, slow.bwd, slow.rec = fwd.kernels, bwd.kernels, rec.kernels
			slow.tpc = fwd.comm + bwd.comm + rec.comm
		}
	}
	st.Forward, st.Backward, st.Recompute, st.TensorComm = slow.fwd, slow.bwd, slow.rec, slow.tpc
	if s.PP > 1 {
		// An activation forward and its gradient back, each a micro-batch:
		// b·s·h in the working type, split over the tensor ranks
		// (Narayanan et al.'s scatter/gather: each sends 1/t, the next
		// stage gathers over NVLink).
		act := int64(s.Batch) * int64(s.Seq) * int64(s.Model.Hidden) * int64(dt.Size()) / int64(s.TP)
		send := nw.Cost(SendRecv, act, pp).Time
		st.PipelineComm = 2 * send
	}
	mb := st.Forward + st.Backward + st.Recompute + st.TensorComm + st.PipelineComm
	st.Compute = time.Duration(m) * mb
	if s.PP > 1 {
		v := max(1, opts.Interleave)
		st.Bubble = time.Duration(float64(s.PP-1) / float64(v) * float64(mb))
	}

	// The data-parallel collectives, over the busiest stage's parameters.
	st.DataComm, st.DataExposed = dataTimes(s, e, nw, dp, st.Backward, st.Forward, m, opts.SerialGrads)

	// The optimizer reads and writes every model state of the rank, and
	// reads the gradients.
	dev := e.States
	st.Optimizer = card.Memory(2*(dev.Params+dev.Master+dev.AdamM+dev.AdamV) + dev.Grads)
	if pc := e.PCIe.Total(); pc > 0 && nw.PCIe.Bandwidth > 0 {
		st.Offload = time.Duration(math.Ceil(float64(pc) / (nw.PCIe.Bandwidth * nw.PCIe.Efficiency) * 1e9))
	}
	st.Step = st.Compute + st.Bubble + st.DataExposed + st.Optimizer + st.Offload

	// The step's FLOPs: every replica's micro-batches.
	r := e.Recompute
	steps := float64(m) * float64(s.Ranks)
	st.ModelFLOPs = r.Step * steps
	st.HardwareFLOPs = (r.Step + r.Recompute) * steps
	sec := st.Step.Seconds()
	if peak := card.PeakFLOPS(dt); peak > 0 && sec > 0 {
		st.MFU = st.ModelFLOPs / (sec * float64(st.GPUs) * peak)
		st.HFU = st.HardwareFLOPs / (sec * float64(st.GPUs) * peak)
	}
	if sec > 0 {
		st.TokensPerSecond = float64(s.Batch) * float64(s.Seq) * steps / sec
	}
	return st, nil
}

// blockCosts are one micro-batch's times on one rank: a block's forward,
// backward and recomputation, and the model's two ends.
type blockCosts struct {
	fwd, bwd, rec                        work
	embedFwd, embedBwd, headFwd, headBwd work
}

// gemm is a product's shape: batch products of m×k by k×n.
type gemm struct{ batch, m, n, k int64 }

// grads are the two products of its backward pass: the input's gradient
// (m×n by n×k) and the other operand's (k×m by m×n).
func (g gemm) grads() [2]gemm {
	return [2]gemm{{g.batch, g.m, g.k, g.n}, {g.batch, g.k, g.n, g.m}}
}

// blockTimes costs a block of s's model on one tensor-parallel rank of
// span tp: its products at their shapes, its memory-bound kernels by the
// bytes they read and write, its collectives.
func blockTimes(s model.Setup, card cuda.Roofline, nw Network, tp Span, dt cuda.DType, dropout bool) blockCosts {
	mc := s.Model
	b, sq, h, t := int64(s.Batch), int64(s.Seq), int64(mc.Hidden), int64(s.TP)
	a := int64(mc.Heads)
	kvh := int64(mc.KVHeads)
	if kvh == 0 {
		kvh = a
	}
	d := h / a
	kv := kvh * d
	F := int64(mc.FFNWidth())
	in := int64(1)
	if mc.MLP == model.MLPSwiGLU {
		in = 2
	}
	V := int64(mc.Vocab)
	bs := b * sq
	flash := mc.Attention == model.AttentionFlash

	products := []gemm{
		{1, bs, (h + 2*kv) / t, h}, // q, k, v
		{1, bs, h, h / t},          // the attention's output projection
		{1, bs, in * F / t, h},     // the MLP's input (gate and up)
		{1, bs, h, F / t},          // the MLP's output
	}
	attn := []gemm{
		{b * a / t, sq, sq, d}, // scores, q·kᵀ
		{b * a / t, sq, d, sq}, // the probabilities times v
	}
	mm := func(gs ...gemm) time.Duration {
		var d time.Duration
		for _, g := range gs {
			d += card.Matmul(dt, g.batch, g.m, g.n, g.k)
		}
		return d
	}
	back := func(gs ...gemm) time.Duration {
		var d time.Duration
		for _, g := range gs {
			gr := g.grads()
			d += mm(gr[0], gr[1])
		}
		return d
	}

	// The memory-bound kernels, by the elements each reads and writes:
	// E = b·s·h (split over the tensor ranks under sequence parallelism),
	// the heads' and the MLP's widths split always, the probabilities
	// b·(a/t)·s² unless flash attention keeps them on chip.
	esz := int64(dt.Size())
	E := bs * h
	if s.SequenceParallel {
		E /= t
	}
	Ef, S2 := bs*F/t, b*(a/t)*sq*sq
	// The biases are added in their products' kernels (trainmem's linear
	// op; Megatron-LM fuses them into the GELU and the dropout-add).
	var mem []int64
	mem = append(mem, 2*E, 2*E, 3*E, 3*E) // two norms, two residual adds
	if mc.MLP == model.MLPSwiGLU {
		mem = append(mem, 3*Ef) // silu(gate)·up
	} else {
		mem = append(mem, 2*Ef) // GELU
	}
	if mc.Positions == model.PosRoPE {
		mem = append(mem, 2*bs*(h+kv)/t) // the rotation of q and k
	}
	if !flash {
		mem = append(mem, 2*S2) // the scaled, masked softmax
	}
	if dropout {
		// Read, written, and a 1-byte mask: after the attention's and
		// the MLP's output projections, and on the probabilities.
		mem = append(mem, 2*E+E/esz, 2*E+E/esz)
		if !flash {
			mem = append(mem, 2*S2+S2/esz)
		}
	}
	memTime := func(mul int64, es []int64) time.Duration {
		var d time.Duration
		for _, e := range es {
			for range mul {
				d += card.Memory(e * esz)
			}
		}
		return d
	}
	// The tensor-parallel all-reduces of a block's forward and backward
	// passes (Megatron-LM's f and g: after the attention and after the
	// MLP; sequence parallelism's all-gather and reduce-scatter move the
	// same bytes).
	var ar time.Duration
	if t > 1 {
		ar = nw.Cost(AllReduce, bs*h*esz, tp).Time
	}

	// The attention: two products a head, the scores written (b·(a/t)·s²);
	// flash attention is one fused kernel a pass, its arithmetic over the
	// causal half of the scores (the pairs its kernels compute, as
	// trainmem's flash ops count them) and nothing of s² in memory, its
	// backward recomputing the scores: 2.5 times the forward's products.
	attnFwd, attnBwd := mm(attn...), back(attn...)
	if flash {
		pairs := float64(b) * float64(a/t) * float64(sq) * float64(sq+1) / 2
		qkvo := (2*bs*h/t + 2*bs*kv/t) * int64(dt.Size())
		attnFwd = card.Kernel(dt, cuda.Work{FLOPs: 4 * float64(d) * pairs, Bytes: qkvo, Attention: true})
		attnBwd = card.Kernel(dt, cuda.Work{FLOPs: 10 * float64(d) * pairs, Bytes: 2 * qkvo, Attention: true})
	}

	var c blockCosts
	c.fwd = work{mm(products...) + attnFwd + memTime(1, mem), 2 * ar}
	// Backward: each product's two gradients, each memory-bound kernel
	// reading its input and the incoming gradient and writing its own
	// (twice its forward bytes).
	bwd := back(products...) + attnBwd + memTime(2, mem)
	c.bwd = work{bwd, 2 * ar}
	switch s.Checkpoint.Kind {
	case model.CheckpointFull, model.CheckpointEvery, model.CheckpointSqrt:
		c.rec = c.fwd
	case model.CheckpointSelective:
		if !flash {
			c.rec = work{attnFwd + memTime(1, []int64{2 * S2}), 0}
		}
	}
	// The ends: the embedding's gather (and its all-reduce over a
	// vocabulary split), the head's norm, its product over the
	// vocabulary (split over the tensor ranks) and the cross-entropy over
	// fp32 logits.
	c.embedFwd = work{card.Memory(3 * bs * h * esz), ar}
	c.embedBwd = work{card.Memory(3 * bs * h * esz), 0}
	head := gemm{1, bs, V / t, h}
	logits := bs * V / t * 4
	c.headFwd = work{mm(head) + card.Memory(2*E*esz) + card.Memory(2*logits), 0}
	c.headBwd = work{back(head) + card.Memory(4*E*esz) + card.Memory(2*logits), 0}
	return c
}

// dataTimes is the data-parallel collectives' time in a step, and the
// part of it not hidden behind the backward pass: the gradients' reduction
// (all-reduce under plain data parallelism, reduce-scatter under ZeRO)
// overlaps the last micro-batch's backward pass, bucket by bucket, unless
// serial; ZeRO-1 and -2 gather the updated weights after the optimizer;
// ZeRO-3 gathers each layer's weights ahead of its forward and backward
// passes (prefetched, hidden behind them up to their time).
func dataTimes(s model.Setup, e model.Estimate, nw Network, dp Span, bwd, fwd time.Duration, m int, serial bool) (total, exposed time.Duration) {
	if s.Ranks <= 1 {
		return 0, 0
	}
	phi := e.RankTrained
	grads, weights := phi*s.GradSize(), phi*s.Precision.Size()
	var reduce, gather time.Duration
	switch s.ZeRO {
	case 0:
		reduce = nw.Cost(AllReduce, grads, dp).Time
	case 1, 2:
		reduce, gather = nw.Cost(ReduceScatter, grads, dp).Time, nw.Cost(AllGather, weights, dp).Time
	case 3:
		// Every micro-batch gathers the weights for its forward and its
		// backward pass.
		reduce, gather = nw.Cost(ReduceScatter, grads, dp).Time, time.Duration(2*m)*nw.Cost(AllGather, weights, dp).Time
	}
	total = reduce + gather
	if serial {
		return total, total
	}
	// The reduction's last bucket (25 MB, DDP's and DeepSpeed's default)
	// cannot hide; the rest hides behind the last backward pass.
	const bucket = 25 << 20
	last := nw.Cost(AllReduce, min(grads, bucket), dp).Time
	if s.ZeRO > 0 {
		last = nw.Cost(ReduceScatter, min(grads, bucket), dp).Time
	}
	exposed = max(reduce-bwd, 0) + min(last, reduce)
	if s.ZeRO == 3 {
		// Gathered layer by layer ahead of use, over every micro-batch's
		// passes.
		exposed += max(gather-time.Duration(m)*(fwd+bwd), 0)
	} else {
		exposed += gather
	}
	return total, exposed
}

func scale(w work, n int) work {
	return work{w.kernels * time.Duration(n), w.comm * time.Duration(n)}
}

func add(a, b work) work { return work{a.kernels + b.kernels, a.comm + b.comm} }
