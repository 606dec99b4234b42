package cuda

import "sync"

// PeakReporter is implemented by devices that know their peak arithmetic
// rate, for model FLOPs utilization (MFU) in step records: the host (its
// cores' fp32 peak, HostPeakGFLOPS) and the CUDA device (a datasheet table
// by card, cuda_plan.go's gpuPeak). dt is the storage type of the run's
// products: a GPU's tensor cores set the peak for fp16 and bf16, its fp32
// units for fp32. flops is 0 when the peak is unknown; how says where the
// number comes from.
type PeakReporter interface {
	PeakFLOPS(dt DType) (flops float64, how string)
}

// LibraryWorkspacer is implemented by devices whose libraries hold scratch
// from the caching allocator, tagged workspace, that no kernel of the
// Kernels interface asks for (cuBLAS's workspace on the CUDA device). The
// shape-only device has no such library, so a measured run's workspace
// exceeds the simulated one by exactly these bytes, once cuBLAS has run.
type LibraryWorkspacer interface {
	LibraryWorkspaceBytes() int64
}

var hostPeak = sync.OnceValues(HostPeakGFLOPS)

// PeakFLOPS is the host's fp32 peak whatever dt: host kernels compute
// 16-bit values in fp32.
func (h *Host) PeakFLOPS(dt DType) (float64, string) {
	g, how := hostPeak()
	return g * 1e9, how
}

var _ PeakReporter = (*Host)(nil)
