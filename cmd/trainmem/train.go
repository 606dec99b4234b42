package main

// trainmem train: train a GPT-2 for real on the host CPU, measuring the
// allocator every step.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"

	"trainmem/bench"
	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/model"
	"trainmem/model/files"
	"trainmem/zero"
)

func init() {
	register(command{
		name:     "train",
		graceful: true,
		summary:  "train a GPT-2 on the host CPU, measuring the allocator every step",
		run:      runTrain,
	})
}

const trainSynopsis = `Trains a GPT-2 preset (or shape) on the host CPU with trainmem's executor and
caching allocator and shows, step by step, the loss, the speed and the memory
the allocator holds; at the end, where the memory went, by category.

Without --data it trains on a corpus built into the binary. A text file is
read as bytes (vocabulary-256 presets such as tiny); an llm.c token file
(.bin, magic 20240520, uint16 tokens) serves GPT-2-vocabulary presets.
--load starts from an llm.c GPT-2 checkpoint (magic 20240326, e.g.
gpt2_124M.bin; the model shape comes from the file when no --preset is
given); --save writes one. --out writes one JSON record per step.

example: trainmem train --preset tiny --steps 200 --out run.jsonl`

// maxThreads bounds --threads: the CPUs this process may use
// (runtime.GOMAXPROCS, which follows the affinity mask and the cgroup's
// CPU quota). A thread past them adds no speed and costs memory: OpenBLAS
// gives each of its threads a 32 MiB buffer and a stack of its own, so
// 33 threads under a 6 GiB address-space limit ran out of it and 40 hung
// inside OpenBLAS, deaf to SIGTERM.
func maxThreads() int { return runtime.GOMAXPROCS(0) }

// threadsUsage is --threads's help.
func threadsUsage() string {
	return fmt.Sprintf("host `threads`: 1 to %d (the CPUs this process may use), or 0 for every core (default 0: every core)", maxThreads())
}

// trainFlags are the flags of a measured run, shared with the subcommands
// that run one (validate).
type trainFlags struct {
	setup                 *setupFlags
	steps                 int
	lr                    float64
	seed                  uint64
	data, out, save, load string
	saveAdapter           string // --save-adapter DIR
	loadAdapter           string // --load-adapter DIR: its adapter_config.json is the LoRA (--peft-config)
	device                string
	threads               int
	// gpu is the next GPU newDevice opens: the process's local rank, then
	// one more for each rank of this process.
	gpu int
	// resolved is the setup resolve gave, and notes where newDevice says
	// that the host is slow (noteSlowHost).
	resolved *model.Setup
	notes    io.Writer
}

// runSetupOptions are the setup flags of the subcommands that run a step
// (train, validate): one device, the tiny preset, batch 8 and sequence 64
// (capped by the context) unless given.
var runSetupOptions = setupOptions{batch: 8, seq: 64, preset: "tiny, or --load's"}

func addTrainFlags(fs *flag.FlagSet) *trainFlags {
	f := &trainFlags{setup: addSetupFlags(fs, runSetupOptions)}
	intVar(fs, &f.steps, "steps", 200, "training `steps`")
	fs.Float64Var(&f.lr, "lr", 1e-3, "learning rate")
	uint64Var(fs, &f.seed, "seed", 1, "`seed` of the initialisation and the batch order")
	fs.StringVar(&f.data, "data", "", "training data: a text file or an llm.c token file (.bin) (default: the built-in corpus)")
	fs.StringVar(&f.out, "out", "", "write one JSON record per step to this file (JSON Lines, each step appended as it finishes)")
	fs.StringVar(&f.save, "save", "", "write the trained weights to this llm.c checkpoint file (atomically)")
	fs.StringVar(&f.load, "load", "", "start from this llm.c GPT-2 checkpoint")
	fs.StringVar(&f.loadAdapter, "load-adapter", "", "start a LoRA from PEFT's adapter `directory` (its adapter_config.json and adapter_model.safetensors)")
	fs.StringVar(&f.saveAdapter, "save-adapter", "", "write a LoRA's adapters to this `directory` as PEFT does (adapter_config.json, adapter_model.safetensors)")
	fs.StringVar(&f.device, "device", "host", "where to run: host (the CPU); cuda needs a CUDA build")
	intVar(fs, &f.threads, "threads", 0, threadsUsage())
	return f
}

// resolve turns the flags into a setup: the preset defaults to tiny (or to
// the shape of the --load file), the batch to 8 and the sequence to 64
// (capped by the context); parallelism flags belong to estimate.
func (f *trainFlags) resolve() (model.Checked, error) {
	sf := f.setup
	shape := sf.set("layers") || sf.set("hidden") || sf.set("heads")
	var loaded model.Config
	if f.load != "" {
		st, err := model.IsSafetensors(f.load)
		switch {
		case err != nil:
			return model.Checked{}, err
		case st && sf.hfConfig == "":
			return model.Checked{}, usagef("--load %s is a safetensors file, which holds tensors and no model: give the model's config.json with --hf-config", f.load)
		case !st:
			// The header, checked against the file's size before any work.
			if loaded, err = model.CheckpointConfig(f.load); err != nil {
				return model.Checked{}, err
			}
		}
	}
	if sf.preset == "" && !shape && sf.hfConfig == "" {
		if f.load != "" { // an llm.c file: its shape
			// The file's shape: its preset when one matches (gpt2_124M.bin
			// is gpt2), else the shape it declares.
			if sf.preset = model.PresetOf(loaded); sf.preset == "" {
				sf.base = &loaded
			}
		} else {
			sf.preset = "tiny"
		}
	}
	if f.loadAdapter != "" {
		if sf.peftConfig != "" {
			return model.Checked{}, usagef("--load-adapter %s and --peft-config %s: the adapter directory's adapter_config.json is its LoRA; give one of them", f.loadAdapter, sf.peftConfig)
		}
		sf.peftConfig = filepath.Join(f.loadAdapter, model.AdapterConfigFile)
	}
	if !sf.set("seq") {
		// The default sequence, at most the context.
		sf.seq, sf.capSeq = runSetupOptions.seq, true
	}
	c, err := sf.setup()
	if err != nil {
		return c, err
	}
	s := c.Setup()
	f.resolved = &s
	if f.load != "" {
		// The file against the model, before any work.
		if err := model.CheckCheckpoint(f.load, s.Model); err != nil {
			return c, err
		}
	}
	if f.steps <= 0 {
		return c, usagef("--steps %d: must be a positive integer", f.steps)
	}
	if !(f.lr > 0) || math.IsInf(f.lr, 0) {
		return c, usagef("--lr %g: must be a positive finite number (e.g. 1e-3)", f.lr)
	}
	if n := maxThreads(); f.threads < 0 || f.threads > n {
		return c, usagef("--threads %d: out of range (valid: 0 for every core, or 1 to %d, the CPUs this process may use; each OpenBLAS thread holds a 32 MiB buffer and its own stack, and threads past the cores add no speed)", f.threads, n)
	}
	if f.device == "host" {
		if err := host.CheckEnv(); err != nil {
			return c, usageError{err}
		}
	}
	return c, nil
}

// options are the run's options from the flags (train's, validate's and
// report's alike): the checked setup, the seed, data and learning rate, and
// progress to w.
func (f *trainFlags) options(c model.Checked, w io.Writer) bench.Options {
	var o bench.Options
	o.Setup, o.Seed, o.Data, o.LR, o.Progress = c, f.seed, f.data, f.lr, w
	o.Config = f.setup.hfConfig
	return o
}

// newDevice opens the device of a measured run.
func (f *trainFlags) newDevice() (cuda.Device, error) {
	switch f.device {
	case "host":
		h, err := host.New(host.Options{Threads: f.threads})
		if err == nil && f.resolved != nil {
			noteSlowHost(f.notes, h, *f.resolved)
		}
		return h, err
	case "cuda":
		f.gpu++
		return openCUDA(f.gpu - 1)
	}
	return nil, usagef("--device %q: unknown device (valid: host, cuda)", f.device)
}

func runTrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("train", flag.ContinueOnError)
	tf := addTrainFlags(fs)
	tf.notes = stderr
	trace := addTraceFlag(fs)
	format := newFormatFlag(fs, "text", "summary", "json")
	profile := fs.Bool("profile", false, "time every op after the first step and print them per op family and phase, with GFLOP/s and GB/s")
	lf := addLaunchFlags(fs)
	if stop, err := parseFlags(fs, args, stderr, trainSynopsis); stop {
		return err
	}
	launch, backend, err := lf.launch(tf)
	if err != nil {
		return err
	}
	if err := lf.ranksFrom(launch, tf.setup); err != nil {
		return err
	}
	c, err := tf.resolve()
	if err != nil {
		return err
	}
	s := c.Setup()
	opts := tf.options(c, stderr)
	opts.Steps, opts.Out, opts.Save, opts.Load = tf.steps, tf.out, tf.save, tf.load
	opts.SaveAdapter, opts.LoadAdapter = tf.saveAdapter, tf.loadAdapter
	if tf.saveAdapter != "" {
		if err := os.MkdirAll(tf.saveAdapter, 0o755); err != nil { // PEFT's save_pretrained makes it too
			return usagef("--save-adapter %s: %v", tf.saveAdapter, err)
		}
	}
	if format.v == "json" && !*profile {
		return usagef("--format json is the profile's: give --profile (a run's records are --out's JSON Lines)")
	}
	world := zero.LayoutOf(s).Size()
	if *profile && (launch.Processes() || world > 1) {
		return usagef("--profile times one device's steps: give it without --ranks and --tp")
	}
	if format.v == "summary" && (launch.Processes() || world > 1) {
		return usagef("--format summary is one device's memory summary: give it without --ranks and --tp")
	}
	set, err := tf.setup.setting()
	if err != nil {
		return err
	}
	ranked := world > 1 // one rank is one device, whatever the setting
	var traced []int
	if ranked {
		traced = ownRanks(launch, world)
	}
	// Every path is checked before the device opens and the work starts, in
	// one check (the records, the weights, the traces and the plot against
	// the inputs and each other); over processes a rank other than 0
	// writes its own trace only.
	written, err := trace.paths(traced)
	if err != nil {
		return err
	}
	if launch.Processes() && launch.Rank != 0 {
		inputs, _ := opts.Paths()
		err = files.Check(inputs, written)
	} else {
		opts.Written = written
		err = opts.Check()
	}
	if err != nil {
		return err
	}
	if *profile {
		opts.Profile = &bench.Profile{}
	}
	set.Native = backend == zero.NCCL // NCCL stages in its own buffers: the simulation too
	opts.Setting = set
	var where bench.Where
	var proc *process
	if launch.Processes() {
		if proc, err = lf.open(launch, backend, setupFields("train", s, set, tf)); err != nil {
			return err
		}
		if !proc.root() {
			stdout = io.Discard
		}
		where = proc.where(tf.newDevice)
	} else {
		if world > bench.MostMeasuredRanks {
			ranks := fmt.Sprintf("--ranks %d", s.Ranks)
			if s.TP*s.PP > 1 {
				ranks = fmt.Sprintf("--ranks %d with --tp %d and --pp %d (%d ranks)", s.Ranks, s.TP, s.PP, world)
			}
			return usagef("%s: train runs at most %d ranks in one process ('trainmem simulate --ranks N' simulates any number; one process a rank trains any number: see --backend)", ranks, bench.MostMeasuredRanks)
		}
		where = inProcess(backend, tf.newDevice)
	}
	where.Traces = trace.rankRecorder()
	err = trainOn(ctx, where, opts, format.v, *profile, stdout)
	if err == nil {
		if ranked {
			err = trace.writeRanks(stdout, where.Traces, "text", nil) // each process its own rank's
		} else {
			err = trace.write(stdout, where.Traces[0], "text", nil)
		}
	}
	return proc.end(err)
}

// trainOn trains where says and writes the report: one rank's in the
// chosen format (the profile after it), the ranks' in text.
func trainOn(ctx context.Context, where bench.Where, opts bench.Options, format string, profile bool, stdout io.Writer) error {
	s := opts.Setup.Setup()
	rep, err := bench.Train(ctx, where, opts)
	if rep == nil {
		return err
	}
	device := rep.Device
	if world := zero.LayoutOf(s).Size(); world > 1 {
		device = fmt.Sprintf("%d ranks", world)
	}
	if format != "json" {
		bench.WriteHeader(stdout, s, device)
	}
	if rep.Result.Steps > 0 {
		var write func(io.Writer) error
		switch format {
		case "summary":
			write = rep.WriteSummary
		case "json":
			write = bench.ProfileReport{P: opts.Profile}.WriteJSON
		default:
			write = rep.WriteText
		}
		if werr := write(stdout); werr != nil && err == nil {
			err = werr
		}
		if profile && format != "json" && err == nil {
			fmt.Fprintln(stdout)
			err = bench.ProfileReport{P: opts.Profile}.WriteText(stdout)
		}
	}
	if rep.Result.Interrupted {
		// This process's own signal, or (over ranks) the peer's stop that
		// every rank agreed on (zero.StopError: its rank, and its signal,
		// whose number sets this exit status too). A stop sets the exit
		// status even when writing an output failed after it: the failure
		// is added to the message.
		var cause error = rep.Stop
		switch {
		case rep.Stop == nil:
			cause = context.Cause(ctx)
		case ctx.Err() != nil:
			cause = agreedStop{context.Cause(ctx), rep.Stop}
		}
		if err != nil {
			return fmt.Errorf("stopped after %d of %d steps (the outputs hold the finished steps; and %v): %w", rep.Result.Steps, opts.Steps, err, cause)
		}
		return fmt.Errorf("stopped after %d of %d steps (the outputs hold the finished steps): %w", rep.Result.Steps, opts.Steps, cause)
	}
	if err != nil {
		return err
	}
	records := "records"
	if zero.LayoutOf(s).Size() > 1 {
		records = "records (one a rank a step)"
	}
	weights := "weights"
	if s.Model.LoRA.On() {
		weights = "weights (the adapters merged into the base model)"
	}
	for _, p := range []struct{ what, path string }{{records, opts.Out}, {weights, opts.Save}, {"adapters (PEFT's adapter_config.json and adapter_model.safetensors)", opts.SaveAdapter}} {
		if p.path != "" {
			fmt.Fprintf(stdout, "%s written to %s\n", p.what, p.path)
		}
	}
	return nil
}

// agreedStop is this process's own stop (cause: its signal) that every
// rank agreed on (stop): it reads as the cause, and carries both, so that
// the exit status is the signal's and the link ends with a goodbye.
type agreedStop struct {
	cause error
	stop  *zero.StopError
}

func (e agreedStop) Error() string   { return e.cause.Error() }
func (e agreedStop) Unwrap() []error { return []error{e.cause, e.stop} }
