package zero_test

import (
	"fmt"

	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/zero"
)

// A group of ranks in one process, one device each: Run calls every rank
// at once, each in a goroutine of its own; the ring moves the data as
// NCCL's does, staging its blocks in the ranks' own allocators (comm),
// and each rank counts what it sent: an all-reduce of n elements over N
// ranks sends 2(N-1)/N·n of them.
func ExampleGroup() {
	const n, N = 6, 3
	devs := make([]cuda.Device, N)
	for r := range devs {
		d, err := host.New(host.Options{Threads: 1})
		if err != nil {
			fmt.Println(err)
			return
		}
		defer d.Close()
		devs[r] = d
	}
	g, err := zero.NewGroup(devs)
	if err != nil {
		fmt.Println(err)
		return
	}
	sums := make([][]float32, N)
	err = g.Run(func(c *zero.Comm) error { // every rank at once, in goroutines of its own
		d := c.Device()
		b, err := d.Alloc(cuda.Grads, cuda.F32, n)
		if err != nil {
			return err
		}
		defer d.Free(b)
		v := make([]float32, n)
		for i := range v {
			v[i] = float32((c.Rank() + 1) * (i + 1)) // rank r holds (r+1)·(1, 2, ..., 6)
		}
		if err := d.Upload(b, v); err != nil {
			return err
		}
		if err := c.AllReduce(b, b, zero.Sum); err != nil {
			return err
		}
		sums[c.Rank()] = v
		return d.Download(v, b)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("every rank:", sums[0], sums[1], sums[2])
	t := g.Comm(0).Traffic()[zero.AllReduce]
	fmt.Println("rank 0 sent", t.SentBytes, "bytes in", t.Calls, "call")
	// Output:
	// every rank: [6 12 18 24 30 36] [6 12 18 24 30 36] [6 12 18 24 30 36]
	// rank 0 sent 32 bytes in 1 call
}
