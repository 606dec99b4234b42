package zero

// The collectives of Comm: checks, the rendezvous that compares the ranks'
// calls, and then the group's engine moves the data: the ring algorithm
// step by step (here), or a native library (native.go). At step s of a ring, rank r
// sends to rank r+1 and receives from rank r-1 (mod N); a step ends at a
// barrier, so that every block written in a step is read only after it.
// Partial sums travel in two staging buffers per rank (comm, from the
// rank's own allocator): a rank receives step s's partial into buffer s%2
// while it sends the one it reduced at step s-1 from the other.

import (
	"fmt"

	"trainmem/cuda"
	"trainmem/model"
)

// Broadcast implements Communicator.Broadcast: a chain from the root,
// each rank but the last forwarding the root's elements to the next.
func (c *Comm) Broadcast(send, recv *cuda.Buffer, root int) error {
	return c.collective(call{kind: Broadcast, root: root}, send, recv, func(sendLen, recvLen int) error {
		if c.rank == root && sendLen != recvLen {
			return fmt.Errorf("send has %d elements, want recv's %d", sendLen, recvLen)
		}
		return nil
	}, func() error { return c.g.eng.broadcast(c, send, recv, root) })
}

// broadcast is the ring's Broadcast.
func (ring) broadcast(c *Comm, send, recv *cuda.Buffer, root int) error {
	n := c.Size()
	if c.rank == root {
		c.copyLocal(recv, send)
	}
	size := int64(recv.DType.Size())
	if !c.g.computes {
		// Shape-only ranks move nothing: the chain's bytes in closed form.
		// Every rank but the root's predecessor sends once, every rank but
		// the root receives once.
		bytes := int64(recv.Len) * size
		c.countEach(Broadcast, func(r int) (sent, recvd int64) {
			if n > 1 && r != mod(root-1, n) {
				sent = bytes
			}
			if n > 1 && r != root {
				recvd = bytes
			}
			return sent, recvd
		})
		return nil
	}
	for s := range n - 1 {
		from, to := (root+s)%n, (root+s+1)%n
		var out, in *cuda.Buffer
		if c.rank == from {
			out = recv
			c.count(Broadcast, int64(recv.Len)*size, 0)
		}
		if c.rank == to {
			in = recv
			c.count(Broadcast, 0, int64(recv.Len)*size)
		}
		if err := c.exchange(out, to, in, from); err != nil {
			return err
		}
	}
	return nil
}

// Reduce implements Communicator.Reduce: a chain from the rank after the
// root to the root, each rank adding its elements to the partial it
// receives and forwarding the sum.
func (c *Comm) Reduce(send, recv *cuda.Buffer, op Op, root int) error {
	return c.collective(call{kind: Reduce, op: op, root: root}, send, recv, func(sendLen, recvLen int) error {
		if c.rank == root && sendLen != recvLen {
			return fmt.Errorf("recv has %d elements, want send's %d", recvLen, sendLen)
		}
		return nil
	}, func() error { return c.g.eng.reduce(c, send, recv, op, root) })
}

// reduce is the ring's Reduce.
func (ring) reduce(c *Comm, send, recv *cuda.Buffer, op Op, root int) error {
	n := c.Size()
	size := int64(send.DType.Size())
	if !c.g.computes {
		// Shape-only ranks move nothing: the chain's bytes in closed form.
		// Every rank but the root sends once, every rank but the root's
		// successor receives once.
		bytes := int64(send.Len) * size
		c.countEach(Reduce, func(r int) (sent, recvd int64) {
			if n > 1 && r != root {
				sent = bytes
			}
			if n > 1 && r != (root+1)%n {
				recvd = bytes
			}
			return sent, recvd
		})
		return nil
	}
	for s := range n - 1 {
		from, to := (root+1+s)%n, (root+2+s)%n
		var out, in *cuda.Buffer
		if c.rank == from {
			out = send
			if s > 0 {
				out = c.own((s - 1) % 2)
			}
			c.count(Reduce, int64(send.Len)*size, 0)
		}
		if c.rank == to {
			in = c.own(s % 2)
			c.count(Reduce, 0, int64(send.Len)*size)
		}
		if err := c.exchange(out, to, in, from); err != nil {
			return err
		}
		if c.rank == to {
			c.reduceLocal(c.own(s%2), send, op)
		}
	}
	if c.rank == root {
		if n == 1 {
			c.copyLocal(recv, send)
		} else {
			c.copyLocal(recv, c.own((n-2)%2))
		}
	}
	return nil
}

// AllReduce implements Communicator.AllReduce: NCCL's ring, a
// reduce-scatter of N blocks of ShardLen(count, N) elements (the last ones
// shorter or empty) followed by an all-gather of the reduced blocks.
func (c *Comm) AllReduce(send, recv *cuda.Buffer, op Op) error {
	return c.collective(call{kind: AllReduce, op: op}, send, recv, func(sendLen, recvLen int) error {
		if sendLen != recvLen {
			return fmt.Errorf("recv has %d elements, want send's %d", recvLen, sendLen)
		}
		return nil
	}, func() error { return c.g.eng.allReduce(c, send, recv, op) })
}

// AllReduceSum is AllReduce(b, b, Sum): the in-place sum a tensor-parallel
// rank's layers make over their tensor group (model.TensorGroup).
func (c *Comm) AllReduceSum(b *cuda.Buffer) error { return c.AllReduce(b, b, Sum) }

// ReduceScatterSum is ReduceScatter(send, recv, Sum): sequence
// parallelism's sum of a row-parallel layer's rows (model.TensorGroup).
func (c *Comm) ReduceScatterSum(send, recv *cuda.Buffer) error {
	return c.ReduceScatter(send, recv, Sum)
}

// AllReduceMax is AllReduce(b, b, Max), the vocabulary-parallel cross
// entropy's rows' maxima (model.TensorGroup).
func (c *Comm) AllReduceMax(b *cuda.Buffer) error { return c.AllReduce(b, b, Max) }

var _ model.TensorGroup = (*Comm)(nil)

// allReduce is the ring's AllReduce.
func (ring) allReduce(c *Comm, send, recv *cuda.Buffer, op Op) error {
	n, count := c.Size(), send.Len
	block := func(b *cuda.Buffer, i int) *cuda.Buffer {
		lo, hi := blockRange(count, n, i)
		return b.View(lo, hi-lo)
	}
	if err := c.reduceScatterRing(AllReduce, op, count, func(i int) *cuda.Buffer { return block(send, i) }, block(recv, c.rank)); err != nil {
		return err
	}
	return c.allGatherRing(AllReduce, func(b *cuda.Buffer, i int) *cuda.Buffer { return block(b, i) }, recv)
}

// ReduceScatter implements Communicator.ReduceScatter.
func (c *Comm) ReduceScatter(send, recv *cuda.Buffer, op Op) error {
	n := c.Size()
	return c.collective(call{kind: ReduceScatter, op: op}, send, recv, func(sendLen, recvLen int) error {
		if sendLen != n*recvLen {
			return fmt.Errorf("send has %d elements, want N·recv = %d·%d = %d (shard a tensor of n elements over PaddedLen(n, N))", sendLen, n, recvLen, n*recvLen)
		}
		return nil
	}, func() error { return c.g.eng.reduceScatter(c, send, recv, op) })
}

// reduceScatter is the ring's ReduceScatter.
func (ring) reduceScatter(c *Comm, send, recv *cuda.Buffer, op Op) error {
	n, kk := c.Size(), recv.Len
	return c.reduceScatterRing(ReduceScatter, op, n*kk, func(i int) *cuda.Buffer { return send.View(i*kk, kk) }, recv)
}

// AllGather implements Communicator.AllGather.
func (c *Comm) AllGather(send, recv *cuda.Buffer) error {
	n := c.Size()
	return c.collective(call{kind: AllGather}, send, recv, func(sendLen, recvLen int) error {
		if recvLen != n*sendLen {
			return fmt.Errorf("recv has %d elements, want N·send = %d·%d = %d", recvLen, n, sendLen, n*sendLen)
		}
		return nil
	}, func() error { return c.g.eng.allGather(c, send, recv) })
}

// allGather is the ring's AllGather.
func (ring) allGather(c *Comm, send, recv *cuda.Buffer) error {
	kk := send.Len
	c.copyLocal(recv.View(c.rank*kk, kk), send)
	return c.allGatherRing(AllGather, func(b *cuda.Buffer, i int) *cuda.Buffer { return b.View(i*kk, kk) }, recv)
}

// reduceScatterRing reduces block i of every rank (own(i) on this rank)
// into this rank's out, block rank: at step s rank r sends its partial of
// block r-s-1 and receives block r-s-2's, adding its own to it; after N-1
// steps it holds block r summed over every rank, in the order r+1, r+2, ...,
// r.
//
// total is the elements of every block together. Shape-only ranks move
// nothing, so their counts are the loop's in closed form (every block but
// one each way), which makes a collective of N ranks cost the same at any
// N: the blocks sent are every one but block r, those received every one
// but block r-1.
func (c *Comm) reduceScatterRing(kind Collective, op Op, total int, own func(i int) *cuda.Buffer, out *cuda.Buffer) error {
	n, r := c.Size(), c.rank
	if n == 1 {
		c.copyLocal(out, own(0))
		return nil
	}
	size := int64(out.DType.Size())
	next, prev := (r+1)%n, mod(r-1, n)
	if !c.g.computes {
		c.countEach(kind, func(r int) (int64, int64) {
			return int64(total-own(r).Len) * size, int64(total-own(mod(r-1, n)).Len) * size
		})
		return nil
	}
	for s := range n - 1 {
		sb, rb := mod(r-s-1, n), mod(r-s-2, n)
		outgoing := own(sb)
		if s > 0 {
			outgoing = c.own((s-1)%2).View(0, outgoing.Len)
		}
		mine := own(rb)
		in := c.own(s%2).View(0, mine.Len)
		c.count(kind, int64(outgoing.Len)*size, int64(mine.Len)*size)
		if err := c.exchange(outgoing, next, in, prev); err != nil {
			return err
		}
		c.reduceLocal(in, mine, op)
	}
	c.copyLocal(out, c.own((n-2)%2).View(0, out.Len))
	return c.exchange(nil, next, nil, prev) // every rank's result is in place before the next phase reads recvs
}

// allGatherRing passes every rank's block (already in its recv, block
// rank) around the ring into every rank's recv: at step s rank r sends
// block r-s to rank r+1.
//
// Shape-only ranks count the loop's bytes in closed form: every block but
// block r+1 sent, every one but block r received.
func (c *Comm) allGatherRing(kind Collective, block func(b *cuda.Buffer, i int) *cuda.Buffer, recv *cuda.Buffer) error {
	n, r := c.Size(), c.rank
	size := int64(recv.DType.Size())
	next, prev := (r+1)%n, mod(r-1, n)
	if !c.g.computes {
		if n > 1 {
			c.countEach(kind, func(r int) (int64, int64) {
				return int64(recv.Len-block(recv, (r+1)%n).Len) * size, int64(recv.Len-block(recv, r).Len) * size
			})
		}
		return nil
	}
	for s := range n - 1 {
		sb, rb := mod(r-s, n), mod(r-s-1, n)
		out, in := block(recv, sb), block(recv, rb)
		c.count(kind, int64(out.Len)*size, int64(in.Len)*size)
		if err := c.exchange(out, next, in, prev); err != nil {
			return err
		}
	}
	return nil
}

func mod(a, n int) int { return ((a % n) + n) % n }

// engine is how a group moves a collective's data once its ranks have
// agreed on the call: the ring over the group's transport (ring, this
// file) or a native library's collectives (native, native.go). It is
// chosen once, when the group is made (NewNativeGroup, or NewRanks for a
// simulation of a native setting), so that no collective asks which.
type engine interface {
	broadcast(c *Comm, send, recv *cuda.Buffer, root int) error
	reduce(c *Comm, send, recv *cuda.Buffer, op Op, root int) error
	allReduce(c *Comm, send, recv *cuda.Buffer, op Op) error
	reduceScatter(c *Comm, send, recv *cuda.Buffer, op Op) error
	allGather(c *Comm, send, recv *cuda.Buffer) error
	// staging is the length of each of the two comm buffers a call takes
	// from the rank's allocator over n ranks.
	staging(k call, n int) int
	// readsHost is whether the engine reads the buffers' memory from the
	// host (the ring, on devices that compute).
	readsHost() bool
	// agreed counts rank c's traffic of call k where the engine does not
	// count it as it moves the bytes.
	agreed(c *Comm, k call)
}

// ring moves the data with NCCL's ring algorithm over the group's
// transport, staging partial sums in the rank's allocator (comm) and
// counting every step's bytes as it sends them.
type ring struct{}

func (ring) staging(k call, n int) int { return k.staging(n) }
func (ring) readsHost() bool           { return true }
func (ring) agreed(*Comm, call)        {}

// call is one rank's side of a collective, compared across ranks before
// any data moves.
type call struct {
	kind             Collective
	op               Op
	root             int
	dtype            cuda.DType
	sendLen, recvLen int
	err              error // this rank's arguments or staging failed
}

func (k call) String() string {
	s := fmt.Sprintf("%s of %s", k.kind, k.dtype)
	switch k.kind {
	case Reduce, AllReduce, ReduceScatter:
		s += " (" + k.op.String() + ")"
	}
	if k.kind == Broadcast || k.kind == Reduce {
		s += fmt.Sprintf(" to root %d", k.root)
	}
	return s + fmt.Sprintf(", send %d and recv %d elements", k.sendLen, k.recvLen)
}

// staging is the length of each of the two staging buffers a call's ring
// needs over n ranks: a partial sum in flight (the whole count along a
// reduce chain, a ring block of an all-reduce, a block of a
// reduce-scatter); none for one rank or a collective that reduces nothing.
func (k call) staging(n int) int {
	if n == 1 {
		return 0
	}
	switch k.kind {
	case Reduce:
		return k.sendLen
	case AllReduce:
		return ShardLen(k.sendLen, n)
	case ReduceScatter:
		return k.recvLen
	}
	return 0
}

// checkBuffers checks send and recv (recv may be nil off the root of a
// Reduce, send off the root of a Broadcast: NCCL reads them only there),
// records the call's dtype and lengths, and runs the collective's own
// length rule.
func (c *Comm) checkBuffers(send, recv *cuda.Buffer, k *call, lengths func(sendLen, recvLen int) error) error {
	kind := k.kind
	if k.op >= numOps {
		return fmt.Errorf("zero: %s: unknown reduction %v (valid: sum, min, max)", kind, k.op)
	}
	if (kind == Broadcast || kind == Reduce) && (k.root < 0 || k.root >= c.Size()) {
		return fmt.Errorf("zero: %s: root %d out of range (valid: 0 to %d)", kind, k.root, c.Size()-1)
	}
	needSend := kind != Broadcast || c.rank == k.root
	needRecv := kind != Reduce || c.rank == k.root
	switch {
	case needSend && send == nil:
		return fmt.Errorf("zero: %s: send is nil", kind)
	case needRecv && recv == nil:
		return fmt.Errorf("zero: %s: recv is nil", kind)
	case kind == Reduce && recv == nil:
		recv = send // off the root: lengths from send
	case kind == Broadcast && send == nil:
		send = recv
	}
	for _, b := range []*cuda.Buffer{send, recv} {
		switch b.DType {
		case cuda.F32, cuda.F16, cuda.BF16, cuda.F64, cuda.I32:
		default:
			return fmt.Errorf("zero: %s: %s has an unknown dtype", kind, b)
		}
		if c.g.computes && c.g.eng.readsHost() && b.Len > 0 && len(b.Host()) != int(b.Bytes()) {
			return fmt.Errorf("zero: %s: %s is not in host memory (a buffer of another device?)", kind, b)
		}
	}
	if send.DType != recv.DType {
		return fmt.Errorf("zero: %s: send is %s and recv %s, want one dtype", kind, send.DType, recv.DType)
	}
	k.dtype, k.sendLen, k.recvLen = send.DType, send.Len, recv.Len
	switch kind { // off the root only one buffer counts
	case Broadcast:
		k.sendLen = recv.Len
	case Reduce:
		k.recvLen = send.Len
	}
	if err := lengths(send.Len, recv.Len); err != nil {
		return fmt.Errorf("zero: %s: %w", kind, err)
	}
	return nil
}

// collective is every collective's course on this rank: its buffers
// checked (checkBuffers, with the collective's own length rule), the ranks
// met and agreed (begin), then move (the engine's), then the staging given
// back (end).
func (c *Comm) collective(k call, send, recv *cuda.Buffer, lengths func(sendLen, recvLen int) error, move func() error) error {
	k.err = c.checkBuffers(send, recv, &k, lengths)
	if err := c.begin(&k); err != nil {
		return err
	}
	defer c.end()
	c.logCollective(k.kind, k.bytes())
	return move()
}

// bytes is the call's buffer in nccl-tests' terms (Network.Cost's S): the
// all-reduce's, the reduce-scatter's and the reduce's input, the
// all-gather's output, the broadcast's buffer.
func (k call) bytes() int64 {
	n := k.sendLen
	if k.kind == AllGather || k.kind == Broadcast {
		n = k.recvLen
	}
	return int64(n) * int64(k.dtype.Size())
}

// begin allocates this rank's staging (two comm buffers of the call's
// staging length; none under a native engine, which stages in its own
// buffers) and meets the other ranks: every rank's call must be the same
// collective of the same dtype and lengths, and none may have failed. A
// failure anywhere fails every rank with the same error.
func (c *Comm) begin(k *call) error {
	g := c.g
	if stageLen := c.g.eng.staging(*k, c.Size()); k.err == nil && stageLen > 0 {
		for i := range 2 {
			b, err := c.Device().Alloc(cuda.Comm, k.dtype, stageLen)
			if err != nil {
				k.err = fmt.Errorf("zero: %s: staging: %w", k.kind, err)
				break
			}
			g.stage[c.idx][i] = b
		}
	}
	if err := g.tr.meet(c, *k); err != nil {
		c.end()
		return err
	}
	c.countCall(k.kind)
	c.g.eng.agreed(c, *k)
	return nil
}

// end gives this rank's staging back.
func (c *Comm) end() {
	for i, b := range c.g.stage[c.idx] {
		if b != nil {
			c.Device().Free(b)
			c.g.stage[c.idx][i] = nil
		}
	}
}

// exchange is one ring step of this rank over the group's transport.
func (c *Comm) exchange(out *cuda.Buffer, to int, in *cuda.Buffer, from int) error {
	return c.g.tr.exchange(c, out, to, in, from)
}

func (c *Comm) count(kind Collective, sent, recvd int64) {
	c.traffic[kind].SentBytes += sent
	c.traffic[kind].RecvBytes += recvd
}

// copyLocal copies src into dst within this rank (not traffic).
func (c *Comm) copyLocal(dst, src *cuda.Buffer) {
	if c.g.computes && dst.Addr() != src.Addr() {
		copyHost(dst, src)
	}
}

// reduceLocal computes acc = acc op own on this rank.
func (c *Comm) reduceLocal(acc, own *cuda.Buffer, op Op) {
	if c.g.computes {
		reduceHost(acc, own, op)
	}
}
