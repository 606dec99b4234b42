package main

// The flags that describe a model and a training setup, shared by the
// subcommands that answer questions about one (estimate, fit, and later
// train, simulate and validate).

import (
	"flag"
	"fmt"
	"strings"

	"trainmem/model"
)

// setupFlags holds the parsed values; setup turns them into a model.Setup.
type setupFlags struct {
	fs *flag.FlagSet

	preset                                string
	layers, hidden, heads, vocab, context int
	untied                                bool
	params                                int64

	batch, seq int

	precision  model.Precision
	optimizer  model.Optimizer
	checkpoint model.Checkpoint

	ranks, zero, tp, pp int
	sequenceParallel    bool

	// base, when set, is the model in place of a preset: the shape of a
	// checkpoint file (train --load), which the shape flags may override.
	base *model.Config
}

// addSetupFlags defines the model and setup flags on fs.
func addSetupFlags(fs *flag.FlagSet) *setupFlags {
	f := &setupFlags{fs: fs, checkpoint: model.Checkpoint{Kind: model.CheckpointNone}}
	fs.StringVar(&f.preset, "preset", "", "model preset: "+strings.Join(model.PresetNames(), ", "))
	fs.IntVar(&f.layers, "layers", 0, "transformer layers, L (a custom shape, or overriding the preset's)")
	fs.IntVar(&f.hidden, "hidden", 0, "hidden size, h")
	fs.IntVar(&f.heads, "heads", 0, "attention heads, a (must divide the hidden size)")
	fs.IntVar(&f.vocab, "vocab", 50257, "vocabulary, V, for a custom shape")
	fs.IntVar(&f.context, "context", 1024, "context (learned positions) for a custom shape")
	fs.BoolVar(&f.untied, "untied", false, "an output head of its own (V×h) instead of the tied token embedding; --untied=false ties it (default: the preset's choice, tied for a custom shape)")
	fs.Func("params", "parameter count for model states only, e.g. 7.5e9 or 7.5B (no shape: no activations)", func(s string) error {
		n, err := model.ParseCount(s)
		if err == nil && n == 0 {
			err = fmt.Errorf("model: bad count %q: must be positive", s)
		}
		f.params = n
		return err
	})
	fs.IntVar(&f.batch, "batch", 1, "micro-batch per rank, b")
	fs.IntVar(&f.seq, "seq", 0, "sequence length, s (default: the model's context)")
	fs.Func("precision", "fp32, or fp16 / bf16 for mixed precision (16-bit weights, gradients and activations, fp32 master weights and moments) (default fp32)", func(s string) error {
		p, err := model.ParsePrecision(s)
		f.precision = p
		return err
	})
	fs.Func("optimizer", "adam, adamw, sgd or momentum (default adam)", func(s string) error {
		o, err := model.ParseOptimizer(s)
		f.optimizer = o
		return err
	})
	fs.Func("checkpoint", "gradient checkpointing: "+model.CheckpointPolicies+" (default none)", func(s string) error {
		c, err := model.ParseCheckpoint(s)
		f.checkpoint = c
		return err
	})
	fs.IntVar(&f.ranks, "ranks", 1, "data-parallel ranks, N (ZeRO shards over them)")
	fs.IntVar(&f.zero, "zero", 0, "ZeRO stage: 0 (plain data parallel), 1 (optimizer states), 2 (+ gradients), 3 (+ weights)")
	fs.IntVar(&f.tp, "tp", 1, "tensor-parallel ranks, t (Megatron-LM; must divide the heads)")
	fs.IntVar(&f.pp, "pp", 1, "pipeline stages, P (1F1B; must divide the layers)")
	fs.BoolVar(&f.sequenceParallel, "sequence-parallel", false, "with --tp, split the layer norms' and dropouts' activations too (Korthikanti et al. 2022)")
	return f
}

// set reports whether the named flag was given.
func (f *setupFlags) set(name string) bool {
	given := false
	f.fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == name })
	return given
}

// setup builds and validates the model.Setup; its errors are usage errors.
func (f *setupFlags) setup() (model.Setup, error) {
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
		{"vocab", f.vocab, 1, model.MaxVocab, true},
		{"context", f.context, 1, model.MaxContext, true},
		{"batch", f.batch, 1, model.MaxBatch, true},
		{"seq", f.seq, 1, model.MaxContext, f.set("seq")},
		{"ranks", f.ranks, 1, model.MaxRanks, true},
		{"zero", f.zero, 0, 3, true},
		{"tp", f.tp, 1, model.MaxHidden, true},
		{"pp", f.pp, 1, model.MaxLayers, true},
	} {
		if r.check && (r.v < r.lo || r.v > r.hi) {
			if r.flag == "zero" {
				return model.Setup{}, usagef("--zero %d: not a ZeRO stage (valid: 0, 1, 2, 3)", r.v)
			}
			return model.Setup{}, usagef("--%s %d: out of range (valid: %d to %d)", r.flag, r.v, r.lo, r.hi)
		}
	}
	s := model.Setup{
		Batch: f.batch, Precision: f.precision, Optimizer: f.optimizer, Checkpoint: f.checkpoint,
		Ranks: f.ranks, ZeRO: f.zero, TP: f.tp, PP: f.pp, SequenceParallel: f.sequenceParallel,
	}
	shape := f.set("layers") || f.set("hidden") || f.set("heads") || f.set("vocab") || f.set("context") || f.set("untied")
	switch {
	case f.params > 0:
		if f.preset != "" || shape {
			return model.Setup{}, usagef("--params gives a bare parameter count: use it without --preset and the shape flags")
		}
		s.Params = f.params
		return s, f.validate(s)
	case f.preset != "" || f.base != nil:
		var c model.Config
		if f.base != nil {
			c = *f.base
		} else {
			var err error
			if c, err = model.Preset(f.preset); err != nil {
				return model.Setup{}, usagef("--preset %q: unknown preset (valid: %s)", f.preset, strings.Join(model.PresetNames(), ", "))
			}
		}
		if shape {
			c.Name = c.Name + "+custom"
		}
		for _, o := range []struct {
			flag string
			dst  *int
			v    int
		}{{"layers", &c.Layers, f.layers}, {"hidden", &c.Hidden, f.hidden}, {"heads", &c.Heads, f.heads}, {"vocab", &c.Vocab, f.vocab}, {"context", &c.Context, f.context}} {
			if f.set(o.flag) {
				*o.dst = o.v
			}
		}
		if f.set("untied") {
			c.Untied = f.untied
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
			return model.Setup{}, usagef("a custom shape needs --layers, --hidden and --heads (missing: %s)", strings.Join(missing, ", "))
		}
		s.Model = model.Config{Name: "custom", Layers: f.layers, Hidden: f.hidden, Heads: f.heads, Vocab: f.vocab, Context: f.context, Untied: f.untied}
	default:
		return model.Setup{}, usagef("no model: give --preset (valid: %s), a shape (--layers, --hidden, --heads) or --params", strings.Join(model.PresetNames(), ", "))
	}
	s.Seq = s.Model.Context
	if f.set("seq") {
		s.Seq = f.seq
	}
	return s, f.validate(s)
}

// validate runs the model's checks and turns their errors into usage errors.
func (f *setupFlags) validate(s model.Setup) error {
	if err := s.Validate(); err != nil {
		return badSetup(err)
	}
	return nil
}

// describe is the setup in one line, for the text reports.
func describe(s model.Setup) string {
	var b strings.Builder
	prec := s.Precision.String()
	if s.Precision.Mixed() {
		prec += " mixed precision"
	}
	if !s.ParamsOnly() {
		fmt.Fprintf(&b, "micro-batch %d, sequence %d, ", s.Batch, s.Seq)
	}
	fmt.Fprintf(&b, "%s, %s", prec, s.Optimizer)
	if !s.ParamsOnly() {
		fmt.Fprintf(&b, ", checkpoint %s", s.Checkpoint)
	}
	fmt.Fprintf(&b, "; %s, ZeRO-%d", plural(s.Ranks, "data-parallel rank"), s.ZeRO)
	if !s.ParamsOnly() {
		fmt.Fprintf(&b, ", tp %d, pp %d", s.TP, s.PP)
		if s.SequenceParallel && s.TP > 1 {
			b.WriteString(", sequence parallel")
		}
	}
	return b.String()
}

// modelLine is the model in one line.
func modelLine(s model.Setup) string {
	if s.ParamsOnly() {
		return fmt.Sprintf("%s parameters (no shape: model states only)", model.Comma(s.Params))
	}
	return s.Model.String()
}
