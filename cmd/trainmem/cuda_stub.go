//go:build !cuda

package main

import "trainmem/cuda"

// openCUDA answers --device cuda in a build without CUDA.
func openCUDA() (cuda.Device, error) {
	return nil, usagef("--device cuda: this trainmem was built without CUDA; build it with 'make build-cuda' (go build -tags cuda ./cmd/trainmem) on a machine with the CUDA build kit (scripts/install-cuda-kit.sh)")
}
