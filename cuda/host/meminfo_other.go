//go:build !linux

package host

func machineMemory() (free, total int64, err error) { return 0, 0, errNoMemInfo }
