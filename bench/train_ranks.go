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
	"trainmem/train"
	"trainmem/zero"
)

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

// stopping says whether the run stops after this step, on every rank at
// once (zero.Stopping): it stops when any rank was interrupted or failed
// to write (mine, this rank's reason). A rank's own failure is returned as
// it is; a stop, this rank's or a peer's, is stopped, with r.Stop saying
// whose and why.
func (r *TrainReport) stopping(g *zero.Group, mine *zero.StopError, failed, stopped error) error {
	st, err := zero.Stopping(g, mine)
	switch {
	case err != nil:
		return err
	case failed != nil:
		return failed
	case st != nil:
		r.Result.Interrupted, r.Stop = true, st
		return stopped
	}
	return nil
}

// writeRanks is WriteText over ranks: the loss and speed over the ranks,
// then every rank's memory and traffic in the last step.
func (r *TrainReport) writeRanks(w io.Writer) error {
	fmt.Fprintf(w, "data    %s\nsetting %s over %s, each on %s\nengine  %s\n", r.Result.Dataset, r.Setting, ranksText(r.Setup), r.Device, engineText(r.Engine))
	fmt.Fprintf(w, "loss    %.4f at step 1, %.4f at step %d (the mean over the ranks)\n", r.FirstLoss, r.LastLoss, r.Result.Steps)
	fmt.Fprintf(w, "speed   %.1f ms/step (mean over the ranks and the steps after the first)\n\n", r.MeanStepMs)
	if len(r.Ranks) == 0 {
		// The run failed before the ranks could gather their results: no
		// table (the error follows).
		return nil
	}
	fmt.Fprintf(w, "the last step, %s:\n", rankPeaks)
	var states *model.States
	if !r.Setting.PS {
		if st, err := r.Setup.RankStates(rankParams(r.Setup), r.Setting.Stage); err == nil {
			states = &st
		}
	}
	if err := writeRankTables(w, r.Setup, r.Setting, r.Ranks, states, true); err != nil {
		return err
	}
	writeOffload(w, r.Setup, measuredLabel(r.ShapeOnly)+" rank 0", r.Ranks[0].Record.Offload, nil)
	return nil
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
