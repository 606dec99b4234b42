package host

import (
	"sync"
	"trainmem/cuda"
)

var hostPeak = sync.OnceValues(PeakGFLOPS)

// PeakFLOPS is the host's fp32 peak whatever dt: host kernels compute
// 16-bit values in fp32.
func (h *Device) PeakFLOPS(dt cuda.DType) (float64, string) {
	g, how := hostPeak()
	return g * 1e9, how
}

var _ cuda.PeakReporter = (*Device)(nil)
