//go:build trainmem_mpi

package zero

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"trainmem/cuda"
)

// TestMPISendRecv: the ring and the chain of ringAndChain over MPI, four
// ranks started by mpirun (make test-mpi), then the ranks split into a
// dp 2 × tp 2 layout's groups (splitAndExchange: every pair reached over
// MPI, the data groups too): the test starts mpirun on its own binary, and
// each rank, seeing MPI's environment, runs its part with the link of
// MPI_COMM_WORLD. It skips, saying why, without mpirun.
func TestMPISendRecv(t *testing.T) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") == "" {
		mr, err := exec.LookPath("mpirun")
		if err != nil {
			t.Skip("no mpirun (Debian: apt-get install openmpi-bin libopenmpi-dev)")
		}
		cmd := exec.Command(mr, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "4",
			os.Args[0], "-test.run", "^TestMPISendRecv$", "-test.count", "1")
		out, err := cmd.CombinedOutput()
		if err != nil || strings.Count(string(out), "PASS") < 4 {
			t.Fatalf("mpirun -np 4: %v\n%s", err, out)
		}
		return
	}
	l, err := OpenMPI(0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dev := hosts(t, 1)[0]
	g, err := NewProcessGroup(dev, l)
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []cuda.DType{cuda.F32, cuda.BF16, cuda.I32} {
		if err := g.Run(func(c *Comm) error { return ringAndChain(c, dt, 10) }); err != nil {
			t.Fatalf("rank %d, %s: %v", l.Rank(), dt, err)
		}
	}
	if err := g.Run(func(c *Comm) error { return splitAndExchange(c, g, Layout{DP: 2, TP: 2, PP: 1}, true) }); err != nil {
		t.Fatalf("rank %d, split: %v", l.Rank(), err)
	}
	tr := g.Comm(0).Traffic()[SendRecv]
	if tr.Calls < 6 || tr.SentBytes == 0 && l.Rank() < l.Size()-1 {
		t.Errorf("rank %d: send_recv traffic %+v", l.Rank(), tr)
	}
}
