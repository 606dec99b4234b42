package cuda

import (
	"errors"
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
