//go:build trainmem_cuda

package cuda_test

import (
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/conformance"
)

// TestConformanceCUDA runs the conformance suite on GPU 0. Without one it
// is skipped with the reason (no NVIDIA driver, no device): the cuda build
// starts on any machine (cuda/cuda_shim.c), so this binary can always run.
func TestConformanceCUDA(t *testing.T) {
	if err := cuda.CUDAAvailable(); err != nil {
		t.Skipf("CUDA conformance skipped: %v (it runs on a machine with an NVIDIA GPU: scripts/gpu-check.sh)", err)
	}
	conformance.RunAll(t, func(t *testing.T) cuda.Device {
		d, err := cuda.NewCUDA(cuda.CUDAOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
