package host_test

import (
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/conformance"
	"trainmem/cuda/host"
)

func TestConformanceHostGo(t *testing.T) {
	conformance.RunAll(t, func(t *testing.T) cuda.Device { return newHost(t, host.BLASGo) })
}

func TestConformanceHostOpenBLAS(t *testing.T) {
	if err := host.OpenBLASAvailable(); err != nil {
		t.Skipf("OpenBLAS is not installed here: %v", err)
	}
	conformance.RunAll(t, func(t *testing.T) cuda.Device { return newHost(t, host.BLASOpenBLAS) })
}

func newHost(t *testing.T, blas string) *host.Device {
	t.Helper()
	h, err := host.New(host.Options{BLAS: blas})
	if err != nil {
		t.Fatal(err)
	}
	return h
}
