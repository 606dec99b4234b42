package main

// trainmem estimate: the closed-form memory of one rank, per category, with
// every formula of the literature side by side and each figure's source.

import (
	"context"
	"flag"
	"io"

	"trainmem/bench"
	"trainmem/model"
	"trainmem/zero"
)

func init() {
	register(command{
		name:    "estimate",
		summary: "memory per category from the literature's formulas (ZeRO paper, Korthikanti et al.)",
		run:     runEstimate,
	})
}

const estimateSynopsis = `Prints the memory one rank needs to train the model, per category (params,
grads, master, adam_m, adam_v, gathered, activations), from the closed-form
formulas of the literature, each with its source: model states and ZeRO
sharding (Rajbhandari et al. 2020), activations by the ZeRO paper's
12·h·b·s·L values and by Korthikanti et al. 2022's sbh·(34 + 5as/h) bytes a
layer, for the checkpoint policy, tensor and pipeline parallelism given.
Beside them, the estimators users arrive with, computed as their code
computes them: DeepSpeed's estimate_zero2/zero3 model states per GPU and
per node's CPU (every offload option; --gpus-per-node, --buffer-factor,
--largest-layer) and Megatron-LM's theoretical memory of the first
pipeline stage.
Sizes print in GB (10^9 bytes, as the articles and the ZeRO paper) and GiB
(2^30, as PyTorch); --format json and csv give exact bytes.

example: trainmem estimate --preset gpt2-xl --batch 32 --seq 1000 --precision fp16`

func runEstimate(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	sf := addSetupFlags(fs, setupOptions{batch: 1})
	cf := addClusterFlags(fs)
	var formula model.Formula
	formulaVar(fs, &formula, "counted in total_bytes")
	format := newFormatFlag(fs, "text", "json", "csv")
	card := addCardFlags(fs, "none", "a card to time the step on by formula")
	network := fs.String("network", "", "the system the ranks sit on, for the step time: "+zero.NetworkNames()+", or nvlink=GB/s,net=GB/s (default: a DGX of the card's generation)")
	if stop, err := parseFlags(fs, args, stderr, estimateSynopsis); stop {
		return err
	}
	roofline, err := card.roofline(fs)
	if err != nil {
		return err
	}
	if roofline == nil && given(fs, "network") {
		return usagef("--network %q places the ranks for the step time: give it with --gpu (or --peak-tflops and --bandwidth)", *network)
	}
	c, err := sf.setup()
	if err != nil {
		return err
	}
	cl, err := cf.cluster(c)
	if err != nil {
		return err
	}
	sf.noteIgnored(stderr)
	rep, err := bench.Estimate(c, formula, cl)
	if err != nil {
		return badSetup(err) // only a shape too large is left
	}
	if roofline != nil {
		nw := zero.DefaultNetwork(*card.gpu)
		if *network != "" {
			if nw, err = zero.ParseNetwork(*network); err != nil {
				return usagef("--network: %v", err)
			}
		}
		if cl.GPUsPerNode > 0 {
			nw.GPUsPerNode = cl.GPUsPerNode
		}
		if err := rep.AddTime(c, zero.TimeOptions{Card: *roofline, Network: nw}); err != nil {
			return badSetup(err)
		}
	}
	return writeReport(stdout, format.v, rep)
}
