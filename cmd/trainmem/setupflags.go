package main

// The flags that describe a model and a training setup, shared by the
// subcommands that answer questions about one (estimate, fit, and later
// train, simulate and validate).

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"trainmem/cuda"
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
	freeze     model.Freeze       // --freeze
	quantize   model.Quantization // --quantize
	// A LoRA: --lora-rank, --lora-alpha, --lora-targets (module names,
	// read once the model is known), --peft-config.
	loraRank            int
	loraAlpha           float64
	loraTargets         string
	peftConfig          string
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

// setupScope is which of the setup's flags a subcommand takes: every
// subcommand takes the model's and one device's; the ones that run ranks
// take the layouts' too, as the ones that estimate take theirs.
type setupScope uint8

const (
	scopeDevice   setupScope = 1 << iota // one device: every setup subcommand
	scopeRun                             // layouts run rank by rank: simulate, train, validate
	scopeEstimate                        // layouts estimated, and --params: estimate, fit
)

// commandScopes are the subcommands with setup flags and what they take:
// the one place that says so (the flags' table says which scope has
// which flag, and a flag given to a subcommand without it names the ones
// with it).
var commandScopes = []struct {
	name  string
	scope setupScope
}{
	{"estimate", scopeDevice | scopeEstimate},
	{"fit", scopeDevice | scopeEstimate},
	{"simulate", scopeDevice | scopeRun},
	{"train", scopeDevice | scopeRun},
	{"validate", scopeDevice | scopeRun},
	{"report", scopeDevice},
}

// scopeOf is the subcommand's scope.
func scopeOf(command string) setupScope {
	for _, c := range commandScopes {
		if c.name == command {
			return c.scope
		}
	}
	return scopeDevice
}

// setupOptions say a subcommand's defaults for its setup flags.
type setupOptions struct {
	batch  int    // default micro-batch
	seq    int    // default sequence length; 0: the model's context
	preset string // what the default model is, for --preset's help; "" for none
	// batchHelp, when set, is --batch's help, whose default is then not
	// printed (fit searches the batch without it).
	batchHelp string
}

// setupFlag is one flag of the setup: defined once, with a one-line help
// (the longer explanation is in docs/guide.md, "Flags"), in the scopes
// that take it.
type setupFlag struct {
	name  string
	scope setupScope
	help  string
	// define puts the flag on fs, its value in f; o are the subcommand's
	// defaults.
	define func(fs *flag.FlagSet, f *setupFlags, name, help string, o setupOptions)
}

// intFlag is a setupFlag's define for an int field with a fixed default.
func intFlag(field func(*setupFlags) *int, value int) func(*flag.FlagSet, *setupFlags, string, string, setupOptions) {
	return func(fs *flag.FlagSet, f *setupFlags, name, help string, _ setupOptions) {
		intVar(fs, field(f), name, value, help)
	}
}

// parsedFlag is a setupFlag's define for a field parsed by parse.
func parsedFlag[T any](field func(*setupFlags) *T, parse func(string) (T, error)) func(*flag.FlagSet, *setupFlags, string, string, setupOptions) {
	return func(fs *flag.FlagSet, f *setupFlags, name, help string, _ setupOptions) {
		parsedVar(fs, field(f), name, help, parse)
	}
}

// boolFlag is a setupFlag's define for a bool field, false by default.
func boolFlag(field func(*setupFlags) *bool) func(*flag.FlagSet, *setupFlags, string, string, setupOptions) {
	return func(fs *flag.FlagSet, f *setupFlags, name, help string, _ setupOptions) {
		fs.BoolVar(field(f), name, false, help)
	}
}

// guideFlags is where a flag's long explanation is.
const guideFlags = "docs/guide.md, Flags"

// setupFlagTable is every setup flag (-h lists them sorted by name).
var setupFlagTable = []setupFlag{
	{"preset", scopeDevice, "model preset: ", func(fs *flag.FlagSet, f *setupFlags, name, help string, o setupOptions) {
		help += strings.Join(model.PresetNames(), ", ")
		if o.preset != "" {
			help += " (default " + o.preset + ")"
		}
		fs.StringVar(&f.preset, name, "", help)
	}},
	{"hf-config", scopeDevice, "a Hugging Face `config.json` (model_type " + strings.Join(model.HFModelTypes, ", ") + ") in place of a preset", func(fs *flag.FlagSet, f *setupFlags, name, help string, _ setupOptions) {
		fs.StringVar(&f.hfConfig, name, "", help)
	}},
	{"layers", scopeDevice, "transformer layers, `L` (a custom shape, or overriding the preset's)", intFlag(func(f *setupFlags) *int { return &f.layers }, 0)},
	{"hidden", scopeDevice, "hidden size, `h`", intFlag(func(f *setupFlags) *int { return &f.hidden }, 0)},
	{"heads", scopeDevice, "attention heads, `a` (must divide the hidden size)", intFlag(func(f *setupFlags) *int { return &f.heads }, 0)},
	{"kv-heads", scopeDevice, "key and value heads, `K` (grouped-query attention; must divide the heads; default: the heads)", intFlag(func(f *setupFlags) *int { return &f.kvHeads }, 0)},
	{"vocab", scopeDevice, "vocabulary, `V`, for a custom shape", intFlag(func(f *setupFlags) *int { return &f.vocab }, 50257)},
	{"context", scopeDevice, "learned positions, `ctx` (the longest sequence), for a custom shape", intFlag(func(f *setupFlags) *int { return &f.context }, 1024)},
	{"untied", scopeDevice, "an output head of its own instead of the tied token embedding (default: the preset's)", boolFlag(func(f *setupFlags) *bool { return &f.untied })},
	{"norm", scopeDevice, "layernorm (GPT-2's) or rmsnorm (LLaMA's) (default: the preset's)", parsedFlag(func(f *setupFlags) *model.Norm { return &f.norm }, model.ParseNorm)},
	{"bias", scopeDevice, "biases in the linear layers, as GPT-2 has (default: the preset's)", func(fs *flag.FlagSet, f *setupFlags, name, help string, _ setupOptions) {
		fs.Var(&f.bias, name, help)
	}},
	{"no-bias", scopeDevice, "no biases in the linear layers (--bias=false)", boolFlag(func(f *setupFlags) *bool { return &f.noBias })},
	{"mlp", scopeDevice, "gelu (GPT-2's) or swiglu (LLaMA's) (default: the preset's)", parsedFlag(func(f *setupFlags) *model.MLP { return &f.mlp }, model.ParseMLP)},
	{"ffn", scopeDevice, "the MLP's inner width, `F` (default: 4h for gelu, LLaMA's rule for swiglu)", intFlag(func(f *setupFlags) *int { return &f.ffn }, 0)},
	{"positions", scopeDevice, "learned (GPT-2's table) or rope (LLaMA's rotary embedding) (default: the preset's)", parsedFlag(func(f *setupFlags) *model.Positions { return &f.positions }, model.ParsePositions)},
	{"attention", scopeDevice, "naive (the probabilities kept) or flash (recomputed in backward) (default: naive)", parsedFlag(func(f *setupFlags) *model.Attention { return &f.attention }, model.ParseAttention)},
	{"rope-theta", scopeDevice, "the rotary base θ with --positions rope (default 10000)", func(fs *flag.FlagSet, f *setupFlags, name, help string, _ setupOptions) {
		fs.Float64Var(&f.ropeTheta, name, 0, help)
	}},
	{"batch", scopeDevice, "micro-batch per rank, `b`", func(fs *flag.FlagSet, f *setupFlags, name, help string, o setupOptions) {
		if o.batchHelp != "" {
			intVar(fs, &f.batch, name, 0, o.batchHelp)
			f.batchDefault = o.batch
			return
		}
		intVar(fs, &f.batch, name, o.batch, help)
	}},
	{"seq", scopeDevice, "sequence length, `s`", func(fs *flag.FlagSet, f *setupFlags, name, help string, o setupOptions) {
		if o.seq > 0 {
			intVar(fs, &f.seq, name, o.seq, help+" (at most the context)")
			return
		}
		intVar(fs, &f.seq, name, 0, help+" (default: the model's context)")
	}},
	{"precision", scopeDevice, "fp32, or fp16 / bf16 for mixed precision (default fp32)", parsedFlag(func(f *setupFlags) *model.Precision { return &f.precision }, model.ParsePrecision)},
	{"main-grads", scopeDevice, "the kept gradients' type: weights (their type) or fp32 (Megatron-LM's main_grad) (default weights)", parsedFlag(func(f *setupFlags) *model.MainGrads { return &f.mainGrads }, model.ParseMainGrads)},
	{"offload", scopeDevice, "none, optimizer (ZeRO-Offload) or params (with --zero 3, ZeRO-Infinity's) (default none)", parsedFlag(func(f *setupFlags) *model.Offload { return &f.offload }, model.ParseOffload)},
	{"optimizer", scopeDevice, "adam, adamw, sgd, momentum, or adam8bit / adamw8bit (m and v in 8 bits, bitsandbytes' blockwise) (default adam)", parsedFlag(func(f *setupFlags) *model.Optimizer { return &f.optimizer }, model.ParseOptimizer)},
	{"checkpoint", scopeDevice, "gradient checkpointing: " + model.CheckpointPolicies + " (default none)", parsedFlag(func(f *setupFlags) *model.Checkpoint { return &f.checkpoint }, model.ParseCheckpoint)},
	{"freeze", scopeDevice, "the parts a fine-tune leaves untrained, comma-separated: embeddings, layers:N, head (default none)", parsedFlag(func(f *setupFlags) *model.Freeze { return &f.freeze }, model.ParseFreeze)},
	{"quantize", scopeDevice, "the frozen linear weights stored quantized: none or nf4 (QLoRA's 4-bit NormalFloat, double quantization) (default none)", parsedFlag(func(f *setupFlags) *model.Quantization { return &f.quantize }, model.ParseQuantization)},
	{"lora-rank", scopeDevice, "LoRA: adapters of rank `r` on --lora-targets, every other weight frozen (Hu et al. 2021)", intFlag(func(f *setupFlags) *int { return &f.loraRank }, 0)},
	{"lora-alpha", scopeDevice, "LoRA's α: the adapters' output scaled by α/r (default 8, PEFT's)", func(fs *flag.FlagSet, f *setupFlags, name, help string, _ setupOptions) {
		fs.Float64Var(&f.loraAlpha, name, model.DefaultLoRAAlpha, help)
	}},
	{"lora-targets", scopeDevice, "the linear layers LoRA adapts, PEFT's names (q_proj,v_proj; c_attn) or attention, mlp, all-linear (default PEFT's)", func(fs *flag.FlagSet, f *setupFlags, name, help string, _ setupOptions) {
		fs.StringVar(&f.loraTargets, name, "", help)
	}},
	{"peft-config", scopeDevice, "a PEFT `adapter_config.json`: its LoRA (r, lora_alpha, target_modules); the --lora flags override it", func(fs *flag.FlagSet, f *setupFlags, name, help string, _ setupOptions) {
		fs.StringVar(&f.peftConfig, name, "", help)
	}},
	{"params", scopeEstimate, "a parameter count for model states only, e.g. 7.5B (" + strings.Join(paramsIgnore, ", ") + " ignored)", func(fs *flag.FlagSet, f *setupFlags, name, help string, _ setupOptions) {
		fs.Func(name, help, func(s string) error {
			n, err := model.ParseCount(s)
			if err == nil && n == 0 {
				err = fmt.Errorf("model: bad count %q: must be positive", s)
			}
			f.params = n
			return err
		})
	}},
	{"ranks", scopeRun | scopeEstimate, "data-parallel ranks, `N`", intFlag(func(f *setupFlags) *int { return &f.ranks }, 1)},
	{"zero", scopeRun | scopeEstimate, "ZeRO `stage`: 0 (DDP), 1 (optimizer states sharded), 2 (+ gradients), 3 (+ weights)", intFlag(func(f *setupFlags) *int { return &f.zero }, 0)},
	{"tp", scopeRun | scopeEstimate, "tensor-parallel ranks, `t`, Megatron-LM's split (must divide the heads)", intFlag(func(f *setupFlags) *int { return &f.tp }, 1)},
	{"pp", scopeRun | scopeEstimate, "pipeline stages, `P` (at most the layers)", intFlag(func(f *setupFlags) *int { return &f.pp }, 1)},
	{"sequence-parallel", scopeRun | scopeEstimate, "with --tp, split the layer norms' and dropouts' rows too (Korthikanti et al. 2022)", boolFlag(func(f *setupFlags) *bool { return &f.sequenceParallel })},
	{"data-parallel", scopeRun, "ps: the parameter server instead of ZeRO", func(fs *flag.FlagSet, f *setupFlags, name, help string, _ setupOptions) {
		fs.Func(name, help, func(s string) error {
			if s != "ps" {
				return fmt.Errorf("%q: unknown data-parallel setting (valid: ps; ZeRO stages are --zero)", s)
			}
			f.ps = true
			return nil
		})
	}},
	{"prefetch", scopeRun, "with --zero 3: gather the next unit's weights ahead", boolFlag(func(f *setupFlags) *bool { return &f.prefetch })},
	{"bucket-mb", scopeRun, "the gradient bucket of DDP and ZeRO-2, in MiB (default 25, PyTorch DDP's)", func(fs *flag.FlagSet, f *setupFlags, name, help string, _ setupOptions) {
		fs.Func(name, help, func(s string) error {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil || !(v > 0) || v > 1<<40 {
				return fmt.Errorf("%q: want a positive number of MiB", s)
			}
			f.bucketBytes = int64(v * (1 << 20))
			return nil
		})
	}},
	{"micro-batches", scopeRun, "micro-batches, `M`, of --batch a step: a pipeline's, or gradient accumulation", intFlag(func(f *setupFlags) *int { return &f.micro }, 1)},
	{"schedule", scopeRun, "the pipeline schedule: 1f1b or gpipe (default 1f1b)", parsedFlag(func(f *setupFlags) *model.PipelineSchedule { return &f.schedule }, model.ParsePipelineSchedule)},
}

// addSetupFlags defines on fs the setup flags of its subcommand's scope
// (commandScopes, by fs's name), with o's defaults.
func addSetupFlags(fs *flag.FlagSet, o setupOptions) *setupFlags {
	f := &setupFlags{fs: fs, checkpoint: model.Checkpoint{Kind: model.CheckpointNone}, ranks: 1, tp: 1, pp: 1, micro: 1}
	scope := scopeOf(fs.Name())
	f.runsTensor = scope&scopeRun != 0
	for _, d := range setupFlagTable {
		if d.scope&scope != 0 {
			d.define(fs, f, d.name, d.help, o)
		}
	}
	return f
}

// elsewhere is why a setup flag a subcommand does not take is refused:
// the subcommands that take it, from commandScopes and the flags' table;
// false for a name that is no setup flag.
func elsewhere(command, name string) (string, bool) {
	for _, d := range setupFlagTable {
		if d.name != name {
			continue
		}
		var run, est []string
		for _, c := range commandScopes {
			switch {
			case c.scope&d.scope&scopeRun != 0:
				run = append(run, c.name)
			case c.scope&d.scope&scopeEstimate != 0:
				est = append(est, c.name)
			}
		}
		var ways []string
		if len(run) > 0 {
			ways = append(ways, "'trainmem "+strings.Join(run, "', 'trainmem ")+"' run it")
		}
		if len(est) > 0 {
			ways = append(ways, "'trainmem "+strings.Join(est, "' and 'trainmem ")+"' estimate it")
		}
		return fmt.Sprintf("'trainmem %s' does not take it: %s (%s)", command, strings.Join(ways, "; "), guideFlags), true
	}
	return "", false
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
		for _, fl := range []string{"freeze", "quantize", "lora-rank", "lora-alpha", "lora-targets", "peft-config"} {
			if f.set(fl) {
				return model.Checked{}, usagef("--%s names parts of a model and --params gives a bare count: give --preset or a shape", fl)
			}
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
	s.Model.Freeze = f.freeze // what a fine-tune trains, not the shape: the name stays
	s.Model.Quantize = f.quantize
	if err := f.lora(&s.Model); err != nil {
		return model.Checked{}, err
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

// lora sets c's LoRA from --peft-config and the --lora flags (which
// override the file), noting on the flags' output what the file asks and
// trainmem does not model.
func (f *setupFlags) lora(c *model.Config) error {
	if f.peftConfig == "" && !f.set("lora-rank") {
		for _, fl := range []string{"lora-alpha", "lora-targets"} {
			if f.set(fl) {
				return usagef("--%s without --lora-rank or --peft-config: give the adapters' rank", fl)
			}
		}
		return nil
	}
	l := model.LoRA{Alpha: f.loraAlpha, Targets: c.DefaultLoRATargets()}
	if f.peftConfig != "" {
		var notes []string
		var err error
		if l, notes, err = model.ReadPEFTConfig(f.peftConfig, *c); err != nil {
			return err
		}
		for _, n := range notes {
			fmt.Fprintf(f.fs.Output(), "trainmem %s: note: --peft-config %s: %s\n", f.fs.Name(), f.peftConfig, n)
		}
	}
	if f.set("lora-rank") {
		if f.loraRank < 1 || f.loraRank > model.MaxLoRARank {
			return usagef("--lora-rank %d: out of range (valid: 1 to %d)", f.loraRank, model.MaxLoRARank)
		}
		l.Rank = f.loraRank
	}
	if f.set("lora-alpha") {
		l.Alpha = f.loraAlpha
	}
	if f.set("lora-targets") {
		t, err := c.ParseLoRATargets(f.loraTargets)
		if err != nil {
			return usagef("--lora-targets %q: %s", f.loraTargets, strings.TrimPrefix(err.Error(), "model: "))
		}
		l.Targets = t
	}
	c.LoRA = l
	return nil
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
	intVar(fs, &f.c.GPUsPerNode, "gpus-per-node", 0, "GPUs a node, `G`, for DeepSpeed's CPU memory a node (default 8, or gcd(ranks × tp × pp, 8))")
	fs.Func("buffer-factor", "DeepSpeed's additional_buffer_factor, the margin of its CPU estimates (default 1.5, DeepSpeed's)", func(s string) error {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || !(v > 0) || v > 1e6 {
			return fmt.Errorf("%q: want a positive number (DeepSpeed's default is 1.5)", s)
		}
		f.c.BufferFactor = v
		return nil
	})
	fs.Func("largest-layer", "with --params and --zero 3: DeepSpeed's largest_layer_params, e.g. 80.4M", func(s string) error {
		n, err := model.ParseCount(s)
		if err != nil || n < 1 {
			return fmt.Errorf("%q: want a positive parameter count such as 80411200 or 80.4M", s)
		}
		f.c.LargestLayer = n
		return nil
	})
	return f
}

// clusterFlagOf is the flag of each argument model.Cluster.Validate
// refuses by its *cuda.ArgError.
var clusterFlagOf = map[string]string{"GPUs a node": "gpus-per-node", "buffer factor": "buffer-factor", "largest layer": "largest-layer"}

// cluster is the flags' cluster for the checked setup, or a usage error
// naming the flag.
func (f *clusterFlags) cluster(c model.Checked) (model.Cluster, error) {
	if f.c.GPUsPerNode < 0 {
		return model.Cluster{}, usagef("--gpus-per-node %d: must be a positive integer", f.c.GPUsPerNode)
	}
	if err := f.c.Validate(c.Setup()); err != nil {
		var ae *cuda.ArgError
		if errors.As(err, &ae) {
			return model.Cluster{}, usagef("--%s: %s", clusterFlagOf[ae.What], ae.Detail())
		}
		return model.Cluster{}, usageError{err}
	}
	return f.c, nil
}
