package zero

// The simulated ranks' step in time. A simulated rank's device keeps a
// clock of its kernels (cuda.TimeModel); its communicator logs, in order,
// every collective, send, receive and wait it makes, each with that
// clock's reading. After the step the logs are replayed: each rank's
// kernels between two events take the clock's difference on its compute
// stream; a collective on the compute stream (tensor parallelism's, the
// gradients' last reduction, ZeRO-1's gather) starts when every member
// has reached it and holds each member until it ends; one on the
// communication stream (DDP's and ZeRO-2's buckets during the backward
// pass, ZeRO-3's prefetched gathers) starts when every member has issued
// it and the stream is free, and holds nothing until a wait for it; a
// send arrives its time after it is made, and a receive waits for it. Each
// rank's step then has a time and a split: its kernels, the collectives
// that held it, and the time it waited for other ranks (the pipeline's
// bubble, a slower rank).

import (
	"fmt"
	"time"

	"trainmem/cuda"
)

// eventKind is what a logged event is.
type eventKind uint8

const (
	evCollective eventKind = iota // a collective on the compute stream
	evAsync                       // a collective on the communication stream
	evWait                        // the compute stream waits for async collective id
	evSend
	evRecv
)

// event is one entry of a rank's log: at compute-clock reading at, a
// collective of group g (its seq-th there) costing cost, or a wait for
// async id, or a send to or receive from peer (its seq-th of the pair).
type event struct {
	kind eventKind
	coll Collective
	at   time.Duration
	g    *Group
	seq  int
	cost time.Duration
	id   int // evAsync's id, evWait's target (-1: every one issued)
	peer int // evSend, evRecv: the peer's member index in g
}

// clockLog is one member's log of a step, and what it needs to log.
type clockLog struct {
	on      bool
	tm      cuda.TimeModel
	start   time.Duration
	end     time.Duration
	events  []event
	seqs    map[*Group]int // collectives made, per group
	pairs   map[[3]int]int // sends or receives made, per (group id, peer, direction)
	gids    map[*Group]int // a number per group, for pairs
	async   int            // async collectives issued
	inAsync bool           // the next collective goes on the communication stream
}

// Timing is a rank's replayed step: its time from the step's start to
// its end, its kernels' time, the collectives' time that held its
// compute stream, and the time it waited for other ranks (the pipeline's
// bubble, a slower member of a collective, a send not yet arrived).
type Timing struct {
	Step, Compute, Comm, Wait time.Duration
	// CommStream is the communication stream's busy time (collectives
	// overlapped with the compute stream, whether or not they held it).
	CommStream time.Duration
	// Start is the device clock's reading at the step's start; Shifts say
	// how far the replayed step runs behind the device's clock from each
	// reading on (the collectives and waits before it), in order, so that
	// a reading x of the step is at x - Start + Shift of the last shift at
	// or before x on the replayed step's clock.
	Start  time.Duration
	Shifts []Shift
	// Intervals are the step's collectives, sends' waits and waits on the
	// replayed step's clock (from 0 at the step's start).
	Intervals []Interval
}

// Shift is the replayed step's lag behind the device clock from reading
// At on.
type Shift struct {
	At, By time.Duration
}

// Interval is a stretch of a rank's replayed step: a collective on the
// compute stream (Stream "collectives": it holds the kernels) or the
// communication stream ("communication"), or the time the compute stream
// waited ("waited": for other ranks, a send, an overlapped collective).
type Interval struct {
	Name, Stream string
	Start, End   time.Duration
}

// Map is reading x of the step's device clock on the replayed step's
// clock.
func (t *Timing) Map(x time.Duration) time.Duration {
	by := time.Duration(0)
	for _, s := range t.Shifts {
		if s.At > x {
			break
		}
		by = s.By
	}
	return x - t.Start + by
}

// logStart begins a step's log on member c (nothing without a network or
// a modelled clock).
func (c *Comm) logStart() {
	tm, ok := c.Device().(cuda.TimeModel)
	if !ok || tm.Roofline().Bandwidth <= 0 {
		c.log = clockLog{}
		return
	}
	c.log = clockLog{on: true, tm: tm, start: tm.Now(), seqs: map[*Group]int{}, pairs: map[[3]int]int{}, gids: map[*Group]int{}}
}

// logEnd ends the step's log.
func (c *Comm) logEnd() {
	if c.log.on {
		c.log.end = c.log.tm.Now()
	}
}

// root is the member of the group the splits began from that c is.
func (c *Comm) root() *Comm {
	for c.g.parents != nil {
		c = c.g.parents[c.idx]
	}
	return c
}

// logCollective logs a collective of c's group: kind k of S bytes.
func (c *Comm) logCollective(k Collective, S int64) {
	r := c.root()
	l := &r.log
	if !l.on || c.g.net == nil {
		return
	}
	cost := c.g.net.Cost(k, S, c.g.span).Time
	seq := l.seqs[c.g]
	l.seqs[c.g]++
	e := event{kind: evCollective, coll: k, at: l.tm.Now(), g: c.g, seq: seq, cost: cost}
	if l.inAsync {
		e.kind, e.id = evAsync, l.async
		l.async++
	}
	l.events = append(l.events, e)
}

// logP2P logs a send to (or receive from) member peer of c's group of S
// bytes.
func (c *Comm) logP2P(send bool, peer int, S int64) {
	r := c.root()
	l := &r.log
	if !l.on || c.g.net == nil {
		return
	}
	gid, ok := l.gids[c.g]
	if !ok {
		gid = len(l.gids)
		l.gids[c.g] = gid
	}
	dir := 0
	kind := evRecv
	if send {
		dir, kind = 1, evSend
	}
	key := [3]int{gid, peer, dir}
	seq := l.pairs[key]
	l.pairs[key]++
	// One hop, across nodes when the group spans nodes.
	sp := Span{N: 2, Nodes: 1}
	if c.g.span.Nodes > 1 {
		sp.Nodes = 2
	}
	l.events = append(l.events, event{kind: kind, at: l.tm.Now(), g: c.g, seq: seq, peer: peer, cost: c.g.net.Cost(SendRecv, S, sp).Time})
}

// Async runs f, a collective of c's, on the communication stream: it
// overlaps the compute stream until a Wait for the id it returns (-1
// when the step is not timed).
func (c *Comm) Async(f func() error) (int, error) {
	l := &c.root().log
	if !l.on {
		return -1, f()
	}
	l.inAsync = true
	id := l.async
	err := f()
	l.inAsync = false
	if l.async == id {
		return -1, err // f made no collective
	}
	return l.async - 1, err
}

// Wait holds the compute stream until async collective id (and every one
// before it on the stream) has ended; -1: every one issued so far.
func (c *Comm) Wait(id int) {
	l := &c.root().log
	if !l.on || l.async == 0 {
		return
	}
	if id < 0 || id >= l.async {
		id = l.async - 1
	}
	l.events = append(l.events, event{kind: evWait, at: l.tm.Now(), id: id})
}

// replay times the members' logged step (members: the group's root
// communicators, in member order) and returns each member's timing. A
// collective waits for the members that are in its group; the ranks they
// stand for are alike and reach it at the same time.
func replay(members []*Comm) ([]Timing, error) {
	n := len(members)
	type state struct {
		next     int           // the next event
		last     time.Duration // the compute clock reading of the last event handled
		c, k     time.Duration // the compute and communication streams' times
		asyncEnd []time.Duration
		t        Timing
	}
	st := make([]state, n)
	index := map[*Comm]int{}
	for i, m := range members {
		index[m] = i
		st[i].last = m.log.start
	}
	// The collectives reached, per group and sequence: each member's
	// ready time (compute stream; for async, its issue time and stream).
	type key struct {
		g   *Group
		seq int
	}
	type arrival struct {
		ready map[int]time.Duration // member → the time it can start
		done  bool
		end   time.Duration
	}
	arrivals := map[key]*arrival{}
	sends := map[[4]int]time.Duration{} // (group id, from, to, seq) → arrival
	gid := map[*Group]int{}
	idOf := func(g *Group) int {
		if v, ok := gid[g]; ok {
			return v
		}
		gid[g] = len(gid)
		return gid[g]
	}
	// memberOf is member i's index among g's members, and the member
	// indexes (in members) of g's members.
	membersOf := func(g *Group) []int {
		out := make([]int, len(g.comms))
		for j, gc := range g.comms {
			r := gc
			for r.g.parents != nil {
				r = r.g.parents[r.idx]
			}
			out[j] = index[r]
		}
		return out
	}
	advance := func(i int, e event) {
		s := &st[i]
		d := e.at - s.last
		s.last = e.at
		s.c += d
		s.t.Compute += d
	}
	// shifted records rank i's lag after an event, and an interval of it.
	shifted := func(i int, name, stream string, from, to time.Duration) {
		s := &st[i]
		if to > from {
			s.t.Intervals = append(s.t.Intervals, Interval{Name: name, Stream: stream, Start: from, End: to})
		}
		by := s.c - (s.last - members[i].log.start)
		if n := len(s.t.Shifts); n == 0 || s.t.Shifts[n-1].By != by {
			s.t.Shifts = append(s.t.Shifts, Shift{At: s.last, By: by})
		}
	}
	for {
		progress, remaining := false, false
		for i, m := range members {
			s := &st[i]
			for s.next < len(m.log.events) {
				e := m.log.events[s.next]
				switch e.kind {
				case evWait:
					advance(i, e)
					if e.id < len(s.asyncEnd) && s.asyncEnd[e.id] > s.c {
						from := s.c
						s.t.Comm += s.asyncEnd[e.id] - s.c
						s.c = s.asyncEnd[e.id]
						shifted(i, "wait for the communication stream", "waited", from, s.c)
					}
				case evSend:
					advance(i, e)
					sends[[4]int{idOf(e.g), selfIn(e.g, m), e.peer, e.seq}] = s.c + e.cost
				case evRecv:
					k := [4]int{idOf(e.g), e.peer, selfIn(e.g, m), e.seq}
					at, ok := sends[k]
					if !ok && peerIsMember(e.g, e.peer) {
						goto blocked
					}
					advance(i, e)
					if !ok {
						at = s.c + e.cost // the peer is a rank this one stands beside: alike, in step
					}
					if at > s.c {
						from := s.c
						s.t.Wait += at - s.c
						s.c = at
						shifted(i, fmt.Sprintf("receive from rank %d", e.peer), "waited", from, s.c)
					}
				case evCollective, evAsync:
					k := key{e.g, e.seq}
					a := arrivals[k]
					if a == nil {
						a = &arrival{ready: map[int]time.Duration{}}
						arrivals[k] = a
					}
					if _, in := a.ready[i]; !in {
						advance(i, e)
						r := s.c
						if e.kind == evAsync {
							r = max(r, s.k)
						}
						a.ready[i] = r
					}
					ms := membersOf(e.g)
					if !a.done {
						if len(a.ready) < len(ms) {
							goto blocked
						}
						var start time.Duration
						for _, r := range a.ready {
							start = max(start, r)
						}
						a.done, a.end = true, start+e.cost
					}
					name := e.name()
					if e.kind == evAsync {
						s.t.CommStream += e.cost
						s.k = a.end
						s.asyncEnd = append(s.asyncEnd, a.end)
						s.t.Intervals = append(s.t.Intervals, Interval{Name: name, Stream: "communication", Start: a.end - e.cost, End: a.end})
					} else {
						start := a.end - e.cost
						if start > s.c {
							s.t.Wait += start - s.c
							s.t.Intervals = append(s.t.Intervals, Interval{Name: "wait for the group: " + name, Stream: "waited", Start: s.c, End: start})
						}
						s.t.Comm += e.cost
						s.c = a.end
						shifted(i, name, "collectives", start, a.end)
					}
				}
				s.next++
				progress = true
			}
			// The step's last kernels after the last event.
			if s.next == len(m.log.events) && s.last != m.log.end {
				d := m.log.end - s.last
				s.c += d
				s.t.Compute += d
				s.last = m.log.end
				progress = true
			}
			continue
		blocked:
			remaining = true
		}
		if !remaining {
			break
		}
		if !progress {
			return nil, fmt.Errorf("zero: the simulated ranks' logs do not replay: a collective or receive waits for a rank that never reaches it")
		}
	}
	out := make([]Timing, n)
	for i := range st {
		out[i] = st[i].t
		out[i].Step = st[i].c
		out[i].Start = members[i].log.start
	}
	return out, nil
}

// name is a collective event's name: its kind, its size and its group's.
func (e event) name() string {
	return fmt.Sprintf("%s over %d", e.coll, e.g.span.N)
}

// selfIn is root member m's index among g's members.
func selfIn(g *Group, m *Comm) int {
	for _, gc := range g.comms {
		if gc.root() == m {
			return gc.rank
		}
	}
	return -1
}

// peerIsMember reports whether rank peer of g is one of its members.
func peerIsMember(g *Group, peer int) bool {
	for _, gc := range g.comms {
		if gc.rank == peer {
			return true
		}
	}
	return false
}
