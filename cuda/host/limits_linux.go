package host

import (
	"bufio"
	"bytes"
	"math"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
)

// processRoom is how much more memory this process may take by the
// tightest of its own limits, the machine's available memory aside: its
// address-space limit (RLIMIT_AS, `ulimit -v`, less what it maps now) and
// its cgroup's memory limit (v2's memory.max less memory.current, up the
// hierarchy; v1's memory.limit_in_bytes less its usage). ok is false when
// no limit binds. A fit check that counted the machine's memory alone
// passed runs a limit then stopped at their first step.
func processRoom() (room int64, what string, ok bool) {
	room = math.MaxInt64
	take := func(r int64, w string) {
		if r < room {
			room, what, ok = max(r, 0), w, true
		}
	}
	var rl syscall.Rlimit
	// RLIM_INFINITY is all ones, past MaxInt64.
	if syscall.Getrlimit(syscall.RLIMIT_AS, &rl) == nil && rl.Cur < math.MaxInt64 {
		if status, err := os.ReadFile("/proc/self/status"); err == nil {
			if vm, found := statusBytes(status, "VmSize:"); found {
				take(int64(rl.Cur)-vm, "the process's address-space limit (ulimit -v)")
			}
		}
	}
	if cg, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		if r, found := cgroupRoom(cg, func(p string) ([]byte, error) { return os.ReadFile(p) }); found {
			take(r, "the process's cgroup memory limit")
		}
	}
	return room, what, ok
}

// statusBytes reads a "Key: n kB" line of /proc/self/status, in bytes.
func statusBytes(status []byte, key string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == key {
			v, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, false
			}
			if len(f) > 2 && f[2] == "kB" {
				v *= 1024
			}
			return v, true
		}
	}
	return 0, false
}

// cgroupRoom is the room under the memory limits of the cgroups that
// /proc/self/cgroup's text names, each file read with read: v2 (the line
// "0::/path": memory.max less memory.current in the group and each group
// above it, the tightest) and v1 (a line naming the memory controller:
// memory.limit_in_bytes less memory.usage_in_bytes; 2^62 and more is no
// limit). found is false when no limit is set.
func cgroupRoom(cgroup []byte, read func(string) ([]byte, error)) (room int64, found bool) {
	room = math.MaxInt64
	num := func(p string) (int64, bool) {
		b, err := read(p)
		if err != nil {
			return 0, false
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return v, err == nil
	}
	sc := bufio.NewScanner(bytes.NewReader(cgroup))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[0] == "0" && f[1] == "":
			for dir := path.Clean(f[2]); ; dir = path.Dir(dir) {
				base := path.Join("/sys/fs/cgroup", dir)
				if limit, ok := num(path.Join(base, "memory.max")); ok {
					used, _ := num(path.Join(base, "memory.current"))
					if limit-used < room {
						room, found = limit-used, true
					}
				}
				if dir == "/" {
					break
				}
			}
		case strings.Contains(","+f[1]+",", ",memory,"):
			base := path.Join("/sys/fs/cgroup/memory", path.Clean(f[2]))
			if limit, ok := num(path.Join(base, "memory.limit_in_bytes")); ok && limit < 1<<62 {
				used, _ := num(path.Join(base, "memory.usage_in_bytes"))
				if limit-used < room {
					room, found = limit-used, true
				}
			}
		}
	}
	return max(room, 0), found
}
