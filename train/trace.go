package train

// Tracing a step: every allocator event of the steps that follow, each
// with the site of the instruction that caused it (its phase, op, block
// and value), for the viewers (bench's memory trace).

import (
	"fmt"
	"strconv"
	"strings"

	"trainmem/cuda"
)

// Trace sends the allocator events of the steps that follow to tr, each
// step opened by a cuda.TraceStep event and every event carrying its site;
// nil stops, and a cuda.TraceEnder tracer is told, while the device still
// holds what the events end in. The device must be cuda.Traceable (every
// device of trainmem is).
func (t *Trainer) Trace(tr cuda.Tracer) error {
	d, ok := t.dev.(cuda.Traceable)
	if !ok {
		return fmt.Errorf("train: %s records no allocator events", t.dev.Name())
	}
	d.SetTracer(tr)
	if e, ok := t.tracer.(cuda.TraceEnder); ok && tr == nil {
		e.EndTrace(t.dev)
	}
	t.tracer, t.traced = tr, d
	if tr != nil && t.sites == nil {
		t.sites = make([]cuda.Site, len(t.sched.Instrs))
		for i := range t.sched.Instrs {
			t.sites[i] = siteOf(&t.sched.Instrs[i])
		}
	}
	return nil
}

// site sets the site of the allocations that follow, when tracing.
func (t *Trainer) site(s cuda.Site) {
	if t.tracer != nil {
		t.traced.SetSite(s)
	}
}

// optimizerSite is the site of the update: the optimizer and the
// policy's reductions and gathers after the backward pass.
func (t *Trainer) optimizerSite() cuda.Site {
	return cuda.Site{Phase: "optimizer", Op: t.opts.Optimizer.Kind.String(), Block: -1, Value: "update"}
}

// siteOf is an instruction's site: its phase (the update is "optimizer",
// as PyTorch's profiler names it), its op's family (the op's name without
// its shape), the block its value belongs to (h3.attn.qkv and d(h3.ln1)
// are block 3's; -1 for the embeddings and the head) and the value.
func siteOf(in *Instr) cuda.Site {
	phase := in.Phase.String()
	if in.Phase == Update {
		phase = "optimizer"
	}
	op := in.Node.Op().String()
	if i := strings.IndexAny(op, "{("); i > 0 {
		op = op[:i]
	}
	name := in.Node.Name()
	return cuda.Site{Phase: phase, Op: op, Block: blockOf(name), Value: name}
}

// blockOf reads the block of a value's name: "h<k>." after an optional
// "d(" prefix; -1 when there is none.
func blockOf(name string) int {
	name = strings.TrimPrefix(name, "d(")
	if !strings.HasPrefix(name, "h") {
		return -1
	}
	end := strings.IndexByte(name, '.')
	if end < 2 {
		return -1
	}
	k, err := strconv.Atoi(name[1:end])
	if err != nil {
		return -1
	}
	return k
}
