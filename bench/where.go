package bench

// Where a measured run's ranks run: every rank in this process, or one
// rank per process (as torchrun, mpirun or srun start them) with rank 0
// gathering every rank's results and reporting them as the in-process
// run does.

import (
	"fmt"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/train"
	"trainmem/zero"
)

// Where says where a measured run's ranks run. With Link nil every rank
// runs in this process, each on a device of its own from New (at most
// MostMeasuredRanks). With Link set this process is rank Link.Rank() of
// Link.Size() ranks, one a process, on one device from New; its reports
// are rank 0's (the other ranks' come back empty).
type Where struct {
	New  func() (cuda.Device, error)
	Link zero.Link
	// Native, when set, makes the group of a native engine (NCCL) over the
	// devices New opened: in one process (link nil) every rank's, else
	// this process's rank's over link. Nil: the ring moves the data.
	Native func(devs []cuda.Device, link zero.Link) (*zero.Group, error)
	// Traces, when set, records the last step of each of this process's
	// ranks.
	Traces RankTraces
	// Offload opens a rank's offload device, host memory, for a setup
	// that offloads the optimizer (model.OffloadOptimizer); each rank
	// opens its own, and its trainer closes it.
	Offload func() (cuda.Device, error)
}

// trainOptions are the trainer options of a measured run of s: the
// optimizer at lr, the profile, and the offload device when s offloads.
func (w Where) trainOptions(s model.Setup, lr float64, p *train.Profile) (train.Options, error) {
	opts := train.Options{Optimizer: train.DefaultOptimizer(s.Optimizer).WithLR(lr), Profile: p}
	if s.Offload != model.OffloadNone {
		if w.Offload == nil {
			return opts, fmt.Errorf("bench: the setup offloads the %s and the run opens no offload device (Where.Offload)", s.Offload)
		}
		opts.Offload = w.Offload
	}
	return opts, nil
}

// Root says whether this process reports: every in-process run, rank 0 of
// a run over processes.
func (w Where) Root() bool { return w.Link == nil || w.Link.Rank() == 0 }

// open opens the devices and the group of a run of n ranks: one device a
// rank in this process, or this process's rank of the link's group. close
// closes the devices.
func (w Where) open(n int) (g *zero.Group, devs []cuda.Device, close func(), err error) {
	close = func() {
		for _, d := range devs {
			if d != nil {
				d.Close()
			}
		}
	}
	members := n
	switch {
	case w.Link != nil && w.Link.Size() != n:
		return nil, nil, close, fmt.Errorf("bench: %d ranks over a link of %d processes", n, w.Link.Size())
	case w.Link != nil:
		members = 1
	case n > MostMeasuredRanks:
		return nil, nil, close, fmt.Errorf("bench: measuring %d ranks in one process: at most %d (one process a rank runs any number: see 'trainmem help train', launchers)", n, MostMeasuredRanks)
	}
	devs = make([]cuda.Device, members)
	for i := range devs {
		if devs[i], err = w.New(); err != nil {
			return nil, nil, close, err
		}
	}
	switch {
	case w.Native != nil:
		g, err = w.Native(devs, w.Link)
	case w.Link != nil:
		g, err = zero.NewProcessGroup(devs[0], w.Link)
	default:
		g, err = zero.NewGroup(devs)
	}
	if err != nil {
		return nil, devs, close, err
	}
	if w.Traces != nil {
		g.TraceRanks(w.Traces.Tracer)
	}
	closeDevs := close
	close = func() {
		g.Close()
		closeDevs()
	}
	return g, devs, close, nil
}

// prepare is what a run on devs (opened by open) starts from once the
// machine is checked to hold it (checkFits, on devices that compute): the
// data's batches (closed by the caller), and the initial weights: load's
// checkpoint when given (a LoRA's adapters initialised from seed over
// it), else seed's on devices that compute (nil on shape-only ones, which
// hold none), and a LoRA's adapters from adapter's directory when given.
func (w Where) prepare(devs []cuda.Device, c model.Checked, set zero.Setting, data, load, adapter string, seed uint64) (*train.Batches, []float32, error) {
	s := c.Setup()
	if devs[0].Computes() {
		if err := w.checkFits(devs, c, set); err != nil {
			return nil, nil, err
		}
	}
	batches, err := train.OpenBatches(devs[0], data, s, seed)
	if err != nil {
		return nil, nil, err
	}
	var init []float32
	switch {
	case load != "":
		if init, err = model.LoadCheckpoint(load, s.Model); err != nil {
			batches.Close()
			return nil, nil, err
		}
		if s.Model.LoRA.On() {
			model.InitAdapters(s.Model, seed, init) // the file holds the base model
		}
	case devs[0].Computes():
		init = model.InitParams(s.Model, seed)
	}
	if adapter != "" && init != nil {
		if err := model.LoadAdapter(adapter, s.Model, init); err != nil {
			batches.Close()
			return nil, nil, err
		}
	}
	return batches, init, nil
}

// stream is the batches of a run of the layout's ranks: each step, data
// rank d takes the d-th run of m micro-batches (the setup's micro-batches
// a step) of every DP such runs of the data's stream, and every
// tensor-parallel rank and pipeline stage of a replica the same run. In
// one process the members ask in rank order, each in turn (the first
// tensor rank of a replica's first stage reads its run, the others of the
// replica, after it, share it); a process's rank reads the DP runs of a
// step and keeps its own.
func (w Where) stream(b *train.Batches, lay zero.Layout, m int) func(step, rank int) ([]int32, []int32, error) {
	m = max(m, 1)
	run := func() (tok, tgt []int32, err error) {
		for range m {
			t, g, err := b.Next()
			if err != nil {
				return nil, nil, err
			}
			tok, tgt = append(tok, t...), append(tgt, g...)
		}
		return tok, tgt, nil
	}
	if w.Link == nil {
		tok, tgt := make([][]int32, lay.DP), make([][]int32, lay.DP)
		return func(_, rank int) ([]int32, []int32, error) {
			c := lay.Coord(rank)
			d := c[zero.DataAxis]
			if c[zero.TensorAxis] == 0 && c[zero.PipelineAxis] == 0 {
				t, g, err := run()
				if err != nil {
					return nil, nil, err
				}
				tok[d], tgt[d] = t, g
			}
			return tok[d], tgt[d], nil
		}
	}
	return func(_, rank int) (tok, tgt []int32, err error) {
		mine := lay.Coord(rank)[zero.DataAxis]
		for q := range lay.DP {
			t, g, err := run()
			if err != nil {
				return nil, nil, err
			}
			if q == mine {
				tok, tgt = t, g
			}
		}
		return tok, tgt, nil
	}
}

// Engine is what moves the ranks' data: NCCL (a native engine), the
// link's transport (TCP, MPI) over processes, else the in-process ring.
func (w Where) Engine() zero.Backend {
	switch {
	case w.Native != nil:
		return zero.NCCL
	case w.Link != nil:
		if b, err := zero.ParseBackend(w.Link.Name()); err == nil {
			return b
		}
	}
	return zero.Inproc
}

// over says, for progress lines, how the ranks meet.
func (w Where) over() string {
	if w.Link == nil {
		return ""
	}
	return fmt.Sprintf(", one a process over %s", w.Link.Name())
}

// checkFits refuses a run of this process's ranks that the machine cannot
// hold, before anything is allocated: each rank's reserved bytes by the
// simulation (every rank of an in-process group, or this process's rank),
// and the float32 parameters the run initialises on the host once
// (train.CheckMachine; host devices share the machine's memory).
func (w Where) checkFits(devs []cuda.Device, c model.Checked, set zero.Setting) error {
	s := c.Setup()
	var reserve []int64
	if w.Link == nil {
		res, err := zero.Simulate(func() cuda.Device { return shape.New(0) }, c, set, 2, nil)
		if err != nil {
			return fmt.Errorf("bench: the simulation before the run: %w", err)
		}
		for _, r := range res {
			reserve = append(reserve, r.Stats.ReservedBytes.Peak)
		}
	} else {
		sim := shape.New(0)
		defer sim.Close()
		r, err := zero.SimulateRank(sim, c, set, w.Link.Rank(), 2)
		if err != nil {
			return fmt.Errorf("bench: the simulation before the run: %w", err)
		}
		reserve = []int64{r.Stats.ReservedBytes.Peak}
	}
	hostBytes := train.HostParamBytes(s.Model)
	if cuda.OnMachineMemory(devs[0]) {
		var sum int64
		for _, r := range reserve {
			sum += r
		}
		return train.CheckMachine(devs[0], sum, hostBytes)
	}
	for i, d := range devs {
		if i < len(reserve) {
			if err := train.CheckMachine(d, reserve[i], hostBytes); err != nil {
				return err
			}
		}
		hostBytes = 0 // once
	}
	return nil
}
