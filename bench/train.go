package bench

// The train report: a training run's loss, speed and memory, over its
// ranks: one rank's as one device's run; over ranks the mean loss and
// speed, and every rank's memory and traffic.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"trainmem/model"
	"trainmem/model/files"
	"trainmem/train"
	"trainmem/zero"
)

// TrainReport is a run's summary over its ranks: the setup, the devices
// and what the steps left. One rank is one device's run.
type TrainReport struct {
	Setup   model.Setup
	Setting zero.Setting
	Device  string // each rank's device
	// ShapeOnly is set when the devices compute nothing (cuda.Device's
	// Computes): the report says so.
	ShapeOnly bool
	// Engine is what moved the ranks' data.
	Engine zero.Backend
	// Result is the run's summary: its finished steps (rank 0's records
	// over ranks: each rank's are in Out), the first and last, the mean
	// speed, the allocator statistics after the run (rank 0's), its data
	// and schedule, and whether it was interrupted.
	Result *train.RunResult
	// Over ranks: the ranks' mean loss at the first and the last step, the
	// mean step time over the ranks and the steps after the first (the
	// first alone for one step), every rank's last step, and the agreed
	// stop of an interrupted run (which rank asked first, and why; this
	// process's own when the signal came here).
	FirstLoss, LastLoss, MeanStepMs float64
	Ranks                           []zero.RankResult
	Stop                            *zero.StopError
}

// Train trains o.Setup under o.Setting over its ranks where says, in this
// process or one a process, one rank being one device's run: it checks
// every path first (files.Check), refuses a run its machine cannot hold
// before anything is allocated, loads the data (rank r takes the r-th of
// every N micro-batches of the stream), builds and compiles each rank's
// trainer, initialises or loads the weights and runs o.Steps steps,
// stopping cleanly after the step in flight when ctx ends (over processes
// every rank stops after the same step). Each step writes its record to
// o.Out (one rank's as train's record; over ranks one a rank, a "rank"
// field first, gathered on rank 0, which alone writes the file) and to
// o.OnRecord (every rank's, in rank order); the weights, assembled from
// every rank's pieces, go to o.Save at the end, also after a run that
// diverged or failed once a step finished. The report holds the finished
// steps even when the error is set. Over processes the report is rank 0's;
// the other ranks' holds their setup only.
func Train(ctx context.Context, where Where, o Options) (*TrainReport, error) {
	set := o.Setting
	if err := o.Setup.Err(); err != nil {
		return nil, err
	}
	s := o.Setup.Setup()
	lay := zero.LayoutOf(s)
	one := lay.Size() == 1
	switch {
	case o.Steps <= 0:
		return nil, fmt.Errorf("train: steps must be a positive integer, got %d", o.Steps)
	case o.Trace != nil:
		return nil, errors.New("bench: Train records its ranks' traces in Where.Traces, not in Options.Trace")
	case o.Profile != nil && !one:
		return nil, errors.New("bench: a profile is one device's: give it without ranks")
	}
	root, save := where.Root(), o.Save != "" || o.SaveAdapter != ""
	if !root {
		o.Out, o.Save, o.SaveAdapter, o.Progress = "", "", "", nil // rank 0's
	}
	if err := o.Check(); err != nil {
		return nil, err
	}
	if o.Load != "" {
		if err := train.CheckHostFits(o.Load, s.Model); err != nil {
			return nil, err
		}
	}
	g, devs, closeDevs, err := where.open(lay.Size())
	defer closeDevs()
	if err != nil {
		return nil, err
	}
	dev := devs[0]
	rep := &TrainReport{Setup: s, Setting: set, Device: dev.Name(), ShapeOnly: !dev.Computes(), Engine: where.Engine(),
		Result: &train.RunResult{Device: dev.Name()}}
	batches, init, err := where.prepare(devs, o.Setup, set, o.Data, o.Load, o.LoadAdapter, o.Seed)
	if err != nil {
		return rep, err
	}
	defer batches.Close()
	rep.Result.Dataset = fmt.Sprintf("%s (%s tokens)", batches.Source, model.Comma(batches.Tokens))
	rank := 0
	if where.Link != nil {
		rank = where.Link.Rank()
	}
	// Stopped before the first step (a signal while the data or the
	// weights were loading): every rank agrees on it in one round, so a
	// peer stops with the signal too instead of a broken link's error
	// (SIGTERM to rank 1 here gave exits 1 and 143).
	errStopped := errors.New("stopped")
	if err := rep.stopping(g, stopOf(ctx, rank, -1, o.Steps, nil), nil, errStopped); err != nil {
		if errors.Is(err, errStopped) {
			return rep, nil
		}
		return rep, err
	}
	var out *files.Lines
	if o.Out != "" {
		out = files.CreateLines(o.Out)
	}
	bar := train.NewProgress(o.Progress, o.Steps)
	var outErr error
	var steady float64
	opts, err := where.trainOptions(s, o.LR, o.Profile)
	if err != nil {
		return nil, err
	}
	var saved []float32
	var saveErr error
	mine, err := zero.Run(g, o.Setup, set, opts, init, o.Steps, where.stream(batches, lay, o.Setup.Setup().MicroBatches),
		func(step int, mine []train.Record, _ error) error {
			recs, err := zero.Gather(g, mine)
			if err != nil {
				return err
			}
			if !root {
				rep.Result.Add(mine[0])
				return rep.stopping(g, stopOf(ctx, rank, step, o.Steps, nil), nil, errStopped)
			}
			rep.Result.Add(recs[0])
			mean, ms := 0.0, 0.0
			for r, rec := range recs {
				mean += rec.Loss / float64(len(recs))
				ms += rec.StepMs / float64(len(recs))
				if out != nil && outErr == nil {
					outErr = writeRecord(out, r, one, rec)
				}
				if o.OnRecord != nil {
					o.OnRecord(rec)
				}
			}
			if step == 0 {
				rep.FirstLoss, rep.MeanStepMs = mean, ms
			} else {
				steady += ms
				rep.MeanStepMs = steady / float64(step)
			}
			rep.LastLoss = mean
			bar.Update(recs[0])
			return rep.stopping(g, stopOf(ctx, rank, step, o.Steps, outErr), outErr, errStopped)
		}, func(rk *zero.Ranks) {
			rep.Result.Schedule = rk.Trainer(0).Schedule().Summary()
			if save && dev.Computes() {
				saved, saveErr = rk.Params() // on every rank: over processes they gather on rank 0
			}
		})
	switch {
	case errors.Is(err, errStopped):
		err = nil
	case outErr != nil && errors.Is(err, outErr):
		err = nil // outErr says it
	}
	var div *train.DivergedError
	if err == nil || where.Link == nil && errors.As(err, &div) {
		rep.Ranks, _ = zero.Gather(g, mine) // in one process the members' own
	}
	if err != nil || outErr != nil || rep.Result.Interrupted {
		bar.Done()
	}
	rep.Result.Stats = dev.Stats()
	if out != nil {
		if cerr := out.Close(); cerr != nil && outErr == nil {
			outErr = cerr
		}
	}
	if saved != nil && rep.Result.Steps > 0 && saveErr == nil && root {
		saveErr = saveWeights(o.RunOptions, s.Model, saved)
	}
	switch {
	case errors.As(err, &div):
		err = div // it names its step
	case err != nil:
		err = fmt.Errorf("step %d: %w", rep.Result.Steps+1, unwrapRankOf(one, err))
	case outErr != nil:
		err = outErr
	default:
		err = saveErr
	}
	if saveErr != nil && err != saveErr {
		err = fmt.Errorf("%w (and the weights were not saved: %v)", err, saveErr)
	}
	return rep, err
}

// unwrapRankOf is a one-rank run's error as one device's (unwrapRank),
// and a run's over ranks as it is.
func unwrapRankOf(one bool, err error) error {
	if one {
		return unwrapRank(err)
	}
	return err
}

// writeRecord appends rank r's record of a step to out: one rank's as
// train's record marshals itself, a rank's among several with a "rank"
// field first.
func writeRecord(out *files.Lines, r int, one bool, rec train.Record) error {
	var b []byte
	var err error
	if one {
		if b, err = json.Marshal(rec); err != nil {
			return fmt.Errorf("train: encoding the record of step %d: %w", rec.Step, err)
		}
	} else if b, err = rankRecord(r, rec); err != nil {
		return err
	}
	return out.WriteLine(b)
}

// WriteHeader writes the model, the setup and the device of a run, the
// lines train and simulate start with.
func WriteHeader(w io.Writer, s model.Setup, device string) {
	fmt.Fprintf(w, "model   %s\nsetup   %s\ndevice  %s\n", s.Model, Describe(s), device)
}

// WriteText writes the loss, the speed and the memory table of the run.
func (r *TrainReport) WriteText(w io.Writer) error {
	if zero.LayoutOf(r.Setup).Size() > 1 {
		return r.writeRanks(w)
	}
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
	writeOffload(w, r.Setup, measuredLabel(r.ShapeOnly), res.Last.Offload, nil)
	if r.ShapeOnly {
		fmt.Fprintln(w, "(shape-only device: nothing was computed)")
	}
	return nil
}

// measuredLabel is a train run's column: measured, or simulated on a
// shape-only device.
func measuredLabel(shapeOnly bool) string {
	if shapeOnly {
		return "simulated"
	}
	return "measured"
}

// saveWeights writes a run's weights, params (the whole table, flat):
// o.Save as a checkpoint (a LoRA merged into its base, as PEFT's
// merge_and_unload), o.SaveAdapter as PEFT's adapter directory.
func saveWeights(o train.RunOptions, c model.Config, params []float32) error {
	if o.SaveAdapter != "" {
		if err := model.WriteAdapter(o.SaveAdapter, c, params); err != nil {
			return err
		}
	}
	if o.Save == "" {
		return nil
	}
	if c.LoRA.On() {
		base, merged, err := model.MergeLoRA(c, params)
		if err != nil {
			return err
		}
		c, params = base, merged
	}
	return model.SaveCheckpoint(o.Save, c, params)
}
