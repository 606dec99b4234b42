package main

// trainmem fit: what fits in a card of a given size. Without --batch: the
// largest micro-batch per rank for each checkpoint policy and ZeRO stage.
// With --batch (or --params, which has no activations): the fewest
// data-parallel ranks per policy and stage, and the lowest stage that fits
// at --ranks. With --gpus: the smallest tensor × pipeline layout of that
// many GPUs whose every rank fits, by simulation beside the formula. Every
// answer is a search over the estimate itself, and the micro-batch and
// layout answers over the simulation too.

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
that fits at --ranks, and the fewest ranks by DeepSpeed's estimate_zero2/3
(each offload row) and Megatron-LM's theoretical memory. With --params
(model states only): the fewest ranks per stage. 0 or "-" means nothing fits, and the notes say what alone is
already too large. With --gpus G: every layout tp × pp × dp = G (tp
dividing the heads, pp at most the layers) at --batch, --checkpoint and
--zero, each simulated rank by rank on a card of --memory, and the
smallest tp × pp that fits by the simulation and by the formula. With
--method (full, lora, qlora or all): the fine-tuner's question, each way
of fine-tuning the model with and without full checkpointing, with the
optimizer and its 8-bit form: the largest micro-batch at --seq by the
simulation and the formula, and the smallest card class that holds
micro-batch 1 (LoRA at r 16, QLoRA at r 64, on every linear layer, unless
--lora-rank and --lora-targets say otherwise).

example: trainmem fit --preset gpt2-xl --seq 1024 --precision bf16 --ranks 8 --memory 80GiB
example: trainmem fit --preset 6b --seq 2048 --precision bf16 --checkpoint selective --zero 1 --gpus 64 --memory 24GiB
With --objective time: every layout of --gpus and every micro-batch of
--global-batch whose every rank fits by simulation, ranked by the step's
time by formula on --gpu over --network (as trainmem estimate --gpu), the
fastest first, with their MFU and memory headroom, and why the others lose.

example: trainmem fit --preset llama2-7b --seq 2048 --precision bf16 --attention flash --method all --memory 24GiB
example: trainmem fit --preset llama3-8b --seq 8192 --precision bf16 --attention flash --checkpoint full --gpus 8 --memory 80GiB --objective time --global-batch 128 --gpu h100`

func runFit(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fit", flag.ContinueOnError)
	sf := addSetupFlags(fs, setupOptions{batch: 1, batchHelp: "micro-batch per rank, `b`: with it, fit finds the fewest ranks for it (default: fit searches the largest micro-batch)"})
	memory := int64(-1)
	parsedVar(fs, &memory, "memory", "memory a rank has, e.g. 80GiB, 24GB, 1.5e10 (required)", parseMemory)
	var formula model.Formula
	formulaVar(fs, &formula, "to fit by")
	gpus := 0
	fs.IntVar(&gpus, "gpus", 0, "GPUs, `G`: the smallest tensor × pipeline layout of G GPUs whose every rank fits --memory")
	var method bench.Method
	parsedVar(fs, &method, "method", "fine-tuning methods to compare ("+bench.MethodList()+"): the largest micro-batch and smallest card, with and without checkpointing and 8-bit states", bench.ParseMethod)
	cf := addClusterFlags(fs)
	format := newFormatFlag(fs, "text", "json", "csv")
	objective := fs.String("objective", "memory", "with --gpus: memory (the smallest tp × pp that fits) or time (every layout and micro-batch that fits, fastest first)")
	global := 0
	fs.IntVar(&global, "global-batch", 0, "with --objective time: the sequences a step, `B` (default: one a GPU)")
	card := addCardFlags(fs, "h100", "with --objective time, the card")
	network := fs.String("network", "", "with --objective time, the system the GPUs sit on: "+zero.NetworkNames()+", or nvlink=GB/s,net=GB/s (default: a DGX of the card)")
	if stop, err := parseFlags(fs, args, stderr, fitSynopsis); stop {
		return err
	}
	switch *objective {
	case "memory":
		for _, f := range []string{"global-batch", "gpu", "peak-tflops", "bandwidth", "network"} {
			if given(fs, f) {
				return usagef("--%s times a layout: give it with --gpus and --objective time", f)
			}
		}
	case "time":
		if !sf.set("gpus") {
			return usagef("--objective time ranks the layouts of --gpus G: give --gpus")
		}
		if sf.set("batch") {
			return usagef("--batch with --objective time: fit searches each layout's micro-batches itself; give the step's sequences with --global-batch")
		}
	default:
		return usagef("--objective %q: unknown (valid: memory, time)", *objective)
	}
	if memory < 0 {
		return usagef("--memory is required (e.g. --memory 80GiB, --memory 24GB)")
	}
	if sf.set("gpus") {
		if gpus < 1 || gpus > model.MaxFitRanks {
			return usagef("--gpus %d: out of range (valid: 1 to %d)", gpus, model.MaxFitRanks)
		}
		for _, f := range []string{"ranks", "tp", "pp", "params"} {
			if sf.set(f) {
				return usagef("--%s with --gpus: fit --gpus searches the layouts itself (tp × pp × dp = --gpus); drop --%s", f, f)
			}
		}
	}
	if sf.set("method") {
		for _, f := range []string{"gpus", "batch", "checkpoint", "quantize", "freeze", "params"} {
			if sf.set(f) {
				return usagef("--%s with --method: fit --method searches the largest micro-batch of each method itself, with and without full checkpointing; drop --%s", f, f)
			}
		}
	}
	c, err := sf.setup()
	if err != nil {
		return err
	}
	sf.noteIgnored(stderr)
	if sf.set("method") {
		rank := 0
		if sf.set("lora-rank") {
			rank = sf.loraRank
		}
		rep, err := bench.FitMethods(c, memory, formula, method, rank, sf.loraTargets, stderr)
		if err != nil {
			return badSetup(err)
		}
		return writeReport(stdout, format.v, rep)
	}
	if *objective == "time" {
		roofline, err := card.roofline(fs)
		if err != nil {
			return err
		}
		if roofline == nil {
			return usagef("--objective time needs a card to time the step: give --gpu (not none) or --peak-tflops and --bandwidth")
		}
		nw := zero.DefaultNetwork(*card.gpu)
		if *network != "" {
			if nw, err = zero.ParseNetwork(*network); err != nil {
				return usagef("--network: %v", err)
			}
		}
		if given(fs, "gpus-per-node") {
			if cf.c.GPUsPerNode < 1 {
				return usagef("--gpus-per-node %d: must be a positive integer", cf.c.GPUsPerNode)
			}
			nw.GPUsPerNode = cf.c.GPUsPerNode
		}
		if !given(fs, "global-batch") {
			global = gpus
		}
		if global < 1 {
			return usagef("--global-batch %d: must be a positive integer", global)
		}
		rep, err := bench.FitTime(c, gpus, global, memory, zero.TimeOptions{Card: *roofline, Network: nw}, stderr)
		if err != nil {
			return badSetup(err)
		}
		return writeReport(stdout, format.v, rep)
	}
	if sf.set("gpus") {
		rep, err := bench.FitLayouts(c, gpus, memory, formula, stderr)
		if err != nil {
			return badSetup(err)
		}
		return writeReport(stdout, format.v, rep)
	}
	if given(fs, "gpus-per-node") {
		return usagef("--gpus-per-node: fit answers by each estimator's figure a GPU, which no node split changes (DeepSpeed's CPU memory a node is 'trainmem estimate' and 'trainmem validate')")
	}
	cl, err := cf.cluster(c)
	if err != nil {
		return err
	}
	rep, err := bench.Fit(c, memory, formula, sf.set("batch"), cl, stderr)
	if err != nil {
		return badSetup(err)
	}
	return writeReport(stdout, format.v, rep)
}
