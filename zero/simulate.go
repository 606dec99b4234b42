package zero

import (
	"errors"
	"fmt"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/train"
)

// RankResult is what the last step of a run left on one rank: its record,
// its allocator's statistics and the bytes it sent and received in that
// step.
type RankResult struct {
	Record  train.Record
	Stats   cuda.Stats
	Traffic [NumCollectives]Traffic
}

// Simulate runs steps of s (s.Batch a rank's micro-batch, s.Ranks the
// ranks) under set on devs, one shape-only device per rank: every rank's
// schedule, collectives and allocations, nothing computed. It returns the
// last step's result per rank (the first step fills the caches; two are
// run by default). A rank that runs out of its device's memory fails the
// run with the allocator's *cuda.OutOfMemoryError, naming the rank.
func Simulate(devs []cuda.Device, s model.Setup, set Setting, steps int) ([]RankResult, error) {
	if steps <= 0 {
		steps = 2
	}
	for r, d := range devs {
		if d.Computes() {
			return nil, fmt.Errorf("zero: Simulate runs on shape-only devices; rank %d's is %s", r, d.Name())
		}
	}
	g, err := NewGroup(devs)
	if err != nil {
		return nil, err
	}
	rk, err := NewRanks(g, s, set, train.Options{})
	if err != nil {
		return nil, err
	}
	defer rk.Close()
	tokens := make([]int32, s.Batch*s.Seq) // never read
	var recs []train.Record
	var before [][NumCollectives]Traffic
	for step := range steps {
		if step == steps-1 {
			for r := range rk.Size() {
				before = append(before, rk.Comm(r).Traffic())
			}
		}
		if recs, err = rk.Step(func(int) ([]int32, []int32) { return tokens, tokens }); err != nil {
			return nil, oomFirst(err)
		}
	}
	out := make([]RankResult, rk.Size())
	for r := range out {
		out[r] = RankResult{Record: recs[r], Stats: devs[r].Stats()}
		for k, tr := range rk.Comm(r).Traffic() {
			b := before[r][k]
			out[r].Traffic[k] = Traffic{Calls: tr.Calls - b.Calls, SentBytes: tr.SentBytes - b.SentBytes, RecvBytes: tr.RecvBytes - b.RecvBytes}
		}
	}
	return out, nil
}

// oomFirst puts a rank's out-of-memory error first: the other ranks then
// only report that it left.
func oomFirst(err error) error {
	var oom *cuda.OutOfMemoryError
	if errors.As(err, &oom) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				if errors.As(e, &oom) {
					return e
				}
			}
		}
	}
	return err
}
