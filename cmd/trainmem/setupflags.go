package main

// The flags that describe a model and a training setup, shared by the
// subcommands that answer questions about one (estimate, fit, and later
// train, simulate and validate).

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"trainmem/model"
	"trainmem/zero"
)

// setupFlags holds the parsed values; setup turns them into a model.Setup.
type setupFlags struct {
	fs *flag.FlagSet
	// batchDefault is --batch's value when the flag is not given and its
	// help prints no default (fit's).
	batchDefault int

	preset                                string
	hfConfig                              string // --hf-config: a Hugging Face config.json
	layers, hidden, heads, vocab, context int
	kvHeads                               int
	attention                             model.Attention
	untied                                bool
	norm                                  model.Norm
	bias                                  unsetBool
	noBias                                bool
	mlp                                   model.MLP
	ffn                                   int
	positions                             model.Positions
	ropeTheta                             float64
	params                                int64

	batch, seq int

	precision  model.Precision
	mainGrads  model.MainGrads // --main-grads
	offload    model.Offload   // --offload
	optimizer  model.Optimizer
	checkpoint model.Checkpoint

	ranks, zero, tp, pp int
	micro               int                    // --micro-batches
	schedule            model.PipelineSchedule // --schedule
	ps                  bool                   // --data-parallel ps
	prefetch            bool                   // --prefetch
	bucketBytes         int64                  // --bucket-mb; 0: DDP's default
	sequenceParallel    bool

	// capSeq caps a default --seq at the model's context (train, validate).
	capSeq bool
	// runsTensor is set where the tensor-parallel ranks are run (simulate,
	// train, validate): sequence parallelism must then split the rows.
	runsTensor bool

	// base, when set, is the model in place of a preset: the shape of a
	// checkpoint file (train --load), which the shape flags may override.
	base *model.Config
}

// setupOptions say which setup flags a subcommand has and their defaults.
type setupOptions struct {
	// parallel defines --params, --ranks, --zero, --tp, --pp and
	// --sequence-parallel (estimate and fit); subcommands that run one
	// device refuse them with the reason (see elsewhere).
	parallel bool
	// ranks defines --ranks, --zero, --data-parallel and --bucket-mb
	// (simulate: the ranks are run); parallel implies the first two.
	ranks bool
	// tensor defines --tp with the ranks (simulate: the tensor-parallel
	// ranks are run).
	tensor bool
	batch  int    // default micro-batch
	seq    int    // default sequence length; 0: the model's context
	preset string // what the default model is, for --preset's help; "" for none
	// batchHelp, when set, is --batch's help, whose default is then not
	// printed (fit searches the batch without it).
	batchHelp string
}

// addSetupFlags defines the model and setup flags on fs.
func addSetupFlags(fs *flag.FlagSet, o setupOptions) *setupFlags {
	f := &setupFlags{fs: fs, checkpoint: model.Checkpoint{Kind: model.CheckpointNone}, ranks: 1, tp: 1, pp: 1, micro: 1}
	preset := "model preset: " + strings.Join(model.PresetNames(), ", ")
	if o.preset != "" {
		preset += " (default " + o.preset + ")"
	}
	fs.StringVar(&f.preset, "preset", "", preset)
	fs.StringVar(&f.hfConfig, "hf-config", "", "a Hugging Face `config.json` (model_type "+strings.Join(model.HFModelTypes, ", ")+") in place of a preset; a field this GPT-2/LLaMA cannot honour is refused by name, and the shape flags override its values")
	intVar(fs, &f.layers, "layers", 0, "transformer layers, `L` (a custom shape, or overriding the preset's)")
	intVar(fs, &f.hidden, "hidden", 0, "hidden size, `h`")
	intVar(fs, &f.heads, "heads", 0, "attention heads, `a` (must divide the hidden size)")
	intVar(fs, &f.kvHeads, "kv-heads", 0, "key and value heads, `K`, each shared by a/K query heads (grouped-query attention; must divide the heads; default: the heads, multi-head attention; 1 is multi-query)")
	intVar(fs, &f.vocab, "vocab", 50257, "vocabulary, `V`, for a custom shape")
	intVar(fs, &f.context, "context", 1024, "learned positions, `ctx` (the longest sequence), for a custom shape")
	fs.BoolVar(&f.untied, "untied", false, "an output head of its own (V×h) instead of the tied token embedding; --untied=false ties it (default: the preset's choice, tied for a custom shape)")
	parsedVar(fs, &f.norm, "norm", "the blocks' and the head's norm: layernorm (GPT-2's, a gain and a bias) or rmsnorm (LLaMA's, a gain alone) (default: the preset's, layernorm for a custom shape)", model.ParseNorm)
	fs.Var(&f.bias, "bias", "biases in the linear layers, as GPT-2 has; --bias=false or --no-bias leaves them out, as LLaMA does (default: the preset's, biases for a custom shape)")
	fs.BoolVar(&f.noBias, "no-bias", false, "no biases in the linear layers (--bias=false; a layer norm keeps its own)")
	parsedVar(fs, &f.mlp, "mlp", "the blocks' MLP: gelu (GPT-2's fc, GELU, proj) or swiglu (LLaMA's gate and up projections, silu(gate)·up, down) (default: the preset's, gelu for a custom shape)", model.ParseMLP)
	intVar(fs, &f.ffn, "ffn", 0, "the MLP's inner width, `F` (default: 4h for gelu; for swiglu LLaMA's 2/3·4h rounded up to a multiple of 256)")
	parsedVar(fs, &f.positions, "positions", "learned (GPT-2's table of --context rows, added to the token embedding) or rope (LLaMA's rotary embedding of the queries and keys, no table) (default: the preset's, learned for a custom shape)", model.ParsePositions)
	parsedVar(fs, &f.attention, "attention", "how the attention is computed: naive (the probabilities kept for backward, a·s² values a layer) or flash (FlashAttention, Dao et al. 2022: the fp32 row log-sum-exp kept, the probabilities recomputed in backward) (default: naive)", model.ParseAttention)
	fs.Float64Var(&f.ropeTheta, "rope-theta", 0, "the rotary base θ with --positions rope (default 10000, LLaMA 2's; LLaMA 3 uses 500000)")
	if o.batchHelp != "" {
		intVar(fs, &f.batch, "batch", 0, o.batchHelp)
		f.batchDefault = o.batch
	} else {
		intVar(fs, &f.batch, "batch", o.batch, "micro-batch per rank, `b`")
	}
	if o.seq > 0 {
		intVar(fs, &f.seq, "seq", o.seq, "sequence length, `s` (at most the context)")
	} else {
		intVar(fs, &f.seq, "seq", 0, "sequence length, `s` (default: the model's context)")
	}
	parsedVar(fs, &f.precision, "precision", "fp32, or fp16 / bf16 for mixed precision (16-bit weights, gradients and activations, fp32 master weights and moments) (default fp32)", model.ParsePrecision)
	parsedVar(fs, &f.mainGrads, "main-grads", "the kept gradients' type: weights (the working weights' type, 16-bit under mixed precision) or fp32 (an fp32 buffer each backward kernel's 16-bit gradient is added into: Megatron-LM's main_grad, DeepSpeed's fp32 gradients; 2 bytes a parameter more, sharded as the gradients are, and reduced in fp32) (default weights)", model.ParseMainGrads)
	parsedVar(fs, &f.offload, "offload", "none; optimizer: ZeRO-Offload (DeepSpeed's offload_optimizer=cpu): the fp32 master weights and moments of the parameters a rank updates in host memory, beside copies of their gradients and working weights; the host runs the update, and each step copies the gradients down and the updated weights up over PCIe; or params: with --zero 3, the rank's weight shard in host memory too (ZeRO-Infinity's offload_param), copied up at each gather (fp16 or bf16 only) (default none)", model.ParseOffload)
	parsedVar(fs, &f.optimizer, "optimizer", "adam, adamw, sgd or momentum (default adam)", model.ParseOptimizer)
	parsedVar(fs, &f.checkpoint, "checkpoint", "gradient checkpointing: "+model.CheckpointPolicies+" (default none)", model.ParseCheckpoint)
	if o.ranks {
		intVar(fs, &f.ranks, "ranks", 1, "data-parallel ranks, `N`, each with a device of its own (simulated; measured in one process for validate, at most 8)")
		intVar(fs, &f.zero, "zero", 0, "ZeRO `stage` over the ranks: 0 (DDP: gradients all-reduced in buckets), 1 (optimizer states sharded), 2 (gradients sharded too, reduce-scattered in buckets), 3 (weights sharded too, gathered unit by unit)")
		fs.Func("data-parallel", "ps: the parameter server (gradients reduced to rank 0, which alone holds the optimizer states and updates; weights broadcast) instead of ZeRO", func(s string) error {
			if s != "ps" {
				return fmt.Errorf("%q: unknown data-parallel setting (valid: ps; ZeRO stages are --zero)", s)
			}
			f.ps = true
			return nil
		})
		fs.BoolVar(&f.prefetch, "prefetch", false, "with --zero 3: gather the next unit's weights as a pass first reads a unit (two units gathered at once)")
		fs.Func("bucket-mb", "the gradient bucket of DDP and ZeRO-2, in MiB (default 25, PyTorch DDP's)", func(s string) error {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || !(v > 0) || v > 1<<40 {
				return fmt.Errorf("%q: want a positive number of MiB", s)
			}
			f.bucketBytes = int64(v * (1 << 20))
			return nil
		})
		if o.tensor {
			f.runsTensor = true
			fs.BoolVar(&f.sequenceParallel, "sequence-parallel", false, "with --tp, split the residual stream, the layer norms and the additions by rows too (Korthikanti et al. 2022, Section 4.2.2): gathered before each column-parallel layer, reduce-scattered after each row-parallel one; b·s must be a multiple of t")
			intVar(fs, &f.tp, "tp", 1, "tensor-parallel ranks, `t`, of each data-parallel rank, each with a device of its own: Megatron-LM's split (each block's heads and MLP channels, the vocabulary of the token embedding, the head and the cross entropy); must divide the heads")
			intVar(fs, &f.pp, "pp", 1, "pipeline stages, `P`, of each data-parallel rank, each with a device of its own: the blocks split into runs (L/P each, the first L mod P one more), the embedding on the first stage, the head and the loss on the last; activations and their gradients sent between neighbours")
			intVar(fs, &f.micro, "micro-batches", 1, "micro-batches, `M`, of --batch a step: a pipeline's (its stages run them in --schedule's order), or gradient accumulation on one stage (each micro-batch's gradients added to the step's)")
			parsedVar(fs, &f.schedule, "schedule", "the pipeline schedule: 1f1b (Narayanan et al. 2021, as Megatron-LM runs it: stage r keeps at most P-r micro-batches) or gpipe (every forward pass, then every backward pass: M kept) (default 1f1b)", model.ParsePipelineSchedule)
		}
		return f
	}
	if !o.parallel {
		return f
	}
	fs.Func("params", "parameter count for model states only, e.g. 7.5e9 or 7.5B (no shape, so "+strings.Join(paramsIgnore, ", ")+" are ignored)", func(s string) error {
		n, err := model.ParseCount(s)
		if err == nil && n == 0 {
			err = fmt.Errorf("model: bad count %q: must be positive", s)
		}
		f.params = n
		return err
	})
	intVar(fs, &f.ranks, "ranks", 1, "data-parallel ranks, `N` (ZeRO shards over them)")
	intVar(fs, &f.zero, "zero", 0, "ZeRO `stage`: 0 (plain data parallel), 1 (optimizer states), 2 (+ gradients), 3 (+ weights)")
	intVar(fs, &f.tp, "tp", 1, "tensor-parallel ranks, `t` (Megatron-LM; must divide the heads)")
	intVar(fs, &f.pp, "pp", 1, "pipeline stages, `P`, at most the layers (1F1B with M ≥ P micro-batches; the blocks split L/P each, the first L mod P one more)")
	fs.BoolVar(&f.sequenceParallel, "sequence-parallel", false, "with --tp, split the layer norms' and dropouts' activations too (Korthikanti et al. 2022)")
	return f
}

// paramsIgnore are the flags a parameter-only setup (--params) ignores:
// they shape activations, which a bare parameter count does not have.
var paramsIgnore = []string{"--batch", "--seq", "--checkpoint", "--sequence-parallel", "--formula"}

// ignoredByParams lists the flags of paramsIgnore that were given with
// --params, for a note.
func (f *setupFlags) ignoredByParams() []string {
	if f.params == 0 {
		return nil
	}
	var given []string
	for _, fl := range paramsIgnore {
		if f.set(strings.TrimPrefix(fl, "--")) {
			given = append(given, fl)
		}
	}
	return given
}

// noteIgnored says on w which given flags --params ignores.
func (f *setupFlags) noteIgnored(w io.Writer) {
	if ig := f.ignoredByParams(); len(ig) > 0 {
		fmt.Fprintf(w, "trainmem %s: note: --params counts model states only; %s ignored (they shape activations)\n", f.fs.Name(), strings.Join(ig, ", "))
	}
}

// elsewhere are flags that belong to other subcommands, with the reason a
// subcommand without them gives when one is passed.
var elsewhere = map[string]string{
	"params":            "a parameter count has no shape to run; it is estimated by 'trainmem estimate' and 'trainmem fit'",
	"ranks":             "this subcommand runs one device; 'trainmem simulate --ranks N' and 'trainmem validate --ranks N' run data parallelism rank by rank, and 'trainmem estimate' and 'trainmem fit' estimate it",
	"zero":              "this subcommand runs one device; 'trainmem simulate --ranks N --zero S' and 'trainmem validate --ranks N --zero S' run ZeRO rank by rank, and 'trainmem estimate' and 'trainmem fit' estimate it",
	"data-parallel":     "this subcommand runs one device; 'trainmem simulate --ranks N --data-parallel ps' and 'trainmem validate' run the parameter server",
	"prefetch":          "ZeRO-3's prefetch belongs to 'trainmem simulate', 'trainmem validate' and 'trainmem train' with --ranks N --zero 3",
	"bucket-mb":         "gradient buckets belong to 'trainmem simulate' and 'trainmem validate' with --ranks N --zero 0 or --zero 2",
	"tp":                "tensor parallelism is run rank by rank by 'trainmem simulate', 'trainmem train' and 'trainmem validate' with --tp T, and estimated by 'trainmem estimate' and 'trainmem fit'",
	"pp":                "pipeline parallelism is run stage by stage by 'trainmem simulate', 'trainmem train' and 'trainmem validate' with --pp P, and estimated by 'trainmem estimate' and 'trainmem fit'",
	"micro-batches":     "micro-batches belong to 'trainmem simulate', 'trainmem train' and 'trainmem validate'",
	"schedule":          "the pipeline schedule belongs to 'trainmem simulate', 'trainmem train' and 'trainmem validate' with --pp P",
	"sequence-parallel": "this subcommand runs one device; sequence parallelism is estimated by 'trainmem estimate' and 'trainmem fit'",
}

// set reports whether the named flag was given.
func (f *setupFlags) set(name string) bool { return given(f.fs, name) }

// setup builds and checks the model.Setup (once: the layers below take the
// model.Checked as it is); its errors are usage errors.
func (f *setupFlags) setup() (model.Checked, error) {
	if !f.set("batch") && f.batchDefault > 0 {
		f.batch = f.batchDefault
	}
	for _, r := range []struct {
		flag  string
		v     int
		lo    int
		hi    int
		check bool
	}{
		{"layers", f.layers, 1, model.MaxLayers, f.set("layers")},
		{"hidden", f.hidden, 1, model.MaxHidden, f.set("hidden")},
		{"heads", f.heads, 1, model.MaxHidden, f.set("heads")},
		{"kv-heads", f.kvHeads, 1, model.MaxHidden, f.set("kv-heads")},
		{"vocab", f.vocab, 1, model.MaxVocab, true},
		{"context", f.context, 1, model.MaxContext, true},
		{"batch", f.batch, 1, model.MaxBatch, true},
		{"seq", f.seq, 1, model.MaxContext, f.set("seq")},
		{"ranks", f.ranks, 1, model.MaxRanks, true},
		{"zero", f.zero, 0, 3, true},
		{"tp", f.tp, 1, model.MaxHidden, true},
		{"pp", f.pp, 1, model.MaxLayers, true},
		{"micro-batches", f.micro, 1, model.MaxMicroBatches, true},
	} {
		if r.check && (r.v < r.lo || r.v > r.hi) {
			if r.flag == "zero" {
				return model.Checked{}, usagef("--zero %d: not a ZeRO stage (valid: 0, 1, 2, 3)", r.v)
			}
			return model.Checked{}, usagef("--%s %d: out of range (valid: %d to %d)", r.flag, r.v, r.lo, r.hi)
		}
	}
	s := model.Setup{
		Batch: f.batch, Precision: f.precision, MainGrads: f.mainGrads, Offload: f.offload, Optimizer: f.optimizer, Checkpoint: f.checkpoint,
		Ranks: f.ranks, ZeRO: f.zero, TP: f.tp, PP: f.pp, SequenceParallel: f.sequenceParallel,
		Pipeline: f.schedule,
	}
	if f.runsTensor {
		// The runs' micro-batches (default 1); the estimate's formulas
		// take a pipeline's first stage to hold P (M ≥ P).
		s.MicroBatches = f.micro
	}
	shape := f.set("layers") || f.set("hidden") || f.set("heads") || f.set("kv-heads") || f.set("vocab") || f.set("context") || f.set("untied") ||
		f.set("norm") || f.set("bias") || f.set("no-bias") || f.set("mlp") || f.set("ffn") || f.set("positions") || f.set("rope-theta")
	if f.set("bias") && f.set("no-bias") {
		return model.Checked{}, usagef("--bias=%t and --no-bias=%t: give one of them", f.bias.v, f.noBias)
	}
	noBias := f.noBias || f.bias.set && !f.bias.v // what the flags ask, where they are set

	if f.hfConfig != "" {
		switch {
		case f.preset != "":
			return model.Checked{}, usagef("--hf-config %s and --preset %s: give one model", f.hfConfig, f.preset)
		case f.params > 0:
			return model.Checked{}, usagef("--params gives a bare parameter count: use it without --hf-config")
		}
		c, err := model.ReadHFConfig(f.hfConfig)
		if err != nil {
			return model.Checked{}, err
		}
		f.base = &c
	}
	switch {
	case f.params > 0:
		if f.preset != "" || shape {
			return model.Checked{}, usagef("--params gives a bare parameter count: use it without --preset and the shape flags")
		}
		s.Params = f.params
		return f.validate(s)
	case f.preset != "" || f.base != nil:
		var c model.Config
		if f.base != nil {
			c = *f.base
		} else {
			var err error
			if c, err = model.Preset(f.preset); err != nil {
				return model.Checked{}, usagef("--preset %q: unknown preset (valid: %s)", f.preset, strings.Join(model.PresetNames(), ", "))
			}
		}
		if shape {
			c.Name = c.Name + "+custom"
		}
		for _, o := range []struct {
			flag string
			dst  *int
			v    int
		}{{"layers", &c.Layers, f.layers}, {"hidden", &c.Hidden, f.hidden}, {"heads", &c.Heads, f.heads}, {"kv-heads", &c.KVHeads, f.kvHeads}, {"vocab", &c.Vocab, f.vocab}, {"context", &c.Context, f.context}} {
			if f.set(o.flag) {
				*o.dst = o.v
			}
		}
		if f.set("untied") {
			c.Untied = f.untied
		}
		if f.set("norm") {
			c.Norm = f.norm
		}
		if f.set("bias") || f.set("no-bias") {
			c.NoBias = noBias
		}
		if f.set("mlp") {
			c.MLP = f.mlp
		}
		if f.set("ffn") {
			c.FFN = f.ffn
		}
		if f.set("positions") {
			c.Positions = f.positions
		}
		if f.set("rope-theta") {
			c.RopeTheta = f.ropeTheta
		}
		s.Model = c
	case shape:
		var missing []string
		for _, n := range []string{"layers", "hidden", "heads"} {
			if !f.set(n) {
				missing = append(missing, "--"+n)
			}
		}
		if len(missing) > 0 {
			return model.Checked{}, usagef("a custom shape needs --layers, --hidden and --heads (missing: %s)", strings.Join(missing, ", "))
		}
		s.Model = model.Config{Name: "custom", Layers: f.layers, Hidden: f.hidden, Heads: f.heads, KVHeads: f.kvHeads, Vocab: f.vocab, Context: f.context, Untied: f.untied,
			Norm: f.norm, NoBias: noBias, MLP: f.mlp, FFN: f.ffn, Positions: f.positions, RopeTheta: f.ropeTheta}
	default:
		ways := "a shape (--layers, --hidden, --heads)"
		if f.fs.Lookup("params") != nil {
			ways += " or --params"
		}
		return model.Checked{}, usagef("no model: give --preset (valid: %s) or %s", strings.Join(model.PresetNames(), ", "), ways)
	}
	if f.set("attention") {
		s.Model.Attention = f.attention // how the model is computed, not its shape: the name stays
	}
	if f.set("rope-theta") && s.Model.Positions != model.PosRoPE {
		return model.Checked{}, usagef("--rope-theta %g for %s, whose positions are learned: a rotary base needs --positions rope", f.ropeTheta, s.Model.Name)
	}
	s.Seq = s.Model.Context
	switch {
	case f.capSeq:
		s.Seq = min(f.seq, s.Model.Context)
	case f.set("seq"):
		s.Seq = f.seq
	}
	return f.validate(s)
}

// validate runs the model's checks and turns their errors into usage
// errors: the setup's limits, and the estimate's sizes, so that every
// subcommand refuses at once a setup whose bytes pass int64 (simulate
// would otherwise build its graph for seconds before running out of the
// shape device's address space).
func (f *setupFlags) validate(s model.Setup) (model.Checked, error) {
	if f.runsTensor && (s.PP > 1 || s.MicroBatches > 1) && s.ZeRO >= 2 {
		return model.Checked{}, usagef("--zero %d with --pp %d and --micro-batches %d: a stage adds each micro-batch's gradients to the step's, which needs every gradient whole on the rank, and ZeRO-2 and 3 keep shards (valid: --zero 0 or 1, or --data-parallel ps; DeepSpeed's pipeline engine refuses them too)", s.ZeRO, s.PP, max(s.MicroBatches, 1))
	}
	if f.runsTensor && s.SequenceParallel && s.TP > 1 && (s.Batch*s.Seq)%s.TP != 0 {
		return model.Checked{}, usagef("--sequence-parallel with --tp %d splits the %d rows of a micro-batch (--batch %d × --seq %d) over the ranks: give a batch and sequence whose product %d divides", s.TP, s.Batch*s.Seq, s.Batch, s.Seq, s.TP)
	}
	c, err := s.Check()
	if err != nil {
		return model.Checked{}, badSetup(err)
	}
	if _, err := c.Estimate(); err != nil {
		return model.Checked{}, badSetup(err)
	}
	return c, nil
}

// setting is the data-parallel setting the flags give; its errors are
// usage errors.
func (f *setupFlags) setting() (zero.Setting, error) {
	if f.ps && f.set("zero") {
		return zero.Setting{}, usagef("--data-parallel ps and --zero %d: the parameter server is a setting of its own (drop --zero)", f.zero)
	}
	if f.bucketBytes > 0 && (f.ps || f.zero == 1) {
		return zero.Setting{}, usagef("--bucket-mb: buckets are DDP's and ZeRO-2's (--zero 0 or 2), not the %s's", zero.Setting{PS: f.ps, Stage: f.zero})
	}
	s := zero.Setting{PS: f.ps, Stage: f.zero, BucketBytes: f.bucketBytes, Prefetch: f.prefetch}
	if err := s.Check(); err != nil {
		return zero.Setting{}, usageError{err}
	}
	return s, nil
}

// clusterFlags are the flags of the estimators that count per node
// (DeepSpeed's): the GPUs a node, additional_buffer_factor, and a
// parameter count's largest layer.
type clusterFlags struct {
	fs *flag.FlagSet
	c  model.Cluster
}

// addClusterFlags defines them on fs (estimate, fit, validate).
func addClusterFlags(fs *flag.FlagSet) *clusterFlags {
	f := &clusterFlags{fs: fs}
	intVar(fs, &f.c.GPUsPerNode, "gpus-per-node", 0, "GPUs a node, `G`, for the estimators that count per node (DeepSpeed's CPU memory a node); must divide ranks × tp × pp (default 8, or gcd(ranks × tp × pp, 8))")
	fs.Func("buffer-factor", "DeepSpeed's additional_buffer_factor, the margin of its CPU estimates (default 1.5, DeepSpeed's)", func(s string) error {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v > 0) || v > 1e6 {
			return fmt.Errorf("%q: want a positive number (DeepSpeed's default is 1.5)", s)
		}
		f.c.BufferFactor = v
		return nil
	})
	fs.Func("largest-layer", "with --params and --zero 3: the largest layer's parameters, e.g. 80.4M (DeepSpeed's largest_layer_params; a shape counts its own)", func(s string) error {
		n, err := model.ParseCount(s)
		if err != nil || n < 1 {
			return fmt.Errorf("%q: want a positive parameter count such as 80411200 or 80.4M", s)
		}
		f.c.LargestLayer = n
		return nil
	})
	return f
}

// cluster is the flags' cluster for the checked setup, or a usage error
// naming the flag.
func (f *clusterFlags) cluster(c model.Checked) (model.Cluster, error) {
	if f.c.GPUsPerNode < 0 {
		return model.Cluster{}, usagef("--gpus-per-node %d: must be a positive integer", f.c.GPUsPerNode)
	}
	if err := f.c.Validate(c.Setup()); err != nil {
		return model.Cluster{}, usagef("%s", strings.TrimPrefix(err.Error(), "model: "))
	}
	return f.c, nil
}
