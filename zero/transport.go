package zero

// How a group's members meet for a collective and move a ring step's
// bytes. In one process (shared) the members are goroutines that meet at a
// barrier and copy from each other's memory; across processes (linked, in
// link.go) each process is one member that checks its call with its ring
// neighbours and sends and receives over a Link. The collectives (ring.go) are
// written once, over this interface, so every transport moves the same
// bytes in the same order and stages them in the same buffers.

import (
	"fmt"
	"sync"

	"trainmem/cuda"
)

// transport is a group's way of meeting and moving bytes.
type transport interface {
	// start begins a Run: every member is present.
	start()
	// meet compares member c's call k with the other ranks': nil when all
	// made the same call and none failed; otherwise an error on every rank
	// naming a rank that differs and its call (or the rank that failed),
	// after which the group cannot go on.
	meet(c *Comm, k call) error
	// exchange is one step of a ring for member c: it sends out (nil:
	// nothing) to rank to and receives in (nil: nothing) from rank from,
	// and returns when both are done. With neither, it orders the steps
	// around it where the ranks share memory. On devices that hold no
	// data nothing moves and it returns at once.
	exchange(c *Comm, out *cuda.Buffer, to int, in *cuda.Buffer, from int) error
	// sendRecv is member c's SendRecv: out to rank to and in from rank
	// from (nil: that half is not made), checked with the peers, the
	// buffers' own checks done; the data moves when move is set (else a
	// native engine moves it once the pair agrees).
	sendRecv(c *Comm, out *cuda.Buffer, to int, in *cuda.Buffer, from int, move bool) error
	// leave says member c's function returned (err: why it failed): the
	// ranks still in a collective with it must not wait for it.
	leave(c *Comm, err error)
}

// agree compares the calls of every rank (calls[i] is ranks[i]'s): the
// first failed call, or the first that differs from ranks[0]'s, is the
// error every rank returns.
func agree(calls []call, ranks []int) error {
	k := calls[0]
	for q, o := range calls {
		switch {
		case o.err != nil:
			return fmt.Errorf("rank %d: %w", ranks[q], o.err)
		case !o.same(k):
			return fmt.Errorf("zero: the ranks' calls differ: rank %d calls %s, rank %d %s", ranks[0], k, ranks[q], o)
		}
	}
	return nil
}

// same reports whether two ranks' calls are the same collective.
func (k call) same(o call) bool {
	return o.kind == k.kind && o.op == k.op && o.root == k.root && o.dtype == k.dtype && o.sendLen == k.sendLen && o.recvLen == k.recvLen
}

// shared is the transport of in-process members: each writes its entry
// before a barrier and reads the others' after it.
type shared struct {
	g     *Group
	bar   barrier
	calls []call         // each member's call, compared at meet
	outs  []*cuda.Buffer // each member's outgoing block of the step in flight
	p2p   mailboxes      // the members' point-to-point hand-overs (p2p.go)
}

func newShared(g *Group) *shared {
	return &shared{g: g, calls: make([]call, len(g.devs)), outs: make([]*cuda.Buffer, len(g.devs))}
}

func (t *shared) start() {
	t.bar.init(len(t.g.devs))
	t.p2p.start(len(t.g.devs))
}

func (t *shared) meet(c *Comm, k call) error {
	t.calls[c.idx] = k
	if err := t.bar.wait(); err != nil {
		return err
	}
	err := agree(t.calls, t.g.worldRanks())
	if err == nil {
		err = t.bar.wait() // every rank has read the calls before any writes its next
	}
	if err != nil {
		t.bar.breakWith(err) // a group that disagreed cannot go on
	}
	return err
}

// exchange publishes out, and after the barrier copies the sender's
// published block into in: the ranks of a group that computes are its
// members (NewSparseGroup takes shape-only devices), so rank from is
// member from. A second barrier keeps every out unchanged until its
// receiver has copied it.
func (t *shared) exchange(c *Comm, out *cuda.Buffer, to int, in *cuda.Buffer, from int) error {
	if !t.g.computes {
		return nil // nothing moves: the steps need no order
	}
	t.outs[c.idx] = out
	if err := t.bar.wait(); err != nil {
		return err
	}
	if in != nil {
		src := t.outs[from]
		if src == nil || src.Len != in.Len {
			err := fmt.Errorf("zero: rank %d expected %d elements from rank %d in a ring step, which sent %v", c.rank, in.Len, from, src)
			t.bar.breakWith(err)
			return err
		}
		copyHost(in, src)
	}
	return t.bar.wait()
}

func (t *shared) leave(c *Comm, err error) {
	why := "returned"
	if err != nil {
		why = fmt.Sprintf("failed (%v)", err)
	}
	t.bar.breakWith(fmt.Errorf("zero: rank %d left the group (it %s) while others were in a collective", c.world(), why))
	t.p2p.leave(c.idx, err)
}

// barrier is a reusable barrier for the group's ranks that can be broken:
// once a rank leaves, or the ranks disagree, every wait fails with the
// reason, so that no rank waits forever.
type barrier struct {
	mu      sync.Mutex
	cond    sync.Cond
	n       int
	arrived int
	gen     uint64
	err     error
}

func (b *barrier) init(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n, b.arrived, b.err = n, 0, nil
	b.cond.L = &b.mu
}

func (b *barrier) wait() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return b.err
	}
	gen := b.gen
	b.arrived++
	if b.arrived == b.n {
		b.arrived = 0
		b.gen++
		b.cond.Broadcast()
		return nil
	}
	for gen == b.gen && b.err == nil {
		b.cond.Wait()
	}
	if gen == b.gen {
		return b.err
	}
	return nil
}

// breakWith fails every wait, now and later, with err (the first reason
// given wins).
func (b *barrier) breakWith(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err == nil {
		b.err = err
	}
	b.cond.Broadcast()
}
