package main

// trainmem report DIR: one setup's answers as a self-contained page.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"trainmem/bench"
	"trainmem/cuda"
	"trainmem/model"
	"trainmem/model/files"
)

func init() {
	register(command{
		name:     "report",
		graceful: true,
		summary:  "one setup's answers on one self-contained page: DIR/index.html, every table also as CSV and JSON",
		run:      runReport,
	})
}

const reportSynopsis = `Writes into DIR (new or empty) one page, index.html, that answers the
setup's questions side by side: validate (the formulas, the simulation and a
measured run, every difference explained, with the step's timeline), the
checkpoint sweep (memory against step time, one timeline a policy), a batch
and a sequence sweep (activations linear in b and in s but for the
attention's s² term, each formula against the simulation), the ZeRO stage
table over --ranks ranks and a scale-up over the presets, simulated against
the formulas. Each table is also DIR/<table>.csv and DIR/<table>.json; each
figure is inline SVG with a caption saying what to look at. The page needs no
network: open it in any browser.

examples:
  trainmem report out
  trainmem report --preset gpt2 --batch 2 --seq 128 --precision bf16 --no-measure gpt2-report`

func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	opts := runSetupOptions
	opts.preset = "tiny" // report reads no checkpoint
	tf := &trainFlags{setup: addSetupFlags(fs, opts), lr: 1e-3, notes: stderr}
	var steps, ranks int
	intVar(fs, &steps, "steps", 0, "measured `steps` (default 3; the checkpoint sweep runs 7 a policy)")
	intVar(fs, &ranks, "ranks", 4, "data-parallel ranks, `N`, of the ZeRO stage table")
	noMeasure := addMeasureFlags(fs, tf)
	arg, stop, err := parseFlagsArg(fs, args, stderr, reportSynopsis, "DIR")
	if stop {
		return err
	}
	if arg == "" {
		return usagef("report writes into a directory: give DIR, new or empty (e.g. trainmem report out)")
	}
	dir := filepath.Clean(arg)
	if steps <= 0 && given(fs, "steps") {
		return usagef("--steps %d: must be a positive integer (default 3; the checkpoint sweep runs 7 a policy)", steps)
	}
	if ranks < 2 || ranks > 1<<20 {
		return usagef("--ranks %d: out of range (valid: 2 to %d)", ranks, 1<<20)
	}
	tf.steps = max(steps, 1)
	c, err := tf.resolve()
	if err != nil {
		return err
	}
	if off := c.Setup().Offload; off != model.OffloadNone {
		return usagef("--offload %s: the report's sweeps and stage tables measure one device each; offloading is run by 'trainmem simulate', 'trainmem train' and 'trainmem validate'", off)
	}
	if err := files.Check([]files.Path{{Flag: "--data", Name: tf.data}}, nil); err != nil {
		return err
	}
	if err := bench.CheckSiteDir(dir); err != nil {
		return err
	}
	o := bench.SiteOptions{Options: tf.options(c, stderr), Ranks: ranks}
	o.Steps = steps
	if !*noMeasure {
		o.NewDevice = func() (cuda.Device, error) { return tf.newDevice() }
	}
	site, err := bench.BuildSite(ctx, o)
	if err != nil {
		return measureErr(err)
	}
	if err := site.Write(dir); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "report written to %s: open %s in a browser (every table also as CSV and JSON beside it)\n", dir, filepath.Join(dir, "index.html"))
	return nil
}
