//go:build unix

package files

import (
	"fmt"
	"os"
	"syscall"
)

// openNonblocking opens path for reading without waiting: a FIFO that
// appeared since the check opens at once (and is refused) instead of
// blocking until a writer comes.
func openNonblocking(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// Map maps the first size bytes of the regular file f read-only and returns
// them with the function that unmaps them. Nothing is copied: the pages are
// read from the file as they are touched, so a multi-gigabyte token file
// costs address space, not memory. size must be what f's Stat gave.
func Map(f *os.File, size int64) ([]byte, func() error, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil, fmt.Errorf("files: mapping %s: cannot map %d bytes", f.Name(), size)
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("files: mapping %s: %w", f.Name(), err)
	}
	return b, func() error { return syscall.Munmap(b) }, nil
}
