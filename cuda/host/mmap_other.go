//go:build !unix

package host

import "unsafe"

// mapMemory falls back to Go memory where there is no mmap. The segment
// stays reachable through the allocator, so the garbage collector keeps it.
func mapMemory(size int64) ([]byte, error) { return make([]byte, size), nil }

func unmapMemory(b []byte) error { return nil }

func sliceAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
