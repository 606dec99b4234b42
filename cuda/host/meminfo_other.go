//go:build !linux

package host

func machineMemory() (free, total int64, err error) { return 0, 0, errNoMemInfo }

// MemoryBound says what bounds the memory a run on the host may take.
func MemoryBound() string { return "the machine's memory" }
