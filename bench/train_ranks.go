package bench

// A training run over in-process ranks: every rank's records, memory and
// traffic.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"trainmem/model"
	"trainmem/model/files"
	"trainmem/train"
	"trainmem/zero"
)

// TrainRanksReport is what a run over ranks leaves: the mean loss and step
// time over the ranks, first and last, and every rank's last step.
type TrainRanksReport struct {
	Setup               model.Setup
	Setting             zero.Setting
	Device, Dataset     string
	Steps               int
	FirstLoss, LastLoss float64 // the ranks' mean
	MeanStepMs          float64 // over the steps after the first (the first alone for one step) and the ranks
	Ranks               []zero.RankResult
	// Interrupted is set when the ranks stopped before the last step; Stop
	// says which rank asked first and why (this process's own when the
	// signal came here).
	Interrupted bool
	Stop        *zero.StopError
	// Engine is what moved the data.
	Engine zero.Backend
}

// Signalled is a stop cause that a signal made (the command line's): its
// number travels to the other ranks with the stop.
type Signalled interface{ SignalNumber() int }

// stopOf is this rank's reason to stop after step (of steps): a failed
// write, or ctx ended before the last step; nil to go on.
func stopOf(ctx context.Context, rank, step, steps int, failed error) *zero.StopError {
	switch {
	case failed != nil:
		return &zero.StopError{Rank: rank, Reason: failed.Error()}
	case ctx.Err() != nil && step+1 < steps:
		cause := context.Cause(ctx)
		st := &zero.StopError{Rank: rank, Reason: cause.Error()}
		var sig Signalled
		if errors.As(cause, &sig) {
			st.Signal = sig.SignalNumber()
		}
		return st
	}
	return nil
}

// rankRecord is one rank's record of a step as --out holds it: a "rank"
// field first, then the train.Record's own (which marshals itself).
func rankRecord(rank int, rec train.Record) ([]byte, error) {
	b, err := json.Marshal(rec)
	if err != nil || len(b) < 2 || b[0] != '{' {
		return nil, fmt.Errorf("bench: encoding rank %d's record of step %d: %v", rank, rec.Step, err)
	}
	return append([]byte(fmt.Sprintf(`{"rank":%d,`, rank)), b[1:]...), nil
}

// TrainRanks trains o.Setup under o.Setting over o.Setup.Ranks ranks, in this
// process or one a process (see Where): rank r takes the r-th of every N
// micro-batches of the data's stream. Each step writes one record per rank
// to o.Out (a "rank" field beside train's record; over processes rank 0
// gathers them and alone writes the file); the weights, assembled from
// every rank's pieces, go to o.Save at the end. Over processes the report
// is rank 0's; the other ranks' holds their setup only.
func TrainRanks(ctx context.Context, where Where, o Options) (*TrainRanksReport, error) {
	set := o.Setting
	if err := o.Setup.Err(); err != nil {
		return nil, err
	}
	s := o.Setup.Setup()
	if o.Steps <= 0 {
		return nil, fmt.Errorf("bench: steps must be a positive integer, got %d", o.Steps)
	}
	root, save := where.Root(), o.Save != ""
	if !root {
		o.Out, o.Save, o.Progress = "", "", nil // rank 0's
	}
	if err := o.Check(); err != nil {
		return nil, err
	}
	g, devs, closeDevs, err := where.open(s.Ranks)
	defer closeDevs()
	if err != nil {
		return nil, err
	}
	if devs[0].Computes() {
		if err := where.checkFits(devs, o.Setup, set); err != nil {
			return nil, err
		}
	}
	batches, err := train.OpenBatches(devs[0], o.Data, s, o.Seed)
	if err != nil {
		return nil, err
	}
	defer batches.Close()
	var init []float32
	switch {
	case o.Load != "":
		if init, err = model.LoadCheckpoint(o.Load, s.Model); err != nil {
			return nil, err
		}
	case devs[0].Computes():
		init = model.InitParams(s.Model, o.Seed)
	}
	rep := &TrainRanksReport{Setup: s, Setting: set, Device: devs[0].Name(), Dataset: fmt.Sprintf("%s (%s tokens)", batches.Source, model.Comma(batches.Tokens)), Engine: where.Engine()}
	rank := 0
	if where.Link != nil {
		rank = where.Link.Rank()
	}
	var out *files.Lines
	if o.Out != "" {
		out = files.CreateLines(o.Out)
	}
	bar := train.NewProgress(o.Progress, o.Steps)
	var outErr error
	var steady float64
	errStopped := errors.New("stopped")
	opts := train.Options{Optimizer: train.DefaultOptimizer(s.Optimizer).WithLR(o.LR)}
	var saved []float32
	var saveErr error
	mine, err := zero.Run(g, o.Setup, set, opts, init, o.Steps, where.stream(batches, s.Ranks),
		func(step int, mine []train.Record, _ error) error {
			recs, err := zero.Gather(g, mine)
			if err != nil {
				return err
			}
			rep.Steps++
			if !root {
				return rep.stopping(g, stopOf(ctx, rank, step, o.Steps, nil), nil, errStopped)
			}
			mean, ms := 0.0, 0.0
			for r, rec := range recs {
				mean += rec.Loss / float64(s.Ranks)
				ms += rec.StepMs / float64(s.Ranks)
				if out != nil && outErr == nil {
					b, jerr := rankRecord(r, rec)
					if outErr = jerr; outErr == nil {
						outErr = out.WriteLine(b)
					}
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
			if save && devs[0].Computes() {
				saved, saveErr = rk.Params() // on every rank: over processes they gather on rank 0
			}
		})
	if errors.Is(err, errStopped) {
		err = nil
	}
	if err == nil {
		rep.Ranks, err = zero.Gather(g, mine)
	}
	if err != nil || rep.Interrupted {
		bar.Done()
	}
	if out != nil {
		if cerr := out.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if saved != nil && rep.Steps > 0 && saveErr == nil && root {
		saveErr = model.SaveCheckpoint(o.Save, s.Model, saved)
	}
	var div *train.DivergedError
	switch {
	case errors.As(err, &div):
		return rep, err // it names its step
	case err != nil:
		return rep, fmt.Errorf("step %d: %w", rep.Steps+1, err)
	}
	return rep, saveErr
}

// stopping says whether the run stops after this step, on every rank at
// once (zero.Stopping): it stops when any rank was interrupted or failed
// to write (mine, this rank's reason). A rank's own failure is returned as
// it is; a stop, this rank's or a peer's, is stopped, with r.Stop saying
// whose and why.
func (r *TrainRanksReport) stopping(g *zero.Group, mine *zero.StopError, failed, stopped error) error {
	st, err := zero.Stopping(g, mine)
	switch {
	case err != nil:
		return err
	case failed != nil:
		return failed
	case st != nil:
		r.Interrupted, r.Stop = true, st
		return stopped
	}
	return nil
}

// WriteText writes the loss and speed over the ranks, then every rank's
// memory and traffic in the last step.
func (r *TrainRanksReport) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "data    %s\nsetting %s over %s, each on %s\nengine  %s\n", r.Dataset, r.Setting, plural(r.Setup.Ranks, "rank"), r.Device, engineText(r.Engine))
	fmt.Fprintf(w, "loss    %.4f at step 1, %.4f at step %d (the mean over the ranks)\n", r.FirstLoss, r.LastLoss, r.Steps)
	fmt.Fprintf(w, "speed   %.1f ms/step (mean over the ranks and the steps after the first)\n\n", r.MeanStepMs)
	if len(r.Ranks) == 0 {
		// The run failed before the ranks could gather their results: no
		// table (the error follows).
		return nil
	}
	fmt.Fprintln(w, "each rank's peak per category in the last step (requested bytes):")
	var states *model.States
	if !r.Setting.PS {
		if st, err := model.ZeROStates(r.Setup.Model.NumParams(), r.Setup.Precision, r.Setup.Optimizer, r.Setup.Ranks, r.Setting.Stage); err == nil {
			states = &st
		}
	}
	return writeRankTables(w, r.Setup, r.Setting, r.Ranks, states)
}

// engineText says in words what moved the ranks' data.
func engineText(engine zero.Backend) string {
	switch engine {
	case zero.Inproc:
		return "inproc (every rank in this process, the ring over shared memory)"
	case zero.TCP, zero.MPI:
		return engine.String() + " (one process a rank, the ring over " + strings.ToUpper(engine.String()) + ")"
	case zero.NCCL:
		return "nccl (NCCL's collectives between the GPUs)"
	}
	return engine.String()
}
