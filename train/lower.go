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
	s, err := t.dev.Alloc(cuda.Workspace, t.st.state, n)
	if err != nil {
		return err
	}
	defer t.dev.Free(s)
	return f(s)
}
