package train

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// fakeStepper records what each step was given and fails as told.
type fakeStepper struct {
	n       int
	got     [][][]int32 // per step, per member: the tokens it saw
	failAt  int         // the step (from 1) that fails; 0: none
	failErr error
}

func (f *fakeStepper) Members() int { return f.n }

func (f *fakeStepper) Step(batch func(int) ([]int32, []int32)) ([]Record, error) {
	step := len(f.got) + 1
	var seen [][]int32
	recs := make([]Record, f.n)
	for i := range f.n {
		tok, _ := batch(i)
		seen = append(seen, append([]int32(nil), tok...))
		recs[i] = Record{Step: step, Loss: float64(10*step + i)}
	}
	f.got = append(f.got, seen)
	if step == f.failAt {
		return recs, f.failErr
	}
	return recs, nil
}

// The run loop's rules: every member's batch of every step, copied (the
// batch function reuses its slice); a diverged step is finished (onStep
// sees it) and ends the loop with its error; a step that fails otherwise
// is not; onStep's error ends the loop after its step; batch's at once;
// a cancelled context stops it before the next step.
func TestLoop(t *testing.T) {
	shared := make([]int32, 2) // the batch function's one buffer
	batch := func(step, member int) ([]int32, []int32, error) {
		shared[0], shared[1] = int32(step), int32(member)
		return shared, shared, nil
	}
	var seen []string
	onStep := func(step int, recs []Record, err error) error {
		seen = append(seen, fmt.Sprintf("%d:%d:%v", step, len(recs), err != nil))
		return nil
	}

	f := &fakeStepper{n: 3}
	res, err := Loop(context.Background(), f, 4, batch, onStep)
	if err != nil || res.Steps != 4 || res.Interrupted || len(res.Last) != 3 || res.Last[2].Loss != 42 {
		t.Fatalf("4 steps of 3 members: %+v, %v", res, err)
	}
	for s, members := range f.got {
		for m, tok := range members {
			if tok[0] != int32(s) || tok[1] != int32(m) {
				t.Errorf("step %d member %d saw %v, want its own batch [%d %d]", s, m, tok, s, m)
			}
		}
	}

	div := &DivergedError{Step: 2}
	seen = nil
	f = &fakeStepper{n: 1, failAt: 2, failErr: div}
	res, err = Loop(context.Background(), f, 5, batch, onStep)
	if !errors.Is(err, div) || res.Steps != 2 || res.Last[0].Step != 2 || fmt.Sprint(seen) != "[0:1:false 1:1:true]" {
		t.Errorf("a diverged step 2: %+v, %v, onStep saw %v; want it finished and the loop ended with its error", res, err, seen)
	}

	broken := errors.New("out of memory")
	seen = nil
	f = &fakeStepper{n: 2, failAt: 3, failErr: broken}
	res, err = Loop(context.Background(), f, 5, batch, onStep)
	if !errors.Is(err, broken) || res.Steps != 2 || res.Last[0].Step != 2 || len(seen) != 2 {
		t.Errorf("a failed step 3: %+v, %v, onStep saw %v; want steps 1 and 2 only", res, err, seen)
	}

	stop := errors.New("stop")
	f = &fakeStepper{n: 1}
	res, err = Loop(context.Background(), f, 5, batch, func(step int, _ []Record, _ error) error {
		if step == 1 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || res.Steps != 2 || len(f.got) != 2 {
		t.Errorf("onStep stopping after step 2: %+v, %v, %d steps run", res, err, len(f.got))
	}

	bad := errors.New("no more data")
	f = &fakeStepper{n: 2}
	res, err = Loop(context.Background(), f, 5, func(step, member int) ([]int32, []int32, error) {
		if step == 1 && member == 1 {
			return nil, nil, bad
		}
		return batch(step, member)
	}, nil)
	if !errors.Is(err, bad) || res.Steps != 1 || len(f.got) != 1 {
		t.Errorf("batch failing in step 2: %+v, %v, %d steps run", res, err, len(f.got))
	}

	ctx, cancel := context.WithCancel(context.Background())
	f = &fakeStepper{n: 1}
	res, err = Loop(ctx, f, 5, batch, func(step int, _ []Record, _ error) error {
		if step == 2 {
			cancel()
		}
		return nil
	})
	if err != nil || !res.Interrupted || res.Steps != 3 || len(f.got) != 3 {
		t.Errorf("cancelled after step 3: %+v, %v, %d steps run", res, err, len(f.got))
	}

	f = &fakeStepper{n: 2}
	if _, err := Loop(context.Background(), f, 1, NoBatch, nil); err != nil || f.got[0][0] != nil {
		t.Errorf("shape-only members: %v, tokens %v; want none", err, f.got[0][0])
	}
}
