package train

import (
	"errors"
	"fmt"

	"gorgonia.org/gorgonia"

	"trainmem/cuda"
	"trainmem/model"
)

// kernel is an op lowered to the device: it runs the op's kernels with out
// as the op's output buffer and a its arguments in the op's order. A
// trainmem op runs itself (op, its model.Runner); gorgonia's "+" that sums
// a value's gradient terms is the device's Add (sum). A value, not a
// closure: a graph of thousands of blocks lowers hundreds of thousands.
type kernel struct {
	op  model.Runner
	sum bool
}

func (k kernel) run(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
	switch {
	case k.op != nil:
		return k.op.Run(t.kernels, out, a)
	case k.sum:
		return t.dev.Add(out, a[0], a[1])
	}
	return errors.New("train: an instruction that was never lowered")
}

// add runs the op's kernels adding their result into out (a later term of
// a parameter's gradient, Instr.Accumulate): in the kernel where the op is
// a model.Accumulator, else from a temporary that lives for the one add.
func (k kernel) add(t *Trainer, out *cuda.Buffer, a []*cuda.Buffer) error {
	if acc, ok := k.op.(model.Accumulator); ok && acc.Accumulates() {
		x := t.kernels
		x.Accumulate = true
		return acc.Run(x, out, a)
	}
	return k.into(t, out.DType, out.Len, a, func(tmp *cuda.Buffer) error { return t.dev.Add(out, out, tmp) })
}

// into runs the op's kernels into a temporary of n elements of dt, hands it
// to then (which adds or casts it into where it belongs) and frees it.
func (k kernel) into(t *Trainer, dt cuda.DType, n int, a []*cuda.Buffer, then func(tmp *cuda.Buffer) error) error {
	tmp, err := t.dev.Alloc(cuda.Temporaries, dt, n)
	if err != nil {
		return err
	}
	defer t.dev.Free(tmp)
	if err := k.run(t, tmp, a); err != nil {
		return err
	}
	return then(tmp)
}

// lower maps an op to its kernels, once, when the schedule is compiled; an
// op the executor cannot run is an error then, not in the middle of a step.
// trainmem's ops run themselves (model.Runner, in the file of each op
// family); the only other op of the graph is gorgonia's "+" that sums a
// value's gradient terms.
func lower(op gorgonia.Op) (kernel, error) {
	if r, ok := op.(model.Runner); ok {
		return kernel{op: r}, nil
	}
	if model.IsGradAccumulation(op) {
		return kernel{sum: true}, nil
	}
	return kernel{}, fmt.Errorf("train: %T %v is not an op trainmem's executor can run", op, op)
}

// withScratchLike lends workspace of n elements of like's dtype.
func (t *Trainer) withScratchLike(like *cuda.Buffer, n int, f func(*cuda.Buffer) error) error {
	s, err := t.dev.Alloc(cuda.Workspace, like.DType, n)
	if err != nil {
		return err
	}
	defer t.dev.Free(s)
	return f(s)
}

// withScratch lends a kernel workspace from the allocator for one call.
func (t *Trainer) withScratch(n int, f func(*cuda.Buffer) error) error {
	s, err := t.dev.Alloc(cuda.Workspace, t.dtypes.state, n)
	if err != nil {
		return err
	}
	defer t.dev.Free(s)
	return f(s)
}
