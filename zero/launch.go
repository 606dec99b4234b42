package zero

// How a process learns its rank: from the launcher that started it, as
// PyTorch's do (torchrun's environment, Open MPI's mpirun, Slurm's srun),
// or from explicit flags.

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"trainmem/cuda/enum"
)

// Launch is how this process was started: its rank among World
// processes, its rank on its node (the GPU it drives), the launcher that
// said so, and where the ranks meet (Init, tcp://host:port; "" under
// mpirun, whose ranks meet over MPI).
type Launch struct {
	Launcher               string // "torchrun", "mpirun", "srun", or "flags"; "" for one process started alone
	Rank, World, LocalRank int
	Init                   string
	// Store is the launcher's key-value store (host:port) when the ranks
	// meet through it instead of at Init: torchrun's agent listens on
	// MASTER_ADDR:MASTER_PORT itself (TORCHELASTIC_USE_AGENT_STORE=True),
	// so rank 0 listens elsewhere and leaves its address under StoreKey
	// (DialTCPStore).
	Store, StoreKey string
}

// Rendezvous says where the ranks meet, for messages.
func (l Launch) Rendezvous() string {
	if l.Store != "" {
		return fmt.Sprintf("%s's store at %s", l.Launcher, l.Store)
	}
	return l.Init
}

// Processes says whether the ranks are processes of their own.
func (l Launch) Processes() bool { return l.Launcher != "" }

// launchers are the environments DetectLaunch reads, in the order it
// tries them: rank, world size and local rank variables.
var launchers = []struct{ name, rank, world, local string }{
	{"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
	{"mpirun", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
	{"srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
}

// DetectLaunch reads the launcher's environment through getenv: torchrun
// (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, and
// TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_RUN_ID and
// TORCHELASTIC_RESTART_COUNT when its agent's store is there), Open MPI's
// mpirun (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK) or Slurm's srun
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; the rendezvous from
// MASTER_ADDR and MASTER_PORT). A launcher of one process is no launcher.
func DetectLaunch(getenv func(string) string) (Launch, error) {
	for _, v := range launchers {
		rs, ws := getenv(v.rank), getenv(v.world)
		if rs == "" || ws == "" {
			continue
		}
		l := Launch{Launcher: v.name}
		var err error
		for _, f := range []struct {
			name string
			dst  *int
			s    string
		}{{v.rank, &l.Rank, rs}, {v.world, &l.World, ws}, {v.local, &l.LocalRank, getenv(v.local)}} {
			if f.s == "" {
				continue // no local rank: 0
			}
			if *f.dst, err = strconv.Atoi(f.s); err != nil || *f.dst < 0 {
				return Launch{}, fmt.Errorf("zero: %s sets %s=%q: want a non-negative integer", v.name, f.name, f.s)
			}
		}
		if l.World < 1 || l.Rank >= l.World {
			return Launch{}, fmt.Errorf("zero: %s sets %s=%d of %s=%d: want 0 ≤ rank < world", v.name, v.rank, l.Rank, v.world, l.World)
		}
		if l.World == 1 {
			return Launch{}, nil
		}
		if a, p := getenv("MASTER_ADDR"), getenv("MASTER_PORT"); a != "" && p != "" {
			l.Init = "tcp://" + net.JoinHostPort(a, p)
			// torchrun's agent holds MASTER_PORT itself (its c10d
			// TCPStore) when it says so; with --standalone it does not,
			// and rank 0 listens there.
			if v.name == "torchrun" && getenv("TORCHELASTIC_USE_AGENT_STORE") == "True" {
				l.Init, l.Store = "", net.JoinHostPort(a, p)
				run, restart := getenv("TORCHELASTIC_RUN_ID"), getenv("TORCHELASTIC_RESTART_COUNT")
				l.StoreKey = fmt.Sprintf("/trainmem/%s/%s/rank0", run, restart)
			}
		}
		return l, nil
	}
	return Launch{}, nil
}

// ParseInit checks a rendezvous address, tcp://host:port, and returns its
// host:port.
func ParseInit(init string) (string, error) {
	u, err := url.Parse(init)
	if err != nil || u.Scheme != "tcp" || u.Host == "" || u.Path != "" && u.Path != "/" {
		return "", fmt.Errorf("%q: want tcp://host:port, where rank 0 listens", init)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" {
		return "", fmt.Errorf("%q: want tcp://host:port, where rank 0 listens", init)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("%q: port %q: want 1 to 65535", init, port)
	}
	return u.Host, nil
}

// Backend is an engine that moves the ranks' data.
type Backend uint8

const (
	Inproc Backend = iota // every rank in this process: the ring over shared memory
	TCP                   // one process a rank: trainmem's ring over TCP
	MPI                   // one process a rank: the ring over MPI's point-to-point (the MPI build)
	NCCL                  // NCCL's collectives between GPUs (the CUDA build)
	numBackends
)

var backendNames = enum.New[Backend]("zero", "Backend", "engine", "inproc", "tcp", "mpi", "nccl")

func (b Backend) String() string { return backendNames.String(b) }

// MarshalText is the backend's name, in JSON.
func (b Backend) MarshalText() ([]byte, error) { return backendNames.Marshal(b) }

// ParseBackend reads a backend's name, the one parser of --backend (its
// message leads with the name, as --backend's flag error quotes it).
func ParseBackend(s string) (Backend, error) {
	if b, ok := backendNames.Lookup(s); ok {
		return b, nil
	}
	return 0, fmt.Errorf("%q: unknown engine (valid: %s)", s, BackendList())
}

// DefaultBackend is the engine for a launch: inproc for one process, mpi
// under mpirun in the MPI build, tcp otherwise.
func DefaultBackend(l Launch) Backend {
	switch {
	case !l.Processes():
		return Inproc
	case l.Launcher == "mpirun" && HaveMPI:
		return MPI
	}
	return TCP
}

// BackendList names every backend, for messages.
func BackendList() string { return backendNames.List() }
