package model

import (
	"math"
	"math/rand/v2"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"trainmem/cuda"
	"trainmem/cuda/conformance"
	"trainmem/cuda/host"
)

// TestRMSNormOps runs the RMSNorm family's ops as the executor lowers them
// (Run on the host device, in float64) and checks the gradients their
// forward op's SymDiff wires up against central finite differences of
// Σ dy·y: the backward ops read the right arguments in the right order.
func TestRMSNormOps(t *testing.T) {
	const N, C, eps = 5, 12, 1e-5
	dev, err := host.New(host.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	randn := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.NormFloat64() + 0.3
		}
		return v
	}
	xv, wv, dyv := randn(N*C), randn(C), randn(N*C)
	buf := func(v []float64) *cuda.Buffer {
		b, err := dev.Alloc(cuda.Temporaries, cuda.F64, len(v))
		if err != nil {
			t.Fatal(err)
		}
		if err := dev.Upload(b, v); err != nil {
			t.Fatal(err)
		}
		return b
	}
	get := func(b *cuda.Buffer) []float64 {
		v := make([]float64, b.Len)
		if err := dev.Download(v, b); err != nil {
			t.Fatal(err)
		}
		return v
	}
	ex := Exec{K: dev}
	statsOp := bind(&NormStatsOp{Kind: NormRMS, N: N, C: C, Eps: eps}, "ln")
	normOp := bind(&NormOp{Kind: NormRMS, N: N, C: C}, "ln")
	forward := func(x, w []float64) (y, stats *cuda.Buffer) {
		xb, wb := buf(x), buf(w)
		stats, y = buf(make([]float64, N)), buf(make([]float64, N*C))
		if err := statsOp.Run(ex, stats, []*cuda.Buffer{xb}); err != nil {
			t.Fatal(err)
		}
		if err := normOp.Run(ex, y, []*cuda.Buffer{xb, stats, wb}); err != nil {
			t.Fatal(err)
		}
		return y, stats
	}
	loss := func() float64 {
		y, _ := forward(xv, wv)
		s := 0.0
		for i, v := range get(y) {
			s += dyv[i] * v
		}
		return s
	}

	// The backward ops, as SymDiff makes them in a graph.
	g := G.NewGraph()
	in := []*G.Node{
		G.NewMatrix(g, tensor.Float64, G.WithShape(N, C), G.WithName("x")),
		G.NewMatrix(g, tensor.Float64, G.WithShape(N, 1), G.WithName("stats")),
		G.NewVector(g, tensor.Float64, G.WithShape(C), G.WithName("w")),
	}
	out, err := G.ApplyOp(normOp, in...)
	if err != nil {
		t.Fatal(err)
	}
	dyNode := G.NewMatrix(g, tensor.Float64, G.WithShape(N, C), G.WithName("dy"))
	grads, err := normOp.SymDiff(in, out, dyNode)
	if err != nil {
		t.Fatal(err)
	}
	if grads[1] != nil {
		t.Fatalf("SymDiff gave the statistic a gradient: %v", grads[1])
	}
	_, stats := forward(xv, wv)
	args := map[*G.Node]*cuda.Buffer{in[0]: buf(xv), in[1]: stats, in[2]: buf(wv), dyNode: buf(dyv)}
	run := func(n *G.Node, size int) []float64 {
		var a []*cuda.Buffer
		for _, c := range Args(n) {
			a = append(a, args[c])
		}
		o := buf(make([]float64, size))
		if err := n.Op().(Runner).Run(ex, o, a); err != nil {
			t.Fatalf("%v: %v", n.Op(), err)
		}
		return get(o)
	}
	dx, dw := run(grads[0], N*C), run(grads[2], C)

	for _, c := range []struct {
		name      string
		got, want []float64
	}{{"dx", dx, conformance.FiniteDiff(xv, loss)}, {"dw", dw, conformance.FiniteDiff(wv, loss)}} {
		for i := range c.got {
			if diff := math.Abs(c.got[i] - c.want[i]); diff > 1e-6*(1+math.Abs(c.want[i])) {
				t.Errorf("%s[%d] = %.10g, finite differences %.10g", c.name, i, c.got[i], c.want[i])
			}
		}
	}

	// What the family keeps: the statistic is one fp32 value a row (N, 1),
	// half a layer norm's (mean, 1/std), and it is a statistic, not an
	// activation of the working dtype.
	if !IsStatistic(statsOp) || StatisticLen(statsOp) != N || StatisticLen(&NormStatsOp{Kind: NormLayer, N: N, C: C}) != 2*N {
		t.Errorf("statistics: RMSNorm %t, %d values; layer norm %d values; want true, %d and %d",
			IsStatistic(statsOp), StatisticLen(statsOp), StatisticLen(&NormStatsOp{Kind: NormLayer, N: N, C: C}), N, 2*N)
	}
}
