//go:build trainmem_cuda

package main

import (
	"trainmem/cuda"
	"trainmem/cuda/gpu"
)

// openCUDA opens GPU 0 (CUDA_VISIBLE_DEVICES picks it); on a machine
// without a usable GPU it says why (no NVIDIA driver, no device, cuInit's
// error). TRAINMEM_CUDA_SYNC=1 synchronizes after every kernel.
func openCUDA() (cuda.Device, error) {
	d, err := gpu.New(gpu.Options{})
	if err != nil {
		return nil, err
	}
	return d, nil
}
