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
	// ParamBuffer is the weights of parameter-table row row, when the
	// layout's weights are bound lazily (LazyParams): called before an
	// instruction reads them while they are not bound, once in the forward
	// pass and once in the backward pass.
	ParamBuffer(t *Trainer, row int) (*cuda.Buffer, error)
	// ParamDone is called after the last instruction of the forward pass,
	// or of the backward pass (recomputation included), that reads row's
	// lazily bound weights; the trainer then unbinds them.
	ParamDone(t *Trainer, row int) error
	// GradBuffer is where the backward pass writes the gradient of
	// parameter-table row row, when the layout's gradients are bound
	// lazily (LazyGrads): called before the instruction that writes it.
	GradBuffer(t *Trainer, row int) (*cuda.Buffer, error)
	// GradReady is called when the backward pass has written the gradient
	// of row row.
	GradReady(t *Trainer, row int) error
	// ReduceGrads runs after the backward pass; the gradients of this
	// rank's pieces are then summed over the ranks.
	ReduceGrads(t *Trainer) error
	// AnyRank is, flag by flag, true on every rank when true on any.
	AnyRank(flags ...bool) ([]bool, error)
	// ShareParams runs after every rank has updated its pieces.
	ShareParams(t *Trainer) error
}

// Layout is one rank's model-state buffers, in elements, and the pieces of
// the flat parameters it updates. Params holds the working weights at
// their table offsets (at least the model's parameters; more when a
// sharded collective needs them padded, the padding zero), or, with
// LazyParams, this rank's shard only, the steps reading weights the policy
// binds (ParamBuffer). Grads is the
// gradients' buffer: at the table offsets like Params, or, with
// LazyGrads, this rank's shard only, the backward pass writing into
// buffers the policy binds (GradBuffer). States is the length of each
// optimizer state (master, m, v), 0 for a rank that holds none. Ranks is
// the data-parallel group's size, which the backward pass's loss seed is
// divided by, so that the gradients the ranks sum are their mean (as
// PyTorch DDP divides before it reduces).
type Layout struct {
	Params, Grads, States int
	Pieces                []Piece
	LazyParams, LazyGrads bool
	Ranks                 int
}

// Piece is a range [Lo, Hi) of the flat parameters that a rank updates:
// its weights at Param in the params buffer, its gradients at Grad in the
// grads buffer and its optimizer states at State in theirs.
type Piece struct{ Lo, Hi, Param, Grad, State int }

// singleRank is the layout without data parallelism.
func singleRank(n int) Layout {
	return Layout{Params: n, Grads: n, States: n, Pieces: []Piece{{Lo: 0, Hi: n}}, Ranks: 1}
}

func (l Layout) check(n int) error {
	if (!l.LazyParams && l.Params < n) || (!l.LazyGrads && l.Grads < n) || l.Ranks < 1 {
		return fmt.Errorf("train: the policy's layout holds %d params and %d grads over %d ranks for a model of %d", l.Params, l.Grads, l.Ranks, n)
	}
	for _, p := range l.Pieces {
		w := p.Hi - p.Lo
		if p.Lo < 0 || p.Hi > n || w < 0 || p.Param < 0 || p.Param+w > l.Params || p.Grad < 0 || p.Grad+w > l.Grads || p.State < 0 || p.State+w > l.States {
			return fmt.Errorf("train: the policy's piece %+v is outside the layout (%d params, %d grads, %d states)", p, l.Params, l.Grads, l.States)
		}
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

// ReadsParam reports whether the forward pass (backward false) or the
// backward pass, recomputation included (backward true), reads row's
// weights.
func (t *Trainer) ReadsParam(row int, backward bool) bool {
	return t.lastRead[half(backward)][row] >= 0
}

// ParamReadOrder is the rows whose weights the forward pass (backward
// false) or the backward pass reads, in the order of their first read.
func (t *Trainer) ParamReadOrder(backward bool) []int { return t.readOrder[half(backward)] }

// PieceParams downloads the weights of this rank's pieces, in Layout's
// order: the fp32 master copy under mixed precision, else the working
// weights.
func (t *Trainer) PieceParams() ([]Piece, [][]float32, error) {
	out := make([][]float32, len(t.layout.Pieces))
	for i, p := range t.layout.Pieces {
		src, dev := t.params.View(p.Param, p.Hi-p.Lo), t.dev
		if t.master != nil {
			src, dev = t.master.View(p.State, p.Hi-p.Lo), t.statesDevice()
		}
		out[i] = make([]float32, p.Hi-p.Lo)
		if err := dev.Download(out[i], src); err != nil {
			return nil, nil, err
		}
	}
	return t.layout.Pieces, out, nil
}

func half(backward bool) int {
	if backward {
		return 1
	}
	return 0
}

// Setup is the setup the trainer runs: one rank's micro-batch.
func (t *Trainer) Setup() model.Setup { return t.setup }

// ParamTable is the model's parameter table (model.Config.Params), made
// once for the trainer: read it, do not change it.
func (t *Trainer) ParamTable() []model.Param { return t.table }
