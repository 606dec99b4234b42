package main

// trainmem validate: the estimate, the simulation and a measured run side by
// side, with every difference explained; --sweep checkpoint runs every
// checkpoint policy and sets memory against step time.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"trainmem/bench"
	"trainmem/cuda"
	"trainmem/model"
	"trainmem/model/files"
	"trainmem/zero"
)

func init() {
	register(command{
		name:     "validate",
		graceful: true,
		summary:  "estimate vs simulate vs measure, every difference explained; --sweep checkpoint for the checkpointing trade-off",
		run:      runValidate,
	})
}

const validateSynopsis = `Answers "where did the memory go?" three ways for one setup and sets them side
by side: the closed-form formulas (the ZeRO paper, Korthikanti et al., and
trainmem's implementation-exact one), the simulation (the real schedule on a
shape-only device) and a measured run (--device host, the default, or cuda).
One row per memory category; formulas are compared with requested bytes
(tensor sizes), and the allocator's rounding, its cache and (on a GPU) the
CUDA context get rows of their own. Under the table, one line per difference
says what causes it, computed from the setup's numbers.

--sweep checkpoint runs every checkpoint policy (none, selective, full, sqrt,
every:K) on the setup: activation memory estimated, simulated and measured,
the step time and its overhead against none, and bar charts; --plot writes
them as an image.

--no-measure skips the measured run, for sizes that do not fit the host.

examples:
  trainmem validate
  trainmem validate --precision fp16 --checkpoint full --format json
  trainmem validate --preset gpt2-xl --batch 32 --seq 1000 --precision fp16 --no-measure
  trainmem validate --sweep checkpoint --layers 8 --hidden 256 --heads 8 --vocab 256 --context 256 --seq 128 --plot sweep.svg`

// addMeasureFlags defines the flags of a measured run that validate and
// report share: --seed, --data, --device, --threads and --no-measure.
func addMeasureFlags(fs *flag.FlagSet, tf *trainFlags) (noMeasure *bool) {
	uint64Var(fs, &tf.seed, "seed", 1, "`seed` of the initialisation and the batch order")
	fs.StringVar(&tf.data, "data", "", "tokens of the measured run: a text file or an llm.c token file (.bin) (default: the built-in corpus)")
	fs.StringVar(&tf.device, "device", "host", "where to measure: host (the CPU); cuda needs a CUDA build")
	intVar(fs, &tf.threads, "threads", 0, threadsUsage())
	return fs.Bool("no-measure", false, "estimate and simulate only (for sizes that do not fit the device)")
}

func runValidate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	tf := &trainFlags{setup: addSetupFlags(fs, runSetupOptions), lr: 1e-3, notes: stderr}
	var steps int
	intVar(fs, &steps, "steps", 0, "measured `steps`; the last is reported (default 3; with --sweep, 7 a policy, the first left out of the timings)")
	noMeasure := addMeasureFlags(fs, tf)
	sweep := fs.String("sweep", "", "sweep: checkpoint (every checkpoint policy on the setup)")
	plotPath := fs.String("plot", "", "with --sweep: write the bar charts to this file ("+bench.PlotFormats+"), atomically")
	format := newFormatFlag(fs, "text", "json")
	trace := addTraceFlag(fs)
	profile := fs.Bool("profile", false, "time every op after the first step and print them per op family and phase, with GFLOP/s and GB/s")
	lf := addLaunchFlags(fs)
	cf := addClusterFlags(fs)
	if stop, err := parseFlags(fs, args, stderr, validateSynopsis); stop {
		return err
	}
	launch, backend, err := lf.launch(tf)
	if err != nil {
		return err
	}
	if launch.Processes() {
		switch {
		case *sweep != "":
			return usagef("--sweep checkpoint runs one rank, and this process is rank %d of %d (%s)", launch.Rank, launch.World, launch.Launcher)
		case *noMeasure:
			return usagef("--no-measure: ranks in processes of their own are there to measure; simulate any number in one process ('trainmem validate --ranks N --no-measure')")
		}
		if err := lf.ranksFrom(launch, tf.setup); err != nil {
			return err
		}
	}
	if steps <= 0 && given(fs, "steps") {
		return usagef("--steps %d: must be a positive integer (default 3; with --sweep, 7 a policy)", steps)
	}
	tf.steps = max(steps, 1)
	switch *sweep {
	case "", "checkpoint":
	default:
		return usagef("--sweep %q: unknown sweep (valid: checkpoint)", *sweep)
	}
	if *sweep != "" && tf.setup.set("checkpoint") {
		return usagef("--checkpoint %s: --sweep checkpoint runs every policy; drop --checkpoint", tf.setup.checkpoint)
	}
	if *plotPath != "" {
		if *sweep == "" {
			return usagef("--plot: plots belong to --sweep checkpoint")
		}
		if err := bench.CheckPlotPath(*plotPath); err != nil {
			return usageError{err}
		}
	}
	c, err := tf.resolve()
	if err != nil {
		return err
	}
	s := c.Setup()
	if *sweep != "" && s.Offload != model.OffloadNone {
		return usagef("--sweep checkpoint with --offload %s: a sweep measures one device a policy; offloading is run by 'trainmem validate' without --sweep, 'trainmem simulate' and 'trainmem train'", s.Offload)
	}
	if steps > 0 && *sweep != "" && steps < 2 && !*noMeasure {
		return usagef("--steps %d: a sweep times the steps after the first: give at least 2", steps)
	}
	// Every path, the traces' and the timeline's with the others, in one
	// check below.
	inputs, outputs := []files.Path{{Flag: "--data", Name: tf.data}, {Flag: "--hf-config", Name: tf.setup.hfConfig}}, []files.Path{{Flag: "--plot", Name: *plotPath}}

	opts := tf.options(c, stderr)
	opts.Steps = steps
	if opts.Cluster, err = cf.cluster(c); err != nil {
		return err
	}
	var rec *bench.MemoryTrace // one rank's simulated step, when nothing is measured
	if *sweep == "" {
		rec = trace.recorder()
	} else {
		opts.Timelines = trace.plot != "" // one panel a policy
	}
	set, err := tf.setup.setting()
	if err != nil {
		return err
	}
	set.Native = backend == zero.NCCL // NCCL stages in its own buffers: the simulation too
	opts.Setting = set
	world := zero.LayoutOf(s).Size()
	ranked := launch.Processes() || world > 1 || set.PS
	switch {
	case *profile && (ranked || *sweep != "" || *noMeasure || format.v == "json"):
		return usagef("--profile times one device's measured run, in text: give it without --ranks, --sweep, --no-measure and --format json")
	case trace.base != "" && *sweep != "":
		return usagef("--memory-trace records one step: give it without --sweep (--plot-timeline draws every policy's)")
	case ranked && trace.given() && *noMeasure:
		return usagef("--memory-trace and --plot-timeline with ranks record the measured ranks; without measuring, 'trainmem simulate --ranks N --memory-trace FILE' records the simulated ones")
	case ranked:
		if err := trace.check(ownRanks(launch, world), inputs, outputs); err != nil {
			return err
		}
	default:
		if err := trace.check(nil, inputs, outputs); err != nil {
			return err
		}
	}
	if *sweep != "" {
		if world > 1 || launch.Processes() {
			return usagef("--sweep checkpoint runs one rank; drop --ranks and --tp (or --data-parallel)")
		}
		var newDev func() (cuda.Device, error)
		if !*noMeasure {
			newDev = tf.newDevice
		}
		rep, err := bench.Sweep(ctx, newDev, opts)
		if err != nil {
			return measureErr(err)
		}
		if err := writeSweep(stdout, s, rep, format.v, *plotPath); err != nil || trace.plot == "" {
			return err
		}
		if err := bench.PlotTimeline(trace.plot, rep.Timelines); err != nil {
			return fmt.Errorf("the report is above, but the timeline plot was not written: %w", err)
		}
		if format.v != "json" {
			fmt.Fprintf(stdout, "timeline plot (one panel a policy, simulated) written to %s\n", trace.plot)
		}
		return nil
	}

	// Where the measured ranks run: one a process under a launcher, else in
	// this process (nowhere with --no-measure).
	var where *bench.Where
	var proc *process
	switch {
	case launch.Processes():
		if proc, err = lf.open(launch, backend, setupFields("validate", s, set, tf)); err != nil {
			return err
		}
		if !proc.root() {
			opts.Progress = nil
		}
		w := proc.where(tf.newDevice)
		where = &w
	case !*noMeasure:
		if world > bench.MostMeasuredRanks {
			ranks := fmt.Sprintf("--ranks %d", s.Ranks)
			if s.TP*s.PP > 1 {
				ranks = fmt.Sprintf("--ranks %d with --tp %d and --pp %d (%d ranks)", s.Ranks, s.TP, s.PP, world)
			}
			return usagef("%s: validate measures at most %d ranks in one process (--no-measure estimates and simulates any number; one process a rank measures any number: see --backend)", ranks, bench.MostMeasuredRanks)
		}
		w := inProcess(backend, tf.newDevice)
		where = &w
	}
	if where != nil {
		where.Traces = trace.rankRecorder()
	} else if rec != nil {
		opts.Trace = rec // one rank's simulated step (never a nil *MemoryTrace in the interface)
	}
	if *profile {
		opts.Profile = &bench.Profile{}
	}
	rep, err := bench.Validate(ctx, where, opts)
	if err == nil && (proc == nil || proc.root()) {
		err = writeReport(stdout, format.v, rep)
	}
	if err == nil && *profile {
		fmt.Fprintln(stdout)
		err = (bench.ProfileReport{P: opts.Profile}).WriteText(stdout)
	}
	if err == nil {
		switch {
		case where != nil && world == 1:
			err = trace.write(stdout, where.Traces[0], format.v, nil)
		case where != nil:
			err = trace.writeRanks(stdout, where.Traces, format.v, nil) // each process its own rank's
		default:
			err = trace.write(stdout, rec, format.v, nil)
		}
	}
	if proc != nil {
		return proc.end(measureErr(err))
	}
	return measureErr(err)
}

// writeSweep writes the sweep's report, then its plot: a plot that fails
// (its directory gone since the check, a full disk) never costs the report,
// which is written first; the plot's error is returned after it.
func writeSweep(stdout io.Writer, s model.Setup, rep *bench.SweepReport, format, plotPath string) error {
	if err := writeReport(stdout, format, rep); err != nil || plotPath == "" {
		return err
	}
	if err := rep.Plot(plotPath); err != nil {
		return fmt.Errorf("the report is above, but the plot was not written: %w", err)
	}
	if format != "json" {
		fmt.Fprintf(stdout, "\nplot written to %s\n", plotPath)
	}
	return nil
}

// measureErr adds the way out to a measured run that does not fit.
func measureErr(err error) error {
	var tooBig *bench.TooLargeError
	var oom *cuda.OutOfMemoryError
	if errors.As(err, &tooBig) || errors.As(err, &oom) {
		return fmt.Errorf("%w (--no-measure estimates and simulates without running)", err)
	}
	return err
}
