package main

// trainmem fit: what fits in a card of a given size. Without --batch: the
// largest micro-batch per rank for each checkpoint policy and ZeRO stage.
// With --batch (or --params, which has no activations): the fewest
// data-parallel ranks per policy and stage, and the lowest stage that fits
// at --ranks. Every answer is a search over the estimate itself.

import (
	"context"
	"flag"
	"io"

	"trainmem/bench"
	"trainmem/model"
)

func init() {
	register(command{
		name:    "fit",
		summary: "the largest micro-batch, fewest ranks or lowest ZeRO stage that fit in --memory",
		run:     runFit,
	})
}

const fitSynopsis = `Searches the estimate for what fits in --memory bytes a rank. Without
--batch: the largest micro-batch per rank for each checkpoint policy (none,
selective, sqrt, full, and --checkpoint if it is another) and each ZeRO
stage, at --ranks data-parallel ranks. With --batch: the fewest
data-parallel ranks for each policy and stage, and the lowest ZeRO stage
that fits at --ranks. With --params (model states only): the fewest ranks
per stage. 0 or "-" means nothing fits, and the notes say what alone is
already too large.

example: trainmem fit --preset gpt2-xl --seq 1024 --precision bf16 --ranks 8 --memory 80GiB`

func runFit(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fit", flag.ContinueOnError)
	sf := addSetupFlags(fs, setupOptions{parallel: true, batch: 1, batchHelp: "micro-batch per rank, `b`: with it, fit finds the fewest ranks for it (default: fit searches the largest micro-batch)"})
	memory := int64(-1)
	fs.Func("memory", "memory a rank has, e.g. 80GiB, 24GB, 1.5e10 (required)", func(s string) error {
		n, err := parseMemory(s)
		memory = n
		return err
	})
	var formula model.Formula
	formulaVar(fs, &formula, "to fit by")
	format := newFormatFlag(fs, "text", "json", "csv")
	if stop, err := parseFlags(fs, args, stderr, fitSynopsis); stop {
		return err
	}
	if memory < 0 {
		return usagef("--memory is required (e.g. --memory 80GiB, --memory 24GB)")
	}
	c, err := sf.setup()
	if err != nil {
		return err
	}
	sf.noteIgnored(stderr)
	rep, err := bench.Fit(c, memory, formula, sf.set("batch"), stderr)
	if err != nil {
		return badSetup(err)
	}
	return writeReport(stdout, format.v, rep)
}
