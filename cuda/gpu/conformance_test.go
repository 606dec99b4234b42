//go:build trainmem_cuda

package gpu_test

import (
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/conformance"
	"trainmem/cuda/gpu"
)

// TestConformanceCUDA runs the conformance suite on GPU 0. Without one it
// is skipped with the reason (no NVIDIA driver, no device): the cuda build
// starts on any machine (cuda/gpu/shim.c), so this binary can always run.
func TestConformanceCUDA(t *testing.T) {
	if err := gpu.Available(); err != nil {
		t.Skipf("CUDA conformance skipped: %v (it runs on a machine with an NVIDIA GPU: scripts/gpu-check.sh)", err)
	}
	conformance.RunAll(t, func(t *testing.T) cuda.Device {
		d, err := gpu.New(gpu.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
