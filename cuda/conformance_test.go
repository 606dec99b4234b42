package cuda_test

import (
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/conformance"
)

func TestConformanceShape(t *testing.T) {
	conformance.RunAll(t, func(t *testing.T) cuda.Device { return cuda.NewShape(0) })
}

func TestConformanceHostGo(t *testing.T) {
	conformance.RunAll(t, func(t *testing.T) cuda.Device { return newHost(t, cuda.BLASGo) })
}

func TestConformanceHostOpenBLAS(t *testing.T) {
	if err := cuda.OpenBLASAvailable(); err != nil {
		t.Skipf("OpenBLAS is not installed here: %v", err)
	}
	conformance.RunAll(t, func(t *testing.T) cuda.Device { return newHost(t, cuda.BLASOpenBLAS) })
}

func newHost(t *testing.T, blas string) *cuda.Host {
	t.Helper()
	h, err := cuda.NewHost(cuda.HostOptions{BLAS: blas})
	if err != nil {
		t.Fatal(err)
	}
	return h
}
