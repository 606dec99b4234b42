package model

// The closed-form memory model of transformer training: what the literature
// says one rank holds, per category, for a model and a training setup. It is
// the first of trainmem's three answers (estimate, simulate, measure); its
// error against the other two is what the reports explain.
//
// Every figure is an exact integer number of bytes (no float rounding), and
// every formula names its source:
//
//   - Model states: Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
//     Toward Training Trillion Parameter Models", Section 3.1 (mixed-precision
//     Adam holds 2Φ + 2Φ + KΦ bytes, K = 12) and Section 5.1 / Table 1
//     (per-rank sharding of the three stages).
//   - Activations, "zero_paper": the same paper, Section 3.2: 12 · h · b · s · L
//     values a replica (GPT-2 1.5B at b=32, s=1K: about 60 GB in 16 bits).
//   - Activations, "korthikanti": Korthikanti et al. 2022, "Reducing
//     Activation Recomputation in Large Transformer Models" (arXiv
//     2205.05198), Section 4.1 (s·b·h·(34 + 5·a·s/h) bytes a layer), Section
//     4.2 and Table 2 (tensor and sequence parallel, selective and full
//     recomputation), Section 4.3 (input embedding and output layer terms).
//   - Checkpointing every K layers: Chen et al. 2016, "Training Deep Nets
//     with Sublinear Memory Cost" (K = ceil(sqrt(L)) gives O(sqrt(L)) memory).
//   - FLOPs: Narayanan et al. 2021, "Efficient Large-Scale Language Model
//     Training on GPU Clusters Using Megatron-LM", Section 5.1, and
//     Korthikanti et al. 2022, Appendix A: a forward pass is
//     L·(24·b·s·h² + 4·b·s²·h) + 2·b·s·h·V, a training step three of them.
//   - Tensor parallelism: Shoeybi et al. 2019 (Megatron-LM), Section 3.
//
// What the formulas leave out, trainmem's simulate and measure show:
// temporaries that die inside a phase, kernel workspaces, allocator rounding
// and caching, and (on a GPU) the CUDA context.

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"trainmem/cuda"
	"trainmem/cuda/enum"
)

// Formula is an activation formula: one of the literature's closed forms,
// or trainmem's own, exact for its implementation. Its name (String,
// MarshalText) is the key of the "activations" object in trainmem's JSON.
type Formula uint8

const (
	ZeROPaper   Formula = iota // Rajbhandari et al. 2020 (ZeRO), Section 3.2
	Korthikanti                // Korthikanti et al. 2022, Section 4.1
	Exact                      // trainmem's ops at its executor's schedule (exact.go)
)

var formulaNames = enum.New[Formula]("model", "Formula", "formula", "zero_paper", "korthikanti", "trainmem")

func (f Formula) String() string { return formulaNames.String(f) }

// MarshalText is the formula's name, so that maps keyed by formula are
// JSON objects keyed by name; UnmarshalText reads it.
func (f Formula) MarshalText() ([]byte, error)  { return formulaNames.Marshal(f) }
func (f *Formula) UnmarshalText(b []byte) error { return formulaNames.Unmarshal(f, b) }

// Formulas lists the activation formulas in report order.
func Formulas() []Formula { return formulaNames.Values() }

// Source is the citation of the formula.
func (f Formula) Source() string {
	switch f {
	case ZeROPaper:
		return "Rajbhandari et al. 2020 (ZeRO), Section 3.2: 12·h·b·s·L values, 2 bytes each in 16-bit training (4 in fp32)"
	case Korthikanti:
		return "Korthikanti et al. 2022, Section 4.1 Eq. 1, Table 2, Section 4.3: sbh·(34 + 5as/h) bytes a layer (34 with flash attention, which stores no scores)"
	case Exact:
		return exactSource
	}
	return ""
}

// ParseFormula reads a formula's name.
func ParseFormula(s string) (Formula, error) { return formulaNames.Parse(s) }

// Precision is the training precision. FP16 and BF16 mean mixed precision:
// 16-bit weights, gradients and activations, fp32 master weights and
// optimizer moments (Micikevicius et al. 2018).
type Precision uint8

const (
	FP32 Precision = iota
	FP16
	BF16
)

var precisionNames = enum.New[Precision]("model", "Precision", "precision", "fp32", "fp16", "bf16")

func (p Precision) String() string { return precisionNames.String(p) }

// ParsePrecision is the inverse of Precision.String.
func ParsePrecision(s string) (Precision, error) {
	return precisionNames.Parse(s)
}

// Mixed reports whether p keeps fp32 master weights beside 16-bit ones.
func (p Precision) Mixed() bool { return p == FP16 || p == BF16 }

// Size is the bytes of one working value (weights, gradients, activations):
// 2 under mixed precision, 4 in fp32.
func (p Precision) Size() int64 {
	if p.Mixed() {
		return 2
	}
	return 4
}

// MainGrads is the type of the gradients a step keeps, accumulates over
// its micro-batches and reduces over the ranks. GradsLikeWeights keeps them
// in the working weights' type (2 bytes under mixed precision, as PyTorch's
// AMP does); GradsFP32 keeps an fp32 buffer beside the 16-bit weights, each
// backward kernel's 16-bit gradient added into it and dropped (Megatron-LM's
// main_grad, DeepSpeed's fp32 gradient partitions): 4 bytes a parameter, 2
// more than the working type's under mixed precision, the same in fp32.
type MainGrads uint8

const (
	GradsLikeWeights MainGrads = iota
	GradsFP32
)

var mainGradsNames = enum.New[MainGrads]("model", "MainGrads", "main gradients", "weights", "fp32")

func (g MainGrads) String() string { return mainGradsNames.String(g) }

// ParseMainGrads is the inverse of MainGrads.String.
func ParseMainGrads(s string) (MainGrads, error) {
	return mainGradsNames.Parse(s)
}

// Offload is where the optimizer's states (and the weights) live.
// OffloadOptimizer is ZeRO-Offload's (Ren et al. 2021; DeepSpeed's
// offload_optimizer=cpu): the fp32 master weights and moments of the
// parameters a rank updates live in host memory beside a copy of their
// gradients and of their working weights, the host runs the update, and
// each step copies the gradients down and the updated weights up over
// PCIe. OffloadParams is ZeRO-Infinity's offload_param on top of it
// (Rajbhandari et al. 2021; ZeRO-3 only): the rank's shard of the working
// weights lives in host memory too, copied up at each of ZeRO-3's gathers
// (the forward pass's and the backward pass's) and updated in place. Mixed
// precision only: fp32 training has no master weights to keep there.
type Offload uint8

const (
	OffloadNone Offload = iota
	OffloadOptimizer
	OffloadParams
)

var offloadNames = enum.New[Offload]("model", "Offload", "offload", "none", "optimizer", "params")

func (o Offload) String() string { return offloadNames.String(o) }

// ParseOffload is the inverse of Offload.String.
func ParseOffload(s string) (Offload, error) { return offloadNames.Parse(s) }

// PCIe is the bytes one step copies between a device and host memory
// under Offload: the gradients of the parameters the rank updates down
// (in the kept gradients' type) and their updated working weights up, or
// under OffloadParams the weight shard up at each gather.
type PCIe struct {
	ToHost, ToDevice int64
}

// Total is both ways.
func (p PCIe) Total() int64 { return p.ToHost + p.ToDevice }

// offloaded splits a rank's model states between the device and host
// memory under s.Offload: the optimizer's states (master, m, v) move to the
// host, beside the host's copies of the gradients and working weights of
// the parameters they update; and the step's PCIe copies of those.
func (s Setup) offloaded(st States, stage int, phi int64) (device, host States, pcie PCIe, err error) {
	if s.Offload == OffloadNone {
		return st, States{}, PCIe{}, nil
	}
	var c calc
	count := phi // the parameters the rank updates
	if stage >= 1 {
		count = ceilDiv(phi, int64(s.Ranks))
	}
	device = States{Params: st.Params, Grads: st.Grads, Frozen: st.Frozen, QuantState: st.QuantState}
	host = States{Params: c.mul(count, s.Precision.Size()), Grads: c.mul(count, s.GradSize()), Master: st.Master, AdamM: st.AdamM, AdamV: st.AdamV}
	pcie = PCIe{ToHost: host.Grads, ToDevice: host.Params}
	if s.Offload == OffloadParams {
		// The weight shard itself is the host's, gathered twice a step
		// (a unit the backward pass does not read is gathered once).
		device.Params, host.Params = 0, st.Params
		pcie.ToDevice = c.mul(2, st.Params)
	}
	c.add(host.Params, host.Grads, host.Master, host.AdamM, host.AdamV)
	return device, host, pcie, c.err()
}

// GradSize is the bytes of one kept gradient value under s: 4 with fp32
// main gradients, else the working type's (Precision.Size).
func (s Setup) GradSize() int64 {
	if s.MainGrads == GradsFP32 {
		return 4
	}
	return s.Precision.Size()
}

// Optimizer is the update rule, which decides the optimizer states.
type Optimizer uint8

const (
	Adam     Optimizer = iota // Kingma & Ba 2015: m and v
	AdamW                     // Loshchilov & Hutter 2019: m and v, decoupled decay
	SGD                       // no state
	Momentum                  // SGD with momentum: one buffer, reported as adam_m
	// Adam8bit and AdamW8bit are Adam and AdamW with m and v stored
	// blockwise in 8 bits (Dettmers et al. 2022, "8-bit Optimizers via
	// Block-wise Quantization"; bitsandbytes' Adam8bit and AdamW8bit,
	// transformers' adamw_bnb_8bit): a byte each a parameter, and an fp32
	// scale each a block of 256 (cuda.Adam8bit); a tensor of fewer than
	// Min8bitSize values keeps fp32 states, as bitsandbytes does.
	Adam8bit
	AdamW8bit
)

var optimizerNames = enum.New[Optimizer]("model", "Optimizer", "optimizer", "adam", "adamw", "sgd", "momentum", "adam8bit", "adamw8bit")

// Min8bitSize is the fewest values a tensor needs for 8-bit optimizer
// states: bitsandbytes' min_8bit_size (optim/optimizer.py), below which
// its 8-bit optimizers keep fp32 states.
const Min8bitSize = 4096

// EightBit reports whether o stores its moments in 8 bits.
func (o Optimizer) EightBit() bool { return o == Adam8bit || o == AdamW8bit }

// Rule is o's update rule: Adam or AdamW for the 8-bit ones, else o.
func (o Optimizer) Rule() Optimizer {
	switch o {
	case Adam8bit:
		return Adam
	case AdamW8bit:
		return AdamW
	}
	return o
}

// Moment8bitBytes is the bytes of one 8-bit moment (m or v) of a tensor of
// n values: a byte a value and an fp32 scale a block of 256, or 4 bytes a
// value for a tensor below Min8bitSize.
func Moment8bitBytes(n int64) int64 {
	if n < Min8bitSize {
		return 4 * n
	}
	return n + 4*cuda.Blocks(n, cuda.Block8)
}

// moments8bit is the bytes of one 8-bit moment of c's trained rows (of a
// bare count of phi parameters, one tensor).
func (s Setup) moments8bit(phi int64) int64 {
	if s.ParamsOnly() {
		return Moment8bitBytes(phi)
	}
	var b int64
	for _, p := range s.Model.Params() {
		if !p.Frozen {
			b += Moment8bitBytes(p.Count)
		}
	}
	return b
}

func (o Optimizer) String() string { return optimizerNames.String(o) }

// ParseOptimizer is the inverse of Optimizer.String.
func ParseOptimizer(s string) (Optimizer, error) {
	return optimizerNames.Parse(s)
}

// States is bytes per model-state category. As a rate (PerParam) it is
// bytes a parameter; as a result (Estimate.States) bytes on one rank.
type States struct {
	Params int64 // working weights: 2 bytes under mixed precision, 4 in fp32
	Grads  int64 // gradients, in the working dtype
	Master int64 // fp32 master weights, mixed precision only
	AdamM  int64 // Adam's m, or the momentum buffer (the "first moment")
	AdamV  int64 // Adam's v
	// Frozen is the weights a fine-tune does not train (Config.Freeze),
	// at the working weights' width (the codes of those stored quantized,
	// Config.Quantize), with nothing else: no gradient, no master copy, no
	// optimizer state. The other categories count the trained parameters
	// only.
	Frozen int64
	// QuantState is the quantized frozen weights' scales and offsets
	// (QuantSizes.StateBytes).
	QuantState int64
}

// Total is the sum over categories.
func (s States) Total() int64 {
	return s.Params + s.Grads + s.Master + s.AdamM + s.AdamV + s.Frozen + s.QuantState
}

// Optimizer is the optimizer-state part, the ZeRO paper's K (per parameter)
// or KΦ: master weights and moments.
func (s States) Optimizer() int64 { return s.Master + s.AdamM + s.AdamV }

// Share is one memory category's bytes.
type Share struct {
	Cat   cuda.Category
	Bytes int64
}

// Named lists the model-state categories with their bytes, in report
// order; the frozen weights only where a fine-tune has some.
func (s States) Named() []Share {
	n := []Share{
		{cuda.Params, s.Params},
		{cuda.Grads, s.Grads},
		{cuda.Master, s.Master},
		{cuda.AdamM, s.AdamM},
		{cuda.AdamV, s.AdamV},
	}
	if s.Frozen > 0 {
		n = append(n, Share{cuda.Frozen, s.Frozen})
	}
	if s.QuantState > 0 {
		n = append(n, Share{cuda.QuantState, s.QuantState})
	}
	return n
}

// PerParam is the model-state bytes a parameter. Mixed-precision Adam holds
// 2 + 2 + 4 + 4 + 4 = 16 (ZeRO paper Section 3.1: 2Φ + 2Φ + KΦ, K = 12);
// fp32 Adam 4 + 4 + 4 + 4 = 16; fp32 SGD 4 + 4 = 8; SGD momentum adds one
// fp32 buffer, reported in adam_m.
func PerParam(p Precision, o Optimizer) States {
	w := p.Size()
	s := States{Params: w, Grads: w}
	if p.Mixed() {
		s.Master = 4
	}
	switch o {
	case Adam, AdamW:
		s.AdamM, s.AdamV = 4, 4
	case Adam8bit, AdamW8bit:
		s.AdamM, s.AdamV = 1, 1 // the codes; the scales and the small tensors' fp32 states: Setup.moments8bit
	case Momentum:
		s.AdamM = 4
	}
	return s
}

// ZeROStates is what one of n data-parallel ranks holds of phi parameters'
// model states at ZeRO stage 0 to 3 (Rajbhandari et al. 2020, Section 5 and
// Table 1): stage 1 shards the optimizer states (master, m, v), stage 2 also
// the gradients, stage 3 also the weights. A sharded category holds
// ceil(phi/n) parameters' worth on every rank (the last shard padded, as the
// implementations do), so n·shard ≥ phi. With K the optimizer bytes a
// parameter: stage 0 (2+2+K)Φ, stage 1 2Φ+2Φ+KΦ/n, stage 2 2Φ+(2+K)Φ/n,
// stage 3 (2+2+K)Φ/n.
func ZeROStates(phi int64, p Precision, o Optimizer, n, stage int) (States, error) {
	return zeroStates(phi, PerParam(p, o), n, stage)
}

// RankStates is what one of s's data-parallel ranks holds of phi
// parameters' model states at ZeRO stage stage: ZeROStates with the
// gradients at s.GradSize() bytes a parameter (fp32 main gradients: 2Φ more
// at stages 0 and 1, 2Φ/N more at 2 and 3).
func (s Setup) RankStates(phi int64, stage int) (States, error) {
	st, err := zeroStates(phi, s.PerParam(), s.Ranks, stage)
	if err == nil && s.Optimizer.EightBit() { // never sharded (Validate): every trained row's states, exactly
		st.AdamM = s.moments8bit(phi)
		st.AdamV = st.AdamM
	}
	return st, err
}

// DevicePerParam is PerParam on the device: without the optimizer's
// states (and the weights) when s offloads them.
func (s Setup) DevicePerParam() States {
	r := s.PerParam()
	if s.Offload != OffloadNone {
		r.Master, r.AdamM, r.AdamV = 0, 0, 0
	}
	if s.Offload == OffloadParams {
		r.Params = 0
	}
	return r
}

// PerParam is the bytes a parameter of each model state under s: the
// package's PerParam with the gradients at s.GradSize().
func (s Setup) PerParam() States {
	r := PerParam(s.Precision, s.Optimizer)
	r.Grads = s.GradSize()
	return r
}

func zeroStates(phi int64, r States, n, stage int) (States, error) {
	if phi < 0 || n < 1 || stage < 0 || stage > 3 {
		return States{}, fmt.Errorf("model: ZeRO states of %d parameters on %d ranks at stage %d: out of range", phi, n, stage)
	}
	var c calc
	shard := ceilDiv(phi, int64(n))
	count := func(sharded bool) int64 {
		if sharded {
			return shard
		}
		return phi
	}
	s := States{
		Params: c.mul(count(stage >= 3), r.Params),
		Grads:  c.mul(count(stage >= 2), r.Grads),
		Master: c.mul(count(stage >= 1), r.Master),
		AdamM:  c.mul(count(stage >= 1), r.AdamM),
		AdamV:  c.mul(count(stage >= 1), r.AdamV),
	}
	c.add(s.Params, s.Grads, s.Master, s.AdamM, s.AdamV)
	return s, c.err()
}

// CheckpointKind is a gradient-checkpointing policy.
type CheckpointKind uint8

const (
	CheckpointNone      CheckpointKind = iota // keep every activation
	CheckpointFull                            // keep each layer's input; recompute one layer at a time (every:1)
	CheckpointEvery                           // keep the input of every K-th layer; recompute a segment of K at a time
	CheckpointSqrt                            // every:K with K = ceil(sqrt(L)) (Chen et al. 2016)
	CheckpointSelective                       // drop only the attention scores (Korthikanti et al. 2022, selective recomputation)
)

// Checkpoint is a checkpointing policy; Every is K for CheckpointEvery.
type Checkpoint struct {
	Kind  CheckpointKind
	Every int
}

// CheckpointPolicies are the policy spellings, for messages and fit's table.
const CheckpointPolicies = "none, full, every:K (K from 1 to the layers), sqrt, selective"

// ParseCheckpoint reads none, full, every:K, sqrt or selective. K is checked
// against the layers by Setup.Validate.
func ParseCheckpoint(s string) (Checkpoint, error) {
	switch s {
	case "none":
		return Checkpoint{Kind: CheckpointNone}, nil
	case "full":
		return Checkpoint{Kind: CheckpointFull}, nil
	case "sqrt":
		return Checkpoint{Kind: CheckpointSqrt}, nil
	case "selective":
		return Checkpoint{Kind: CheckpointSelective}, nil
	}
	if k, ok := strings.CutPrefix(s, "every:"); ok {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 {
			return Checkpoint{}, fmt.Errorf("model: bad checkpoint policy %q: K must be a positive integer (valid: %s)", s, CheckpointPolicies)
		}
		return Checkpoint{Kind: CheckpointEvery, Every: n}, nil
	}
	return Checkpoint{}, fmt.Errorf("model: unknown checkpoint policy %q (valid: %s)", s, CheckpointPolicies)
}

func (c Checkpoint) String() string {
	switch c.Kind {
	case CheckpointNone:
		return "none"
	case CheckpointFull:
		return "full"
	case CheckpointEvery:
		return fmt.Sprintf("every:%d", c.Every)
	case CheckpointSqrt:
		return "sqrt"
	case CheckpointSelective:
		return "selective"
	}
	return fmt.Sprintf("Checkpoint(%d)", c.Kind)
}

// Segment is the layers per recomputed segment for layers layers: 1 for
// full, K for every:K (at most layers), ceil(sqrt(layers)) for sqrt, and 0
// for none and selective, which recompute no whole layer.
func (c Checkpoint) Segment(layers int) int {
	switch c.Kind {
	case CheckpointFull:
		return 1
	case CheckpointEvery:
		return min(c.Every, layers)
	case CheckpointSqrt:
		k := int(math.Ceil(math.Sqrt(float64(layers))))
		for k > 1 && (k-1)*(k-1) >= layers { // guard float rounding
			k--
		}
		for k*k < layers {
			k++
		}
		return k
	}
	return 0
}

// Setup is a model and a training setup, seen from one rank.
type Setup struct {
	// Model is the shape. A zero Model (Layers 0) with Params > 0 is a
	// parameter-only setup: model states, no activations.
	Model  Config
	Params int64 // Φ of a parameter-only setup; ignored when Model has a shape

	Batch int // micro-batch per rank, b
	Seq   int // sequence length, s (at most Model.Context)

	Precision  Precision
	Optimizer  Optimizer
	Checkpoint Checkpoint

	Ranks int // data-parallel ranks N; ZeRO shards over them (1: no data parallelism)
	ZeRO  int // ZeRO stage 0 (plain data parallel) to 3
	TP    int // tensor-parallel ranks t (Megatron-LM); must divide the heads
	PP    int // pipeline stages P, at most the layers (StageBlocks: L/P each, the first L mod P one more)
	// MicroBatches is the micro-batches M of b a step runs (0 is one):
	// a pipeline's, or gradient accumulation on one stage.
	MicroBatches int
	// Pipeline is the order a stage runs its micro-batches in.
	Pipeline PipelineSchedule
	// SequenceParallel splits the layer norms' and dropouts' activations
	// over the tensor-parallel ranks too (Korthikanti et al. 2022, Section 4.2).
	SequenceParallel bool
	// MainGrads is the kept gradients' type (the zero value: the weights').
	MainGrads MainGrads
	// Offload is where the optimizer's states live (the zero value: on
	// the device).
	Offload Offload
}

// ParamsOnly reports whether s has no model shape, only a parameter count.
func (s Setup) ParamsOnly() bool { return s.Model.Layers == 0 && s.Params > 0 }

// Validate checks every field and names the bad value and what is valid.
func (s Setup) Validate() error {
	if !s.ParamsOnly() {
		if err := s.Model.Validate(); err != nil {
			return err
		}
	}
	switch {
	case s.Ranks < 1 || s.Ranks > MaxRanks:
		return cuda.Argf("model", "ranks", s.Ranks, "out of range", fmt.Sprintf("1 to %d", MaxRanks))
	case s.ZeRO < 0 || s.ZeRO > 3:
		return fmt.Errorf("model: ZeRO stage %d (valid: 0, 1, 2, 3)", s.ZeRO)
	case s.TP < 1:
		return cuda.Argf("model", "tensor-parallel ranks", s.TP, "must be a positive integer", "")
	case s.PP < 1:
		return cuda.Argf("model", "pipeline stages", s.PP, "must be a positive integer", "")
	case s.MicroBatches < 0 || s.MicroBatches > MaxMicroBatches:
		return cuda.Argf("model", "micro-batches", s.MicroBatches, "out of range", "1 to "+Comma(MaxMicroBatches))
	}
	// The world, ranks·tp·pp, counted without wrapping: each axis alone
	// in range can still make more ranks than an int holds.
	var wc calc
	if world := wc.mul(int64(s.Ranks), int64(s.TP), int64(s.PP)); wc.err() != nil || world > MaxRanks {
		w := new(big.Int).Mul(big.NewInt(int64(s.Ranks)), big.NewInt(int64(s.TP)))
		return &SizeError{What: "the world of ranks", Expr: "ranks·tp·pp", Factors: []Factor{{"ranks", int64(s.Ranks)}, {"tp", int64(s.TP)}, {"pp", int64(s.PP)}},
			Size: w.Mul(w, big.NewInt(int64(s.PP))), Unit: "ranks", Limit: MaxRanks}
	}
	for _, err := range []error{pipelineScheduleNames.Check(s.Pipeline), precisionNames.Check(s.Precision), optimizerNames.Check(s.Optimizer), mainGradsNames.Check(s.MainGrads), offloadNames.Check(s.Offload)} {
		if err != nil {
			return err
		}
	}
	switch {
	case s.Offload != OffloadNone && !s.Precision.Mixed():
		return fmt.Errorf("model: offloading the optimizer with %s: ZeRO-Offload keeps the fp32 master weights in host memory, and %s training has none (valid: fp16 or bf16 mixed precision)", s.Precision, s.Precision)
	case s.Offload == OffloadParams && s.ZeRO != 3:
		return fmt.Errorf("model: offloading the parameters at ZeRO stage %d: ZeRO-Infinity offloads the weight shards ZeRO-3 keeps (valid: ZeRO stage 3, or offloading the optimizer alone)", s.ZeRO)
	}
	if s.ParamsOnly() {
		if s.TP != 1 || s.PP != 1 {
			return errors.New("model: tensor and pipeline parallelism need a model shape (a preset or layers, hidden, heads), not only a parameter count")
		}
		return nil
	}
	m := s.Model
	switch {
	case s.Batch < 1 || s.Batch > MaxBatch:
		return cuda.Argf("model", "batch", s.Batch, "out of range", fmt.Sprintf("1 to %d", MaxBatch))
	case s.Seq < 1 || s.Seq > m.Context:
		return cuda.Argf("model", "sequence length", s.Seq, "longer than the context", fmt.Sprintf("1 to the context, %d", m.Context))
	case m.Heads%s.TP != 0:
		return fmt.Errorf("model: tensor-parallel ranks %d do not divide the %d heads (valid: %s)", s.TP, m.Heads, divisors(m.Heads))
	case m.KV()%s.TP != 0:
		return fmt.Errorf("model: tensor-parallel ranks %d do not divide the %d key and value heads (valid: %s)", s.TP, m.KV(), divisors(m.KV()))
	case m.FFNWidth()%s.TP != 0:
		return fmt.Errorf("model: tensor-parallel ranks %d do not divide the MLP's %d channels (valid: %s, which divide the heads and the MLP)", s.TP, m.FFNWidth(), divisors(gcd(gcd(m.Heads, m.KV()), m.FFNWidth())))
	case s.PP > m.Whole().Layers:
		return fmt.Errorf("model: %d pipeline stages for %d layers (valid: 1 to %d)", s.PP, m.Whole().Layers, m.Whole().Layers)
	case m.Stage.Size > 1 && m.Stage.Size != s.PP:
		return fmt.Errorf("model: the model is pipeline stage %d of %d and the setup has %d stages (valid: the same count)", m.Stage.Rank, m.Stage.Size, s.PP)
	case m.Tensor.Size > 1 && m.Tensor.Size != s.TP:
		return fmt.Errorf("model: the model is tensor-parallel rank %d of %d and the setup has %d tensor-parallel ranks (valid: the same count)", m.Tensor.Rank, m.Tensor.Size, s.TP)
	case m.Tensor.Sequence != (s.SequenceParallel && m.Tensor.Size > 1):
		return fmt.Errorf("model: the model's sequence parallelism is %t and the setup's %t (valid: the same)", m.Tensor.Sequence, s.SequenceParallel)
	}
	if o := s.Optimizer; o.EightBit() {
		switch {
		case s.ZeRO > 0 && s.Ranks > 1:
			return fmt.Errorf("model: optimizer %s under ZeRO-%d: not yet, since its blocks of 256 are a tensor's and ZeRO's shards cut tensors (valid: ZeRO-0, or %s)", o, s.ZeRO, o.Rule())
		case s.Offload != OffloadNone:
			return fmt.Errorf("model: optimizer %s with --offload %s: not yet (valid: --offload none, or %s)", o, s.Offload, o.Rule())
		case s.TP > 1 || s.PP > 1:
			return fmt.Errorf("model: optimizer %s over tp %d × pp %d: not yet (valid: tp 1 and pp 1, or %s)", o, s.TP, s.PP, o.Rule())
		}
	}
	if m.fineTune() {
		what := "freezing " + m.Freeze.String()
		if m.LoRA.On() {
			what = "LoRA"
		}
		switch {
		case s.PP > 1:
			return fmt.Errorf("model: %s over %d pipeline stages: not yet (valid: one stage)", what, s.PP)
		case m.LoRA.On() && s.TP > 1:
			return fmt.Errorf("model: LoRA over %d tensor-parallel ranks: not yet (valid: tp 1)", s.TP)
		}
	}
	c := s.Checkpoint
	switch c.Kind {
	case CheckpointNone, CheckpointFull, CheckpointSqrt, CheckpointSelective:
	case CheckpointEvery:
		if c.Every < 1 || c.Every > m.Whole().Layers {
			return fmt.Errorf("model: checkpoint every:%d (valid: every:K with K from 1 to the %d layers)", c.Every, m.Whole().Layers)
		}
	default:
		return fmt.Errorf("model: unknown checkpoint policy %v (valid: %s)", c, CheckpointPolicies)
	}
	return s.checkSizes()
}

// Checked is a Setup that Validate accepted. The layers that run a setup
// (train.New, the ranks, the reports) take a Checked, so that a setup is
// checked once, where it is made (the command line's flags), and not again
// below: a Checked is made only by Setup.Check, and Setup returns a copy,
// so a Checked cannot be changed into a setup that was not checked. Its
// zero value is no checked setup: the layers refuse it.
type Checked struct {
	s  Setup
	ok bool
}

// errUnchecked refuses a Checked that Setup.Check did not make.
var errUnchecked = errors.New("model: a setup that was not checked (make it with Setup.Check)")

// Check validates s (Validate) and returns it checked.
func (s Setup) Check() (Checked, error) {
	if err := s.Validate(); err != nil {
		return Checked{}, err
	}
	return Checked{s: s, ok: true}, nil
}

// Setup is the checked setup (a copy).
func (c Checked) Setup() Setup { return c.s }

// TensorRank is the setup of tensor-parallel rank r of c's TP ranks: its
// model the rank's part of c's (Config.TensorRank), the rest as c's. With
// one tensor-parallel rank it is c.
func (c Checked) TensorRank(r int) (Checked, error) {
	return c.part("no model to split over tensor-parallel ranks", func(s Setup) (Config, error) {
		m, err := s.Model.TensorRank(s.TP, r)
		m.Tensor.Sequence = s.SequenceParallel && s.TP > 1
		return m, err
	})
}

// part is the checked setup of one rank's part of the model, split by
// split (TensorRank, StageRank); a setup of a parameter count alone has
// none, and says what it lacks (what).
func (c Checked) part(what string, split func(Setup) (Config, error)) (Checked, error) {
	if err := c.Err(); err != nil {
		return Checked{}, err
	}
	s := c.s
	if s.ParamsOnly() {
		return Checked{}, errors.New("model: a setup of a parameter count only has " + what)
	}
	m, err := split(s)
	if err != nil {
		return Checked{}, err
	}
	s.Model = m
	return s.Check()
}

// Err is nil for a setup that Setup.Check made, an error naming the
// mistake for the zero Checked.
func (c Checked) Err() error {
	if !c.ok {
		return errUnchecked
	}
	return nil
}

// gcd is the greatest common divisor of a, b > 0.
func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// divisors lists n's smallest divisors, at most 12 of them, in order: a
// divisor d below √n pairs with n/d above it, so the search stops at √n.
func divisors(n int) string {
	var low, high []int
	for d := 1; d <= n/d && len(low) < 12; d++ {
		if n%d == 0 {
			low = append(low, d)
			if d != n/d {
				high = append(high, n/d)
			}
		}
	}
	for i := len(high) - 1; i >= 0; i-- {
		low = append(low, high[i])
	}
	var ds []string
	for _, d := range low[:min(len(low), 12)] {
		ds = append(ds, strconv.Itoa(d))
	}
	return strings.Join(ds, ", ")
}

// Term is one named share of an activation total, in bytes, split by kind
// of tensor.
type Term struct {
	Name  string
	Bytes int64
	Parts []Part // Bytes by kind of tensor: they sum to Bytes
}

// TensorKind is a kind of activation tensor: the unit in which trainmem sets
// the formulas side by side, kind by kind.
type TensorKind uint8

const (
	// LayerValues are the e-byte values inside the transformer layers,
	// counted in s·b·h-element units of the unsplit model (a 4h-wide MLP
	// tensor counts 4).
	LayerValues TensorKind = iota
	// Scores are the e-byte a·s²·b attention-score tensors.
	Scores
	// Masks are 1-byte dropout masks.
	Masks
	// Statistics are the fp32 layer-norm row statistics (mean and 1/std),
	// counted in layer norms.
	Statistics
	// Checkpoints are the layer inputs kept for recomputation.
	Checkpoints
	// Outside are the tensors outside the layers: the embedding output
	// and the head (the final layer norm's output and the logits).
	Outside
	// TokenIDs are the int32 token ids and targets.
	TokenIDs
	// Adapters are a LoRA's down projections x·Aᵀ (r values a row an
	// adapted projection), kept for B's gradient; no published formula
	// counts them.
	Adapters
	// NumTensorKinds is the number of kinds.
	NumTensorKinds
)

// Part is one kind of tensor's share of a term.
type Part struct {
	Kind TensorKind
	// Count is how many tensors of the kind the share holds, in the kind's
	// unit, summed over its layers and micro-batches.
	Count int64
	// Layers is how many layers (times micro-batches in flight) the
	// tensors span; 0 outside the layers.
	Layers int64
	Bytes  int64
}

// KindTotal is an activation total's share of one kind of tensor: its parts'
// counts and bytes summed, the most layers any part spans.
type KindTotal struct {
	Count, Layers, Bytes int64
}

// ByKind splits the activations by kind of tensor; other is what the terms
// hold beyond their parts (0 for trainmem's formulas).
func (a Activations) ByKind() (k [NumTensorKinds]KindTotal, other int64) {
	other = a.Total
	for _, t := range a.Terms {
		for _, p := range t.Parts {
			if p.Kind >= NumTensorKinds {
				continue
			}
			k[p.Kind].Count += p.Count
			k[p.Kind].Bytes += p.Bytes
			k[p.Kind].Layers = max(k[p.Kind].Layers, p.Layers)
			other -= p.Bytes
		}
	}
	return k, other
}

// NoDropout is the formula's total for training without dropout, as
// LLaMA-family models and trainmem's own GPT-2 train: Korthikanti et
// al.'s list of tensors with every dropout tensor taken out (its 1-byte
// masks, and the softmax's dropout output, so that the product with v
// reads the softmax output itself: one a·s²·b tensor where the paper
// keeps two), counted by the same formula (korthikantiLayerTerms with
// dropout false). Equal to Total for a formula that counts no dropout.
func (a Activations) NoDropout() int64 {
	if a.noDropout == nil {
		return a.Total
	}
	return *a.noDropout
}

// termOf is a term made of parts, its bytes their sum.
func termOf(c *calc, name string, parts ...Part) Term {
	t := Term{Name: name, Parts: parts}
	for _, p := range parts {
		t.Bytes = c.add(t.Bytes, p.Bytes)
	}
	return t
}

// has reports whether the term holds tensors of kind k.
func (t Term) has(k TensorKind) bool {
	for _, p := range t.Parts {
		if p.Kind == k {
			return true
		}
	}
	return false
}

// times is the term's tensors n times over, its parts' layers too: the
// term for n layers (or micro-batches) from one layer's.
func (t Term) times(c *calc, n int64, name string) Term {
	parts := make([]Part, len(t.Parts))
	for i, p := range t.Parts {
		parts[i] = Part{Kind: p.Kind, Count: c.mul(n, p.Count), Layers: c.mul(n, p.Layers), Bytes: c.mul(n, p.Bytes)}
	}
	return termOf(c, name, parts...)
}

// plus is the term with other's parts added, under a new name.
func (t Term) plus(c *calc, name string, other ...Term) Term {
	parts := append([]Part{}, t.Parts...)
	for _, o := range other {
		parts = append(parts, o.Parts...)
	}
	return termOf(c, name, parts...)
}

// Activations is one formula's activation bytes on the reported rank, for
// the setup's checkpoint policy, split into terms that sum to Total.
type Activations struct {
	Formula Formula
	Source  string
	Terms   []Term
	Total   int64
	// At says when in the step the total is reached, for formulas that
	// follow the schedule (the implementation-exact one); the zero Moment
	// otherwise.
	At Moment
	// noDropout is the total of the formula's no-dropout variant, for a
	// formula that counts dropout (NoDropout).
	noDropout *int64
}

// MomentKind is the kind of moment in a training step at which an
// activation total is reached.
type MomentKind uint8

const (
	// Unscheduled: the formula does not follow the executor's schedule.
	Unscheduled MomentKind = iota
	// EndOfForward: the forward pass has run, the backward pass not begun.
	EndOfForward
	// RecomputedProbs: the backward pass has recomputed block First's
	// attention probabilities (selective checkpointing).
	RecomputedProbs
	// RecomputedSegment: the backward pass has recomputed blocks First to
	// Last, one checkpoint segment.
	RecomputedSegment
)

// Moment is when in a training step an activation total is reached.
type Moment struct {
	Kind        MomentKind
	First, Last int // the blocks recomputed (RecomputedProbs: First = Last, the one block)
}

// String is the moment in words: "the end of the forward pass", "the
// recomputation of block 3's attention probabilities", "the recomputation
// of blocks 4-7" (or "block 4" for a one-block segment).
func (m Moment) String() string {
	switch m.Kind {
	case EndOfForward:
		return "the end of the forward pass"
	case RecomputedProbs:
		return fmt.Sprintf("the recomputation of block %d's attention probabilities", m.First)
	case RecomputedSegment:
		if m.First == m.Last {
			return fmt.Sprintf("the recomputation of block %d", m.First)
		}
		return fmt.Sprintf("the recomputation of blocks %d-%d", m.First, m.Last)
	}
	return "no moment of the schedule"
}

// Comm is the data-parallel communication of one rank in one step.
type Comm struct {
	// Collective names the collectives: "all-reduce" (plain data parallel),
	// "reduce-scatter + all-gather" (ZeRO-1/2), "all-gather ×2 +
	// reduce-scatter" (ZeRO-3), or "none" (one rank).
	Collective string
	// Elements is the ZeRO paper's volume (Section 7): 2Φ for data parallel
	// and ZeRO-1/2, 3Φ for ZeRO-3, Φ the rank's parameters.
	Elements int64
	// Bytes is Elements in their types: the gradients' passes in the kept
	// gradients' (Setup.GradSize), the weights' in the working type.
	Bytes int64
	// RingBytes is what a ring implementation sends: each of the 2 (or 3)
	// passes sends N-1 of the N equal shards, ceil(Φ/N) elements each, so
	// about 2(N-1)/N·Φ elements.
	RingBytes int64
	DType     string
}

// Recompute is the checkpoint policy's compute price for one micro-batch
// of the whole model (not only one rank), in FLOPs.
type Recompute struct {
	Forward   float64 // F = L·(24·b·s·h² + 4·b·s²·h) + 2·b·s·h·V
	Step      float64 // 3F: forward, and a backward of twice the forward
	Recompute float64 // extra forward work of the policy
	Fraction  float64 // Recompute / Step
}

// Estimate is the closed-form memory of one rank: the rank the setup loads
// most (with pipeline stages, the stage with the largest total).
type Estimate struct {
	Setup Setup
	// Params is Φ, the whole model's parameters.
	Params int64
	// RankParams is the parameters the reported rank holds before ZeRO
	// sharding: its pipeline stage's share, split over tensor-parallel
	// ranks; RankTrained those of them a fine-tune trains (RankParams when
	// nothing is frozen), the ones with gradients and optimizer states.
	RankParams, RankTrained int64
	// Stage is the reported pipeline stage (0 is the first).
	Stage int
	// States are the model states of the rank on its device; Offloaded
	// those in host memory under Setup.Offload, and PCIe the step's copies
	// between the two.
	States    States
	Offloaded States
	PCIe      PCIe
	// Gathered is the ZeRO-3 working copy of the units the rank holds
	// gathered at once at its peak (gatheredPeak: with a tied head the
	// embeddings beside a block), in the working dtype; 0 below stage 3
	// and for parameter-only setups.
	Gathered int64
	// Activations has one entry per formula, in Formulas order; empty for a
	// parameter-only setup.
	Activations []Activations
	Comm        Comm
	Recompute   Recompute
}

// ActivationBytes is one formula's activation total (0 when absent).
func (e Estimate) ActivationBytes(formula Formula) int64 {
	a, _ := e.Activation(formula)
	return a.Total
}

// Activation is the formula's activations; false when the estimate has none
// by it (an unknown name, or the implementation-exact formula under tensor
// or pipeline parallelism).
func (e Estimate) Activation(formula Formula) (Activations, bool) {
	for _, a := range e.Activations {
		if a.Formula == formula {
			return a, true
		}
	}
	return Activations{}, false
}

// Total is the rank's bytes with the given activation formula: model
// states, the ZeRO-3 gathered copy and activations.
func (e Estimate) Total(formula Formula) int64 {
	return e.States.Total() + e.Gathered + e.ActivationBytes(formula)
}

// Estimate computes the closed-form memory of the setup. The reported rank
// is the one with the largest total by the korthikanti formula.
func (s Setup) Estimate() (Estimate, error) { return s.EstimateBy(Korthikanti) }

// EstimateBy is Estimate with the formula that picks the reported pipeline
// stage (the stage whose total by that formula is largest).
func (s Setup) EstimateBy(formula Formula) (Estimate, error) {
	c, err := s.Check()
	if err != nil {
		return Estimate{}, err
	}
	return c.EstimateBy(formula)
}

// Estimate is Setup.Estimate of a checked setup, which it does not check
// again.
func (c Checked) Estimate() (Estimate, error) { return c.EstimateBy(Korthikanti) }

// EstimateBy is Setup.EstimateBy of a checked setup.
func (c Checked) EstimateBy(formula Formula) (Estimate, error) {
	if !c.ok {
		return Estimate{}, errUnchecked
	}
	s := c.s
	e, err := s.estimateBy(formula)
	var se *SizeError
	if errors.Is(err, ErrOverflow) && !errors.As(err, &se) {
		err = s.overflowError()
	}
	return e, err
}

func (s Setup) estimateBy(formula Formula) (Estimate, error) {
	if err := formulaNames.Check(formula); err != nil {
		return Estimate{}, err
	}
	if s.ParamsOnly() {
		e := Estimate{Setup: s, Params: s.Params, RankParams: s.Params, RankTrained: s.Params}
		var err error
		if e.States, err = s.RankStates(s.Params, s.ZeRO); err != nil {
			return Estimate{}, err
		}
		if e.States, e.Offloaded, e.PCIe, err = s.offloaded(e.States, s.ZeRO, s.Params); err != nil {
			return Estimate{}, err
		}
		e.Comm, err = dataParallelComm(s.Params, s)
		return e, err
	}
	var best Estimate
	// The first stage holds the embeddings and P micro-batches in flight;
	// middle stages hold the same blocks with fewer in flight and no
	// embeddings, so the heaviest stage is the first or the last.
	stages := []int{0}
	if s.PP > 1 {
		stages = append(stages, s.PP-1)
	}
	for i, st := range stages {
		e, err := s.estimateStage(st)
		if err != nil {
			return Estimate{}, err
		}
		if i == 0 || e.Total(formula) > best.Total(formula) {
			best = e
		}
	}
	return best, nil
}

func (s Setup) estimateStage(stage int) (Estimate, error) {
	m := s.Model
	e := Estimate{Setup: s, Params: m.NumParams(), Stage: stage}
	var c calc
	e.RankParams = s.stageParams(stage, &c)
	if err := c.err(); err != nil {
		return Estimate{}, err
	}
	// A fine-tune's frozen weights (no pipeline stages with them:
	// Validate) are the rank's part's frozen rows, at the working width.
	e.RankTrained = e.RankParams
	var frozen, codes, qstate int64
	if m.fineTune() {
		part := m
		if s.TP > 1 && m.Tensor.Size != s.TP {
			var err error
			if part, err = m.TensorRank(s.TP, 0); err != nil {
				return Estimate{}, err
			}
		}
		frozen = part.NumFrozen()
		e.RankTrained = e.RankParams - frozen
		codes, qstate = part.QuantBytes()
		frozen -= part.NumQuantized()
	}
	var err error
	if e.States, err = s.RankStates(e.RankTrained, s.ZeRO); err != nil {
		return Estimate{}, err
	}
	e.States.Frozen = c.add(c.mul(frozen, s.Precision.Size()), codes)
	e.States.QuantState = qstate
	if e.States, e.Offloaded, e.PCIe, err = s.offloaded(e.States, s.ZeRO, e.RankTrained); err != nil {
		return Estimate{}, err
	}
	if s.ZeRO == 3 && (s.Ranks > 1 || s.Offload == OffloadParams) { // one rank gathers from host memory too
		e.Gathered = c.mul(s.gatheredPeak(stage, &c), s.Precision.Size())
	}
	e.Activations = []Activations{s.zeroPaper(stage, &c), s.korthikanti(stage, &c)}
	xs := s // the exact formula's setup: the stage's, with several
	if s.PP > 1 {
		part, err := m.PipelineStage(s.PP, stage)
		if err != nil {
			return Estimate{}, err
		}
		xs.Model = part
	}
	ex, hasExact, err := xs.exact(&c)
	if err != nil {
		return Estimate{}, err
	}
	if hasExact {
		e.Activations = append(e.Activations, ex)
	}
	for _, a := range e.Activations {
		c.add(e.States.Total(), e.Gathered, a.Total)
	}
	if err := c.err(); err != nil {
		return Estimate{}, err
	}
	if e.Comm, err = dataParallelComm(e.RankTrained, s); err != nil {
		return Estimate{}, err
	}
	e.Recompute = s.recompute()
	return e, nil
}

// stageParams counts the parameters one tensor-parallel rank of a pipeline
// stage holds. Megatron-LM's split (Shoeybi et al. 2019, Section 3): qkv
// and fc are split by columns (weights and biases), the attention and MLP
// projections by rows (their biases replicated), layer norms replicated:
// 12h²/t + 7h/t + 6h a block (blockParams). The token embedding is split over the
// vocabulary (ceil(V/t) rows on the largest rank), positions replicated.
// The first stage holds the embeddings, the last the final layer norm and
// the head: with a tied head the last stage keeps its own copy of wte, as
// Megatron-LM does when P > 1.
func (s Setup) stageParams(stage int, c *calc) int64 {
	m := s.Model
	h, t := int64(m.Hidden), int64(s.TP)
	n := c.mul(int64(s.stageLayers(stage)), s.blockParams(c))
	vocabRows := c.mul(ceilDiv(int64(m.Vocab), t), h)
	first, last := stage == 0, stage == s.PP-1
	if first {
		n = c.add(n, vocabRows, c.mul(int64(m.learnedPositions()), h))
	}
	if last {
		n = c.add(n, m.normParams())
		if m.Untied || !first {
			n = c.add(n, vocabRows)
		}
	}
	return n
}

// blockParams is one tensor-parallel rank's part of a block, as
// Config.LayerParams counts it, in checked arithmetic: 2h²/t for the
// query and output projections, 2h·kv/t for the key and value ones (kv =
// KV·h/a, h with multi-head attention: 4h²/t in all), and (k+1)·h·F/t for
// the MLP's (k = 1, GELU's fc, or 2, SwiGLU's gate and up: 12h²/t in all
// for GPT-2's F = 4h), two norms of h (RMSNorm) or 2h (layer norm), and
// with linear biases h/t + 2kv/t + k·F/t for the column-parallel ones and
// 2h for the replicated.
func (s Setup) blockParams(c *calc) int64 {
	m := s.Model
	h, t := int64(m.Hidden), int64(s.TP)
	F, k, kv := int64(m.FFNWidth()), int64(m.mlpIn()), int64(m.kvWidth())
	n := c.add(c.mul(2, h, h/t), c.mul(2, h, kv/t), c.mul(k+1, h, F/t), c.mul(2, m.normParams()))
	if !m.NoBias {
		n = c.add(n, h/t, c.mul(2, kv/t), c.mul(k, F/t), c.mul(2, h))
	}
	return c.add(n, m.loraParams()) // a LoRA's A and B (lora.go; no tensor parallelism with one)
}

// gatheredPeak is the most parameter elements ZeRO-3 holds gathered at
// once on a stage, as trainmem's schedule gathers them (zero/policy.go:
// a unit, the embeddings, a block or the final layer norm with an untied
// head, is all-gathered at its first read of the forward pass and again
// of the backward pass, and given back after that half's last read; a
// gathered unit is N·ceil(u/N) elements, the padded shards of its ranks).
// This term is trainmem's, not the ZeRO paper's (Table 1 counts model
// states only):
//
//   - forward: the embeddings, then each block, then the final layer norm
//     (and an untied head) one at a time; a tied head reads wte at the end
//     of the pass, so the embeddings stay gathered beside every block:
//     E + max(B, F) when tied on this stage, else max(E, B, F);
//   - backward: the head's input gradient reads wte (tied) or lm_head
//     (in F), then the final layer norm's reads F, one after another, and
//     the untied embeddings are not read; a recomputed segment of K blocks
//     (every:K, sqrt; full is K = 1) gathers its blocks as its recompute
//     reads them and gives each back after its backward: K·B at once.
//
// --prefetch (zero.Setting, not a part of Setup) gathers the next unit
// ahead, one more unit than this.
func (s Setup) gatheredPeak(stage int, c *calc) int64 {
	m := s.Model
	h, t := int64(m.Hidden), int64(s.TP)
	n := int64(s.Ranks)
	pad := func(u int64) int64 { return c.mul(n, ceilDiv(u, n)) }
	first, last := stage == 0, stage == s.PP-1
	vocabRows := c.mul(ceilDiv(int64(m.Vocab), t), h)
	var emb, final int64
	if first {
		emb = pad(c.add(vocabRows, c.mul(int64(m.learnedPositions()), h)))
	}
	if last {
		f := m.normParams()
		if m.Untied || !first {
			f = c.add(f, vocabRows)
		}
		final = pad(f)
	}
	block := pad(s.blockParams(c))
	if m.fineTune() { // a unit gathers its trained rows only: the frozen ones are whole on every rank
		emb, block, final = m.trainedUnits()
		emb, block, final = pad(emb), pad(block), pad(final)
	}
	layers := s.stageLayers(stage)
	k := int64(max(s.Checkpoint.Segment(layers), 1))
	tiedHere := first && last && !m.Untied
	forward := max(emb, block, final)
	backward := max(final, c.mul(k, block))
	if tiedHere {
		forward = c.add(emb, max(block, final))
		backward = max(backward, emb)
	}
	return max(forward, backward)
}

// trainedUnits is the trained parameters of ZeRO-3's units of a
// fine-tune (zero's makeUnits: the embeddings, each block, the final norm
// and head): the embeddings', the largest block's, and the final ones'.
func (c Config) trainedUnits() (emb, block, final int64) {
	perLayer := map[int]int64{}
	seenBlock := false
	for _, p := range c.Params() {
		switch {
		case p.Layer >= 0:
			seenBlock = true
			if !p.Frozen {
				perLayer[p.Layer] += p.Count
			}
		case p.Frozen:
		case seenBlock || c.Layers == 0:
			final += p.Count
		default:
			emb += p.Count
		}
	}
	for _, n := range perLayer {
		block = max(block, n)
	}
	return emb, block, final
}

// inFlight is the micro-batches whose activations a stage holds at once:
// under 1F1B (Narayanan et al. 2021, Section 2.2) P on the first stage,
// one fewer on each next one, at most the setup's M micro-batches; under
// GPipe all M (InFlight of the schedule's Actions, as the trainer counts
// them). Without a micro-batch count, M ≥ P, as Korthikanti et al.
// assume.
func (s Setup) inFlight(stage int) int64 {
	if s.MicroBatches < 1 {
		return int64(s.PP - stage) // M ≥ P, as the formula assumes
	}
	return int64(InFlight(s.Pipeline.Actions(s.PP, stage, s.MicroBatches)))
}

// stageLayers is the blocks of pipeline stage stage: L/P each, the first
// L mod P one more (StageBlocks).
func (s Setup) stageLayers(stage int) int {
	_, n := StageBlocks(s.Model.Layers, s.PP, stage)
	return n
}

// LayerActivations is one transformer layer's stored activations in bytes,
// split as Korthikanti et al. 2022, Section 4.1: attention 11·sbh and
// Scores 5·a·s²·b (together the paper's attention block), MLP 19·sbh, the
// two layer norms 4·sbh; 34·sbh + 5·a·s²·b in all, with 16-bit values and
// 1-byte dropout masks. Without dropout (KorthikantiLayerNoDropout) the
// same list less its dropout tensors: attention 10·sbh, Scores 2·a·s²·b,
// MLP 18·sbh, layer norms 4·sbh, 32·sbh + 2·a·s²·b in all.
type LayerActivations struct {
	Attention  int64 // the qkv input, q, k, v, the projection input, the dropout mask
	Scores     int64 // softmax output, its dropout mask and output: the a·s²·b terms
	MLP        int64 // fc input, GELU input, projection input, dropout mask
	LayerNorms int64 // the two layer norms' inputs
}

// Total is the layer's sum.
func (l LayerActivations) Total() int64 { return l.Attention + l.Scores + l.MLP + l.LayerNorms }

// KorthikantiLayer is one layer's activation bytes after Korthikanti et al.
// 2022 (Section 4.1 Eq. 1 and Table 2), for e-byte stored values (2 in the
// paper, 4 for fp32 training), t tensor-parallel ranks, with or without
// sequence parallelism. The paper's bytes split into values and 1-byte
// dropout masks: values 16·sbh + 2·a·s²·b elements of e bytes, masks
// 2·sbh + a·s²·b bytes, so e = 2 gives sbh·(34 + 5as/h). Under tensor
// parallelism the qkv input, the fc input, both layer norms' inputs and both
// dropout masks (the paper's 10·sbh) stay whole on every rank, the rest is
// split t ways: sbh·(10 + 24/t + 5as/(ht)) (Table 2); sequence parallelism
// splits the 10·sbh too: sbh·(34 + 5as/h)/t (Table 2). t must divide a and h.
func KorthikantiLayer(s, b, h, a, e, t int64, sequenceParallel bool) (LayerActivations, error) {
	return korthikantiLayer(s, b, h, a, e, t, sequenceParallel, true)
}

// KorthikantiLayerNoDropout is KorthikantiLayer for training without
// dropout: the paper's list of tensors less the dropout masks and the
// softmax's dropout output, sbh·(8 + 24/t) + 2·a·s²·b/t bytes with 16-bit
// values (sbh·32/t + 2·a·s²·b/t with sequence parallelism).
func KorthikantiLayerNoDropout(s, b, h, a, e, t int64, sequenceParallel bool) (LayerActivations, error) {
	return korthikantiLayer(s, b, h, a, e, t, sequenceParallel, false)
}

func korthikantiLayer(s, b, h, a, e, t int64, sp, dropout bool) (LayerActivations, error) {
	if s < 1 || b < 1 || h < 1 || a < 1 || e < 1 || t < 1 || a%t != 0 || h%t != 0 {
		return LayerActivations{}, fmt.Errorf("model: Korthikanti layer s=%d b=%d h=%d a=%d e=%d t=%d: sizes must be positive and t must divide a and h", s, b, h, a, e, t)
	}
	var c calc
	l := korthikantiLayerTerms(s, b, h, a, e, t, sp, dropout, &c)
	return LayerActivations{Attention: l.attention.Bytes, Scores: l.scores.Bytes, MLP: l.mlp.Bytes, LayerNorms: l.layerNorms.Bytes}, c.err()
}

// korthikantiTerms is one layer's LayerActivations as terms split by kind:
// values counted in s·b·h units of the unsplit layer (16), the two score
// tensors and the three dropout masks (one score tensor and no masks
// without dropout).
type korthikantiTerms struct {
	attention, scores, mlp, layerNorms Term
	flash                              bool // the scores are never stored
}

// all is the layer's terms: without the scores under flash attention, the
// variant of the formula that its successors use for it (FlashAttention,
// Dao et al. 2022, keeps no a·s²·b tensor: 5as/h → 0, as Megatron-LM's
// theoretical memory report counts sbh·34 a layer).
func (l korthikantiTerms) all() []Term {
	if l.flash {
		return []Term{l.attention, l.mlp, l.layerNorms}
	}
	return []Term{l.attention, l.scores, l.mlp, l.layerNorms}
}

// korthikantiLayerTerms is the paper's list of a layer's stored tensors
// (Section 4.1), each with its width and where tensor and sequence
// parallelism split it; with dropout false the dropout tensors are left
// out: the three 1-byte masks, and the softmax's dropout output, since
// the product with v then reads the softmax output itself.
func korthikantiLayerTerms(s, b, h, a, e, t int64, sp, dropout bool, c *calc) korthikantiTerms {
	sbhT := c.mul(s, b, h/t)      // sbh/t, exact: t divides h
	scores := c.mul(a/t, s, s, b) // a·s²·b/t, exact: t divides a
	whole := c.mul(s, b, h)       // a replicated [s, b, h] tensor
	if sp {
		whole = sbhT // sequence parallel: split along s
	}
	values := func(n int64, bytes int64) Part { return Part{Kind: LayerValues, Count: n, Layers: 1, Bytes: bytes} }
	masks := func(bytes int64) []Part {
		if !dropout {
			return nil
		}
		return []Part{{Kind: Masks, Count: 1, Layers: 1, Bytes: bytes}}
	}
	// The softmax output, and with dropout its dropout output.
	probs := int64(1)
	if dropout {
		probs = 2
	}
	return korthikantiTerms{
		// qkv input (e) + dropout mask after the projection (1), whole;
		// q, k, v and the projection input (4e), split.
		attention: termOf(c, "attention", append([]Part{values(5, c.add(c.mul(e, whole), c.mul(4*e, sbhT)))}, masks(whole)...)...),
		// softmax output (e), dropout output (e) + dropout mask (1).
		scores: termOf(c, "attention_scores", append([]Part{{Kind: Scores, Count: probs, Layers: 1, Bytes: c.mul(probs*e, scores)}}, masks(scores)...)...),
		// fc input (e) + dropout mask after the MLP (1), whole; GELU
		// input and projection input, each 4h wide (8e), split.
		mlp: termOf(c, "mlp", append([]Part{values(9, c.add(c.mul(e, whole), c.mul(8*e, sbhT)))}, masks(whole)...)...),
		// two layer-norm inputs.
		layerNorms: termOf(c, "layer_norms", values(2, c.mul(2*e, whole))),
	}
}

// ZeROPaperLayer is one layer's activation bytes by the ZeRO paper (Section
// 3.2): 12·h·b·s values of e bytes.
func ZeROPaperLayer(s, b, h, e int64) (int64, error) {
	var c calc
	n := c.mul(12, h, b, s, e)
	return n, c.err()
}

// zeroPaper is the ZeRO paper's count for a stage: 12·h·b·s values a layer,
// for every layer of every micro-batch in flight. The paper has no
// tensor-parallel split and no attention-score term, so --tp leaves it whole
// and selective checkpointing leaves it as it is. Checkpointing keeps one
// h·b·s value a checkpointed layer plus the segment being recomputed.
func (s Setup) zeroPaper(stage int, c *calc) Activations {
	m := s.Model
	sz, bz, hz, e := int64(s.Seq), int64(s.Batch), int64(m.Hidden), s.Precision.Size()
	layer := termOf(c, "layers", Part{Kind: LayerValues, Count: 12, Layers: 1, Bytes: c.mul(12, hz, bz, sz, e)})
	input := termOf(c, "checkpoints", Part{Kind: Checkpoints, Count: 1, Bytes: c.mul(hz, bz, sz, e)})
	act := Activations{Formula: ZeROPaper, Source: ZeROPaper.Source()}
	L := int64(s.stageLayers(stage))
	f := s.inFlight(stage)
	if k := int64(s.Checkpoint.Segment(s.stageLayers(stage))); k > 0 {
		act.Terms = []Term{input.times(c, c.mul(f, ceilDiv(L, k)), "checkpoints"), layer.times(c, k, "recompute_segment")}
	} else {
		act.Terms = []Term{layer.times(c, c.mul(f, L), "layers")}
	}
	act.Total = sumTerms(act.Terms, c)
	return act
}

// korthikanti is Korthikanti et al.'s count for a stage: per layer
// KorthikantiLayer for every layer of every micro-batch in flight, then the
// terms of Section 4.3. Those are quoted from the paper as reproduced in
// secondary sources (the expression after Eq. 5, sbhL/t·(p/L + δ_{p=1}·4/L·
// (1 + v/h))); trainmem's copy of the paper was not at hand to check the
// equation number, so the code cites the section only:
//   - the input embedding's dropout mask, sbh·p/t bytes on the first stage
//     (p micro-batches in flight; 1 byte each; /t with sequence parallelism,
//     which the paper assumes; whole without it);
//   - the final layer norm's input, 2sbh/t, and the output projection's
//     input, 2sbh/t (here e·sbh each, whole without sequence parallelism);
//   - the cross-entropy's fp32 logits, 4sbv/t (vocabulary-parallel: ceil(v/t)
//     columns on the largest rank).
//
// The paper counts the output terms only when p = 1, because it reports the
// first stage; trainmem puts them on the last stage (one micro-batch in
// flight there) and reports whichever stage is heavier.
//
// Checkpoint policies (the paper's Table 2 and its selective recomputation): selective drops
// the a·s²·b terms and recomputes one layer's at a time (that layer's
// Scores are the working set); full keeps each layer's input (e·sbh a
// layer: the paper's 2sbh) plus one layer recomputed at a time; every:K and
// sqrt keep one input every K layers plus a K-layer segment.
func (s Setup) korthikanti(stage int, c *calc) Activations {
	act := s.korthikantiWith(stage, true, c)
	nd := s.korthikantiWith(stage, false, c).Total
	act.noDropout = &nd
	return act
}

// korthikantiWith is korthikanti with or without the dropout tensors
// (korthikantiLayerTerms; the embedding's dropout mask too).
func (s Setup) korthikantiWith(stage int, dropout bool, c *calc) Activations {
	m := s.Model
	sz, bz, hz, az := int64(s.Seq), int64(s.Batch), int64(m.Hidden), int64(m.Heads)
	e, t := s.Precision.Size(), int64(s.TP)
	sp := s.SequenceParallel && t > 1
	layer := korthikantiLayerTerms(sz, bz, hz, az, e, t, sp, dropout, c)
	layer.flash = m.Attention == AttentionFlash
	whole := c.mul(sz, bz, hz) // a [s, b, h] tensor on one rank, in elements
	if sp {
		whole = c.mul(sz, bz, hz/t)
	}
	L := int64(s.stageLayers(stage))
	f := s.inFlight(stage)
	act := Activations{Formula: Korthikanti, Source: Korthikanti.Source()}
	single := func(name string, kind TensorKind, bytes int64) Term {
		return termOf(c, name, Part{Kind: kind, Count: 1, Bytes: bytes})
	}
	switch s.Checkpoint.Kind {
	case CheckpointNone:
		n := c.mul(f, L)
		for _, t := range layer.all() {
			act.Terms = append(act.Terms, t.times(c, n, t.Name))
		}
	case CheckpointSelective:
		n := c.mul(f, L)
		act.Terms = []Term{
			layer.attention.times(c, n, "attention"),
			layer.mlp.times(c, n, "mlp"),
			layer.layerNorms.times(c, n, "layer_norms"),
		}
		if !layer.flash { // flash attention has no scores to drop or recompute
			act.Terms = append(act.Terms, layer.scores.times(c, 1, "recompute_scores"))
		}
	default:
		k := int64(s.Checkpoint.Segment(s.stageLayers(stage)))
		one := termOf(c, "recompute_segment").plus(c, "recompute_segment", layer.all()...)
		act.Terms = []Term{
			single("checkpoints", Checkpoints, c.mul(e, whole)).times(c, c.mul(f, ceilDiv(L, k)), "checkpoints"),
			one.times(c, k, "recompute_segment"),
		}
	}
	if stage == 0 && dropout {
		act.Terms = append(act.Terms, single("embedding_dropout", Masks, whole).times(c, f, "embedding_dropout"))
	}
	if stage == s.PP-1 {
		act.Terms = append(act.Terms,
			single("final_layer_norm", Outside, c.mul(e, whole)),
			single("output_projection", Outside, c.mul(e, whole)),
			single("logits", Outside, c.mul(4, sz, bz, ceilDiv(int64(m.Vocab), t))),
		)
	}
	act.Total = sumTerms(act.Terms, c)
	return act
}

// recompute is the compute price of the checkpoint policy, after the FLOP
// count of Narayanan et al. 2021 (Section 5.1) and Korthikanti et al. 2022
// (Appendix A): a forward pass F = L·(24·b·s·h² + 4·b·s²·h) + 2·b·s·h·V
// (matrix multiplies only), a step 3F. Full, every:K and sqrt recompute
// every layer's forward once (not the logits): a bit under a third more;
// selective recomputes only the attention-score products, L·4·b·s²·h.
// The 24·b·s·h² is 2·b·s times the block's matrices, 4h² + 2·h·4h; an MLP
// of another width F or SwiGLU's three matrices make it 2·b·s·(4h² +
// (k+1)·h·F) (k = 2 for SwiGLU's gate and up), and grouped-query
// attention's narrower k and v 2·b·s·(2h² + 2h·kv + …) (kv = KV·h/a).
// Under flash attention selective recomputes nothing: there are no
// probabilities to drop.
func (s Setup) recompute() Recompute {
	m := s.Model
	b, sq, h, v, L := float64(s.Batch), float64(s.Seq), float64(m.Hidden), float64(m.Vocab), float64(m.Layers)
	F, k, kv := float64(m.FFNWidth()), float64(m.mlpIn()), float64(m.kvWidth())
	layers := L * (2*b*sq*(2*h*h+2*h*kv+(k+1)*h*F) + 4*b*sq*sq*h)
	r := Recompute{Forward: layers + 2*b*sq*h*v}
	r.Step = 3 * r.Forward
	switch s.Checkpoint.Kind {
	case CheckpointFull, CheckpointEvery, CheckpointSqrt:
		r.Recompute = layers
	case CheckpointSelective:
		if m.Attention != AttentionFlash { // flash attention has no probabilities to drop
			r.Recompute = L * 4 * b * sq * sq * h
		}
	}
	r.Fraction = r.Recompute / r.Step
	return r
}

// dataParallelComm is the per-step data-parallel traffic of one rank
// holding phi parameters (ZeRO paper Section 7): all-reduce of the
// gradients for plain data parallelism, 2Φ; reduce-scatter of the gradients
// and all-gather of the updated weights for ZeRO-1 and -2, 2Φ; for ZeRO-3
// an all-gather of the weights in forward and again in backward plus the
// reduce-scatter, 3Φ. Gradients and weights travel in the working dtype.
func dataParallelComm(phi int64, s Setup) (Comm, error) {
	cm := Comm{Collective: "none", DType: s.Precision.String()}
	if s.Precision == FP32 {
		cm.DType = "fp32"
	}
	if s.Ranks == 1 {
		return cm, nil
	}
	var c calc
	// The passes over the gradients (in their kept type) and over the
	// weights (in the working type).
	var grads, weights int64
	switch s.ZeRO {
	case 0:
		cm.Collective = "all-reduce (gradients)"
		grads = 2
	case 1, 2:
		cm.Collective = "reduce-scatter (gradients) + all-gather (weights)"
		grads, weights = 1, 1
	case 3:
		cm.Collective = "all-gather (weights, forward) + all-gather (weights, backward) + reduce-scatter (gradients)"
		grads, weights = 1, 2
	}
	if gw, w := s.GradSize(), s.Precision.Size(); gw != w {
		cm.DType = fmt.Sprintf("fp32 gradients, %s weights", s.Precision)
		if weights == 0 {
			cm.DType = "fp32 gradients"
		}
	}
	n := int64(s.Ranks)
	shard := ceilDiv(phi, n)
	cm.Elements = c.mul(grads+weights, phi)
	cm.Bytes = c.add(c.mul(grads, phi, s.GradSize()), c.mul(weights, phi, s.Precision.Size()))
	cm.RingBytes = c.add(c.mul(grads, n-1, shard, s.GradSize()), c.mul(weights, n-1, shard, s.Precision.Size()))
	return cm, c.err()
}

func sumTerms(ts []Term, c *calc) int64 {
	var sum int64
	for _, t := range ts {
		sum = c.add(sum, t.Bytes)
	}
	return sum
}
