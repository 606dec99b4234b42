package zero

import (
	"fmt"

	"trainmem/cuda"
	"trainmem/model"
	"trainmem/train"
)

// Setting is a data-parallel setting: the parameter server (PS) or a ZeRO
// stage.
type Setting struct {
	// PS is the source article's parameter-server data parallel: the
	// gradients are reduced to rank 0, which alone holds the optimizer
	// states and updates, and the new weights are broadcast.
	PS bool
	// Stage is the ZeRO stage when PS is false: 0 is plain data parallel
	// (DDP: every rank holds everything, the gradients all-reduced in
	// buckets as the backward pass produces them); 1 shards the optimizer
	// states (gradients reduce-scattered after the backward pass, each rank
	// updating its shard, the weights all-gathered).
	Stage int
	// BucketBytes is DDP's gradient bucket size; 0 means PyTorch DDP's
	// default, 25 MiB.
	BucketBytes int64
}

// DefaultBucketBytes is PyTorch DDP's bucket_cap_mb default, 25 MiB.
const DefaultBucketBytes = 25 << 20

func (s Setting) String() string {
	if s.PS {
		return "parameter server"
	}
	if s.Stage == 0 {
		return "ZeRO-0 (DDP)"
	}
	return fmt.Sprintf("ZeRO-%d", s.Stage)
}

// Check refuses a setting this package does not run, naming what does.
func (s Setting) Check() error {
	switch {
	case s.PS && s.Stage != 0:
		return fmt.Errorf("zero: the parameter server is a setting of its own: give it without a ZeRO stage (got stage %d)", s.Stage)
	case s.Stage < 0 || s.Stage > 3:
		return fmt.Errorf("zero: ZeRO stage %d (valid: 0, 1, 2, 3)", s.Stage)
	case s.Stage > 1:
		return fmt.Errorf("zero: ZeRO-%d is not run yet (valid today: the parameter server, ZeRO-0 and ZeRO-1; estimate and fit give ZeRO-2 and ZeRO-3 by formula)", s.Stage)
	case s.BucketBytes < 0:
		return fmt.Errorf("zero: bucket size %d bytes (valid: > 0, or 0 for %d)", s.BucketBytes, DefaultBucketBytes)
	}
	return nil
}

// NewPolicy is the setting's policy for the rank of c, for train.Options.
func NewPolicy(c Communicator, s Setting) (train.Policy, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	if s.BucketBytes == 0 {
		s.BucketBytes = DefaultBucketBytes
	}
	return &policy{c: c, set: s}, nil
}

// policy is one rank's part of a setting.
type policy struct {
	c   Communicator
	set Setting
	n   int // parameters

	// DDP's buckets: consecutive parameter-table rows from the last, each
	// bucket a range of the flat gradients, all-reduced once every row's
	// gradient of it is written.
	buckets   []bucket
	rowBucket []int
	pending   []int // rows not yet written, per bucket, this step
}

type bucket struct{ lo, hi, rows int }

// Layout implements train.Policy.
func (p *policy) Layout(s model.Setup) train.Layout {
	n, N, r := int(s.Model.NumParams()), p.c.Size(), p.c.Rank()
	p.n = n
	switch {
	case p.set.PS:
		l := train.Layout{Params: n, Grads: n, Ranks: N}
		if r == 0 {
			l.States = n
		}
		return l
	case p.set.Stage == 1:
		k := ShardLen(n, N)
		return train.Layout{Params: PaddedLen(n, N), Grads: PaddedLen(n, N), StatesFrom: r * k, States: k, Ranks: N}
	}
	p.makeBuckets(s)
	return train.Layout{Params: n, Grads: n, States: n, Ranks: N}
}

// makeBuckets fills buckets of at most BucketBytes of gradients (at least
// one row each) from the last row of the table back, the order in which
// the backward pass produces them.
func (p *policy) makeBuckets(s model.Setup) {
	rows := s.Model.Params()
	p.rowBucket = make([]int, len(rows))
	e := s.Precision.Size()
	cur := bucket{lo: -1}
	for i := len(rows) - 1; i >= 0; i-- {
		r := rows[i]
		if cur.rows > 0 && int64(cur.hi-int(r.Offset))*e > p.set.BucketBytes {
			p.buckets = append(p.buckets, cur)
			cur = bucket{lo: -1}
		}
		if cur.rows == 0 {
			cur.hi = int(r.Offset + r.Count)
		}
		cur.lo = int(r.Offset)
		cur.rows++
		p.rowBucket[i] = len(p.buckets)
	}
	p.buckets = append(p.buckets, cur)
	p.pending = make([]int, len(p.buckets))
	p.reset()
}

func (p *policy) reset() {
	for i, b := range p.buckets {
		p.pending[i] = b.rows
	}
}

// GradReady implements train.Policy: under DDP, a bucket whose every row
// is written is all-reduced in place at once, while the backward pass goes
// on.
func (p *policy) GradReady(t *train.Trainer, row int) error {
	if p.buckets == nil {
		return nil
	}
	i := p.rowBucket[row]
	if p.pending[i]--; p.pending[i] > 0 {
		return nil
	}
	b := p.buckets[i]
	g := t.GradsBuffer().View(b.lo, b.hi-b.lo)
	return p.c.AllReduce(g, g, Sum)
}

// ReduceGrads implements train.Policy.
func (p *policy) ReduceGrads(t *train.Trainer) (lo, hi int, err error) {
	g := t.GradsBuffer()
	N, r := p.c.Size(), p.c.Rank()
	switch {
	case p.set.PS:
		var recv *cuda.Buffer
		if r == 0 {
			recv = g
		}
		if err := p.c.Reduce(g, recv, Sum, 0); err != nil {
			return 0, 0, err
		}
		if r == 0 {
			return 0, p.n, nil
		}
		return 0, 0, nil
	case p.set.Stage == 1:
		k := g.Len / N
		if err := p.c.ReduceScatter(g, g.View(r*k, k), Sum); err != nil {
			return 0, 0, err
		}
		return r * k, (r + 1) * k, nil
	}
	for i, left := range p.pending {
		if left != 0 {
			return 0, 0, fmt.Errorf("zero: gradient bucket %d still waits for %d rows after the backward pass", i, left)
		}
	}
	p.reset()
	return 0, p.n, nil
}

// AnyRank implements train.Policy: one all-reduce of the flags, by max.
func (p *policy) AnyRank(flags ...bool) ([]bool, error) {
	d := p.c.Device()
	f, err := d.Alloc(cuda.Comm, cuda.I32, len(flags))
	if err != nil {
		return nil, err
	}
	defer d.Free(f)
	v := make([]int32, len(flags))
	for i, b := range flags {
		if b {
			v[i] = 1
		}
	}
	if err := d.Upload(f, v); err != nil {
		return nil, err
	}
	if err := p.c.AllReduce(f, f, Max); err != nil {
		return nil, err
	}
	if err := d.Download(v, f); err != nil {
		return nil, err
	}
	out := make([]bool, len(flags))
	for i, x := range v {
		out[i] = x != 0
	}
	return out, nil
}

// ShareParams implements train.Policy.
func (p *policy) ShareParams(t *train.Trainer) error {
	w := t.ParamsBuffer()
	switch {
	case p.set.PS:
		return p.c.Broadcast(w, w, 0)
	case p.set.Stage == 1:
		N, r := p.c.Size(), p.c.Rank()
		k := w.Len / N
		return p.c.AllGather(w.View(r*k, k), w)
	}
	return nil
}
