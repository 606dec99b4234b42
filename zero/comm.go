// Package zero is trainmem's ranks: the collectives between them, with
// NCCL's semantics and the traffic NCCL's ring algorithm sends, and (as it
// grows) data parallel and the ZeRO stages as policies over package
// train's executor (policy.go: the parameter server, ZeRO-0, 1, 2 and 3).
//
// The collectives are a Communicator. The in-process one (Group) runs N
// ranks as goroutines, each with its own device, and moves the data with the
// ring algorithm chunk by chunk between the ranks' buffers, so each rank's
// sent and received bytes are what NCCL's ring would send; the staging a
// rank needs for partial sums comes from its own allocator, tagged comm. On
// shape-only devices nothing is moved or reduced, and the allocations and
// the traffic are the same.
//
// Error policy: a collective's arguments are checked on every rank, and
// the ranks' calls are compared before any data moves; an error on one rank
// (a bad buffer, a rank calling another collective or another size) ends
// the collective on every rank, naming the rank and the value: in one
// process and under a native engine every rank returns the same error;
// over processes with the ring, the rank that finds it aborts the link with
// it and the others' waits fail with that reason (see linked.meet). A rank that leaves
// the group (its function returned) while others wait in a collective ends
// theirs with an error naming it: nothing hangs.
package zero

import (
	"trainmem/cuda"
	"trainmem/cuda/enum"
)

// Op is a collective's reduction, as NCCL's ncclRedOp_t: Sum, Min or Max.
type Op uint8

const (
	Sum Op = iota // ncclSum
	Min           // ncclMin
	Max           // ncclMax
	numOps
)

var opNames = enum.New[Op]("zero", "Op", "reduction", "sum", "min", "max")

func (o Op) String() string { return opNames.String(o) }

// Collective names a kind of collective, for the traffic counters.
type Collective uint8

const (
	Broadcast Collective = iota
	Reduce
	AllReduce
	ReduceScatter
	AllGather
	SendRecv // point-to-point (Comm.SendRecv): not collective, but counted alike
	NumCollectives
)

var collectiveNames = enum.New[Collective]("zero", "Collective", "collective", "broadcast", "reduce", "all_reduce", "reduce_scatter", "all_gather", "send_recv")

func (c Collective) String() string { return collectiveNames.String(c) }

// Traffic is what one rank sent and received in one kind of collective:
// the calls it made and the bytes that crossed its links, as the ring
// algorithm moves them (a rank's own data copied into its own buffer is
// not traffic).
type Traffic struct {
	Calls     int64 `json:"calls"`
	SentBytes int64 `json:"sent_bytes"`
	RecvBytes int64 `json:"recv_bytes"`
}

// Communicator is one rank's view of the collectives, with NCCL's
// semantics. Every rank of the group makes the same calls in the same
// order; each call returns when this rank's part is done. Buffers are the
// rank's own (from its device); send and recv may be the same memory where
// NCCL allows it (in place):
//
//   - Broadcast: root's send (count = recv.Len elements) into every rank's
//     recv; send is read on the root only. In place: send = recv.
//   - Reduce: the reduction of every rank's send into the root's recv
//     (recv is written on the root only). In place: send = recv.
//   - AllReduce: the reduction of every rank's send into every rank's recv.
//     In place: send = recv.
//   - ReduceScatter: send holds N·k elements; block r of the reduction
//     (elements r·k to (r+1)·k) lands in rank r's recv of k elements. In
//     place: recv = send.View(r·k, k). N must divide send's length: shard a
//     tensor of n elements over PaddedLen(n, N) (see ShardLen).
//   - AllGather: every rank's send of k elements, rank r's at r·k, into
//     every rank's recv of N·k. In place: send = recv.View(r·k, k).
//
// Every float type reduces in fp32 (fp64 for F64 buffers) with one
// rounding to the storage type at every hop of the ring, as NCCL's reduce
// kernels do; int32 sums wrap.
type Communicator interface {
	Rank() int
	Size() int
	Device() cuda.Device
	Collectives
	// Traffic is what this rank has sent and received, per collective.
	Traffic() [NumCollectives]Traffic
}

// Collectives are the calls that move a collective's data, as a
// Communicator takes them and as a native engine (Native) makes them.
type Collectives interface {
	Broadcast(send, recv *cuda.Buffer, root int) error
	Reduce(send, recv *cuda.Buffer, op Op, root int) error
	AllReduce(send, recv *cuda.Buffer, op Op) error
	ReduceScatter(send, recv *cuda.Buffer, op Op) error
	AllGather(send, recv *cuda.Buffer) error
	// SendRecv is point-to-point: send to rank to and recv from rank from
	// in one call (p2p.go); on a native engine either half may be nil (not
	// made), and the pair's halves were checked to match before it is
	// called.
	SendRecv(send *cuda.Buffer, to int, recv *cuda.Buffer, from int) error
}

// ShardLen is the elements of one rank's shard of a tensor of n elements
// over N ranks: ceil(n/N). Every rank holds a shard of this length; the
// last ranks' shards end in padding when N does not divide n (the rule of
// DeepSpeed's flat partitions and llm.c's ZeRO shards). N must be > 0.
func ShardLen(n, N int) int { return (n + N - 1) / N }

// PaddedLen is the length of a tensor of n elements padded for N shards:
// N·ShardLen(n, N), the padding zeros at its end.
func PaddedLen(n, N int) int { return N * ShardLen(n, N) }

// blockRange is block i of a count-element buffer split for the ring into
// N blocks of ShardLen(count, N): [lo, hi), empty for blocks past the end.
func blockRange(count, N, i int) (lo, hi int) {
	c := ShardLen(count, N)
	lo, hi = min(i*c, count), min((i+1)*c, count)
	return lo, hi
}
