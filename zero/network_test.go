package zero

import (
	"math"
	"strings"
	"testing"
)

// ncclRow is one line of a published all_reduce_perf table: the buffer
// in bytes and its bus bandwidth in GB/s.
type ncclRow struct {
	bytes int64
	busbw float64
}

func TestNCCLTestsAllReduce(t *testing.T) {
	a100, _ := NetworkByName("dgx-a100")
	p5, _ := NetworkByName("p5")
	h100, _ := NetworkByName("dgx-h100")
	for _, tc := range []struct {
		name   string
		tol    float64 // the relative error allowed from minBytes up
		minB   int64
		nw     Network
		g      Span
		source string
		rows   []ncclRow
	}{
		{"8 A100, one node", 0.15, 8 << 20, a100, Span{8, 1},
			"Hetu-Galvatron tests/profiler/test_hardware_profile.py @6f77a6cb: all_reduce_perf on 8 A100 (NVSwitch)",
			[]ncclRow{{1 << 20, 23.29}, {2 << 20, 33.73}, {4 << 20, 55.97}, {8 << 20, 80.04}, {16 << 20, 99.99}, {32 << 20, 141.27},
				{64 << 20, 178.69}, {128 << 20, 186.91}, {256 << 20, 200.85}, {512 << 20, 202.00}, {1 << 30, 230.84}}},
		{"8 A100, one node (OCI)", 0.05, 0, a100, Span{8, 1}, "OCI BM.GPU4.8 all_reduce_perf, 10 GiB", []ncclRow{{10 << 30, 232.20}}},
		{"16 A100, two nodes over RoCE (OCI)", 0.05, 0, a100, Span{16, 2}, "OCI BM.GPU4.8 ×2 all_reduce_perf, 10 GiB", []ncclRow{{10 << 30, 191.76}}},
		{"8 H100, one node", 0.05, 0, h100, Span{8, 1}, "S. Jeaugey, nccl-tests issue #212: NVLS about 480 GB/s", []ncclRow{{8 << 30, 480}}},
		{"16 H100, two p5 nodes", 0.10, 64 << 20, p5, Span{16, 2},
			"aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/README.md: all_reduce_perf on 2 p5.48xlarge",
			[]ncclRow{{1 << 20, 15.95}, {16 << 20, 105.52}, {64 << 20, 209.19}, {256 << 20, 342.81}, {1 << 30, 436.95}, {8 << 30, 479.28}, {16 << 30, 487.09}}},
	} {
		for _, r := range tc.rows {
			c := tc.nw.Cost(AllReduce, r.bytes, tc.g)
			bus := float64(r.bytes) / c.Time.Seconds() * BusFactor(AllReduce, tc.g.N) / 1e9
			e := bus/r.busbw - 1
			t.Logf("%s: %6d MiB: published %6.1f GB/s, model %6.1f (%s/%s), %+.0f%%", tc.name, r.bytes>>20, r.busbw, bus, c.Algorithm, c.Protocol, 100*e)
			// Below minBytes NCCL's small-buffer costs (launches, the
			// protocols' switch-over) are more than its tuner's
			// latencies: the model is optimistic there, at most about
			// twice the published bandwidth.
			if tol := tc.tol; r.bytes < tc.minB && !(e > -0.15 && e < 1.1) || r.bytes >= tc.minB && math.Abs(e) > tol {
				t.Errorf("%s (%s): %d bytes: model %.1f GB/s, published %.1f (%+.0f%%)", tc.name, tc.source, r.bytes, bus, r.busbw, 100*e)
			}
		}
	}
}

func TestBusFactor(t *testing.T) {
	// nccl-tests doc/PERFORMANCE.md: all-reduce 2(n-1)/n, reduce-scatter
	// and all-gather (n-1)/n, broadcast and reduce 1.
	for _, c := range []struct {
		c    Collective
		n    int
		want float64
	}{{AllReduce, 8, 1.75}, {AllReduce, 2, 1}, {ReduceScatter, 8, 0.875}, {AllGather, 4, 0.75}, {Broadcast, 8, 1}, {Reduce, 16, 1}, {AllReduce, 1, 0}} {
		if got := BusFactor(c.c, c.n); got != c.want {
			t.Errorf("BusFactor(%s, %d) = %g, want %g", c.c, c.n, got, c.want)
		}
	}
}

func TestCostShape(t *testing.T) {
	nw, _ := NetworkByName("dgx-a100")
	one := Span{8, 1}
	// Twice the bytes never cost less; a one-rank group and no bytes cost nothing.
	prev := Cost{}
	for S := int64(1); S <= 1<<34; S *= 2 {
		c := nw.Cost(AllReduce, S, one)
		if c.Time < prev.Time {
			t.Fatalf("all-reduce of %d bytes takes %v, less than half of it (%v)", S, c.Time, prev.Time)
		}
		prev = c
	}
	if c := nw.Cost(AllReduce, 1<<30, Span{1, 1}); c.Time != 0 {
		t.Errorf("one rank's all-reduce takes %v", c.Time)
	}
	// A large buffer is bandwidth-bound: an all-gather moves half an
	// all-reduce's bytes, a group across nodes crosses the network.
	big := int64(8 << 30)
	ar, ag := nw.Cost(AllReduce, big, one), nw.Cost(AllGather, big, one)
	if r := ar.Time.Seconds() / ag.Time.Seconds(); math.Abs(r-2) > 0.01 {
		t.Errorf("all-reduce / all-gather of 8 GiB on 8 GPUs = %.3f, want 2", r)
	}
	// 8 data ranks, one a node (tensor parallel 8 fills each node): each
	// group has one NIC a node, 25 GB/s at 96%.
	dp := nw.Cost(AllReduce, big, Span{8, 8})
	if bus := float64(big) / dp.Time.Seconds() * BusFactor(AllReduce, 8); math.Abs(bus/24e9-1) > 0.02 {
		t.Errorf("8 nodes' all-reduce, one GPU a node: bus bandwidth %.1f GB/s, want about 24", bus/1e9)
	}
	// Sending to the next stage over NVLink and over the network.
	in, out := nw.Cost(SendRecv, big, Span{2, 1}), nw.Cost(SendRecv, big, Span{2, 2})
	if r := out.Time.Seconds() / in.Time.Seconds(); math.Abs(r-240.0/24) > 0.1 {
		t.Errorf("send over the network / over NVLink = %.2f, want 10", r)
	}
}

func TestGroupOf(t *testing.T) {
	for _, c := range []struct {
		l       Layout
		perNode int
		a       Axis
		want    Span
	}{
		{Layout{DP: 4, TP: 8, PP: 2}, 8, TensorAxis, Span{8, 1}},
		{Layout{DP: 4, TP: 8, PP: 2}, 8, DataAxis, Span{4, 4}},
		{Layout{DP: 4, TP: 8, PP: 2}, 8, PipelineAxis, Span{2, 2}},
		{Layout{DP: 8, TP: 2, PP: 1}, 8, DataAxis, Span{8, 2}},
		{Layout{DP: 2, TP: 2, PP: 2}, 8, PipelineAxis, Span{2, 1}},
		{Layout{DP: 3, TP: 2, PP: 1}, 4, DataAxis, Span{3, 2}},
		{Layout{DP: 16, TP: 1, PP: 1}, 8, TensorAxis, Span{1, 1}},
	} {
		if got := c.l.GroupOf(c.a, c.perNode); got != c.want {
			t.Errorf("%v, %d a node: the %s group spans %+v, want %+v", c.l, c.perNode, c.a, got, c.want)
		}
	}
}

func TestParseNetwork(t *testing.T) {
	n, err := ParseNetwork("nvlink=300,net=100,gpus=4")
	if err != nil || n.Intra.Bandwidth != 300e9 || n.Inter.Bandwidth != 100e9 || n.GPUsPerNode != 4 {
		t.Fatalf("ParseNetwork: %+v, %v", n, err)
	}
	for _, bad := range []string{"dgx-b300", "nvlink=300", "nvlink=-1,net=5", "nvlink=1e9,net=5", "nvlink=x,net=5", "nvlink=300,net=5,wifi=2", "nvlink=300,net=5,gpus=2.5", "nvlink=300,net=5,gpus=0"} {
		_, err := ParseNetwork(bad)
		if err == nil || !strings.Contains(err.Error(), "valid") {
			t.Errorf("ParseNetwork(%q): %v, want an error naming what is valid", bad, err)
		}
	}
}
