package host

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// machineMemory reads MemAvailable and MemTotal from /proc/meminfo.
func machineMemory() (free, total int64, err error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, fmt.Errorf("cuda: host memory: %w", err)
	}
	return parseMeminfo(data)
}

func parseMeminfo(data []byte) (free, total int64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 {
			continue
		}
		v, perr := strconv.ParseInt(string(f[1]), 10, 64)
		if perr != nil {
			continue
		}
		if len(f) > 2 && string(f[2]) == "kB" {
			v *= 1024
		}
		switch string(f[0]) {
		case "MemAvailable:":
			free = v
		case "MemTotal:":
			total = v
		}
	}
	if total == 0 || free == 0 {
		return 0, 0, fmt.Errorf("cuda: host memory: no MemTotal and MemAvailable in /proc/meminfo")
	}
	return free, total, nil
}
