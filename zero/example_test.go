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
	g, done, err := hostGroup(N)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer done()
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

// A data × tensor × pipeline layout numbers its ranks as Megatron-LM does,
// the tensor rank fastest: a tensor group is consecutive ranks, a pipeline
// group strides over the whole run. Split makes each axis's groups of a
// group's ranks; inside the group's Run a rank reaches its own with Sub,
// and the pipeline's stages pass activations on with SendRecv.
func ExampleLayout() {
	l := zero.Layout{DP: 2, TP: 2, PP: 2}
	for a := range zero.NumAxes {
		fmt.Println(a, l.Groups(a))
	}
	fmt.Println("rank 5 is at", l.Coord(5), "(tensor, data, pipeline)")

	g, done, err := hostGroup(l.Size())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer done()
	stages, err := g.Split(l.Groups(zero.PipelineAxis))
	if err != nil {
		fmt.Println(err)
		return
	}
	got := make([][]float32, l.Size())
	err = g.Run(func(c *zero.Comm) error {
		var p *zero.Comm
		for _, s := range stages {
			if sc, ok := s.Sub(c); ok {
				p = sc
			}
		}
		d := c.Device()
		b, err := d.Alloc(cuda.Activations, cuda.F32, 2)
		if err != nil {
			return err
		}
		defer d.Free(b)
		if p.Rank() == 0 { // the first stage sends its rank's values on
			if err := d.Upload(b, []float32{float32(c.Rank()), 1}); err != nil {
				return err
			}
			return p.SendRecv(b, 1, nil, 0)
		}
		if err := p.SendRecv(nil, 0, b, 0); err != nil {
			return err
		}
		got[c.Rank()] = make([]float32, 2)
		return d.Download(got[c.Rank()], b)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("stage 1 ranks received", got[4:])
	// Output:
	// tensor [[0 1] [2 3] [4 5] [6 7]]
	// data [[0 2] [1 3] [4 6] [5 7]]
	// pipeline [[0 4] [1 5] [2 6] [3 7]]
	// rank 5 is at [1 0 1] (tensor, data, pipeline)
	// stage 1 ranks received [[0 1] [1 1] [2 1] [3 1]]
}

// hostGroup is a group of n ranks in this process on host devices of one
// thread each, and what closes them.
func hostGroup(n int) (*zero.Group, func(), error) {
	devs := make([]cuda.Device, 0, n)
	done := func() {
		for _, d := range devs {
			d.Close()
		}
	}
	for range n {
		d, err := host.New(host.Options{Threads: 1})
		if err != nil {
			done()
			return nil, nil, err
		}
		devs = append(devs, d)
	}
	g, err := zero.NewGroup(devs)
	if err != nil {
		done()
		return nil, nil, err
	}
	return g, done, nil
}
