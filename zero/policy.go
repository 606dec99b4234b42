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
	// updating its shard, the weights all-gathered); 2 shards the gradients
	// too (each bucket of gradients reduce-scattered as the backward pass
	// produces it, a rank keeping its shard and the bucket in flight); 3
	// shards the weights too (a unit's weights all-gathered into gathered
	// before the forward pass reads them and again before the backward
	// pass, given back after their last read; gradients reduce-scattered
	// unit by unit).
	Stage int
	// BucketBytes is the gradient bucket of DDP and ZeRO-2; 0 means
	// PyTorch DDP's default, 25 MiB.
	BucketBytes int64
	// Prefetch, under ZeRO-3, gathers the next unit the pass reads as soon
	// as the pass first reads a unit, so that two units can be gathered at
	// once (DeepSpeed's prefetch; the memory shows in gathered).
	Prefetch bool
	// Network, when set, times a simulation's collectives, sends and
	// receives over it, each simulated rank's kernels on its device's
	// modelled clock (cuda.TimeModel): Simulate's results then carry each
	// rank's replayed step (RankResult.Timing).
	Network *Network
	// Native says a native engine (NCCL) moves the collectives' data: it
	// stages their partial sums in buffers of its own, so a rank's comm
	// holds none of the ring's staging (the settings' own comm buffers
	// stay). Simulate follows it; a group with native engines runs so.
	Native bool
}

// DefaultBucketBytes is PyTorch DDP's bucket_cap_mb default, 25 MiB.
const DefaultBucketBytes = 25 << 20

func (s Setting) String() string {
	switch {
	case s.PS:
		return "parameter server" + s.over()
	case s.Stage == 0:
		return "ZeRO-0 (DDP)" + s.over()
	case s.Prefetch:
		return fmt.Sprintf("ZeRO-%d with prefetch", s.Stage) + s.over()
	}
	return fmt.Sprintf("ZeRO-%d", s.Stage) + s.over()
}

func (s Setting) over() string {
	if s.Native {
		return " over a native engine"
	}
	return ""
}

// Check refuses a setting this package does not run, naming what does.
func (s Setting) Check() error {
	switch {
	case s.PS && s.Stage != 0:
		return fmt.Errorf("zero: the parameter server is a setting of its own: give it without a ZeRO stage (got stage %d)", s.Stage)
	case s.Stage < 0 || s.Stage > 3:
		return fmt.Errorf("zero: ZeRO stage %d (valid: 0, 1, 2, 3)", s.Stage)
	case s.Prefetch && s.Stage != 3:
		return fmt.Errorf("zero: prefetch gathers ZeRO-3's units ahead; %s gathers none", s)
	case s.Stage == 3 && s.BucketBytes != 0:
		return fmt.Errorf("zero: ZeRO-3 gathers and reduces a unit (the embeddings, a block, the head) at a time: it takes no bucket size")
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

	// The buckets of DDP and ZeRO-2: consecutive parameter-table rows from
	// the last, each bucket a range of the flat gradients, reduced once
	// every row's gradient of it is written.
	buckets   []bucket
	rowBucket []int
	pending   []int // rows not yet written, per bucket, this step
}

// bucket is rows [lo, hi) of the flat parameters; under ZeRO-2 rank r
// owns elements lo+r·shard to lo+(r+1)·shard of it, at off in its shard
// of the gradients and the optimizer states, and inflight is the bucket's
// gradients (padded to N·shard) while the backward pass writes them.
type bucket struct {
	lo, hi, rows int
	shard, off   int
	inflight     *cuda.Buffer

	// ZeRO-3: the unit's weights gathered (N·shard, gathered) while the
	// forward or the backward pass reads them, the rows still to read in
	// this half, and the gathers of this step (1 in the forward pass, 2 in
	// the backward pass).
	gathered *cuda.Buffer
	readers  int
	gathers  int
	touched  bool // the pass has read the unit (prefetch: the next is gathered)
	// prefetched is 1 + the id of the prefetched gather on the
	// communication stream (Comm.Async), 0 when none is in flight.
	prefetched int
}

// Layout implements train.Policy.
func (p *policy) Layout(s model.Setup) train.Layout {
	n, N, r := int(s.Model.NumTrained()), p.c.Size(), p.c.Rank()
	p.n = n
	switch {
	case p.set.PS:
		l := train.Layout{Params: n, Grads: n, Ranks: N}
		if r == 0 {
			l.States, l.Pieces = n, []train.Piece{{Lo: 0, Hi: n}}
		}
		return l
	case p.set.Stage == 1:
		k := ShardLen(n, N)
		l := train.Layout{Params: PaddedLen(n, N), Grads: PaddedLen(n, N), States: k, Ranks: N}
		// A rank past the parameters (more ranks than parameters) holds a
		// shard of padding only, and updates nothing.
		if lo, hi := r*k, min((r+1)*k, n); hi > lo {
			l.Pieces = []train.Piece{{Lo: lo, Hi: hi, Param: lo, Grad: lo}}
		}
		return l
	case p.set.Stage >= 2:
		l := train.Layout{Params: n, LazyGrads: true, Ranks: N}
		if p.set.Stage == 3 {
			p.makeUnits(s)
			l.LazyParams = true
		} else {
			p.makeBuckets(s)
		}
		for i := range p.buckets {
			b := &p.buckets[i]
			b.shard, b.off = ShardLen(b.hi-b.lo, N), l.States
			l.States += b.shard
			lo, hi := b.lo+r*b.shard, min(b.lo+(r+1)*b.shard, b.hi)
			if hi > lo {
				w := lo // ZeRO-2: the weights are whole, at their table offsets
				if l.LazyParams {
					w = b.off + lo - (b.lo + r*b.shard) // ZeRO-3: in this rank's shard
				}
				l.Pieces = append(l.Pieces, train.Piece{Lo: lo, Hi: hi, Param: w, Grad: b.off, State: b.off})
			}
		}
		l.Grads = l.States
		if l.LazyParams {
			l.Params = l.States
		}
		return l
	}
	p.makeBuckets(s)
	return train.Layout{Params: n, Grads: n, States: n, Pieces: []train.Piece{{Lo: 0, Hi: n}}, Ranks: N}
}

// makeUnits makes ZeRO-3's units, the buckets of both its gathers and its
// reductions: the runs of consecutive parameter-table rows of one layer
// (the embeddings, each block, the final layer norm and head), a block
// being one contiguous range of the flat parameters.
func (p *policy) makeUnits(s model.Setup) {
	rows := s.Model.Params()
	p.rowBucket = make([]int, len(rows))
	prev := -1 // the last trained row
	for i, r := range rows {
		if r.Frozen {
			p.rowBucket[i] = -1
			continue
		}
		if prev < 0 || r.Layer != rows[prev].Layer {
			p.buckets = append(p.buckets, bucket{lo: int(r.Store)})
		}
		prev = i
		b := &p.buckets[len(p.buckets)-1]
		b.hi = int(r.Store + r.Count)
		b.rows++
		p.rowBucket[i] = len(p.buckets) - 1
	}
	p.pending = make([]int, len(p.buckets))
	p.reset()
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
		if r.Frozen {
			p.rowBucket[i] = -1
			continue
		}
		if cur.rows > 0 && int64(cur.hi-int(r.Store))*e > p.set.BucketBytes {
			p.buckets = append(p.buckets, cur)
			cur = bucket{lo: -1}
		}
		if cur.rows == 0 {
			cur.hi = int(r.Store + r.Count)
		}
		cur.lo = int(r.Store)
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

// ParamBuffer implements train.Policy: under ZeRO-3 a unit's weights are
// all-gathered from every rank's shard into a buffer of their own
// (gathered) when the forward or backward pass first reads one of them.
func (p *policy) ParamBuffer(t *train.Trainer, row int) (*cuda.Buffer, error) {
	if p.set.Stage != 3 {
		return nil, fmt.Errorf("zero: %s binds no weights lazily", p.set)
	}
	u := p.rowBucket[row]
	b := &p.buckets[u]
	if b.gathered == nil {
		if err := p.gather(t, u); err != nil {
			return nil, err
		}
	} else if b.prefetched > 0 {
		wait(p.c, b.prefetched-1) // gathered ahead, on the communication stream
		b.prefetched = 0
	}
	if !b.touched {
		b.touched = true
		if p.set.Prefetch {
			if err := p.prefetch(t, u, b.gathers > 1); err != nil {
				return nil, err
			}
		}
	}
	r := t.ParamTable()[row]
	return b.gathered.View(int(r.Store)-b.lo, int(r.Count)), nil
}

// gather all-gathers unit u for the pass that reads it next (the forward
// pass at the step's first gather, else the backward pass) and counts the
// rows that pass reads.
func (p *policy) gather(t *train.Trainer, u int) error {
	b := &p.buckets[u]
	d := p.c.Device()
	w := t.ParamsBuffer()
	src := w.View(b.off, b.shard)
	if t.ParamsOffloaded() {
		// The shard is in host memory (ZeRO-Infinity's offload_param):
		// copied up into comm staging first.
		stage, err := d.Alloc(cuda.Comm, w.DType, b.shard)
		if err != nil {
			return err
		}
		defer d.Free(stage)
		if err := t.FetchParams(stage, b.off, b.shard); err != nil {
			return err
		}
		src = stage
	}
	g, err := d.Alloc(cuda.Gathered, w.DType, p.c.Size()*b.shard)
	if err != nil {
		return err
	}
	if err := p.c.AllGather(src, g); err != nil {
		d.Free(g)
		return err
	}
	b.gathered, b.readers = g, 0
	backward := b.gathers > 0
	b.gathers++
	for i := range p.rowBucket {
		if p.rowBucket[i] == u && t.ReadsParam(i, backward) {
			b.readers++
		}
	}
	return nil
}

// prefetch gathers the unit that the pass first reads after unit u, unless
// the pass has read it already or it is gathered.
func (p *policy) prefetch(t *train.Trainer, u int, backward bool) error {
	after := false
	for _, row := range t.ParamReadOrder(backward) {
		v := p.rowBucket[row]
		switch {
		case v < 0:
			continue // a frozen row: whole on every rank, never gathered
		case v == u:
			after = true
		case after && !p.buckets[v].touched && p.buckets[v].gathered == nil:
			id, err := async(p.c, func() error { return p.gather(t, v) })
			p.buckets[v].prefetched = id + 1
			return err
		case after:
			return nil // the next unit is read already or gathered
		}
	}
	return nil
}

// ParamDone implements train.Policy: a unit's gathered weights are given
// back after the last row of it that this half reads.
func (p *policy) ParamDone(t *train.Trainer, row int) error {
	b := &p.buckets[p.rowBucket[row]]
	if b.gathered == nil {
		return fmt.Errorf("zero: the weights of row %d were not gathered", row)
	}
	if b.readers--; b.readers == 0 {
		p.c.Device().Free(b.gathered)
		b.gathered, b.touched = nil, false
	}
	return nil
}

// GradBuffer implements train.Policy: under ZeRO-2 a bucket's gradients
// are written into a buffer of its own (grads, zero-filled: the padding to
// N·shard stays zero), taken when the backward pass first writes into the
// bucket.
func (p *policy) GradBuffer(t *train.Trainer, row int) (*cuda.Buffer, error) {
	if p.set.Stage < 2 {
		return nil, fmt.Errorf("zero: %s binds no gradient lazily", p.set)
	}
	b := &p.buckets[p.rowBucket[row]]
	d := p.c.Device()
	if b.inflight == nil {
		g, err := d.Alloc(cuda.Grads, t.GradsBuffer().DType, p.c.Size()*b.shard)
		if err == nil {
			err = d.Fill(g, 0)
		}
		if err != nil {
			return nil, err
		}
		b.inflight = g
	}
	r := t.ParamTable()[row]
	return b.inflight.View(int(r.Store)-b.lo, int(r.Count)), nil
}

// GradReady implements train.Policy: a bucket whose every row is written
// is reduced at once, while the backward pass goes on: all-reduced in
// place under DDP, reduce-scattered into this rank's shard under ZeRO-2
// (and its buffer given back).
func (p *policy) GradReady(t *train.Trainer, row int) error {
	if p.buckets == nil {
		return nil
	}
	i := p.rowBucket[row]
	if p.pending[i]--; p.pending[i] > 0 {
		return nil
	}
	b := &p.buckets[i]
	// On the communication stream: the backward pass goes on.
	if p.set.Stage >= 2 {
		_, err := async(p.c, func() error { return p.c.ReduceScatter(b.inflight, t.GradsBuffer().View(b.off, b.shard), Sum) })
		p.c.Device().Free(b.inflight)
		b.inflight = nil
		return err
	}
	g := t.GradsBuffer().View(b.lo, b.hi-b.lo)
	_, err := async(p.c, func() error { return p.c.AllReduce(g, g, Sum) })
	return err
}

// async runs f, a collective of c, on the communication stream when c
// times its collectives (Comm.Async); its id, or -1.
func async(c Communicator, f func() error) (int, error) {
	if tc, ok := c.(*Comm); ok {
		return tc.Async(f)
	}
	return -1, f()
}

// wait holds c's compute stream until async collective id has ended
// (Comm.Wait; -1: every one issued).
func wait(c Communicator, id int) {
	if tc, ok := c.(*Comm); ok {
		tc.Wait(id)
	}
}

// ReduceGrads implements train.Policy.
func (p *policy) ReduceGrads(t *train.Trainer) error {
	wait(p.c, -1) // the buckets reduced during the backward pass
	g := t.GradsBuffer()
	N, r := p.c.Size(), p.c.Rank()
	switch {
	case p.set.PS:
		var recv *cuda.Buffer
		if r == 0 {
			recv = g
		}
		return p.c.Reduce(g, recv, Sum, 0)
	case p.set.Stage == 1:
		k := g.Len / N
		return p.c.ReduceScatter(g, g.View(r*k, k), Sum)
	}
	for i, left := range p.pending {
		if left != 0 {
			return fmt.Errorf("zero: gradient bucket %d still waits for %d rows after the backward pass", i, left)
		}
	}
	for i := range p.buckets {
		if p.buckets[i].gathered != nil {
			return fmt.Errorf("zero: unit %d's weights are still gathered after the backward pass", i)
		}
		p.buckets[i].gathers, p.buckets[i].touched = 0, false
	}
	p.reset()
	return nil
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
	case p.set.Stage == 2:
		for i := range p.buckets {
			if err := p.gatherBucket(w, &p.buckets[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

// gatherBucket all-gathers a ZeRO-2 bucket's updated weights through comm
// staging (its shards padded to N·shard), back into the weights.
func (p *policy) gatherBucket(w *cuda.Buffer, b *bucket) error {
	d, N, r := p.c.Device(), p.c.Size(), p.c.Rank()
	send, err := d.Alloc(cuda.Comm, w.DType, b.shard)
	if err != nil {
		return err
	}
	defer d.Free(send)
	recv, err := d.Alloc(cuda.Comm, w.DType, N*b.shard)
	if err != nil {
		return err
	}
	defer d.Free(recv)
	if err := d.Fill(send, 0); err != nil {
		return err
	}
	if lo, hi := b.lo+r*b.shard, min(b.lo+(r+1)*b.shard, b.hi); hi > lo {
		if err := d.Cast(send.View(0, hi-lo), w.View(lo, hi-lo)); err != nil {
			return err
		}
	}
	if err := p.c.AllGather(send, recv); err != nil {
		return err
	}
	return d.Cast(w.View(b.lo, b.hi-b.lo), recv.View(0, b.hi-b.lo))
}
