package train

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/train/data"
)

// RunOptions describe a training run.
type RunOptions struct {
	Setup model.Setup // model, batch, sequence, precision, optimizer, checkpoint policy
	Steps int
	// LR overrides the optimizer's default learning rate when > 0.
	LR   float64
	Seed uint64 // initialisation and batch order
	// Data is a token or text file; empty means the built-in corpus.
	Data string
	// Out receives one JSON record per step (JSON Lines), written
	// atomically when the run ends.
	Out string
	// Load starts from an llm.c GPT-2 checkpoint; Save writes one at the end
	// (atomically).
	Load, Save string
	// Progress receives the progress bar; nil shows none.
	Progress io.Writer
}

// RunResult is what a run leaves: the per-step records, the final allocator
// statistics and where the run happened.
type RunResult struct {
	Device   string
	Dataset  string
	Schedule string
	Records  []Record
	Stats    cuda.Stats
	// Interrupted is set when the context ended the run early; the records
	// and files hold the steps that finished.
	Interrupted bool
}

// Run trains on dev: it loads the data, builds and compiles the model,
// initialises or loads the weights and runs the steps, stopping early (and
// cleanly) when ctx ends.
func Run(ctx context.Context, dev cuda.Device, o RunOptions) (*RunResult, error) {
	s := o.Setup
	if o.Steps <= 0 {
		return nil, fmt.Errorf("train: steps must be a positive integer, got %d", o.Steps)
	}
	var ds *data.Dataset
	var err error
	if o.Data == "" {
		ds, err = data.DefaultDataset(s.Model.Vocab)
	} else {
		ds, err = data.Load(o.Data, s.Model.Vocab)
	}
	if err != nil {
		return nil, err
	}
	loader, err := data.NewLoader(ds, s.Batch, s.Seq, o.Seed)
	if err != nil {
		return nil, err
	}
	var params []float32
	if o.Load != "" {
		if params, err = model.LoadCheckpoint(o.Load, s.Model); err != nil {
			return nil, err
		}
	} else if dev.Computes() {
		params = model.InitParams(s.Model, o.Seed)
	}
	opt := DefaultOptimizer(s.Optimizer)
	if o.LR > 0 {
		opt.LR = float32(o.LR)
	}
	tr, err := New(dev, s.Model, s.Batch, s.Seq, Options{Precision: s.Precision, Checkpoint: s.Checkpoint, Optimizer: opt})
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	if params != nil {
		if err := tr.SetParams(params); err != nil {
			return nil, err
		}
	}

	res := &RunResult{Device: dev.Name(), Dataset: fmt.Sprintf("%s (%s tokens)", ds.Source, model.Comma(int64(len(ds.Tokens)))), Schedule: tr.Schedule().Summary()}
	bar := NewProgress(o.Progress, o.Steps)
	tokens, targets := make([]int32, s.Batch*s.Seq), make([]int32, s.Batch*s.Seq)
	var stepErr error
	for range o.Steps {
		if ctx.Err() != nil {
			res.Interrupted = true
			break
		}
		if err := loader.Next(tokens, targets); err != nil {
			stepErr = err
			break
		}
		r, err := tr.Step(tokens, targets)
		if err != nil {
			stepErr = err
			break
		}
		res.Records = append(res.Records, r)
		bar.Update(r)
	}
	if stepErr != nil || res.Interrupted {
		bar.Done()
	}
	res.Stats = dev.Stats()

	// Keep what finished, even when a step failed or the run was stopped.
	if o.Out != "" && len(res.Records) > 0 {
		if err := WriteRecords(o.Out, res.Records); err != nil {
			return res, err
		}
	}
	if o.Save != "" && dev.Computes() && len(res.Records) > 0 {
		p, err := tr.Params()
		if err != nil {
			return res, err
		}
		if err := model.SaveCheckpoint(o.Save, s.Model, p); err != nil {
			return res, err
		}
	}
	if stepErr != nil {
		return res, fmt.Errorf("step %d: %w", len(res.Records)+1, stepErr)
	}
	return res, nil
}

// WriteRecords writes records as JSON Lines to path, atomically.
func WriteRecords(path string, records []Record) error {
	return model.WriteFileAtomic(path, func(w io.Writer) error {
		bw := bufio.NewWriter(w)
		enc := json.NewEncoder(bw)
		for _, r := range records {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return bw.Flush()
	})
}
