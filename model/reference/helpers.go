package reference

// The helpers that the tests and benchmarks of several packages share:
// building the reference, checking a setup, opening the host device it is
// checked against, and comparing gradients.

import (
	"math"
	"testing"

	"gorgonia.org/tensor"

	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/model"
)

// MustNew is New for a test or benchmark: an error fails tb, and the model
// is closed when tb ends.
func MustNew(tb testing.TB, cfg model.Config, B, T int, dt tensor.Dtype) *Model {
	tb.Helper()
	r, err := New(cfg, B, T, dt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// Checked is s checked (model.Setup.Check), as the command line gives a
// setup to the layers below: an error fails tb.
func Checked(tb testing.TB, s model.Setup) model.Checked {
	tb.Helper()
	c, err := s.Check()
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// NewHost opens the host device (every core, the default options) for a
// test or benchmark: an error fails tb, and the device is closed when tb
// ends.
func NewHost(tb testing.TB) cuda.Device {
	tb.Helper()
	h, err := host.New(host.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { h.Close() })
	return h
}

// MaxRelErr is max|a-b| / max|b| over a tensor: the per-tensor relative
// error, relative to the tensor's scale so that near-zero entries do not
// dominate (llm.c's test compares tensors the same way).
func MaxRelErr(a, b []float64) float64 {
	var d, m float64
	for i := range a {
		d = math.Max(d, math.Abs(a[i]-b[i]))
		m = math.Max(m, math.Abs(b[i]))
	}
	if m == 0 {
		return d
	}
	return d / m
}
