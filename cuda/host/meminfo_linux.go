package host

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// machineMemory reads MemAvailable and MemTotal from /proc/meminfo, each
// no more than this process may take (processRoom): the memory a run here
// can use.
func machineMemory() (free, total int64, err error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, fmt.Errorf("cuda: host memory: %w", err)
	}
	free, total, err = parseMeminfo(data)
	if room, _, ok := processRoom(); err == nil && ok {
		free, total = min(free, room), min(total, room)
	}
	return free, total, err
}

// MemoryBound says what bounds the memory a run on the host may take:
// the machine's available memory, or a limit of this process's.
func MemoryBound() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "the machine's memory"
	}
	free, _, err := parseMeminfo(data)
	if room, what, ok := processRoom(); ok && (err != nil || room < free) {
		return what
	}
	return "the machine's available memory"
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
