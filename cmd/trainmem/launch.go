package main

// The flags of a run whose ranks are processes of their own: the rank,
// the world size and the rendezvous from the launcher that started
// trainmem (torchrun, mpirun, srun) or from --rank, --world and --init, and
// the engine that moves the data (--backend).

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"trainmem/bench"
	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/model"
	"trainmem/zero"
)

// launchFlags are the flags of a run over processes.
type launchFlags struct {
	fs          *flag.FlagSet
	backend     string
	rank, world int
	init        string
	timeout     time.Duration
	getenv      func(string) string // os.Getenv; tests give their own
}

const launchHelp = `Ranks as processes of their own, one a rank, are started by a launcher, which
trainmem reads: torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT), Open MPI's mpirun (OMPI_COMM_WORLD_*) or Slurm's srun
(SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with MASTER_ADDR and MASTER_PORT
or --init), or by hand with --rank, --world and --init. Every rank runs the
same command; rank 0 prints the report, with every rank's memory and traffic:
  torchrun --nproc_per_node 4 --no_python trainmem validate --zero 2
  mpirun -np 4 trainmem-mpi validate --zero 2
  srun -n 4 trainmem validate --zero 2 --init tcp://$(hostname):29500`

func addLaunchFlags(fs *flag.FlagSet) *launchFlags {
	f := &launchFlags{fs: fs, getenv: os.Getenv}
	fs.StringVar(&f.backend, "backend", "", "what moves the ranks' data: inproc, tcp, mpi or nccl (default: from the device and the launcher)")
	intVar(fs, &f.rank, "rank", 0, "this process's `rank`, with --world and --init, for ranks started by hand (default: the launcher's)")
	intVar(fs, &f.world, "world", 0, "the number of processes, `N`, one a rank, with --rank (default: the launcher's)")
	fs.StringVar(&f.init, "init", "", "the rendezvous, tcp://`host:port`, where rank 0 listens (default: MASTER_ADDR and MASTER_PORT)")
	fs.DurationVar(&f.timeout, "timeout", zero.DefaultTimeout, "how long a rank waits for another (at the rendezvous, in a collective) before it stops, naming the rank")
	return f
}

func (f *launchFlags) given(name string) bool { return given(f.fs, name) }

// launch resolves the launcher's environment and the flags, for ranks on
// tf's device (host or cuda); a process of a launch takes its local rank's
// GPU.
func (f *launchFlags) launch(tf *trainFlags) (zero.Launch, zero.Backend, error) {
	l, b, err := f.resolve(tf.device)
	if err == nil && l.Processes() {
		tf.gpu = l.LocalRank
	}
	return l, b, err
}

// resolve is launch's work: the launcher's environment and the flags
// checked against each other, and the backend for ranks on device.
func (f *launchFlags) resolve(device string) (zero.Launch, zero.Backend, error) {
	l, err := zero.DetectLaunch(f.getenv)
	if err != nil {
		return zero.Launch{}, 0, usageError{err}
	}
	switch r, w := f.given("rank"), f.given("world"); {
	case r != w:
		return zero.Launch{}, 0, usagef("--rank and --world go together: give both, for ranks started by hand")
	case r && (f.world < 1 || f.world > model.MaxRanks):
		return zero.Launch{}, 0, usagef("--world %d: out of range (valid: 1 to %d)", f.world, model.MaxRanks)
	case r && (f.rank < 0 || f.rank >= f.world):
		return zero.Launch{}, 0, usagef("--rank %d: out of range (valid: 0 to %d for --world %d)", f.rank, f.world-1, f.world)
	case r && f.world == 1:
		l = zero.Launch{}
	case r:
		// One node unless LOCAL_RANK says otherwise: rank r drives GPU r.
		l = zero.Launch{Launcher: "flags", Rank: f.rank, World: f.world, LocalRank: f.rank}
		if v, err := strconv.Atoi(f.getenv("LOCAL_RANK")); err == nil && v >= 0 {
			l.LocalRank = v
		}
	}
	if f.init != "" {
		if _, err := zero.ParseInit(f.init); err != nil {
			return zero.Launch{}, 0, usagef("--init %w", err)
		}
		l.Init, l.Store, l.StoreKey = f.init, "", "" // rank 0 listens there, whatever the launcher runs
	}
	if f.timeout <= 0 {
		return zero.Launch{}, 0, usagef("--timeout %v: want a positive duration (e.g. 5m)", f.timeout)
	}
	var backend zero.Backend
	switch {
	case f.backend == "" && device == "cuda" && haveNCCL:
		backend = zero.NCCL
	case f.backend == "":
		backend = zero.DefaultBackend(l)
	default:
		var err error
		if backend, err = zero.ParseBackend(f.backend); err != nil {
			return zero.Launch{}, 0, usagef("--backend %w", err)
		}
		if device == "cuda" && backend != zero.NCCL {
			return zero.Launch{}, 0, usagef("--backend %s moves host memory, and --device cuda's ranks hold theirs on GPUs: use --backend nccl", backend)
		}
	}
	switch backend {
	case zero.Inproc:
		if l.Processes() {
			return zero.Launch{}, 0, usagef("--backend inproc runs every rank in one process, and this process is rank %d of %d (%s): use --backend tcp or mpi", l.Rank, l.World, l.Launcher)
		}
	case zero.TCP:
		if !l.Processes() {
			return zero.Launch{}, 0, usagef("--backend tcp runs one process a rank: start them with a launcher (torchrun, srun) or give --rank, --world and --init")
		}
		if l.Init == "" && l.Store == "" {
			return zero.Launch{}, 0, usagef("--backend tcp: no rendezvous: give --init tcp://HOST:PORT (where rank 0 listens) or set MASTER_ADDR and MASTER_PORT")
		}
	case zero.MPI:
		if !zero.HaveMPI {
			return zero.Launch{}, 0, usagef("--backend mpi: this trainmem has no MPI: build bin/trainmem-mpi with 'make build-mpi' (needs libopenmpi-dev) and start it with mpirun")
		}
	case zero.NCCL:
		switch {
		case !haveNCCL:
			return zero.Launch{}, 0, usagef("--backend nccl: this trainmem was built without CUDA: build it with 'make build-cuda' and run it on NVIDIA GPUs")
		case device != "cuda":
			return zero.Launch{}, 0, usagef("--backend nccl moves data between GPUs: give --device cuda")
		case l.Processes() && l.Init == "" && l.Store == "" && !(l.Launcher == "mpirun" && zero.HaveMPI):
			return zero.Launch{}, 0, usagef("--backend nccl over processes: the ranks meet to share NCCL's id: give --init tcp://HOST:PORT or set MASTER_ADDR and MASTER_PORT (or run the MPI build under mpirun)")
		}
	}
	return l, backend, nil
}

// process is this process's rank of a run over processes: its link, and
// whether NCCL moves its data (the link then only meets the ranks).
type process struct {
	link zero.Link
	nccl bool
}

// open joins the ranks' group (the rendezvous), and checks that every rank
// runs the same setup. A nil process is a run in one process.
func (f *launchFlags) open(l zero.Launch, backend zero.Backend, fields []zero.Field) (*process, error) {
	var link zero.Link
	meet := backend
	if backend == zero.NCCL { // NCCL's id travels over MPI under mpirun, else TCP
		meet = zero.TCP
		if l.Launcher == "mpirun" && zero.HaveMPI {
			meet = zero.MPI
		}
	}
	switch meet {
	case zero.Inproc:
		return nil, nil
	case zero.TCP:
		if l.Store != "" {
			var err error
			if link, err = zero.DialTCPStore(l.Store, l.StoreKey, l.Rank, l.World, f.timeout); err != nil {
				return nil, err
			}
			break
		}
		addr, err := zero.ParseInit(l.Init)
		if err != nil {
			return nil, usageError{err}
		}
		if link, err = zero.DialTCP(addr, l.Rank, l.World, f.timeout); err != nil {
			return nil, err
		}
	case zero.MPI:
		ml, err := zero.OpenMPI(f.timeout)
		if err != nil {
			return nil, err
		}
		if l.Processes() && (ml.Rank() != l.Rank || ml.Size() != l.World) {
			ml.Close()
			return nil, fmt.Errorf("MPI says rank %d of %d, and %s rank %d of %d", ml.Rank(), ml.Size(), l.Launcher, l.Rank, l.World)
		}
		if ml.Size() == 1 {
			ml.Close()
			return nil, usagef("--backend mpi: MPI started one process: start the ranks with mpirun -np N")
		}
		link = ml
	}
	if err := zero.Agree(link, fields); err != nil {
		var me *zero.MismatchError
		if errors.As(err, &me) && meet == zero.MPI {
			// Every rank knows the verdict: say it before MPI_Finalize,
			// since mpirun ends the other ranks as soon as one exits, and
			// a rank still finalizing would be ended before it said why.
			fmt.Fprintf(os.Stderr, "trainmem: %s: %v\n", f.fs.Name(), err)
			link.Close()
			return nil, reportedError{usageError{err}}
		}
		link.Close()
		if me != nil {
			return nil, usageError{err}
		}
		return nil, err
	}
	return &process{link: link, nccl: backend == zero.NCCL}, nil
}

// where is where the run's ranks are: this process's rank, or every rank
// in this process (p nil), each on a device from newDevice.
func (p *process) where(newDevice func() (cuda.Device, error)) bench.Where {
	if p == nil {
		return bench.Where{New: newDevice, Offload: offloadHost}
	}
	w := bench.Where{New: newDevice, Link: p.link, Offload: offloadHost}
	if p.nccl {
		w.Native = ncclGroup
	}
	return w
}

// offloadHost opens a rank's offload device: this machine's memory, the
// host device (its threads running the offloaded update, as DeepSpeed's
// CPU Adam does).
func offloadHost() (cuda.Device, error) { return host.New(host.Options{}) }

// inProcess is where the ranks of a run in one process are: NCCL's
// group with --device cuda, the ring otherwise.
func inProcess(backend zero.Backend, newDevice func() (cuda.Device, error)) bench.Where {
	w := bench.Where{New: newDevice, Offload: offloadHost}
	if backend == zero.NCCL {
		w.Native = ncclGroup
	}
	return w
}

// end leaves the group: after a run that failed on this rank, the others
// hear why (their waits end naming this rank).
func (p *process) end(err error) error {
	if p == nil {
		return err
	}
	if err != nil {
		// Bad input and a stop that every rank agreed on end every rank
		// alike: a goodbye. A failure here, or a signal the others have
		// not heard of, is theirs to hear.
		var u usageError
		var stop *zero.StopError
		if errors.As(err, &u) || errors.As(err, &stop) {
			p.link.Close()
		} else {
			p.link.Abort(err)
		}
		return fmt.Errorf("rank %d: %w", p.link.Rank(), err)
	}
	return p.link.Close()
}

// root says whether this process writes the report.
func (p *process) root() bool { return p == nil || p.link.Rank() == 0 }

// setupFields are the values every rank of a run must share: the setup,
// the setting and the run's own flags, named as the flags that give them.
func setupFields(cmd string, s model.Setup, set zero.Setting, tf *trainFlags) []zero.Field {
	c := s.Model
	var f []zero.Field
	for _, kv := range [][2]string{
		{"subcommand", cmd},
		{"--layers", strconv.Itoa(c.Layers)}, {"--hidden", strconv.Itoa(c.Hidden)}, {"--heads", strconv.Itoa(c.Heads)}, {"--kv-heads", strconv.Itoa(c.KV())},
		{"--vocab", strconv.Itoa(c.Vocab)}, {"--context", strconv.Itoa(c.Context)}, {"--untied", strconv.FormatBool(c.Untied)},
		{"--norm", c.Norm.String()}, {"--bias", strconv.FormatBool(!c.NoBias)}, {"--mlp", c.MLP.String()}, {"--ffn", strconv.Itoa(c.FFNWidth())},
		{"--positions", c.Positions.String()}, {"--attention", c.Attention.String()}, {"--rope-theta", strconv.FormatFloat(c.Theta(), 'g', -1, 64)},
		{"the norms' ε (--hf-config)", strconv.FormatFloat(c.Eps(), 'g', -1, 64)},
		{"--batch", strconv.Itoa(s.Batch)}, {"--seq", strconv.Itoa(s.Seq)},
		{"--precision", s.Precision.String()}, {"--main-grads", s.MainGrads.String()}, {"--offload", s.Offload.String()}, {"--optimizer", s.Optimizer.String()}, {"--checkpoint", s.Checkpoint.String()},
		{"--world", strconv.Itoa(s.Ranks)}, {"--tp", strconv.Itoa(s.TP)}, {"--pp", strconv.Itoa(s.PP)},
		{"--micro-batches", strconv.Itoa(max(s.MicroBatches, 1))}, {"--schedule", s.Pipeline.String()}, {"the setting (--zero, --data-parallel, --prefetch)", set.String()},
		{"--bucket-mb", strconv.FormatInt(set.BucketBytes, 10) + " bytes"},
		{"--steps", strconv.Itoa(tf.steps)}, {"--lr", strconv.FormatFloat(tf.lr, 'g', -1, 64)}, {"--seed", strconv.FormatUint(tf.seed, 10)},
		{"--data", tf.data}, {"--load", tf.load}, {"--device", tf.device},
		// Rank 0 writes the records and the checkpoint, and every rank
		// takes part in gathering them: a rank told otherwise (--save on
		// rank 0 alone) gathered a different message and broke the run.
		{"--out", tf.out}, {"--save", tf.save},
		{"the host's BLAS (TRAINMEM_BLAS; which library multiplies decides the losses' last digits)", hostBLAS(tf)},
	} {
		f = append(f, zero.Field{Name: kv[0], Value: kv[1]})
	}
	return f
}

// ranksFrom makes the launcher's world the run's ranks: --ranks, when
// given, must say the same.
func (f *launchFlags) ranksFrom(l zero.Launch, sf *setupFlags) error {
	if !l.Processes() {
		return nil
	}
	tp, pp := max(sf.tp, 1), max(sf.pp, 1)
	if l.World%(tp*pp) != 0 {
		return usagef("--tp %d × --pp %d: it does not divide the %d processes %s started (valid: a divisor of %d)", tp, pp, l.World, l.Launcher, l.World)
	}
	dp := l.World / (tp * pp)
	if sf.set("ranks") && sf.ranks != dp {
		if tp*pp > 1 {
			return usagef("--ranks %d: this process is rank %d of %d started by %s, %d data-parallel ranks of --tp %d × --pp %d (give --ranks %d, or leave it out)", sf.ranks, l.Rank, l.World, l.Launcher, dp, tp, pp, dp)
		}
		return usagef("--ranks %d: this process is rank %d of %d started by %s (give --ranks %d, or leave it out)", sf.ranks, l.Rank, l.World, l.Launcher, l.World)
	}
	sf.ranks = dp
	return nil
}

// hostBLAS is the library the host device multiplies with ("" off the
// host): ranks whose processes load different ones (OpenBLAS installed on
// one machine, not another) would train to different losses.
func hostBLAS(tf *trainFlags) string {
	if tf.device != "host" {
		return ""
	}
	h, err := host.New(host.Options{Threads: 1})
	if err != nil {
		return err.Error()
	}
	defer h.Close()
	return h.BLAS()
}
