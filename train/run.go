package train

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/model"
	"trainmem/model/files"
)

// RunOptions describe a training run.
type RunOptions struct {
	Setup model.Checked // model, batch, sequence, precision, optimizer, checkpoint policy
	Steps int
	// LR overrides the optimizer's default learning rate when > 0.
	LR   float64
	Seed uint64 // initialisation and batch order
	// Data is a token or text file; empty means the built-in corpus.
	Data string
	// Config is the Hugging Face config.json the model was read from
	// (--hf-config), an input no output may replace; empty for none.
	Config string
	// Out receives one JSON record per step (JSON Lines), each appended as
	// its step finishes (files.Lines: the file is whole at every moment).
	Out string
	// Load starts from an llm.c GPT-2 checkpoint; Save writes one at the end
	// (files.WriteAtomic), a LoRA merged into its base (model.MergeLoRA).
	Load, Save string
	// LoadAdapter starts a LoRA's adapters from PEFT's adapter directory;
	// SaveAdapter writes them as one at the end (model.WriteAdapter).
	LoadAdapter, SaveAdapter string
	// Progress receives the progress bar; nil shows none.
	Progress io.Writer
	// OnRecord, when set, is called with every finished step's record.
	OnRecord func(Record)
	// Trace, when set, receives the steps' allocator events
	// (Trainer.Trace), and is told when they end (cuda.TraceEnder).
	Trace cuda.Tracer
	// Profile, when set, times every instruction (Trainer.Profile).
	Profile *Profile
	// Written are the files the caller writes after the run besides Out
	// and Save (memory traces, plots, each derived name), checked with the
	// run's own so that no output replaces an input or another output.
	Written []files.Path
}

// Paths are the run's files, for files.Check: its inputs, and every file
// it or its caller writes.
func (o RunOptions) Paths() (inputs, outputs []files.Path) {
	inputs = []files.Path{{Flag: "--data", Name: o.Data}, {Flag: "--hf-config", Name: o.Config}}
	for _, f := range model.LoadFiles(o.Load) { // a sharded model's index and its shards
		inputs = append(inputs, files.Path{Flag: "--load", Name: f})
	}
	outputs = []files.Path{{Flag: "--out", Name: o.Out}, {Flag: "--save", Name: o.Save}}
	for _, f := range []string{model.AdapterConfigFile, model.AdapterWeightsFile} {
		if o.LoadAdapter != "" {
			inputs = append(inputs, files.Path{Flag: "--load-adapter", Name: filepath.Join(o.LoadAdapter, f)})
		}
		if o.SaveAdapter != "" {
			outputs = append(outputs, files.Path{Flag: "--save-adapter", Name: filepath.Join(o.SaveAdapter, f)})
		}
	}
	return inputs, append(outputs, o.Written...)
}

// Check is what a run checks before any work: every path (files.Check),
// and that Save can hold the model. The command line calls it before it
// opens the device; Run calls it again.
func (o RunOptions) Check() error {
	if err := o.Setup.Err(); err != nil {
		return err
	}
	if err := files.Check(o.Paths()); err != nil {
		return err
	}
	if o.Save != "" {
		if err := model.CheckSavable(o.Setup.Setup().Model); err != nil {
			return &files.PathError{Flag: "--save", Path: o.Save, Problem: err.Error()}
		}
	}
	for _, a := range []struct{ flag, dir string }{{"--save-adapter", o.SaveAdapter}, {"--load-adapter", o.LoadAdapter}} {
		if a.dir != "" {
			if _, err := o.Setup.Setup().Model.AdapterTensors(); err != nil {
				return &files.PathError{Flag: a.flag, Path: a.dir, Problem: strings.TrimPrefix(err.Error(), "model: ") + " (valid: with --lora-rank or --peft-config)"}
			}
		}
	}
	return nil
}

// RunResult is what a run leaves: a summary of its steps (the records
// themselves went to Out and OnRecord as they finished, so that a run of
// any length holds no more than one), the final allocator statistics and
// where the run happened.
type RunResult struct {
	Device   string
	Dataset  string
	Schedule string
	// Steps is the number of finished steps; First and Last their first
	// and last records.
	Steps       int
	First, Last Record
	Stats       cuda.Stats
	// Interrupted is set when the context ended the run early; the files
	// (and OnRecord's calls) hold the steps that finished.
	Interrupted bool

	steadyMs, steadyTokensPerS float64 // sums over steps 2..Steps
}

// Add takes a finished step into the summary.
func (res *RunResult) Add(r Record) {
	res.Steps++
	if res.Steps == 1 {
		res.First = r
	} else {
		res.steadyMs += r.StepMs
		res.steadyTokensPerS += r.TokensPerS
	}
	res.Last = r
}

// Mean is the mean step time and throughput of the steps after the first
// (the first pays for filling the allocator's cache), or of the first alone.
func (res *RunResult) Mean() (stepMs, tokensPerS float64) {
	if res.Steps <= 1 {
		return res.First.StepMs, res.First.TokensPerS
	}
	n := float64(res.Steps - 1)
	return res.steadyMs / n, res.steadyTokensPerS / n
}

// CheckHostFits refuses a checkpoint whose parameters the machine could
// not hold while reading it (a sparse file of the right size for a huge
// shape passes every other check).
func CheckHostFits(path string, cfg model.Config) error {
	need := HostParamBytes(cfg)
	avail, _, err := host.Memory()
	if err != nil || need <= avail {
		return nil // the size is not known here: the read will tell
	}
	return files.BadInput(path, fmt.Errorf("train: checkpoint %s: its %s parameters need %s of host memory to read, and this machine has %s available",
		path, model.Comma(cfg.NumParams()), model.Bytes(need), model.Bytes(avail)))
}
