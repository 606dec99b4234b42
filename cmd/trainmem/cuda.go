//go:build trainmem_cuda

package main

import (
	"trainmem/cuda"
	"trainmem/cuda/gpu"
	"trainmem/zero"
)

// haveNCCL says whether --backend nccl is built in.
const haveNCCL = true

// openCUDA opens GPU ordinal (after CUDA_VISIBLE_DEVICES); on a machine
// without a usable GPU it says why (no NVIDIA driver, no device, cuInit's
// error). TRAINMEM_CUDA_SYNC=1 synchronizes after every kernel.
func openCUDA(ordinal int) (cuda.Device, error) {
	d, err := gpu.New(gpu.Options{Ordinal: ordinal})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// ncclGroup is the group of ranks on GPUs over NCCL: every rank of devs
// in this process (link nil), or this process's rank over link.
func ncclGroup(devs []cuda.Device, link zero.Link) (*zero.Group, error) {
	if link == nil {
		return zero.NewNCCLGroup(devs)
	}
	return zero.NewNCCLProcessGroup(devs[0], link)
}
