//go:build unix

package host

import (
	"errors"
	"fmt"
	"syscall"
	"trainmem/cuda"
	"unsafe"
)

// mapMemory maps size bytes of anonymous, private, zero-filled memory.
func mapMemory(size int64) ([]byte, error) {
	if size <= 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("cuda: host: cannot map %d bytes", size)
	}
	b, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if errors.Is(err, syscall.ENOMEM) {
		return nil, fmt.Errorf("%w: mmap of %s: %v", cuda.ErrNoMemory, cuda.FormatBytes(size), err)
	}
	if err != nil {
		return nil, fmt.Errorf("cuda: host: mmap of %s: %w", cuda.FormatBytes(size), err)
	}
	return b, nil
}

func unmapMemory(b []byte) error {
	if err := syscall.Munmap(b); err != nil {
		return fmt.Errorf("cuda: host: munmap of %s: %w", cuda.FormatBytes(int64(len(b))), err)
	}
	return nil
}

// sliceAddr is the address of b's first byte (a pointer to integer
// conversion, which go vet accepts; nothing converts back).
func sliceAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
