package model

// Fitting a setup into a memory budget: the largest micro-batch, the fewest
// data-parallel ranks, the lowest ZeRO stage. Each is a search over the
// estimate itself, never a formula solved by hand, so whatever the estimate
// counts (every term, every policy, pipeline stages) the answer honours.

import "errors"

// Search limits: the largest micro-batch and rank count the searches try.
// The micro-batch goes as far as a setup allows (MaxBatch), so the formula
// and the simulation search alike; an answer at the limit means "at least
// this many" (the memory holds more than any setup can ask for).
const (
	MaxFitBatch = MaxBatch
	MaxFitRanks = 1 << 20
)

// fits estimates s and reports whether its total by formula is at most
// memory. An estimate too large for int64 does not fit; any other error is
// the setup's and is returned.
func (s Setup) fits(memory int64, formula Formula) (bool, Estimate, error) {
	e, err := s.EstimateBy(formula)
	if errors.Is(err, ErrOverflow) {
		return false, Estimate{}, nil
	}
	if err != nil {
		return false, Estimate{}, err
	}
	return e.Total(formula) <= memory, e, nil
}

// search returns the smallest x in [1, limit] for which ok(x) holds, given
// that ok is monotone (false ... false true ... true), or 0 when none does.
// It doubles from 1 and then bisects, so small answers cost few estimates.
func search(limit int, ok func(int) (bool, error)) (int, error) {
	hi := 1
	for {
		good, err := ok(hi)
		if err != nil {
			return 0, err
		}
		if good {
			break
		}
		if hi == limit {
			return 0, nil
		}
		hi = min(2*hi, limit)
	}
	lo := hi / 2 // ok(lo) is false, or lo is 0
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		good, err := ok(mid)
		if err != nil {
			return 0, err
		}
		if good {
			hi = mid
		} else {
			lo = mid
		}
	}
	return hi, nil
}

// MaxBatch is the largest micro-batch per rank, at most MaxFitBatch, whose
// total by formula fits in memory bytes, with its estimate. It is 0 when not
// even a micro-batch of 1 fits; the estimate returned then is batch 1's, so
// the caller can say what did not fit. s.Batch is ignored.
func (s Setup) MaxBatch(memory int64, formula Formula) (int, Estimate, error) {
	s.Batch = 1
	if _, err := s.EstimateBy(formula); err != nil {
		return 0, Estimate{}, err // a shape too large even at batch 1 is the setup's error
	}
	// The largest b that fits is one below the smallest that does not.
	over, err := search(MaxFitBatch, func(b int) (bool, error) {
		t := s
		t.Batch = b
		ok, _, err := t.fits(memory, formula)
		return !ok, err
	})
	if err != nil {
		return 0, Estimate{}, err
	}
	b := MaxFitBatch
	if over > 0 {
		b = over - 1
	}
	s.Batch = max(b, 1)
	e, err := s.EstimateBy(formula)
	if err != nil && !errors.Is(err, ErrOverflow) {
		return 0, Estimate{}, err
	}
	return b, e, nil
}

// MinRanks is the fewest data-parallel ranks, at most MaxFitRanks, with
// which s (at its ZeRO stage and micro-batch) fits in memory bytes, with
// its estimate; 0 when no rank count does (then the estimate is at
// MaxFitRanks, to say what still does not fit). At ZeRO stage 0 every rank
// holds everything, so the answer is 1 or 0. s.Ranks is ignored.
func (s Setup) MinRanks(memory int64, formula Formula) (int, Estimate, error) {
	limit := MaxFitRanks
	if s.ZeRO == 0 {
		limit = 1
	}
	var last Estimate
	n, err := search(limit, func(n int) (bool, error) {
		t := s
		t.Ranks = n
		ok, e, err := t.fits(memory, formula)
		last = e
		return ok, err
	})
	if err != nil || n == 0 {
		return 0, last, err
	}
	s.Ranks = n
	e, err := s.EstimateBy(formula)
	return n, e, err
}

// AtStage is s at ZeRO stage z, offloading what that stage can: the
// weights offload at ZeRO-3 alone (OffloadParams), so below it a setup
// that offloads them offloads the optimizer only.
func (s Setup) AtStage(z int) Setup {
	s.ZeRO = z
	if s.Offload == OffloadParams && z < 3 {
		s.Offload = OffloadOptimizer
	}
	return s
}

// FewestRanks is the fewest data-parallel ranks, at most MaxFitRanks, for
// which fits holds, given that it holds for every count above one that
// does (a figure a rank that falls as ranks are added); 0 when none does.
// It is the search MinRanks runs, for a figure of another estimator.
func FewestRanks(fits func(n int) (bool, error)) (int, error) { return search(MaxFitRanks, fits) }

// LowestStage is the lowest ZeRO stage (0 to 3) with which s fits in memory
// bytes at its rank count, with its estimate; -1 when none does (then the
// estimate is stage 3's). s.ZeRO is ignored.
func (s Setup) LowestStage(memory int64, formula Formula) (int, Estimate, error) {
	var e Estimate
	for z := 0; z <= 3; z++ {
		t := s.AtStage(z)
		ok, ez, err := t.fits(memory, formula)
		if err != nil {
			return -1, Estimate{}, err
		}
		e = ez
		if ok {
			return z, e, nil
		}
	}
	return -1, e, nil
}

// FitPolicies are the checkpoint policies fit compares, lightest compute
// first: none, selective, sqrt, full, then extra (e.g. an every:K the user
// asked for) if it is not one of them.
func FitPolicies(extra ...Checkpoint) []Checkpoint {
	ps := []Checkpoint{{Kind: CheckpointNone}, {Kind: CheckpointSelective}, {Kind: CheckpointSqrt}, {Kind: CheckpointFull}}
	for _, x := range extra {
		dup := false
		for _, p := range ps {
			dup = dup || p == x
		}
		if !dup {
			ps = append(ps, x)
		}
	}
	return ps
}
