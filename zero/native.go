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
	Collectives
	// Name says the engine ("nccl 2.21.5"); Bytes is the device memory it
	// holds outside the allocator.
	Name() string
	Bytes() int64
	Close() error
}

// NativeLib makes a native library's engines (NCCL's communicators): a
// group's, and each of its sub-groups' (Group.Split), one engine a rank of
// each group, as ncclCommSplit's children are communicators of their own.
type NativeLib interface {
	// InitAll makes the engines of one process's ranks, rank r on devs[r]
	// (ncclCommInitAll).
	InitAll(devs []cuda.Device) ([]Native, error)
	// InitRank makes this process's rank's engine on dev of l's group;
	// every rank of l calls it at once (ncclCommInitRank, its unique id
	// sent by rank 0 over l).
	InitRank(dev cuda.Device, l Link) (Native, error)
}

// NewNativeGroup is the group of len(devs) ranks in one process, rank r
// on devs[r], with lib's engines (one process driving every GPU of a
// node).
func NewNativeGroup(devs []cuda.Device, lib NativeLib) (*Group, error) {
	g, err := NewGroup(devs)
	if err != nil {
		return nil, err
	}
	natives, err := initAll(lib, devs)
	if err != nil {
		return nil, err
	}
	g.eng = native{natives, lib}
	return g, nil
}

// NewNativeProcessGroup is NewProcessGroup with this rank's data moved by
// lib's engine: the ranks meet over l.
func NewNativeProcessGroup(dev cuda.Device, l Link, lib NativeLib) (*Group, error) {
	g, err := NewProcessGroup(dev, l)
	if err != nil {
		return nil, err
	}
	e, err := lib.InitRank(dev, l)
	if err != nil {
		return nil, err
	}
	g.eng = native{[]Native{e}, lib}
	return g, nil
}

// native moves the data with each member's engine (engines[member]), made
// by lib (which makes the sub-groups' too); with none, it is a simulation
// of one on shape-only ranks: nothing moves. Either way nothing is staged
// in the allocator (the engine keeps its partials in buffers of its own)
// and each rank's traffic is what NCCL's ring sends (ringTraffic), counted
// once the ranks agree.
type native struct {
	engines []Native
	lib     NativeLib
}

// split is the native engine of a sub-group whose members are on devs:
// the simulation's for the simulation's, else lib's engines of the
// sub-group (over l, the sub-group's link, when the ranks are processes).
func (e native) split(devs []cuda.Device, l Link) (native, error) {
	if e.engines == nil {
		return e, nil
	}
	if l != nil {
		n, err := e.lib.InitRank(devs[0], l)
		if err != nil {
			return native{}, err
		}
		return native{[]Native{n}, e.lib}, nil
	}
	ns, err := initAll(e.lib, devs)
	if err != nil {
		return native{}, err
	}
	return native{ns, e.lib}, nil
}

// initAll is lib's engines of one process's ranks on devs, one a rank.
func initAll(lib NativeLib, devs []cuda.Device) ([]Native, error) {
	ns, err := lib.InitAll(devs)
	if err != nil {
		return nil, err
	}
	if len(ns) != len(devs) {
		closeNatives(ns)
		return nil, fmt.Errorf("zero: %d engines for %d ranks", len(ns), len(devs))
	}
	return ns, nil
}

func closeNatives(ns []Native) error {
	var errs []error
	for _, n := range ns {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}

func (e native) engine(c *Comm) Native {
	if e.engines == nil {
		return nil
	}
	return e.engines[c.idx]
}

func (e native) broadcast(c *Comm, send, recv *cuda.Buffer, root int) error {
	if n := e.engine(c); n != nil {
		return n.Broadcast(send, recv, root)
	}
	return nil
}

func (e native) reduce(c *Comm, send, recv *cuda.Buffer, op Op, root int) error {
	if n := e.engine(c); n != nil {
		return n.Reduce(send, recv, op, root)
	}
	return nil
}

func (e native) allReduce(c *Comm, send, recv *cuda.Buffer, op Op) error {
	if n := e.engine(c); n != nil {
		return n.AllReduce(send, recv, op)
	}
	return nil
}

func (e native) reduceScatter(c *Comm, send, recv *cuda.Buffer, op Op) error {
	if n := e.engine(c); n != nil {
		return n.ReduceScatter(send, recv, op)
	}
	return nil
}

func (e native) allGather(c *Comm, send, recv *cuda.Buffer) error {
	if n := e.engine(c); n != nil {
		return n.AllGather(send, recv)
	}
	return nil
}

func (native) staging(call, int) int { return 0 }
func (native) readsHost() bool       { return false }

func (native) agreed(c *Comm, k call) {
	c.countEach(k.kind, func(r int) (int64, int64) { return k.ringTraffic(r, c.Size()) })
}

// Engine is member i's native engine, nil for the ring (and for a
// simulation of a native engine).
func (g *Group) Engine(i int) Native {
	if e, ok := g.eng.(native); ok && e.engines != nil {
		return e.engines[i]
	}
	return nil
}

// EngineBytes is the device memory member i's native engines hold outside
// the allocator: its engine of this group and of every group split from
// it that the member is in (0 for the ring and its simulation).
func (g *Group) EngineBytes(i int) int64 {
	var n int64
	if e := g.Engine(i); e != nil {
		n = e.Bytes()
	}
	for _, sub := range g.subs {
		for k, p := range sub.parents {
			if p == g.comms[i] {
				n += sub.EngineBytes(k)
			}
		}
	}
	return n
}

// Close closes the group's native engines, and its sub-groups'.
func (g *Group) Close() error {
	var errs []error
	for _, sub := range g.subs {
		errs = append(errs, sub.Close())
	}
	if e, ok := g.eng.(native); ok {
		errs = append(errs, closeNatives(e.engines))
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
