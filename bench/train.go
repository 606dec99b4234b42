package bench

// The train report: a training run's loss, speed and memory.

import (
	"context"
	"fmt"
	"io"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/train"
)

// TrainReport is a run's summary: the setup, the device and what the steps
// left.
type TrainReport struct {
	Setup  model.Setup
	Device string
	// ShapeOnly is set when the device computes nothing (cuda.Device's
	// Computes): the report says so.
	ShapeOnly bool
	Result    *train.RunResult
}

// Train runs o on dev, one rank (train.Run of o's run options); the report
// holds the steps that finished even when the error is set (a diverged or
// interrupted run).
func Train(ctx context.Context, dev cuda.Device, o Options) (*TrainReport, error) {
	res, err := train.Run(ctx, dev, o.RunOptions)
	if res == nil {
		return nil, err
	}
	return &TrainReport{Setup: o.Setup.Setup(), Device: dev.Name(), ShapeOnly: !dev.Computes(), Result: res}, err
}

// WriteHeader writes the model, the setup and the device of a run, the
// lines train and simulate start with.
func WriteHeader(w io.Writer, s model.Setup, device string) {
	fmt.Fprintf(w, "model   %s\nsetup   %s\ndevice  %s\n", s.Model, Describe(s), device)
}

// WriteText writes the loss, the speed and the memory table of the run.
func (r *TrainReport) WriteText(w io.Writer) error {
	res := r.Result
	first, last := res.First, res.Last
	// The first step pays for filling the allocator's cache: the speed
	// leaves it out when there are others.
	ms, tps := res.Mean()
	fmt.Fprintf(w, "data    %s\nsched   %s\n", res.Dataset, res.Schedule)
	fmt.Fprintf(w, "loss    %.4f at step 1, %.4f at step %d\n", first.Loss, last.Loss, last.Step)
	over := fmt.Sprintf("mean over steps 2..%d", last.Step)
	if res.Steps <= 1 {
		over = "step 1 alone, which fills the allocator's cache"
	}
	fmt.Fprintf(w, "speed   %.1f ms/step, %.0f tokens/s (%s)\n\n", ms, tps, over)
	fmt.Fprintln(w, "where the memory went (allocator bytes, 512-byte blocks):")
	if err := train.WriteMemoryTable(w, res.Stats); err != nil {
		return err
	}
	if r.ShapeOnly {
		fmt.Fprintln(w, "(shape-only device: nothing was computed)")
	}
	return nil
}
