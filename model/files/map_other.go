//go:build !unix

package files

import (
	"fmt"
	"io"
	"os"
)

func openNonblocking(path string) (*os.File, error) { return os.Open(path) }

// Map reads the first size bytes of f into memory where there is no mmap;
// it reads no more than size, and fails if the file holds less.
func Map(f *os.File, size int64) ([]byte, func() error, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, nil, fmt.Errorf("files: reading %s: cannot read %d bytes", f.Name(), size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, nil, fmt.Errorf("files: reading %s: %w", f.Name(), err)
	}
	return b, func() error { return nil }, nil
}
