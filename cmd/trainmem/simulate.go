package main

// trainmem simulate: the real training schedule on the shape-only device.

import (
	"context"
	"flag"
	"fmt"
	"io"

	"trainmem/bench"
	"trainmem/cuda"
	"trainmem/cuda/alloc"
	"trainmem/cuda/shape"
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

example: trainmem simulate --preset gpt2-xl --batch 32 --seq 1000 --precision fp16 --memory 80GiB`

func runSimulate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	sf := addSetupFlags(fs, setupOptions{batch: 1, ranks: true})
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
	if stop, err := parseFlags(fs, args, stderr, simulateSynopsis); stop {
		return err
	}
	if steps <= 0 {
		return usagef("--steps %d: must be a positive integer", steps)
	}
	s, err := sf.setup()
	if err != nil {
		return err
	}
	set, err := sf.setting()
	if err != nil {
		return err
	}
	if format.v == "summary" && (*sweep != "" || s.Ranks > 1 || set.PS) {
		return usagef("--format summary is one device's memory summary: give it without --sweep, --ranks and --data-parallel")
	}
	ranked := s.Ranks > 1 || set.PS
	switch {
	case trace.given() && *sweep != "":
		return usagef("--memory-trace and --plot-timeline record one setting's step: give them without --sweep")
	case ranked:
		if err := trace.check(zero.SimulatedRanks(s.Ranks), nil, nil); err != nil {
			return err
		}
	default:
		if err := trace.check(nil, nil, nil); err != nil {
			return err
		}
	}
	switch {
	case *sweep == "zero" && s.Ranks < 2:
		return usagef("--sweep zero compares the data-parallel settings: give --ranks N of at least 2")
	case *sweep == "zero" && (sf.set("zero") || sf.ps):
		return usagef("--sweep zero runs every setting; drop --zero and --data-parallel")
	case *sweep == "zero":
		rep, err := bench.SweepStages(capacity, s, steps, sf.bucketBytes)
		if err != nil {
			return err
		}
		return writeReport(stdout, format.v, rep)
	case *sweep != "":
		return usagef("--sweep %q: unknown sweep (valid: zero)", *sweep)
	}
	if s.Ranks > 1 || set.PS {
		traces := trace.rankRecorder()
		rep, err := bench.SimulateRanks(capacity, s, set, steps, traces)
		if err != nil {
			return trace.writeRanks(stdout, traces, format.v, err)
		}
		if err := writeReport(stdout, format.v, rep); err != nil {
			return err
		}
		return trace.writeRanks(stdout, traces, format.v, nil)
	}
	dev := shape.New(capacity)
	defer dev.Close()
	rec := trace.recorder()
	rep, err := bench.Simulate(dev, capacity, s, steps, rec)
	if err != nil {
		return trace.write(stdout, rec, format.v, err)
	}
	if err := writeReport(stdout, format.v, rep); err != nil {
		return err
	}
	return trace.write(stdout, rec, format.v, nil)
}
