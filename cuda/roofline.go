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
	// Eff is how close the card's kernels come to the two limits
	// (Matmul, Memory); the zero value is the bare roofline.
	Eff Efficiency
}

// Efficiency is a card's kernel time model beside its roofline: SMs the
// streaming multiprocessors a product's tiles are spread over in waves,
// Matmul the fraction of the peak a large product reaches, Memory the
// fraction of the bandwidth a memory-bound kernel reaches, Launch the
// time a kernel costs however small, and Source where they come from.
type Efficiency struct {
	SMs            int
	Matmul, Memory float64
	// Attention is the fraction of the peak a fused attention kernel
	// (FlashAttention-2, which PyTorch's scaled_dot_product_attention
	// runs) reaches.
	Attention float64
	Launch    time.Duration
	// Special is the special-function evaluations (exp, tanh, sin, cos,
	// pow) the card makes a second: a GPU's special-function units (16
	// results a clock an SM), a CPU's exponential with the arithmetic its
	// kernels do around it; 0 when they never bind.
	Special float64
	// Ladder, where a card has one, is its product kernel's fraction of
	// the peak on square products of side 64, 128, 256, 512 and 1,024
	// (LadderSides), a product read at its shortest side (interpolated
	// in the side's logarithm, the ends beyond them): a CPU's BLAS, whose
	// small products and thin ones (a reduction of 64) run far from its
	// peak. Without SMs and a ladder, every product runs at Matmul.
	Ladder [len(LadderSides)]float64
	Source string
}

// LadderSides are the sides of the square products Efficiency.Ladder is
// measured on.
var LadderSides = [5]int{64, 128, 256, 512, 1024}

// ladder is the fraction of the peak a product whose shortest side is
// side reaches on the ladder: 0 without one.
func (k Efficiency) ladder(side float64) float64 {
	if k.Ladder[0] <= 0 {
		return 0
	}
	l := k.Ladder
	if side <= float64(LadderSides[0]) {
		return l[0]
	}
	for i := 1; i < len(l); i++ {
		if hi := float64(LadderSides[i]); side <= hi {
			lo := float64(LadderSides[i-1])
			f := math.Log2(side/lo) / math.Log2(hi/lo)
			return l[i-1] + f*(l[i]-l[i-1])
		}
	}
	return l[len(l)-1]
}

// The tile cuBLAS prefers for large 16-bit products, 256×128 (NVIDIA's
// Matrix Multiplication Background User's Guide, "Dimension
// quantization effects": 256x128 and 128x256 the most efficient of its
// tiles, each thread block one tile on one SM).
const tileM, tileN = 256, 128

// Matmul is the time of batch products of an m×k by a k×n matrix stored
// as dt on the card: the output's 256×128 tiles run in waves of one tile
// an SM (tile quantization: a partial tile costs a whole one; wave
// quantization: a partial wave costs a whole one), each tile at the
// card's matmul fraction of its share of the peak; at least the time of
// its bytes (inputs and output) at the memory fraction of the bandwidth;
// plus a launch. Without SMs it is the roofline's time of 2·m·n·k·batch
// FLOPs at the matmul fraction, or, on a card with a ladder (a CPU), at
// the ladder's fraction for the product's shortest side.
func (r Roofline) Matmul(dt DType, batch, m, n, k int64) time.Duration {
	if batch <= 0 || m <= 0 || n <= 0 || k <= 0 {
		return 0
	}
	b, mf, nf, kf := float64(batch), float64(m), float64(n), float64(k)
	frac := r.Eff.matmul()
	if l := r.Eff.ladder(min(mf, nf, kf)); l > 0 && r.Eff.SMs == 0 {
		frac = l
	}
	peak := r.PeakFLOPS(dt) * frac
	if peak <= 0 {
		return 0
	}
	s := 2 * b * mf * nf * kf / peak
	if sms := float64(r.Eff.SMs); sms > 0 {
		// Either orientation of the tile, whichever costs less; a side
		// of the output shorter than the tile's gets a tile no longer
		// than it needs (a power of two, at least the tensor cores' 16),
		// as cuBLAS picks narrow tiles for thin products.
		wave := func(tm, tn float64) float64 {
			tm, tn = min(tm, fit(mf)), min(tn, fit(nf))
			return math.Ceil(b*math.Ceil(mf/tm)*math.Ceil(nf/tn)/sms) * 2 * tm * tn * kf / (peak / sms)
		}
		s = min(wave(tileM, tileN), wave(tileN, tileM))
	}
	bytes := (b*(mf*kf+kf*nf) + b*mf*nf) * float64(dt.Size())
	return r.kernel(max(s, r.memorySeconds(bytes)))
}

// Product is batch products of an m×k by a k×n matrix: one kernel.
type Product struct{ Batch, M, N, K int64 }

// Work is what one op does on the device: its arithmetic and the bytes it
// reads and writes, and, when it multiplies matrices, the products.
type Work struct {
	FLOPs    float64
	Bytes    int64
	Products []Product
	// Attention marks a fused attention kernel (flash attention): its
	// arithmetic at the card's attention fraction of the peak.
	Attention bool
	// Specials are the special-function evaluations (exp, tanh, sin,
	// cos, pow) it makes, at the card's Special rate.
	Specials float64
}

// Kernel is the time of work w, stored as dt, on the card: its products
// each by Matmul (with its special functions' time beside them: the
// attention's softmax); else arithmetic without a product's shape (a
// fused kernel, flash attention's) at the matmul fraction of the peak, its
// special functions at the card's rate, or its bytes at the memory
// fraction of the bandwidth, whichever is longest, and a launch. Without
// a kernel model (Eff's zero value) it is the bare roofline's Time.
func (r Roofline) Kernel(dt DType, w Work) time.Duration {
	if r.Eff == (Efficiency{}) {
		return r.Time(dt, w.FLOPs, w.Bytes)
	}
	if len(w.Products) > 0 {
		var d time.Duration
		for _, p := range w.Products {
			d += r.Matmul(dt, p.Batch, p.M, p.N, p.K)
		}
		return d + time.Duration(math.Ceil(r.specialSeconds(w.Specials)*1e9))
	}
	var s float64
	frac := r.Eff.matmul()
	if w.Attention && r.Eff.Attention > 0 {
		frac = r.Eff.Attention
	}
	if peak := r.PeakFLOPS(dt) * frac; peak > 0 && w.FLOPs > 0 {
		s = w.FLOPs / peak
	}
	return r.kernel(max(s, r.memorySeconds(float64(w.Bytes)), r.specialSeconds(w.Specials)))
}

func (r Roofline) specialSeconds(n float64) float64 {
	if r.Eff.Special <= 0 || n <= 0 {
		return 0
	}
	return n / r.Eff.Special
}

// fit is the tile side a side of x needs: the power of two at or above
// it, at least 16.
func fit(x float64) float64 {
	return max(16, math.Pow(2, math.Ceil(math.Log2(x))))
}

// Memory is the time of a memory-bound kernel moving bytes (read and
// written) on the card: at its memory fraction of the bandwidth, plus a
// launch.
func (r Roofline) Memory(bytes int64) time.Duration {
	if bytes <= 0 {
		return 0
	}
	return r.kernel(r.memorySeconds(float64(bytes)))
}

func (r Roofline) memorySeconds(bytes float64) float64 {
	if r.Bandwidth <= 0 {
		return 0
	}
	return bytes / (r.Bandwidth * r.Eff.memory())
}

// kernel is s seconds of work as one kernel: rounded up to the
// nanosecond, with the launch.
func (r Roofline) kernel(s float64) time.Duration {
	ns := math.Ceil(s * 1e9)
	if ns >= math.MaxInt64/2 {
		return time.Duration(math.MaxInt64 / 2)
	}
	return time.Duration(ns) + r.Eff.Launch
}

func (k Efficiency) matmul() float64 {
	if k.Matmul > 0 {
		return k.Matmul
	}
	return 1
}

func (k Efficiency) memory() float64 {
	if k.Memory > 0 {
		return k.Memory
	}
	return 1
}

// Shared is the card as one of the users that take turns on it, each
// with share (above 0, at most 1) of its arithmetic, its bandwidth and its
// special functions, and each launch taking 1/share as long (on a CPU
// the executor's work runs on the shared cores too): host ranks that
// together run more threads than the machine has cores. why says who
// shares it.
func (r Roofline) Shared(share float64, why string) Roofline {
	if !(share > 0 && share <= 1) {
		return r
	}
	r.HalfFLOPS *= share
	r.FP32FLOPS *= share
	r.Bandwidth *= share
	r.Eff.Special *= share
	r.Eff.Launch = time.Duration(math.Ceil(float64(r.Eff.Launch) / share))
	r.Name += fmt.Sprintf(", shared: %.2f of it", share)
	r.Source += fmt.Sprintf("; each user has %.2f of it: %s", share, why)
	return r
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

// The kernel models' sources. Matmul: the largest fraction of the peak
// a bf16 product reaches, measured by S. Bekman's "maximum achievable
// matmul FLOPS" finder (stas00/ml-engineering,
// compute/accelerator/README.md: A100 SXM 271.2 of 312 TFLOP/s, A100
// PCIe 252.9, H100 SXM 794.5 of 989, H200 the same); for cards it has not
// measured, the H100's fraction. Memory: a STREAM-like kernel's fraction
// of the bandwidth (RRZE-HPC/gpu-benches gpu-stream: A100 80GB 1,794 of
// 2,039 GB/s on triad, H100 PCIe 1,832 of 2,000). Launch: about 2.5 µs a
// kernel, back-to-back tiny kernels without a CUDA graph
// (RRZE-HPC/gpu-benches gpu-small-kernels on A100 and H200). SMs: the
// architecture whitepapers (A100 108, H100 SXM and H200 132, H100 PCIe
// 114, L40S 142, L4 58). Attention: FlashAttention-2's fraction of the
// peak, its forward and backward passes together: up to 73% on A100 (Dao
// 2023, arXiv 2307.08691), 35% on H100 (Shah et al. 2024, the
// FlashAttention-3 paper, arXiv 2407.08608: FA2's utilization there); for
// Ada cards, which neither measures, the low end of FA2's Ampere range,
// 50%. Special: 16 results a clock an SM for exp2, sin, cos, log2 and
// the reciprocal (the CUDA C++ Programming Guide's table of arithmetic
// instruction throughput, compute capabilities 8.0 to 9.0), one an
// evaluation, at the datasheets' boost clock (A100 1,410 MHz, H100 SXM
// and H200 1,980, H100 PCIe 1,755, H100 NVL 1,785, L40S 2,520, L4
// 2,040).
const kernelSheet = "matmul: stas00/ml-engineering MAMF table; memory: RRZE-HPC/gpu-benches gpu-stream; attention: FlashAttention-2 and -3 papers; launch: gpu-small-kernels; SMs: NVIDIA whitepapers; special functions: CUDA C++ Programming Guide throughput table at the boost clock"

func efficiency(sms int, matmul, memory, attention, clockMHz float64) Efficiency {
	return Efficiency{SMs: sms, Matmul: matmul, Memory: memory, Attention: attention, Launch: 2500 * time.Nanosecond,
		Special: float64(sms) * 16 * clockMHz * 1e6, Source: kernelSheet}
}

// GPUs is the roofline table, in the order a driver's card name is
// matched (the PCIe and NVL H100s before the SXM one).
var GPUs = []GPUSpec{
	{"h100-pcie", []string{"H100", "PCIe"}, Roofline{"H100 PCIe", 756e12, 51e12, 2.0e12, h100Sheet, efficiency(114, 0.803, 0.916, 0.35, 1755)}},
	{"h100-nvl", []string{"H100", "NVL"}, Roofline{"H100 NVL", 835e12, 60e12, 3.9e12, h100Sheet, efficiency(132, 0.803, 0.88, 0.35, 1785)}},
	{"h200", []string{"H200"}, Roofline{"H200 SXM", 989e12, 67e12, 4.8e12, h200Sheet, efficiency(132, 0.803, 0.88, 0.35, 1980)}},
	{"h100", []string{"H100"}, Roofline{"H100 SXM", 989e12, 67e12, 3.35e12, h100Sheet, efficiency(132, 0.803, 0.88, 0.35, 1980)}},
	{"h800", []string{"H800"}, Roofline{"H800 SXM", 989e12, 67e12, 3.35e12, h100Sheet + " (the H800 as the H100 SXM)", efficiency(132, 0.803, 0.88, 0.35, 1980)}},
	{"a100", []string{"A100"}, Roofline{"A100 SXM 80GB", 312e12, 19.5e12, 2.039e12, a100Sheet, efficiency(108, 0.869, 0.88, 0.73, 1410)}},
	{"a800", []string{"A800"}, Roofline{"A800 SXM 80GB", 312e12, 19.5e12, 2.039e12, a100Sheet + " (the A800 as the A100)", efficiency(108, 0.869, 0.88, 0.73, 1410)}},
	{"l40s", []string{"L40S"}, Roofline{"L40S", 362e12, 91.6e12, 0.864e12, l40sSheet, efficiency(142, 0.803, 0.88, 0.5, 2520)}},
	{"l4", []string{" L4"}, Roofline{"L4", 121e12, 30.3e12, 0.3e12, l4Sheet, efficiency(58, 0.803, 0.88, 0.5, 2040)}},
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
	Spend(dt DType, w Work)
	Roofline() Roofline
	// Now is the modelled clock's reading.
	Now() time.Duration
}
