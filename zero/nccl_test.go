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
	if err := gpu.Available(); err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	devs := make([]cuda.Device, 2)
	for i := range devs {
		d, err := gpu.New(gpu.Options{Ordinal: i})
		if err != nil {
			t.Skipf("NCCL's ranks need 2 GPUs: %v", err)
		}
		defer d.Close()
		devs[i] = d
	}
	if _, err := gpu.NCCLVersion(); err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	g, err := NewNCCLGroup(devs)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
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
	err = g.Run(func(c *Comm) error {
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
