package train

// The profile of a run: where each millisecond of a step went, per op
// family and phase, in the spirit of PyTorch's profiler key averages, with
// each family's arithmetic (model.FLOPer) and bytes moved (its inputs read
// and its output written), so that compute-bound and memory-bound kernels
// can each be set against the device's limit.

import (
	"sort"
	"strings"
	"time"

	"trainmem/cuda"
	"trainmem/model"
)

// ProfileRow is one op family in one phase, summed over the profiled
// steps.
type ProfileRow struct {
	Op    string        `json:"op"`
	Phase string        `json:"phase"`
	Calls int           `json:"calls"`
	Time  time.Duration `json:"time_ns"`
	FLOPs float64       `json:"flops"` // 0 for memory-bound ops
	Bytes int64         `json:"bytes"` // inputs read and output written
}

// Profile collects a run's profile (Trainer.Profile): every step but the
// first, which fills the caches, unless only one step ran.
type Profile struct {
	rows     map[[2]string]*ProfileRow
	first    map[[2]string]*ProfileRow // the first step's, kept until a second one comes
	steps    int
	stepTime time.Duration
	// Device and PeakFLOPS are the device's name and its peak for the
	// run's storage type (0 when unknown).
	Device    string
	PeakFLOPS float64
}

// Rows are the profile's rows, the longest first.
func (p *Profile) Rows() []ProfileRow {
	rows := p.rows
	if p.steps <= 1 {
		rows = p.first
	}
	var out []ProfileRow
	for _, r := range rows {
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Time != out[j].Time {
			return out[i].Time > out[j].Time
		}
		return out[i].Op+out[i].Phase < out[j].Op+out[j].Phase
	})
	return out
}

// Steps is the number of steps the rows sum over; StepTime their time.
func (p *Profile) Steps() int {
	return max(p.steps-1, min(p.steps, 1))
}

// StepTime is the profiled steps' total time.
func (p *Profile) StepTime() time.Duration { return p.stepTime }

func (p *Profile) add(op, phase string, d time.Duration, flops float64, bytes int64) {
	m := p.rows
	if p.steps == 1 {
		m = p.first
	}
	k := [2]string{op, phase}
	r := m[k]
	if r == nil {
		r = &ProfileRow{Op: op, Phase: phase}
		m[k] = r
	}
	r.Calls++
	r.Time += d
	r.FLOPs += flops
	r.Bytes += bytes
}

// Profile makes the trainer time every instruction of the steps that
// follow, and its update, into p; nil stops. Timing costs a device mark
// and an elapsed time per instruction (nothing when off).
func (t *Trainer) Profile(p *Profile) {
	if p != nil && p.rows == nil {
		p.rows, p.first = map[[2]string]*ProfileRow{}, map[[2]string]*ProfileRow{}
		p.Device = t.dev.Name()
		if pr, ok := t.dev.(cuda.PeakReporter); ok {
			p.PeakFLOPS, _ = pr.PeakFLOPS(t.dtypes.param)
		}
	}
	t.profile = p
}

// profileStep opens a step of the profile.
func (t *Trainer) profileStep() {
	if p := t.profile; p != nil {
		p.steps++
		if p.steps == 2 {
			p.stepTime = 0
		}
	}
}

// profiled runs f, timing it into the profile as op in phase with its
// arithmetic and bytes; without a profile it only runs f.
func (t *Trainer) profiled(op, phase string, flops float64, bytes int64, f func() error) error {
	p := t.profile
	if p == nil {
		return f()
	}
	m0, err := t.dev.Mark()
	if err != nil {
		return err
	}
	if err := f(); err != nil {
		return err
	}
	_, d, err := t.lap(m0)
	if err != nil {
		return err
	}
	p.add(op, phase, d, flops, bytes)
	p.stepTime += d
	return nil
}

// opName is an instruction's op as a profile names it: its type, without
// its fields.
func opName(in *Instr) string {
	op := in.Node.Op().String()
	if i := strings.IndexAny(op, "{( "); i > 0 {
		op = op[:i]
	}
	if op == "+" {
		op = "Add (gradients summed)" // gorgonia's own add, which sums a value's gradients
	}
	return op
}

// instrWork is an instruction's arithmetic (its op's, when it multiplies
// matrices) and the bytes it reads and writes: what a profile and a
// modelled clock charge it.
func (t *Trainer) instrWork(in *Instr) (flops float64, bytes int64) {
	if f, ok := in.Node.Op().(model.FLOPer); ok {
		flops = f.FLOPs()
	}
	for _, a := range in.Args {
		sl := &t.sched.Slots[a]
		bytes += int64(sl.Len) * int64(sl.DType.Size())
	}
	out := &t.sched.Slots[in.Out]
	bytes += int64(out.Len) * int64(out.DType.Size())
	return flops, bytes
}

// updateBytes is what the update moves: every model state read and the
// weights, master and moments written.
func (t *Trainer) updateBytes() int64 {
	var n int64
	bufs := []*cuda.Buffer{t.params, t.master, t.m, t.v}
	if t.moments8 != nil { // 8-bit states' scales and small tensors' fp32 states
		bufs = append(bufs, t.moments8.m, t.moments8.v)
	}
	for _, b := range bufs {
		if b != nil {
			n += 2 * b.Bytes()
		}
	}
	if t.grads != nil {
		n += t.grads.Bytes()
	}
	return n
}
