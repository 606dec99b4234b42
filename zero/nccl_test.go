//go:build trainmem_cuda

package zero

import (
	"strings"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/gpu"
)

// TestNCCLSendRecv: the ring and the chain of ringAndChain over NCCL's
// ncclSend and ncclRecv on two GPUs (a machine's, or make test-cuda-emu's
// emulated pair), with the traffic the ring's groups count; a pair that
// disagrees is refused before NCCL is called (it would wait forever),
// naming both ranks and lengths.
func TestNCCLSendRecv(t *testing.T) {
	g := ncclGPUs(t, 2)
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.I32} {
		if err := g.Run(func(c *Comm) error { return ringAndChain(c, dt, 7) }); err != nil {
			t.Fatalf("%s: %v", dt, err)
		}
	}
	for r := range 2 {
		tr := g.Comm(r).Traffic()[SendRecv]
		var b int64
		for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.I32} {
			b += 7 * int64(dt.Size())
		}
		// The ring sends and receives b a rank; the chain adds a send on
		// rank 0 and a receive on rank 1.
		if want := (Traffic{Calls: 6, SentBytes: 2*b - int64(r)*b, RecvBytes: b + int64(r)*b}); tr != want {
			t.Errorf("rank %d: send_recv traffic %+v, want %+v", r, tr, want)
		}
	}
	err := g.Run(func(c *Comm) error {
		b, err := c.Device().Alloc(cuda.Activations, cuda.F32, 4+c.Rank())
		if err != nil {
			return err
		}
		defer c.Device().Free(b)
		if c.Rank() == 0 {
			return c.SendRecv(b, 1, nil, 0)
		}
		return c.SendRecv(nil, 0, b, 0)
	})
	if want := "zero: send_recv: rank 0 sends 4 elements of fp32 to rank 1, which receives 5 of fp32"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a pair that disagrees: %v, want %q", err, want)
	}
}

// TestNCCLSplit: a group of four GPUs over NCCL split into a dp 2 × tp 2
// layout's tensor and data groups, each a communicator of its own
// (ncclCommInitAll over its GPUs): an all-reduce on each tensor group
// equals the sum of its ranks' values, and each data group runs the ring
// and the chain of ringAndChain over ncclSend and ncclRecv, value by
// value; each rank's NCCL memory is its three communicators'.
func TestNCCLSplit(t *testing.T) {
	g := ncclGPUs(t, 4)
	lay := Layout{DP: 2, TP: 2, PP: 1}
	tp, dp, err := splitTensorData(g, lay)
	if err != nil {
		t.Fatal(err)
	}
	err = g.Run(func(c *Comm) error {
		if err := tensorSum(c, tp, lay); err != nil {
			return err
		}
		dc, _ := dp[groupIndex(lay, DataAxis, c.Rank())].Sub(c)
		return ringAndChain(dc, cuda.BF16, 7)
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		want := g.Engine(i).Bytes()
		for _, sub := range []*Group{tp[groupIndex(lay, TensorAxis, i)], dp[groupIndex(lay, DataAxis, i)]} {
			sc, _ := sub.Sub(g.Comm(i))
			b := sub.Engine(sc.idx).Bytes()
			if b <= 0 {
				t.Errorf("rank %d: a sub-group's communicator holds %d bytes", i, b)
			}
			want += b
		}
		if got := g.EngineBytes(i); got != want {
			t.Errorf("rank %d: NCCL holds %d bytes, want its three communicators' %d", i, got, want)
		}
	}
}

// ncclGPUs is a group of n GPUs over NCCL, closed with the test; the test
// is skipped where n GPUs or NCCL do not open.
func ncclGPUs(t *testing.T, n int) *Group {
	t.Helper()
	if err := gpu.Available(); err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	devs := make([]cuda.Device, n)
	for i := range devs {
		d, err := gpu.New(gpu.Options{Ordinal: i})
		if err != nil {
			t.Skipf("the test's ranks need %d GPUs: %v", n, err)
		}
		t.Cleanup(func() { d.Close() })
		devs[i] = d
	}
	if _, err := gpu.NCCLVersion(); err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	g, err := NewNCCLGroup(devs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}
