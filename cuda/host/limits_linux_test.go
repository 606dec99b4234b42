package host

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cgroupRoom against made-up cgroup trees: v2's limit of the group or of
// one above it (the tightest), "max" for none, v1's memory controller
// (2^62 and more is no limit), and no limit at all.
func TestCgroupRoom(t *testing.T) {
	files := map[string]string{
		"/sys/fs/cgroup/user.slice/job/memory.max":               "max\n",
		"/sys/fs/cgroup/user.slice/memory.max":                   "6442450944\n",
		"/sys/fs/cgroup/user.slice/memory.current":               "1073741824\n",
		"/sys/fs/cgroup/memory.max":                              "max\n",
		"/sys/fs/cgroup/tight/memory.max":                        "1000\n",
		"/sys/fs/cgroup/tight/memory.current":                    "4000\n",
		"/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes": "2147483648\n",
		"/sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes": "147483648\n",
		"/sys/fs/cgroup/memory/free/memory.limit_in_bytes":       "9223372036854771712\n",
	}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, errors.New("no such file")
	}
	for _, tc := range []struct {
		cgroup string
		room   int64
		found  bool
	}{
		{"0::/user.slice/job\n", 6442450944 - 1073741824, true},
		{"0::/tight\n", 0, true}, // over its limit already
		{"12:memory:/docker/abc\n0::/\n", 2000000000, true},
		{"12:cpu,memory:/free\n", 0, false},
		{"0::/\n", 0, false},
	} {
		room, found := cgroupRoom([]byte(tc.cgroup), read)
		if found != tc.found || found && room != tc.room {
			t.Errorf("%q: room %d, found %t; want %d, %t", tc.cgroup, room, found, tc.room, tc.found)
		}
	}
	if v, ok := statusBytes([]byte("Name:\ttrainmem\nVmSize:\t  123456 kB\n"), "VmSize:"); !ok || v != 123456*1024 {
		t.Errorf("VmSize %d, %t", v, ok)
	}
}

// Under an address-space limit (ulimit -v) the memory a run may take is
// what the limit leaves, not the machine's: the fit check before a run
// counted the machine alone and let gpt2 at b 4, s 1024 fail at step 1.
func TestAddressSpaceLimit(t *testing.T) {
	if os.Getenv("TRAINMEM_ROOM_CHILD") == "1" {
		// The room first: the process's address space only grows (the Go
		// runtime maps a 64 MiB arena as its heap grows, and CI once saw
		// one mapped between the two reads), so the room machineMemory
		// then reads is at most this one.
		room, what, ok := processRoom()
		free, _, err := machineMemory()
		if err != nil {
			t.Fatal(err)
		}
		if !ok || free > room || !strings.Contains(what, "address-space limit") || MemoryBound() != what {
			t.Fatalf("free %d, room %d by %q (%t), bound %q", free, room, what, ok, MemoryBound())
		}
		return
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	self, err := filepath.Abs(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	// 4 GiB of address space, well below this machine's memory (its Go
	// runtime maps about 1 GiB at start).
	cmd := exec.Command(sh, "-c", `ulimit -v 4194304 && exec "$0" -test.run '^TestAddressSpaceLimit$'`, self)
	cmd.Env = append(os.Environ(), "TRAINMEM_ROOM_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("under ulimit -v: %v\n%s", err, out)
	}
}
