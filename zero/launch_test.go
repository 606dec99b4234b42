package zero

import (
	"strings"
	"testing"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// Each launcher's environment gives its rank, world and local rank, and
// the rendezvous from MASTER_ADDR and MASTER_PORT; one process is no
// launcher; bad values are named.
func TestDetectLaunch(t *testing.T) {
	for _, c := range []struct {
		env  []string
		want Launch
	}{
		{nil, Launch{}},
		{[]string{"RANK", "3", "WORLD_SIZE", "8", "LOCAL_RANK", "3", "MASTER_ADDR", "node1", "MASTER_PORT", "29500"}, Launch{Launcher: "torchrun", Rank: 3, World: 8, LocalRank: 3, Init: "tcp://node1:29500"}},
		// torchrun's agent holds MASTER_PORT (its TCPStore): the ranks meet through it.
		{[]string{"RANK", "1", "WORLD_SIZE", "2", "LOCAL_RANK", "1", "MASTER_ADDR", "127.0.0.1", "MASTER_PORT", "29500", "TORCHELASTIC_USE_AGENT_STORE", "True", "TORCHELASTIC_RUN_ID", "none", "TORCHELASTIC_RESTART_COUNT", "0"},
			Launch{Launcher: "torchrun", Rank: 1, World: 2, LocalRank: 1, Store: "127.0.0.1:29500", StoreKey: "/trainmem/none/0/rank0"}},
		// --standalone: nothing listens on MASTER_PORT, rank 0 does.
		{[]string{"RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "localhost", "MASTER_PORT", "41234", "TORCHELASTIC_USE_AGENT_STORE", "False", "TORCHELASTIC_RUN_ID", "x"},
			Launch{Launcher: "torchrun", Rank: 0, World: 2, Init: "tcp://localhost:41234"}},
		{[]string{"OMPI_COMM_WORLD_RANK", "5", "OMPI_COMM_WORLD_SIZE", "6", "OMPI_COMM_WORLD_LOCAL_RANK", "1"}, Launch{Launcher: "mpirun", Rank: 5, World: 6, LocalRank: 1}},
		{[]string{"SLURM_PROCID", "2", "SLURM_NTASKS", "4", "SLURM_LOCALID", "0", "MASTER_ADDR", "::1", "MASTER_PORT", "7"}, Launch{Launcher: "srun", Rank: 2, World: 4, Init: "tcp://[::1]:7"}},
		{[]string{"RANK", "0", "WORLD_SIZE", "1"}, Launch{}},
		{[]string{"OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "2", "SLURM_PROCID", "0", "SLURM_NTASKS", "8"}, Launch{Launcher: "mpirun", Rank: 1, World: 2}},
	} {
		got, err := DetectLaunch(envOf(c.env...))
		if err != nil || got != c.want {
			t.Errorf("%v: got %+v, %v; want %+v", c.env, got, err, c.want)
		}
	}
	for _, c := range []struct {
		env  []string
		want string
	}{
		{[]string{"RANK", "x", "WORLD_SIZE", "2"}, `torchrun sets RANK="x": want a non-negative integer`},
		{[]string{"RANK", "2", "WORLD_SIZE", "2"}, "torchrun sets RANK=2 of WORLD_SIZE=2: want 0 ≤ rank < world"},
		{[]string{"SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_LOCALID", "-1"}, `srun sets SLURM_LOCALID="-1"`},
	} {
		if _, err := DetectLaunch(envOf(c.env...)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.env, err, c.want)
		}
	}
	for in, want := range map[string]string{"tcp://h:1": "h:1", "tcp://10.0.0.1:29500/": "10.0.0.1:29500"} {
		if got, err := ParseInit(in); err != nil || got != want {
			t.Errorf("ParseInit(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"h:1", "tcp://h", "tcp://:1", "tcp://h:0", "tcp://h:99999", "udp://h:1", "tcp://h:1/x"} {
		if _, err := ParseInit(in); err == nil {
			t.Errorf("ParseInit(%q): no error", in)
		}
	}
}
