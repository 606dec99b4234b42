//go:build unix

package files

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// openNonblocking opens path for reading without waiting: a FIFO that
// appeared since the check opens at once (and is refused) instead of
// blocking until a writer comes.
func openNonblocking(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// openFIFO opens a FIFO for writing as a plain open does, waiting for a
// reader, but in a way that Interrupt ends: it tries without blocking
// (ENXIO while no process reads it) every 20 ms. The descriptor is then
// made blocking (Fd), so writes wait for the reader as a pipe's do.
func openFIFO(path string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|syscall.O_NONBLOCK, 0)
		if err == nil {
			f.Fd()
			return f, nil
		}
		if !errors.Is(err, syscall.ENXIO) {
			return nil, err
		}
		select {
		case <-interrupted:
			return nil, fmt.Errorf("%s: a FIFO that no process read before the run was stopped (start its reader first, e.g. cat %s > copy &): %w", path, path, interruptCause)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
