package train

import (
	"fmt"

	"trainmem/cuda"
	"trainmem/model"
)

// Policy makes a Trainer one rank of a data-parallel group: where this
// rank's model states live and what moves between the ranks in a step.
// Package zero implements the settings (parameter server, ZeRO stages); the
// trainer calls a policy at four points of its schedule:
//
//   - when it allocates the model states (Layout);
//   - after the backward pass writes a parameter row's gradient (GradReady:
//     a bucket of rows complete can be reduced while backward goes on);
//   - after the backward pass (ReduceGrads: the gradients this rank updates
//     from are then final, summed over the ranks);
//   - after the update (ShareParams: every rank's working weights made
//     whole again).
//
// Between the last two the trainer checks the gradients it updates from and
// the loss, and the ranks agree (AnyRank, one collective for both) on
// whether to skip the step, so that every rank skips or updates alike.
type Policy interface {
	// Layout is this rank's model-state buffers for setup s.
	Layout(s model.Setup) Layout
	// GradReady is called when the backward pass has written the gradient
	// of parameter-table row row into the grads buffer.
	GradReady(t *Trainer, row int) error
	// ReduceGrads runs after the backward pass; the gradients of the flat
	// parameters [lo, hi) are then summed over the ranks, and this rank
	// updates those parameters.
	ReduceGrads(t *Trainer) (lo, hi int, err error)
	// AnyRank is, flag by flag, true on every rank when true on any.
	AnyRank(flags ...bool) ([]bool, error)
	// ShareParams runs after the update of [lo, hi) on every rank.
	ShareParams(t *Trainer) error
}

// Layout is one rank's model-state buffers, in elements: params and grads
// (at least the model's parameters; more when a sharded collective needs
// them padded, the padding zero), and the optimizer states (master, m, v)
// for the flat parameters [StatesFrom, StatesFrom+States). Ranks is the
// data-parallel group's size, which the summed gradients are divided by.
type Layout struct {
	Params, Grads      int
	StatesFrom, States int
	Ranks              int
}

// singleRank is the layout without data parallelism.
func singleRank(n int) Layout { return Layout{Params: n, Grads: n, States: n, Ranks: 1} }

func (l Layout) check(n int) error {
	switch {
	case l.Params < n || l.Grads < n:
		return fmt.Errorf("train: the policy's layout holds %d params and %d grads for a model of %d", l.Params, l.Grads, n)
	case l.States < 0 || l.StatesFrom < 0 || l.StatesFrom+l.States > l.Params:
		return fmt.Errorf("train: the policy's optimizer states [%d, %d) are outside the %d params", l.StatesFrom, l.StatesFrom+l.States, l.Params)
	case l.Ranks < 1:
		return fmt.Errorf("train: the policy's group has %d ranks", l.Ranks)
	}
	return nil
}

// ParamsBuffer is the flat working weights of this rank (Layout.Params
// elements), for a policy's collectives.
func (t *Trainer) ParamsBuffer() *cuda.Buffer { return t.params }

// GradsBuffer is the flat gradients of this rank (Layout.Grads elements),
// as the backward pass leaves them: scaled by the loss scale, summed over
// this rank's micro-batch only until the policy reduces them.
func (t *Trainer) GradsBuffer() *cuda.Buffer { return t.grads }

// Setup is the setup the trainer runs: one rank's micro-batch.
func (t *Trainer) Setup() model.Setup { return t.s }
