//go:build trainmem_cuda

package zero

// NCCL as the native engine of ranks on GPUs (cuda/gpu's binding): one
// process driving every GPU of a node (ncclCommInitAll), or one process a
// rank, whose unique id rank 0 makes and sends to every rank over the
// link the processes met on (ncclCommInitRank).

import (
	"errors"
	"fmt"

	"trainmem/cuda"
	"trainmem/cuda/gpu"
)

// ncclEngine is one rank's NCCL communicator as a Native engine.
type ncclEngine struct {
	c       *gpu.NCCLComm
	version string
}

var ncclOps = [numOps]gpu.NCCLOp{Sum: gpu.NCCLSum, Min: gpu.NCCLMin, Max: gpu.NCCLMax}

func (e ncclEngine) Broadcast(send, recv *cuda.Buffer, root int) error {
	return e.c.Broadcast(send, recv, root)
}
func (e ncclEngine) Reduce(send, recv *cuda.Buffer, op Op, root int) error {
	return e.c.Reduce(send, recv, ncclOps[op], root)
}
func (e ncclEngine) AllReduce(send, recv *cuda.Buffer, op Op) error {
	return e.c.AllReduce(send, recv, ncclOps[op])
}
func (e ncclEngine) ReduceScatter(send, recv *cuda.Buffer, op Op) error {
	return e.c.ReduceScatter(send, recv, ncclOps[op])
}
func (e ncclEngine) AllGather(send, recv *cuda.Buffer) error { return e.c.AllGather(send, recv) }
func (e ncclEngine) SendRecv(send *cuda.Buffer, to int, recv *cuda.Buffer, from int) error {
	return e.c.SendRecv(send, to, recv, from)
}
func (e ncclEngine) Name() string { return e.version }
func (e ncclEngine) Bytes() int64 { return e.c.Bytes }
func (e ncclEngine) Close() error { return e.c.Destroy() }

// gpus is devs as GPUs, or an error naming the rank that is not one.
func gpus(devs []cuda.Device) ([]*gpu.Device, error) {
	out := make([]*gpu.Device, len(devs))
	for r, d := range devs {
		g, ok := d.(*gpu.Device)
		if !ok {
			return nil, fmt.Errorf("zero: NCCL moves data between GPUs, and rank %d's device is %s (--device cuda)", r, d.Name())
		}
		out[r] = g
	}
	return out, nil
}

// ncclLib makes NCCL's communicators, a group's and its sub-groups'
// (NativeLib): ncclCommInitAll for one process's GPUs, ncclCommInitRank
// for processes, the unique id made by the group's rank 0 and sent to
// every rank over the group's link (a sub-group's link for a sub-group's
// communicator, so each group of a layout has one of its own).
type ncclLib struct {
	version string
	err     error // why there is no NCCL (ncclGetVersion's error)
}

func (lib ncclLib) InitAll(devs []cuda.Device) ([]Native, error) {
	if lib.err != nil {
		return nil, lib.err
	}
	gs, err := gpus(devs)
	if err != nil {
		return nil, err
	}
	comms, err := gpu.NCCLInitAll(gs)
	if err != nil {
		return nil, err
	}
	natives := make([]Native, len(comms))
	for r, c := range comms {
		natives[r] = ncclEngine{c, lib.version}
	}
	return natives, nil
}

func (lib ncclLib) InitRank(dev cuda.Device, l Link) (Native, error) {
	gs, err := gpus([]cuda.Device{dev})
	err = errors.Join(lib.err, err)
	var id [gpu.NCCLUniqueIDBytes]byte
	if l.Rank() == 0 {
		if err == nil {
			id, err = gpu.NCCLUniqueID()
		}
		// Every rank hears rank 0's id, or why it has none.
		msg := id[:]
		if err != nil {
			msg = []byte(err.Error())
		}
		for q := 1; q < l.Size(); q++ {
			if serr := sendMsg(l, q, msg); serr != nil && err == nil {
				err = serr
			}
		}
	} else {
		b, rerr := recvMsg(l, 0)
		switch {
		case rerr != nil:
			err = errors.Join(err, rerr)
		case len(b) != len(id):
			err = errors.Join(err, fmt.Errorf("zero: rank 0 has no NCCL id: %s", b))
		default:
			copy(id[:], b)
		}
	}
	if err != nil {
		return nil, err
	}
	c, err := gpu.NCCLInitRank(gs[0], id, l.Rank(), l.Size())
	if err != nil {
		return nil, err
	}
	return ncclEngine{c, lib.version}, nil
}

// NewNCCLGroup is the group of one process driving every GPU of devs,
// rank r on devs[r], over NCCL (ncclCommInitAll); its sub-groups get
// communicators of their own.
func NewNCCLGroup(devs []cuda.Device) (*Group, error) {
	version, err := gpu.NCCLVersion()
	if err != nil {
		return nil, err
	}
	return NewNativeGroup(devs, ncclLib{version, nil})
}

// NewNCCLProcessGroup is this process's rank of l's group on dev, its data
// moved by NCCL: rank 0 makes the communicator's unique id and sends it to
// every rank over l, and every rank joins (ncclCommInitRank); each
// sub-group's communicator is made the same way over the sub-group's link.
func NewNCCLProcessGroup(dev cuda.Device, l Link) (*Group, error) {
	version, err := gpu.NCCLVersion()
	// Without NCCL rank 0 still tells every rank why it has no id.
	return NewNativeProcessGroup(dev, l, ncclLib{version, err})
}
