package zero

// Point-to-point: a rank's send to one peer and receive from another in one
// call, as pipeline stages exchange activations and their gradients.

import (
	"fmt"
	"sync"

	"trainmem/cuda"
)

// SendRecv sends send to rank to and receives recv from rank from, both at
// once (a nil buffer: that half is not made), as NCCL's ncclSend and
// ncclRecv inside one ncclGroupStart/ncclGroupEnd, so two ranks that send
// to each other do not wait on each other. Rank to must make a SendRecv
// that receives from this rank, and rank from one that sends to it, of the
// same dtype and length: a difference fails the call on the rank that
// receives (over processes it aborts the group), naming both ranks and
// both lengths. Only the ranks of each half meet; the others go on. The
// bytes count as send_recv traffic, sent on one side and received on the
// other, and the call once on each rank. A peer that leaves the group
// while this rank waits for it fails the call, naming it. Ranks that hold
// no data move none: their calls check their own arguments and count the
// traffic, with no peer needed (a sparse group's peers may not be members).
// Under a native engine (NCCL's ncclSend and ncclRecv) the pair checks its
// halves through the group's transport first, then the engine moves them.
func (c *Comm) SendRecv(send *cuda.Buffer, to int, recv *cuda.Buffer, from int) error {
	if err := c.checkP2P(send, to, "send to"); err != nil {
		return err
	}
	if err := c.checkP2P(recv, from, "receive from"); err != nil {
		return err
	}
	c.countCall(SendRecv)
	if send == nil && recv == nil {
		return nil
	}
	e := c.g.Engine(c.idx)
	// Under a native engine the pair checks its halves first, moving
	// nothing (the library would wait forever on a pair that disagrees),
	// and the engine moves the data.
	if err := c.g.tr.sendRecv(c, send, to, recv, from, e == nil); err != nil {
		return err
	}
	if e != nil {
		if err := e.SendRecv(send, to, recv, from); err != nil {
			return err
		}
	}
	var sent, recvd int64
	if send != nil {
		sent = send.Bytes()
		c.logP2P(true, to, sent)
	}
	if recv != nil {
		recvd = recv.Bytes()
		c.logP2P(false, from, recvd)
	}
	c.countEach(SendRecv, func(int) (int64, int64) { return sent, recvd })
	return nil
}

// checkP2P checks one half of a SendRecv: a peer in the group other than
// this rank, a buffer of a dtype the collectives move, in host memory
// where the data moves through the host.
func (c *Comm) checkP2P(b *cuda.Buffer, peer int, half string) error {
	if b == nil {
		return nil
	}
	switch {
	case peer < 0 || peer >= c.Size():
		return fmt.Errorf("zero: send_recv: %s rank %d: out of range (valid: 0 to %d)", half, peer, c.Size()-1)
	case peer == c.rank:
		return fmt.Errorf("zero: send_recv: rank %d cannot %s itself (copy within the rank)", c.rank, half)
	}
	switch b.DType {
	case cuda.F32, cuda.F16, cuda.BF16, cuda.F64, cuda.I32:
	default:
		return fmt.Errorf("zero: send_recv: %s has an unknown dtype", b)
	}
	if c.g.computes && c.g.eng.readsHost() && b.Len > 0 && len(b.Host()) != int(b.Bytes()) {
		return fmt.Errorf("zero: send_recv: %s is not in host memory (a buffer of another device?)", b)
	}
	return nil
}

// p2pMismatch is the error of a receive that does not match its send.
func p2pMismatch(sender, receiver int, sent, want *cuda.Buffer) error {
	return fmt.Errorf("zero: send_recv: rank %d sends %d elements of %s to rank %d, which receives %d of %s", sender, sent.Len, sent.DType, receiver, want.Len, want.DType)
}

// mailboxes are an in-process group's point-to-point hand-overs: the
// sender offers its buffer on the box of its pair of ranks and waits until
// the receiver has copied it (or found it wrong); either side waiting on
// a rank that left gives up, naming it.
type mailboxes struct {
	mu    sync.Mutex
	boxes map[[2]int]chan p2pOffer // (from, to) → the offers from from to to
	gone  []chan struct{}          // closed when member i leaves
	why   []error                  // why member i left (nil: it returned)
}

// p2pOffer is a sender's buffer, and where the receiver answers.
type p2pOffer struct {
	buf  *cuda.Buffer
	done chan error
}

func (m *mailboxes) start(members int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.boxes = map[[2]int]chan p2pOffer{}
	m.gone, m.why = make([]chan struct{}, members), make([]error, members)
	for i := range m.gone {
		m.gone[i] = make(chan struct{})
	}
}

func (m *mailboxes) box(from, to int) chan p2pOffer {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [2]int{from, to}
	b, ok := m.boxes[k]
	if !ok {
		b = make(chan p2pOffer)
		m.boxes[k] = b
	}
	return b
}

// leave marks member i gone, err saying why.
func (m *mailboxes) leave(i int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.gone[i]:
	default:
		m.why[i] = err
		close(m.gone[i])
	}
}

// left is the error of a wait on member i (rank r) that left.
func (m *mailboxes) left(r, i int, waiter int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	why := "returned"
	if m.why[i] != nil {
		why = fmt.Sprintf("failed (%v)", m.why[i])
	}
	return fmt.Errorf("zero: send_recv: rank %d left the group (it %s) while rank %d waited for it", r, why, waiter)
}

// sendRecv is SendRecv in one process: the send is offered from a
// goroutine of its own while this rank takes its receive, so two ranks
// that send to each other meet in either order; the receiver copies the
// data when move is set (else it only checks the pair). The ranks of a
// group that computes are its members (as exchange has it).
func (t *shared) sendRecv(c *Comm, out *cuda.Buffer, to int, in *cuda.Buffer, from int, move bool) error {
	if !t.g.computes {
		return nil // nothing moves, and a sparse group's peers may be absent
	}
	m := &t.p2p
	me := c.world()
	sent := make(chan error, 1)
	if out != nil {
		go func() {
			offer := p2pOffer{buf: out, done: make(chan error, 1)}
			select {
			case m.box(c.rank, to) <- offer:
			case <-m.gone[to]:
				sent <- m.left(t.g.comms[to].world(), to, me)
				return
			}
			// The receiver took the offer: it answers before it can leave.
			sent <- <-offer.done
		}()
	} else {
		sent <- nil
	}
	var recvErr error
	if in != nil {
		select {
		case offer := <-m.box(from, c.rank):
			if offer.buf.Len != in.Len || offer.buf.DType != in.DType {
				recvErr = p2pMismatch(t.g.comms[from].world(), me, offer.buf, in)
			} else if move {
				copyHost(in, offer.buf)
			}
			offer.done <- recvErr
		case <-m.gone[from]:
			recvErr = m.left(t.g.comms[from].world(), from, me)
		}
	}
	sendErr := <-sent
	if recvErr != nil {
		return recvErr
	}
	return sendErr
}

// sendRecv over processes: each half's header (a call of kind send_recv,
// its dtype and length) then, when move is set, the data, each in one
// Exchange. The receiver compares the sender's header with its buffer and
// on a difference aborts the group with it; the header has a call's size,
// so a peer that makes a collective instead is found by the same
// comparison in either direction.
func (t *linked) sendRecv(c *Comm, out *cuda.Buffer, to int, in *cuda.Buffer, from int, move bool) error {
	var oh, ih []byte
	var ob, ib []byte
	if out != nil {
		oh = encodeCall(0, call{kind: SendRecv, dtype: out.DType, sendLen: out.Len})
		if move {
			ob = out.Host()
		}
	}
	if in != nil {
		ih = make([]byte, callLen)
		if move {
			ib = in.Host()
		}
	}
	if err := t.l.Exchange(to, oh, from, ih); err != nil {
		return err
	}
	if in != nil {
		_, k, err := decodeCall(ih)
		switch {
		case err != nil:
			err = fmt.Errorf("rank %d: %w", from, err)
		case k.kind != SendRecv:
			err = fmt.Errorf("zero: the ranks' calls differ: rank %d calls %s, rank %d send_recv", from, k, c.rank)
		case k.sendLen != in.Len || k.dtype != in.DType:
			err = fmt.Errorf("zero: send_recv: rank %d sends %d elements of %s to rank %d, which receives %d of %s", from, k.sendLen, k.dtype, c.rank, in.Len, in.DType)
		}
		if err != nil {
			t.l.Abort(err)
			return err
		}
	}
	if !move {
		return nil
	}
	return t.l.Exchange(to, ob, from, ib)
}
