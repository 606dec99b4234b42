package train

import (
	"fmt"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/model/files"
	"trainmem/train/data"
)

// Batches is where a run's batches come from, the same for train and for
// validate's measured runs: a loader over the data file, or over the
// built-in corpus when none is given. On a device that computes nothing the
// values are never read, so no data is opened and every batch is zero
// tokens.
type Batches struct {
	// Source says what the batches come from, for reports: the file, the
	// built-in corpus ("default corpus") or "zero tokens"; Tokens is the
	// data's length (0 for zero tokens).
	Source string
	Tokens int64

	loader          *data.Loader
	ds              *data.Dataset
	tokens, targets []int32
}

// OpenBatches opens the batches of setup s on dev from path ("" is the
// built-in corpus), in an order drawn from seed. Data that the model's
// vocabulary cannot hold, or shorter than one batch, is an error that says
// so.
func OpenBatches(dev cuda.Device, path string, s model.Setup, seed uint64) (*Batches, error) {
	b := &Batches{Source: "zero tokens"}
	if !dev.Computes() {
		// No buffer that grows with the batch: the device stores nothing,
		// and a step on it takes nil tokens.
		return b, nil
	}
	n := s.Batch * s.Seq
	b.tokens, b.targets = make([]int32, n), make([]int32, n)
	var err error
	if path == "" {
		if b.ds, err = data.DefaultDataset(s.Model.Vocab); err != nil {
			return nil, &files.InputError{Path: "the built-in corpus", Err: fmt.Errorf("train: the built-in corpus is text, one token per byte, and a vocabulary of %d cannot hold its bytes (%v): give --data a file whose token ids are below %d", s.Model.Vocab, err, s.Model.Vocab)}
		}
	} else {
		b.ds, err = data.Load(path, s.Model.Vocab)
	}
	if err != nil {
		return nil, err
	}
	if b.loader, err = data.NewLoader(b.ds, s.Batch, s.Seq, seed); err != nil {
		b.ds.Close()
		return nil, err
	}
	b.Source, b.Tokens = b.ds.Source, b.ds.Len()
	return b, nil
}

// Next returns the next batch's tokens and targets (B·T each, row-major),
// valid until the following call; nil on a device that computes nothing.
func (b *Batches) Next() (tokens, targets []int32, err error) {
	if b.loader != nil {
		if err := b.loader.Next(b.tokens, b.targets); err != nil {
			return nil, nil, err
		}
	}
	return b.tokens, b.targets, nil
}

// Close releases the data file.
func (b *Batches) Close() error {
	if b.ds == nil {
		return nil
	}
	return b.ds.Close()
}
