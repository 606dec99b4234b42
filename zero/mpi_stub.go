//go:build !trainmem_mpi

package zero

import (
	"errors"
	"time"
)

// HaveMPI says whether this build has the MPI link.
const HaveMPI = false

// MPILink is a Link over MPI, in builds with the trainmem_mpi tag.
type MPILink struct{ Link }

// OpenMPI needs the MPI build.
func OpenMPI(time.Duration) (*MPILink, error) {
	return nil, errors.New("zero: this trainmem has no MPI: build it with `make build-mpi` (bin/trainmem-mpi, cgo against Open MPI: apt-get install libopenmpi-dev)")
}
