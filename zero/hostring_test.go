package zero

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"trainmem/cuda"
	"trainmem/cuda/host"
)

// The ring's cost on a host link is its fixed call, a step for each of
// the ring's steps (2(n-1) for an all-reduce, n-1 for a reduce-scatter,
// an all-gather or a broadcast, one for a send) and nccl-tests' bus bytes
// at the link's bandwidth, worked by hand here; a network with a ring
// costs every collective so, whatever its span.
func TestHostRingCost(t *testing.T) {
	ring := HostRing{Call: 30 * time.Microsecond, Step: 50 * time.Microsecond, Bandwidth: 1e9}
	nw := HostNetwork("tcp", 4, ring, 40e9)
	const S = 8 << 20 // bytes
	for _, tc := range []struct {
		c    Collective
		want time.Duration
	}{
		// 30 µs + 6·50 µs + 1.5·8 MiB / 1 GB/s = 330 µs + 12,582,912 ns.
		{AllReduce, 330*time.Microsecond + 12582912},
		// 30 + 3·50 µs + 0.75·8 MiB at 1 GB/s.
		{ReduceScatter, 180*time.Microsecond + 6291456},
		{AllGather, 180*time.Microsecond + 6291456},
		{Broadcast, 180*time.Microsecond + 8388608},
		// One step and the message.
		{SendRecv, 50*time.Microsecond + 8388608},
	} {
		got := nw.Cost(tc.c, S, Span{N: 4, Nodes: 1})
		if got.Time != tc.want || got.BusBW != 1e9 || got.Algorithm != Ring {
			t.Errorf("%s of %d bytes over 4 ranks: %v (%+v), want %v", tc.c, S, got.Time, got, tc.want)
		}
		if other := nw.Cost(tc.c, S, Span{N: 4, Nodes: 2}); other.Time != got.Time {
			t.Errorf("%s over 4 ranks on 2 nodes: %v, want the ring's %v whatever the span", tc.c, other.Time, got.Time)
		}
	}
	if got := nw.Cost(AllReduce, S, Span{N: 1, Nodes: 1}); got.Time != 0 {
		t.Errorf("an all-reduce of one rank: %v, want nothing", got.Time)
	}
	if !strings.Contains(nw.String(), "trainmem's ring") || nw.PCIe.Bandwidth != 40e9 {
		t.Errorf("network %s, copies at %g B/s", nw, nw.PCIe.Bandwidth)
	}
}

// TimeRing on host ranks in one process: every member times the same
// calls, each timing positive and the fixed costs not negative; SameHost
// counts every rank on this machine, their threads summed, on this
// process's CPUs.
func TestTimeRing(t *testing.T) {
	for _, n := range []int{2, 3} {
		devs := make([]cuda.Device, n)
		for i := range devs {
			d, err := host.New(host.Options{Threads: i + 1})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			devs[i] = d
		}
		g, err := NewGroup(devs)
		if err != nil {
			t.Fatal(err)
		}
		rings := make([]HostRing, n)
		counts := make([][3]int, n)
		if err := g.Run(func(c *Comm) error {
			r, err := TimeRing(c)
			if err != nil {
				return err
			}
			rings[c.Rank()] = r
			ranks, threads, cores, err := SameHost(c, c.Rank()+1)
			counts[c.Rank()] = [3]int{ranks, threads, cores}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for r, ring := range rings {
			if ring.Call < 0 || ring.Step < 0 || !(ring.Bandwidth > 0) || math.IsInf(ring.Bandwidth, 0) || !strings.Contains(ring.Source, fmt.Sprintf("over %d ranks", n)) {
				t.Errorf("%d ranks, rank %d: %+v", n, r, ring)
			}
			if want := [3]int{n, n * (n + 1) / 2, len(allowedCPUs())}; counts[r] != want {
				t.Errorf("%d ranks, rank %d: SameHost %v, want %v", n, r, counts[r], want)
			}
		}
		for _, d := range devs {
			if st := d.Stats(); st.AllocatedBytes.Current != 0 {
				t.Errorf("%d ranks: %d bytes left allocated", n, st.AllocatedBytes.Current)
			}
		}
	}
	one, err := host.New(host.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	g, err := NewGroup([]cuda.Device{one})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Run(func(c *Comm) error { _, err := TimeRing(c); return err }); err == nil || !strings.Contains(err.Error(), "two or more") {
		t.Errorf("a ring of one rank: %v", err)
	}
}

// Linux's CPU lists, as /proc/self/status's Cpus_allowed_list writes them.
func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		ok   bool
	}{{"0-1", []int{0, 1}, true}, {"\t0-3,8,10-11\n", []int{0, 1, 2, 3, 8, 10, 11}, true}, {"5", []int{5}, true},
		{"", nil, false}, {"3-1", nil, false}, {"a", nil, false}, {"1-x", nil, false}, {"-1", nil, false}} {
		got, ok := parseCPUList(tc.in)
		if ok != tc.ok || !slices.Equal(got, tc.want) {
			t.Errorf("%q: %v %v, want %v %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
