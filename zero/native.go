package zero

// Native engines: a library that moves a collective's data itself, on the
// ranks' devices (NCCL on GPUs). The ranks still meet before every call,
// so that a call that differs between them fails on every rank instead of
// hanging in the library, and each rank counts the bytes of NCCL's ring
// algorithm (ringTraffic); nothing is staged in the allocator, since the
// engine keeps its partial sums in buffers of its own (Bytes).

import (
	"errors"
	"fmt"

	"trainmem/cuda"
)

// Native is one rank's native engine.
type Native interface {
	Broadcast(send, recv *cuda.Buffer, root int) error
	Reduce(send, recv *cuda.Buffer, op Op, root int) error
	AllReduce(send, recv *cuda.Buffer, op Op) error
	ReduceScatter(send, recv *cuda.Buffer, op Op) error
	AllGather(send, recv *cuda.Buffer) error
	// Name says the engine ("nccl 2.21.5"); Bytes is the device memory it
	// holds outside the allocator.
	Name() string
	Bytes() int64
	Close() error
}

// NewNativeGroup is the group of len(devs) ranks in one process, rank r
// on devs[r] with engine natives[r] (one process driving every GPU of a
// node).
func NewNativeGroup(devs []cuda.Device, natives []Native) (*Group, error) {
	if len(natives) != len(devs) {
		return nil, fmt.Errorf("zero: %d engines for %d ranks", len(natives), len(devs))
	}
	g, err := NewGroup(devs)
	if err != nil {
		return nil, err
	}
	g.natives, g.unstaged = natives, true
	return g, nil
}

// NewNativeProcessGroup is NewProcessGroup with this rank's data moved by
// engine e: the ranks meet over l.
func NewNativeProcessGroup(dev cuda.Device, l Link, e Native) (*Group, error) {
	g, err := NewProcessGroup(dev, l)
	if err != nil {
		return nil, err
	}
	g.natives, g.unstaged = []Native{e}, true
	return g, nil
}

// native is this rank's engine, nil when the ring moves the data.
func (c *Comm) native() Native {
	if c.g.natives == nil {
		return nil
	}
	return c.g.natives[c.idx]
}

// natively runs an unstaged call: on this rank's native engine, or, in a
// simulation of one (no engine), nothing: the call was counted in begin.
func (c *Comm) natively(call func(Native) error) error {
	if e := c.native(); e != nil {
		return call(e)
	}
	return nil
}

// Engine is member i's native engine, nil for the ring.
func (g *Group) Engine(i int) Native {
	if g.natives == nil {
		return nil
	}
	return g.natives[i]
}

// Close closes the group's native engines.
func (g *Group) Close() error {
	var errs []error
	for _, e := range g.natives {
		errs = append(errs, e.Close())
	}
	return errors.Join(errs...)
}

// ringTraffic is the bytes rank r of n sends and receives in call k by
// NCCL's ring algorithm, as ring.go moves them: a chain of n-1 links for
// Broadcast (from the root) and Reduce (to it), n-1 ring steps of a block
// for ReduceScatter and AllGather, and both for AllReduce over blocks of
// ShardLen(count, n).
func (k call) ringTraffic(r, n int) (sent, recv int64) {
	if n == 1 {
		return 0, 0
	}
	size := int64(k.dtype.Size())
	count := int64(k.sendLen)
	switch k.kind {
	case Broadcast:
		count = int64(k.recvLen)
		if p := mod(r-k.root, n); p < n-1 {
			sent = count
		}
		if r != k.root {
			recv = count
		}
	case Reduce:
		if r != k.root {
			sent = count
		}
		if r != mod(k.root+1, n) {
			recv = count
		}
	case AllReduce:
		block := func(i int) int64 {
			lo, hi := blockRange(k.sendLen, n, mod(i, n))
			return int64(hi - lo)
		}
		sent = 2*count - block(r) - block(r+1)
		recv = 2*count - block(r-1) - block(r)
	case ReduceScatter:
		sent, recv = int64(n-1)*int64(k.recvLen), int64(n-1)*int64(k.recvLen)
	case AllGather:
		sent, recv = int64(n-1)*int64(k.sendLen), int64(n-1)*int64(k.sendLen)
	}
	return sent * size, recv * size
}
