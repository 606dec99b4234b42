//go:build unix

package files

import (
	"os"
	"syscall"
)

// openNonblocking opens path for reading without waiting: a FIFO that
// appeared since the check opens at once (and is refused) instead of
// blocking until a writer comes.
func openNonblocking(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
