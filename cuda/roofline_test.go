package cuda

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// The roofline's time is the longer of the two limits': a product of
// 4096³ in bf16 on an H100 SXM is compute-bound (2·4096³ FLOPs at
// 989 TFLOP/s: 138,968 ns, against its 3·4096²·2 bytes at 3.35 TB/s:
// 30,049 ns), a copy of 1 GiB memory-bound (2^31 bytes read and written at
// 3.35 TB/s: 641,040 ns, rounded up); fp32 products use the fp32 peak.
func TestRooflineTime(t *testing.T) {
	h100, ok := GPUByKey("h100")
	if !ok {
		t.Fatal("no h100 in the table")
	}
	n := 4096.0
	if got := h100.Time(BF16, 2*n*n*n, int64(3*n*n*2)); got != 138968*time.Nanosecond {
		t.Errorf("bf16 product: %v, want 138.968µs", got)
	}
	if got := h100.Time(BF16, 0, 2<<30); got != 641040*time.Nanosecond {
		t.Errorf("1 GiB copy: %v, want 641.04µs", got)
	}
	if got := h100.Time(F32, 2*n*n*n, 0); got != 2051328*time.Nanosecond {
		t.Errorf("fp32 product: %v, want 2.051328ms (67 TFLOP/s)", got)
	}
	if got := h100.Time(BF16, 0, 0); got != time.Nanosecond {
		t.Errorf("no work: %v, want 1ns", got)
	}
	for name, want := range map[string]string{"NVIDIA H100 80GB HBM3": "h100", "NVIDIA H100 PCIe": "h100-pcie", "NVIDIA H200": "h200", "NVIDIA A100-SXM4-80GB": "a100", "NVIDIA L4": "l4"} {
		if g, ok := GPUByName(name); !ok || g.Key != want {
			t.Errorf("GPUByName(%q) = %q, want %q", name, g.Key, want)
		}
	}
	if err := (Roofline{Name: "x", HalfFLOPS: 1, FP32FLOPS: 1}).Check(); err == nil {
		t.Error("a roofline without bandwidth passes its check")
	}
	// A value out of range is an *ArgError, read by field (the command
	// line trimmed "cuda: " off its text to name its flags).
	var ae *ArgError
	err := (Roofline{Name: "x", HalfFLOPS: 1e15, FP32FLOPS: 1e15, Bandwidth: 1}).Check()
	if !errors.As(err, &ae) || ae.What != "roofline x: bandwidth" || ae.Value != "1e-09 GB/s" || ae.Detail() != "roofline x: bandwidth 1e-09 GB/s: out of range (valid: 0.1 to 1e+06 GB/s)" {
		t.Errorf("a roofline of 1 B/s: %#v", err)
	}
}

func TestMatmulQuantization(t *testing.T) {
	a100, _ := GPUByKey("a100")
	r := a100.Roofline
	// NVIDIA's guide's example: with 256×128 tiles on the A100's 108 SMs,
	// M = 2304 (9 tiles) and N = 1536 (12 tiles) fill exactly one wave of
	// 108; one more column of N opens a second wave, and the product takes
	// nearly twice as long for 0.07% more work.
	one := r.Matmul(BF16, 1, 2304, 1536, 4096)
	two := r.Matmul(BF16, 1, 2304, 1537, 4096)
	if ratio := float64(two-r.Eff.Launch) / float64(one-r.Eff.Launch); math.Abs(ratio-2) > 0.01 {
		t.Errorf("one tile column past a full wave: %.3f× the time, want 2", ratio)
	}
	// A full wave runs at the matmul fraction of the peak.
	flops := 2.0 * 2304 * 1536 * 4096
	if got := flops / (one - r.Eff.Launch).Seconds(); math.Abs(got/(r.HalfFLOPS*r.Eff.Matmul)-1) > 1e-4 {
		t.Errorf("a full wave at %.1f TFLOP/s, want %.1f", got/1e12, r.HalfFLOPS*r.Eff.Matmul/1e12)
	}
	// A large product approaches the matmul fraction from below.
	big := r.Matmul(BF16, 1, 16384, 16384, 16384)
	if e := 2 * math.Pow(16384, 3) / big.Seconds() / r.HalfFLOPS; e > r.Eff.Matmul || e < 0.95*r.Eff.Matmul {
		t.Errorf("16k³ at %.3f of peak, want just under %.3f", e, r.Eff.Matmul)
	}
	// A thin product is memory-bound: a matrix-vector product moves its
	// matrix at the memory fraction of the bandwidth.
	mv := r.Matmul(BF16, 1, 1, 8192, 8192) - r.Eff.Launch
	want := float64(2*(8192*8192+8192+8192)) / (r.Bandwidth * r.Eff.Memory)
	if math.Abs(mv.Seconds()/want-1) > 1e-4 {
		t.Errorf("8192×8192 by a vector: %v, want %.3g s", mv, want)
	}
	// Without a kernel model: the bare roofline's time.
	bare := Roofline{Name: "bare", HalfFLOPS: 1e14, FP32FLOPS: 1e14, Bandwidth: 1e12}
	if got, want := bare.Matmul(F16, 2, 1024, 1024, 1024), bare.Time(F16, 2*2*math.Pow(1024, 3), 0); got != want {
		t.Errorf("bare roofline's product: %v, want %v", got, want)
	}
	if bare.Memory(1e9) != bare.Time(F32, 0, 1e9) {
		t.Errorf("bare roofline's memory-bound kernel: %v, want %v", bare.Memory(1e9), bare.Time(F32, 0, 1e9))
	}
}

// A card shared by users that take turns: each has share of its
// arithmetic, its bandwidth and its special functions and pays 1/share of
// each launch, so a kernel of any kind takes 1/share as long (to the
// nanosecond's rounding); a share outside (0, 1] leaves the card as it is.
func TestShared(t *testing.T) {
	g, ok := GPUByKey("a100")
	if !ok {
		t.Fatal("no a100")
	}
	r := g.Roofline
	half := r.Shared(0.5, "two users")
	if !strings.Contains(half.Name, "shared: 0.50") || !strings.Contains(half.Source, "two users") || half.Eff.Launch != 2*r.Eff.Launch {
		t.Errorf("shared card %+v", half)
	}
	for _, w := range []Work{{FLOPs: 1e12}, {Bytes: 1 << 30}, {Specials: 1e10, Bytes: 1}, {Products: []Product{{1, 4096, 4096, 4096}}}} {
		a, b := r.Kernel(BF16, w), half.Kernel(BF16, w)
		if d := b - 2*a; d < -2 || d > 2 {
			t.Errorf("%+v: %v alone, %v shared by two, want twice", w, a, b)
		}
	}
	for _, s := range []float64{0, -1, 1.5, math.NaN()} {
		if got := r.Shared(s, "x"); got != r {
			t.Errorf("share %v changed the card: %+v", s, got)
		}
	}
}
