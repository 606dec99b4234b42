package main

// trainmem simulate: the real training schedule on the shape-only device.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"trainmem/bench"
	"trainmem/cuda"
	"trainmem/cuda/alloc"
	"trainmem/cuda/host"
	"trainmem/cuda/shape"
	"trainmem/model/files"
	"trainmem/zero"
)

func init() {
	register(command{
		name:    "simulate",
		summary: "run the real training schedule on a shape-only device: exact memory at any size, in a second",
		run:     runSimulate,
	})
}

const simulateSynopsis = `Runs trainmem's real training schedule (its GPT-2 graph, forward, backward and
optimizer, every allocation and free) on a shape-only device: the same caching
allocator over a virtual address space, nothing stored or computed. The
per-category peaks are exactly what 'trainmem train' measures for the same
setup, at any size. --memory gives the device a capacity: a setup that does
not fit fails with an out-of-memory report like a real card's.

The step's time is predicted by a roofline (--gpu, an H100 SXM by default):
each op takes the longer of its FLOPs at the card's peak and its bytes at its
memory bandwidth, which also times the --memory-trace timeline. It is an
estimate: no launches, overheads or overlap.

examples:
  trainmem simulate --preset gpt2-xl --batch 32 --seq 1000 --precision fp16 --checkpoint full --gpu a100
  trainmem simulate --preset gpt2-xl --batch 32 --seq 1000 --precision fp16 --memory 80GiB
    (the second runs out of memory, and that is the point: the report says
    what filled the card when the request failed)`

func runSimulate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	sf := addSetupFlags(fs, setupOptions{batch: 1})
	var capacity int64
	fs.Func("memory", "device capacity, e.g. 24GiB or 80GB (default: unlimited)", func(s string) error {
		n, err := parseMemory(s)
		if err == nil && n > alloc.MaxVirtualSpace {
			err = fmt.Errorf("%q is beyond the shape-only device's address space of %s", s, cuda.FormatBytes(alloc.MaxVirtualSpace))
		}
		capacity = n
		return err
	})
	var steps int
	intVar(fs, &steps, "steps", 2, "`steps` to run (the first fills the allocator's cache)")
	sweep := fs.String("sweep", "", "sweep: zero (with --ranks N: the parameter server and ZeRO-0 to 3 side by side)")
	format := newFormatFlag(fs, "text", "json", "summary")
	trace := addTraceFlag(fs)
	card := addCardFlags(fs, cuda.DefaultGPU, "the card that times the simulated step")
	profile := fs.Bool("profile", false, "the model's time of every op of the last step, per op family and phase, as train --profile measures them (one rank, a card)")
	network := fs.String("network", "", "over ranks, the system the ranks sit on: "+zero.NetworkNames()+", or nvlink=GB/s,net=GB/s (default: a DGX of the card)")
	if stop, err := parseFlags(fs, args, stderr, simulateSynopsis); stop {
		return err
	}
	roofline, err := card.roofline(fs)
	if err != nil {
		return err
	}
	if steps <= 0 {
		return usagef("--steps %d: must be a positive integer", steps)
	}
	c, err := sf.setup()
	if err != nil {
		return err
	}
	s := c.Setup()
	lay := zero.LayoutOf(s)
	if *profile && (lay.Size() > 1 || roofline == nil || *sweep != "" || format.v != "text") {
		return usagef("--profile times one device's ops on the card's model: give it with one rank, a card (--gpu, not none) and text output")
	}
	if given(fs, "network") && (lay.Size() == 1 || roofline == nil) {
		return usagef("--network %q places the ranks whose collectives the card's clock times: give it with --ranks, --tp or --pp and a card", *network)
	}
	set, err := sf.setting()
	if err != nil {
		return err
	}
	if format.v == "summary" && (*sweep != "" || lay.Size() > 1) {
		return usagef("--format summary is one device's memory summary: give it without --sweep, --ranks and --tp")
	}
	inputs := []files.Path{{Flag: "--hf-config", Name: sf.hfConfig}} // the traces never replace it
	switch {
	case trace.given() && *sweep != "":
		return usagef("--memory-trace and --plot-timeline record one setting's step: give them without --sweep")
	case lay.Size() > 1:
		if err := trace.check(lay.SimulatedRanks(), inputs, nil); err != nil {
			return err
		}
	default:
		if err := trace.check(nil, inputs, nil); err != nil {
			return err
		}
	}
	switch {
	case *sweep == "zero" && s.Ranks < 2:
		return usagef("--sweep zero compares the data-parallel settings: give --ranks N of at least 2")
	case *sweep == "zero" && s.TP > 1:
		return usagef("--sweep zero compares the data-parallel settings of whole models: give it without --tp")
	case *sweep == "zero" && (sf.set("zero") || sf.ps):
		return usagef("--sweep zero runs every setting; drop --zero and --data-parallel")
	case *sweep == "zero":
		o := bench.Options{Setting: zero.Setting{BucketBytes: sf.bucketBytes}}
		o.Setup, o.Steps = c, steps
		rep, err := bench.SweepStages(func() cuda.Device { return shape.New(capacity) }, o)
		if err != nil {
			return err
		}
		return writeReport(stdout, format.v, rep)
	case *sweep != "":
		return usagef("--sweep %q: unknown sweep (valid: zero)", *sweep)
	}
	if roofline != nil {
		if err := roofline.Check(); err != nil {
			return usageError{err}
		}
		if lay.Size() > 1 {
			// The ranks' collectives, sends and receives timed over the
			// network (a rank's step replayed in time, zero/clock.go).
			nw := zero.DefaultNetwork(*card.gpu)
			if *network != "" {
				var err error
				if nw, err = zero.ParseNetwork(*network); err != nil {
					return usagef("--network: %v", err)
				}
			}
			set.Network = &nw
		}
	}
	newDevice := func() cuda.Device {
		d := shape.New(capacity)
		if roofline != nil {
			d.Model(*roofline) // checked above
		}
		return d
	}
	traces := trace.rankRecorder()
	o := bench.Options{Setting: set}
	o.Setup, o.Steps = c, steps
	if *profile {
		o.Profile = &bench.Profile{}
	}
	rep, err := bench.Simulate(newDevice, capacity, o, traces)
	if lay.Size() > 1 {
		if err != nil {
			return trace.writeRanks(stdout, traces, format.v, err)
		}
		if err := writeReport(stdout, format.v, rep); err != nil {
			return err
		}
		return trace.writeRanks(stdout, traces, format.v, nil)
	}
	var rec *bench.MemoryTrace
	if traces != nil {
		rec = traces[0]
	}
	if err != nil {
		return trace.write(stdout, rec, format.v, err)
	}
	if err := writeReport(stdout, format.v, rep); err != nil {
		return err
	}
	if *profile {
		fmt.Fprintln(stdout)
		if err := (bench.ProfileReport{P: o.Profile}).WriteText(stdout); err != nil {
			return err
		}
	}
	return trace.write(stdout, rec, format.v, nil)
}

// cardFlags are --gpu, --peak-tflops and --bandwidth: the card that
// times a step.
type cardFlags struct {
	gpu                   *string
	peakTFLOPS, bandwidth float64
}

// addCardFlags defines the card's flags, --gpu defaulting to def ("none":
// no card unless one is named); usage says what the card does.
func addCardFlags(fs *flag.FlagSet, def, usage string) *cardFlags {
	f := &cardFlags{}
	f.gpu = fs.String("gpu", def, usage+": "+cuda.GPUKeys()+", host (this CPU, timed), or none")
	fs.Float64Var(&f.peakTFLOPS, "peak-tflops", 0, "a roofline of your own: the peak in TFLOP/s of the run's products (with --bandwidth; instead of --gpu)")
	fs.Float64Var(&f.bandwidth, "bandwidth", 0, "a roofline of your own: the memory bandwidth in GB/s (with --peak-tflops)")
	return f
}

// roofline is the card the flags choose (nil: none).
func (f *cardFlags) roofline(fs *flag.FlagSet) (*cuda.Roofline, error) {
	return rooflineOf(fs, *f.gpu, f.peakTFLOPS, f.bandwidth)
}

// rooflineOf is the roofline the flags choose: --gpu's card, or
// --peak-tflops with --bandwidth; nil for --gpu none.
func rooflineOf(fs *flag.FlagSet, gpu string, peakTFLOPS, bandwidth float64) (*cuda.Roofline, error) {
	own := given(fs, "peak-tflops") || given(fs, "bandwidth")
	switch {
	case own && given(fs, "gpu"):
		return nil, usagef("--gpu %s and --peak-tflops/--bandwidth: give one roofline (a card, or your own numbers)", gpu)
	case own:
		r := cuda.Roofline{Name: fmt.Sprintf("%g TFLOP/s, %g GB/s", peakTFLOPS, bandwidth), HalfFLOPS: peakTFLOPS * 1e12, FP32FLOPS: peakTFLOPS * 1e12,
			Bandwidth: bandwidth * 1e9, Source: "--peak-tflops and --bandwidth"}
		if !given(fs, "peak-tflops") || !given(fs, "bandwidth") {
			return nil, usagef("--peak-tflops %g --bandwidth %g: give both (e.g. --peak-tflops 989 --bandwidth 3350, an H100 SXM)", peakTFLOPS, bandwidth)
		}
		if err := r.Check(); err != nil {
			var ae *cuda.ArgError
			if !errors.As(err, &ae) {
				return nil, err
			}
			return nil, usagef("--peak-tflops %g --bandwidth %g: %s (valid: --peak-tflops %g to %g, --bandwidth %g to %g GB/s)", peakTFLOPS, bandwidth,
				ae.Detail(), cuda.MinPeakFLOPS/1e12, cuda.MaxPeakFLOPS/1e12, cuda.MinBandwidth/1e9, cuda.MaxBandwidth/1e9)
		}
		return &r, nil
	case gpu == "none":
		return nil, nil
	case gpu == "host":
		// This machine's CPU, its limits timed now (bench.HostCard).
		d, err := host.New(host.Options{})
		if err != nil {
			return nil, err
		}
		defer d.Close()
		r, err := bench.HostCard(d)
		if err != nil {
			return nil, err
		}
		return &r, nil
	}
	g, ok := cuda.GPUByKey(gpu)
	if !ok {
		return nil, usagef("--gpu %q: unknown card (valid: %s, none; or --peak-tflops and --bandwidth)", gpu, cuda.GPUKeys())
	}
	return &g.Roofline, nil
}
