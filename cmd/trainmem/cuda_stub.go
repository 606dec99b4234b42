//go:build !trainmem_cuda

package main

import (
	"trainmem/cuda"
	"trainmem/zero"
)

// haveNCCL says whether --backend nccl is built in.
const haveNCCL = false

// ncclGroup is NCCL's group, in the CUDA build.
func ncclGroup([]cuda.Device, zero.Link) (*zero.Group, error) {
	return nil, usagef("--backend nccl: this trainmem was built without CUDA ('make build-cuda')")
}

// openCUDA answers --device cuda in a build without CUDA.
func openCUDA(int) (cuda.Device, error) {
	return nil, usagef("--device cuda: this trainmem was built without CUDA; build it with 'make build-cuda' " +
		"(go build -tags trainmem_cuda ./cmd/trainmem, with the CUDA build kit of scripts/install-cuda-kit.sh; no GPU is needed to build; " +
		"not -tags cuda, which switches on gorgonia's own cuDNN engine) and run that binary on a machine with an NVIDIA GPU")
}
