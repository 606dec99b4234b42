package train

// Micro-batches and pipeline stages: a step of M micro-batches runs each
// micro-batch's forward pass (Schedule.Instrs[:Backward0]) and backward
// pass (the rest) on slots of its own, in the order of the setup's
// pipeline schedule (model.PipelineSchedule.Actions), the gradients of the
// micro-batches after the first added to the grads buffer's. On a
// pipeline stage the passes exchange the residual stream and its gradient
// with the neighbouring stages as Megatron-LM's
// forward_backward_pipelining_without_interleaving does: a stage in the
// steady state of 1F1B sends its output and receives the gradient of an
// earlier one in one call, and sends an input's gradient and receives the
// next input in another, so that no two neighbours wait on each other. One
// stage with M micro-batches is gradient accumulation.

import (
	"errors"
	"fmt"
	"time"

	"trainmem/cuda"
	"trainmem/model"
)

// PipelineGroup is what a pipeline stage needs of its pipeline's stages,
// indexed by stage (package zero's Comm is one): point-to-point exchange
// with its neighbours (SendRecv sends send to stage to and receives recv
// from stage from at once, either buffer nil for no such half) and a sum
// over every stage, for the step's agreement on its loss and on skipping
// the update.
type PipelineGroup interface {
	SendRecv(send *cuda.Buffer, to int, recv *cuda.Buffer, from int) error
	AllReduceSum(b *cuda.Buffer) error
}

// microState is a trainer's state of micro-batching.
type microState struct {
	on         bool // steps run micro-batches (more than one, or a pipeline stage)
	n          int  // micro-batches a step
	accumulate bool // this backward pass adds its gradients to the grads buffer's
	holdGrads  bool // the policy hears of finished gradients in the step's last backward pass only
	// slots are every micro-batch's live buffers (the persistent slots
	// bound alike in each); the trainer's slots are the running pass's.
	slots [][]*cuda.Buffer
	// loss is the step's loss the stages agreed on (agreeStages).
	loss float64
	// wte is the table row of the token embedding on a stage that shares
	// it with another (the first and the last of a tied head), else -1.
	wte int
}

// lossWeight is what a pass's loss counts in the step's: 1/M.
func (m *microState) lossWeight() float64 {
	if m.n > 1 {
		return 1 / float64(m.n)
	}
	return 1
}

// setupMicro readies micro-batching for a setup of M micro-batches or
// pipeline stages.
func (t *Trainer) setupMicro() error {
	s := t.setup
	m := max(s.MicroBatches, 1)
	t.micro = microState{n: m, wte: -1, on: m > 1 || s.PP > 1}
	if !t.micro.on {
		return nil
	}
	switch {
	case t.layout.LazyParams || t.layout.LazyGrads:
		return fmt.Errorf("train: %d micro-batches over %d pipeline stages need every gradient whole on the rank between the micro-batches; ZeRO-2 and 3 keep shards (valid: ZeRO-0 or 1, or the parameter server), as DeepSpeed's pipeline engine refuses them", m, s.PP)
	case s.PP > 1 && s.MicroBatches < 1:
		return fmt.Errorf("train: a pipeline of %d stages runs a count of micro-batches a step: the setup gives none (Setup.MicroBatches; 0 is the estimate's M ≥ P)", s.PP)
	case s.PP > 1 && t.opts.Pipeline == nil:
		return fmt.Errorf("train: %s is a pipeline stage and the trainer has no pipeline group (Options.Pipeline)", s.Model)
	}
	if s.PP > 1 && !s.Model.Untied && (s.Model.First() || s.Model.Last()) {
		for i, r := range t.table {
			if r.Name == "wte" {
				t.micro.wte = i
			}
		}
	}
	t.micro.slots = make([][]*cuda.Buffer, m)
	return nil
}

// stage is the trainer's pipeline stage and the stages, 0 and 1 for a
// whole model.
func (t *Trainer) stage() (r, p int) {
	if t.setup.PP > 1 {
		return t.setup.Model.Stage.Rank, t.setup.PP
	}
	return 0, 1
}

// microBatches runs a step's micro-batches in the pipeline schedule's
// order: the tokens and targets are the M micro-batches', one after
// another (a stage reads those of its own end: the first its tokens, the
// last its targets).
func (t *Trainer) microBatches(tokens, targets []int32) (rec Record, err error) {
	mu := &t.micro
	base := t.slots
	defer func() {
		t.slots = base
		if err != nil {
			t.release()
		}
	}()
	s, M := t.setup, mu.n
	n := s.Batch * s.Seq
	shapeOnly, err := t.beginStep(tokens, targets)
	if err != nil {
		return rec, err
	}
	for k := range mu.slots {
		if mu.slots[k] == nil {
			mu.slots[k] = make([]*cuda.Buffer, len(base))
		}
		for i, b := range base {
			if t.sched.Slots[i].Persistent {
				mu.slots[k][i] = b
			}
		}
	}
	r, P := t.stage()
	first, last := r == 0, r == P-1
	acts := s.Pipeline.Actions(P, r, M)
	rec.MicroBatches, rec.InFlight = M, model.InFlight(acts)

	var spent [numPhases]time.Duration
	var wait time.Duration
	// exchange is one point-to-point call, timed on the device's clock as
	// the stage's wait (a shape-only device's, without a modelled clock,
	// stands still).
	exchange := func(send *cuda.Buffer, to int, recv *cuda.Buffer, from int) error {
		if send == nil && recv == nil {
			return nil
		}
		m0, err := t.dev.Mark()
		if err != nil {
			return err
		}
		if err := t.opts.Pipeline.SendRecv(send, to, recv, from); err != nil {
			return err
		}
		d, err := t.since(m0)
		wait += d
		return err
	}
	// The buffers a pass receives into: its input (a forward pass) or its
	// output's gradient (a backward pass), allocated as the executor would
	// allocate the step input.
	recvBuf := func(k, slot int) (*cuda.Buffer, error) {
		sl := &t.sched.Slots[slot]
		b, err := t.dev.Alloc(sl.Cat, sl.DType, sl.Len)
		if err == nil {
			mu.slots[k][slot] = b
		}
		return b, err
	}
	sent := func(k, slot int) { // a sent buffer is given back
		if b := mu.slots[k][slot]; b != nil {
			t.dev.Free(b)
			mu.slots[k][slot] = nil
		}
	}
	forward := func(k int) error {
		t.slots = mu.slots[k]
		if !shapeOnly {
			t.inputs[t.sched.Tokens] = tokens[k*n : (k+1)*n]
			t.inputs[t.sched.Targets] = targets[k*n : (k+1)*n]
		}
		mu.accumulate, mu.holdGrads = false, true
		return t.run(0, t.sched.Backward0, &rec, &spent)
	}
	backward := func(k int) error {
		t.slots = mu.slots[k]
		mu.accumulate, mu.holdGrads = k > 0, k < M-1
		return t.run(t.sched.Backward0, len(t.sched.Instrs), &rec, &spent)
	}
	// Megatron-LM's calls: recv_forward, send_forward,
	// send_forward_recv_backward, send_backward_recv_forward,
	// recv_backward, send_backward; a half to a stage that does not exist
	// is not made.
	recv := func(none bool, slot, peer int) func(int) error { // recv_forward, recv_backward
		return func(k int) error {
			if none {
				return nil
			}
			buf, err := recvBuf(k, slot)
			if err != nil {
				return err
			}
			return exchange(nil, -1, buf, peer)
		}
	}
	recvForward, recvBackward := recv(first, t.sched.Input, r-1), recv(last, t.sched.DLoss, r+1)
	sendForwardRecvBackward := func(k, j int) error { // j < 0: no receive
		if last {
			return nil
		}
		var dy *cuda.Buffer
		if j >= 0 {
			var err error
			if dy, err = recvBuf(j, t.sched.DLoss); err != nil {
				return err
			}
		}
		err := exchange(mu.slots[k][t.sched.Output], r+1, dy, r+1)
		sent(k, t.sched.Output)
		return err
	}
	sendBackwardRecvForward := func(j, k int) error { // k < 0: no receive
		var x *cuda.Buffer
		if !first && k >= 0 {
			var err error
			if x, err = recvBuf(k, t.sched.Input); err != nil {
				return err
			}
		}
		var dx *cuda.Buffer
		if !first {
			dx = mu.slots[j][t.sched.DInput]
		}
		err := exchange(dx, r-1, x, r-1)
		if !first {
			sent(j, t.sched.DInput)
		}
		return err
	}
	// A pass alone: recv_forward, forward, send_forward; recv_backward,
	// backward, send_backward.
	alone := func(in, pass func(int) error, out func(k, other int) error) func(int) error {
		return func(k int) error {
			if err := in(k); err != nil {
				return err
			}
			if err := pass(k); err != nil {
				return err
			}
			return out(k, -1)
		}
	}
	oneForward := alone(recvForward, forward, sendForwardRecvBackward)
	oneBackward := alone(recvBackward, backward, sendBackwardRecvForward)
	run := func() error {
		if s.Pipeline == model.GPipe || P == 1 {
			for _, a := range acts {
				pass := oneForward
				if a.Backward {
					pass = oneBackward
				}
				if err := pass(a.Micro); err != nil {
					return err
				}
			}
			return nil
		}
		// 1F1B, as Megatron-LM runs it: the warm-up's forward passes,
		// then one forward and one backward pass at a time, each
		// exchange both ways at once, then the remaining backward passes.
		warm := min(P-r-1, M)
		rest := M - warm
		for k := range warm {
			if err := oneForward(k); err != nil {
				return err
			}
		}
		if rest > 0 {
			if err := recvForward(warm); err != nil {
				return err
			}
		}
		for i := range rest {
			k, j := warm+i, i
			if err := forward(k); err != nil {
				return err
			}
			if err := sendForwardRecvBackward(k, j); err != nil {
				return err
			}
			if err := backward(j); err != nil {
				return err
			}
			next := k + 1
			if i == rest-1 {
				next = -1
			}
			if err := sendBackwardRecvForward(j, next); err != nil {
				return err
			}
		}
		for j := rest; j < M; j++ {
			if err := oneBackward(j); err != nil {
				return err
			}
		}
		return nil
	}
	if err := run(); err != nil {
		return rec, err
	}
	rec.ForwardMs, rec.RecomputeMs, rec.BackwardMs = ms(spent[Forward]), ms(spent[Recompute]), ms(spent[Backward])
	rec.BubbleMs = ms(wait)
	return rec, nil
}

// accumulated runs a gradient instruction whose kernels do not write the
// kept gradient in place: of a micro-batch after the first, or with fp32
// main gradients. Its kernels write a temporary of the slot's type, which
// is added to the gradient's buffer (as PyTorch's AccumulateGrad adds a new
// gradient to .grad, and Megatron-LM's hook adds param.grad to main_grad)
// or, on the step's first micro-batch, cast into it.
func (t *Trainer) accumulated(in *Instr, sl *Slot, args []*cuda.Buffer) error {
	g := t.slots[in.Out]
	return in.run.into(t, sl.DType, g.Len, args, func(tmp *cuda.Buffer) error {
		if !t.micro.accumulate && !in.Accumulate {
			return t.dev.Cast(g, tmp)
		}
		return t.dev.Add(g, g, tmp)
	})
}

// tieEmbedding sums the token embedding's gradient of the first and the
// last stage, each adding the other's (Megatron-LM's all-reduce over its
// embedding group of two), so that the two copies update alike: a
// float sum of two terms is the same whichever adds it.
func (t *Trainer) tieEmbedding() error {
	row := t.micro.wte
	if row < 0 {
		return nil
	}
	r, P := t.stage()
	peer := P - 1
	if r == P-1 {
		peer = 0
	}
	g := t.grads.View(int(t.table[row].Store), int(t.table[row].Count))
	other, err := t.dev.Alloc(cuda.Comm, g.DType, g.Len)
	if err != nil {
		return err
	}
	defer t.dev.Free(other)
	if err := t.opts.Pipeline.SendRecv(g, peer, other, peer); err != nil {
		return fmt.Errorf("train: the tied embedding's gradient: %w", err)
	}
	if !t.dev.Computes() {
		return nil
	}
	return t.dev.Add(g, g, other)
}

// agreeStages has every stage of the pipeline learn the step's loss (the
// last stage's) and whether any stage's gradients or loss are not finite,
// in one sum over the stages, so that every stage skips or updates alike.
func (t *Trainer) agreeStages(bad, lossBad bool, loss float64) (bool, bool, float64, error) {
	if t.setup.PP < 2 {
		return bad, lossBad, loss, nil
	}
	r, P := t.stage()
	if r != P-1 {
		loss = 0
	}
	b, err := t.dev.Alloc(cuda.Comm, cuda.F64, 3)
	if err != nil {
		return false, false, 0, err
	}
	defer t.dev.Free(b)
	v := []float64{0, 0, loss}
	if bad {
		v[0] = 1
	}
	if lossBad {
		v[1] = 1
	}
	if err := t.dev.Upload(b, v); err != nil {
		return false, false, 0, err
	}
	if err := t.opts.Pipeline.AllReduceSum(b); err != nil {
		return false, false, 0, fmt.Errorf("train: the stages' agreement on the step: %w", err)
	}
	if !t.dev.Computes() {
		return false, false, 0, nil
	}
	if err := t.dev.Download(v, b); err != nil {
		return false, false, 0, err
	}
	return v[0] != 0, v[1] != 0, v[2], nil
}

// releaseMicro frees every micro-batch's live non-persistent buffers.
func (t *Trainer) releaseMicro() {
	for _, slots := range t.micro.slots {
		for sl, b := range slots {
			if b != nil && !t.sched.Slots[sl].Persistent {
				t.dev.Free(b)
				slots[sl] = nil
			}
		}
	}
}

var errNoPipeline = errors.New("train: a pipeline group for a whole model (the setup has one pipeline stage)")
