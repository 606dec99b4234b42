package cuda

// The roofline: a device's two limits, peak arithmetic and memory
// bandwidth, and the time work takes at them (Williams, Waterman and
// Patterson 2009, "Roofline: an insightful visual performance model for
// multicore architectures", CACM 52(4)): the larger of its FLOPs over the
// peak and its bytes over the bandwidth. The shape-only device models its
// clock with one (a simulated step's predicted time, and a timeline that
// looks like the card's), and the CUDA device reads its peak from the
// table below.

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Roofline is a device's peak arithmetic rate for products stored in 16
// bits (HalfFLOPS: dense tensor-core fp16/bf16) and in fp32 (FP32FLOPS:
// the fp32 units, without TF32, which trainmem's products do not use), in
// FLOP/s, its memory bandwidth in bytes/s, and where the numbers come from.
type Roofline struct {
	Name                 string
	HalfFLOPS, FP32FLOPS float64
	Bandwidth            float64
	Source               string
}

// PeakFLOPS is the peak for products stored as dt: 0 when it has none
// (fp64 and int32 are not trainmem's products).
func (r Roofline) PeakFLOPS(dt DType) float64 {
	switch dt {
	case F16, BF16:
		return r.HalfFLOPS
	case F32:
		return r.FP32FLOPS
	}
	return 0
}

// Time is how long work of flops arithmetic (products stored as dt) and
// bytes of memory traffic takes at the roofline: the larger of the two
// limits' times, rounded up to the nanosecond, so that every piece of work
// takes some time.
func (r Roofline) Time(dt DType, flops float64, bytes int64) time.Duration {
	var s float64
	if p := r.PeakFLOPS(dt); p > 0 && flops > 0 {
		s = flops / p
	}
	if r.Bandwidth > 0 && bytes > 0 {
		s = math.Max(s, float64(bytes)/r.Bandwidth)
	}
	ns := math.Ceil(s * 1e9)
	if ns >= math.MaxInt64 {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(max(ns, 1))
}

// The range of a peak and a bandwidth a roofline may have: from a slow
// CPU's 1 GFLOP/s and 0.1 GB/s to an exaFLOP/s and a petabyte a second,
// far past any card. Outside it a step's time overflows (a peak of
// 1e-308 TFLOP/s made a step of -9.22e15 µs and an MFU of +Inf).
const (
	MinPeakFLOPS = 1e9
	MaxPeakFLOPS = 1e18
	MinBandwidth = 1e8
	MaxBandwidth = 1e15
)

// Check refuses a roofline without both limits or with one out of range,
// naming what is wrong.
func (r Roofline) Check() error {
	for _, l := range []struct {
		name     string
		v        float64
		lo, hi   float64
		unit     string
		unitSize float64
	}{{"16-bit peak", r.HalfFLOPS, MinPeakFLOPS, MaxPeakFLOPS, "TFLOP/s", 1e12}, {"fp32 peak", r.FP32FLOPS, MinPeakFLOPS, MaxPeakFLOPS, "TFLOP/s", 1e12},
		{"bandwidth", r.Bandwidth, MinBandwidth, MaxBandwidth, "GB/s", 1e9}} {
		if !(l.v >= l.lo && l.v <= l.hi) {
			return Argf("cuda", "roofline "+r.Name+": "+l.name, fmt.Sprintf("%g %s", l.v/l.unitSize, l.unit), "out of range", fmt.Sprintf("%g to %g %s", l.lo/l.unitSize, l.hi/l.unitSize, l.unit))
		}
	}
	return nil
}

// GPUSpec is a card of the roofline table: the name --gpu takes, the
// substrings the driver's name for the card holds (all of them), and its
// roofline.
type GPUSpec struct {
	Key   string
	Match []string
	Roofline
}

// The datasheets the table cites (dense numbers: the sheets' tensor-core
// figures "with sparsity" halved).
const (
	a100Sheet = "NVIDIA A100 Tensor Core GPU datasheet (2021): 312 TFLOP/s bf16/fp16 dense, 19.5 TFLOP/s fp32, 2,039 GB/s (80GB SXM)"
	h100Sheet = "NVIDIA H100 Tensor Core GPU datasheet (2023): SXM 989 TFLOP/s bf16/fp16 dense, 67 TFLOP/s fp32, 3.35 TB/s; PCIe 756, 51, 2 TB/s; NVL 835, 60, 3.9 TB/s"
	h200Sheet = "NVIDIA H200 Tensor Core GPU datasheet (2024): SXM 989 TFLOP/s bf16/fp16 dense, 67 TFLOP/s fp32, 4.8 TB/s"
	l40sSheet = "NVIDIA L40S datasheet (2023): 362 TFLOP/s bf16/fp16 dense, 91.6 TFLOP/s fp32, 864 GB/s"
	l4Sheet   = "NVIDIA L4 datasheet (2023): 121 TFLOP/s bf16/fp16 dense, 30.3 TFLOP/s fp32, 300 GB/s"
)

// GPUs is the roofline table, in the order a driver's card name is
// matched (the PCIe and NVL H100s before the SXM one).
var GPUs = []GPUSpec{
	{"h100-pcie", []string{"H100", "PCIe"}, Roofline{"H100 PCIe", 756e12, 51e12, 2.0e12, h100Sheet}},
	{"h100-nvl", []string{"H100", "NVL"}, Roofline{"H100 NVL", 835e12, 60e12, 3.9e12, h100Sheet}},
	{"h200", []string{"H200"}, Roofline{"H200 SXM", 989e12, 67e12, 4.8e12, h200Sheet}},
	{"h100", []string{"H100"}, Roofline{"H100 SXM", 989e12, 67e12, 3.35e12, h100Sheet}},
	{"h800", []string{"H800"}, Roofline{"H800 SXM", 989e12, 67e12, 3.35e12, h100Sheet + " (the H800 as the H100 SXM)"}},
	{"a100", []string{"A100"}, Roofline{"A100 SXM 80GB", 312e12, 19.5e12, 2.039e12, a100Sheet}},
	{"a800", []string{"A800"}, Roofline{"A800 SXM 80GB", 312e12, 19.5e12, 2.039e12, a100Sheet + " (the A800 as the A100)"}},
	{"l40s", []string{"L40S"}, Roofline{"L40S", 362e12, 91.6e12, 0.864e12, l40sSheet}},
	{"l4", []string{" L4"}, Roofline{"L4", 121e12, 30.3e12, 0.3e12, l4Sheet}},
}

// DefaultGPU is the card whose roofline times a simulated step when none
// is named (simulate's --gpu, a simulated step's memory trace).
const DefaultGPU = "h100"

// GPUKeys lists the names --gpu takes, for messages.
func GPUKeys() string {
	var ks []string
	for _, g := range GPUs {
		ks = append(ks, g.Key)
	}
	return strings.Join(ks, ", ")
}

// GPUByKey is the card --gpu names (a100, h100, h200, ...).
func GPUByKey(key string) (GPUSpec, bool) {
	for _, g := range GPUs {
		if strings.EqualFold(g.Key, key) {
			return g, true
		}
	}
	return GPUSpec{}, false
}

// GPUByName is the card whose driver name (e.g. "NVIDIA H100 80GB HBM3")
// holds every one of its substrings, the first in table order.
func GPUByName(name string) (GPUSpec, bool) {
	for _, g := range GPUs {
		all := true
		for _, m := range g.Match {
			if m == " L4" {
				all = all && strings.HasSuffix(name, m)
				continue
			}
			all = all && strings.Contains(name, m)
		}
		if all {
			return g, true
		}
	}
	return GPUSpec{}, false
}

// TimeModel is implemented by devices whose time is modelled rather than
// measured: the shape-only device given a roofline. The trainer tells it
// the work of each instruction (Spend, after the instruction's kernels and
// before its frees), and the device's marks and its allocator's trace read
// the modelled clock, so a simulated step has a predicted time and a
// timeline shaped like the card's.
type TimeModel interface {
	Spend(dt DType, flops float64, bytes int64)
	Roofline() Roofline
}
