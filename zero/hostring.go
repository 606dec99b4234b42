package zero

// The collectives' time between host ranks: trainmem's own ring (ring.go)
// over the link the ranks use (TCP or MPI between processes, memory
// between the goroutines of one), timed on that link rather than read from
// a datasheet, so that a simulated step of host ranks predicts what a
// measured one took.

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"trainmem/cuda"
)

// HostRing is a link timed for trainmem's ring: Call the fixed cost of a
// collective (its rendezvous, where the ranks compare their calls), Step
// what each of the ring's steps adds (a message and its barrier), and
// Bandwidth the bytes a second a rank's link moves.
type HostRing struct {
	Call, Step time.Duration
	Bandwidth  float64
	// Source says how it was timed.
	Source string
}

// cost is collective c of S bytes over n ranks of the ring: Call, and
// each of its steps (2(n-1) for an all-reduce, n-1 for the others, one
// for a send) a Step, and nccl-tests' bus bytes (BusFactor·S; S for a
// send) at the bandwidth.
func (h HostRing) cost(c Collective, S int64, n int) Cost {
	f := BusFactor(c, n)
	if c == SendRecv {
		f = 1
	}
	lat := h.Call + time.Duration(ringSteps(c, n))*h.Step
	if c == SendRecv {
		lat = h.Step
	}
	s := lat.Seconds() + f*float64(S)/h.Bandwidth
	return Cost{Time: time.Duration(math.Ceil(s * 1e9)), Algorithm: Ring, Protocol: Simple, Latency: lat, BusBW: h.Bandwidth}
}

// The buffers the ring is timed with: one element a rank (its calls'
// fixed costs), and 4 Mi fp32 elements (16 MiB: its bandwidth).
const (
	ringTimingReps = 20
	ringTimingBig  = 4 << 20
)

// TimeRing times c's group's ring on its link, every member calling it
// at once (Group.Run): the best of 20 broadcasts and of 20 all-reduces of
// one element a rank give a call's fixed cost and a step's (an all-reduce
// takes twice a broadcast's n-1 steps), the best of 3 all-reduces of 16
// MiB the bandwidth. Each member's answer is its own timing of the same
// calls; about 50 ms on loopback.
func TimeRing(c *Comm) (HostRing, error) {
	n := c.Size()
	if n < 2 {
		return HostRing{}, fmt.Errorf("zero: timing a ring of %d rank: it needs two or more", n)
	}
	d := c.Device()
	get, free := scratch(d)
	defer free()
	alloc := func(len int) (*cuda.Buffer, error) {
		b, err := get(cuda.F32, len)
		if err == nil {
			err = d.Fill(b, 1)
		}
		return b, err
	}
	big := PaddedLen(ringTimingBig, n)
	var aerr error
	mk := func(len int) *cuda.Buffer {
		b, err := alloc(len)
		aerr = cmp.Or(aerr, err)
		return b
	}
	small, out, bigIn, bigOut := mk(n), mk(n), mk(big), mk(big)
	if aerr != nil {
		return HostRing{}, fmt.Errorf("zero: timing the ring: %w", aerr)
	}
	best := func(reps int, f func() error) (time.Duration, error) {
		b := time.Duration(math.MaxInt64)
		for range reps {
			t := time.Now()
			if err := f(); err != nil {
				return 0, fmt.Errorf("zero: timing the ring: %w", err)
			}
			b = min(b, time.Since(t))
		}
		return b, nil
	}
	bc, err := best(ringTimingReps, func() error { return c.Broadcast(small, out, 0) })
	if err != nil {
		return HostRing{}, err
	}
	ar, err := best(ringTimingReps, func() error { return c.AllReduce(small, out, Sum) })
	if err != nil {
		return HostRing{}, err
	}
	arBig, err := best(3, func() error { return c.AllReduce(bigIn, bigOut, Sum) })
	if err != nil {
		return HostRing{}, err
	}
	steps := time.Duration(n - 1)
	step := max(0, (ar-bc)/steps)
	call := max(0, bc-steps*step)
	bytes := float64(big) * 4
	bw := BusFactor(AllReduce, n) * bytes / max(arBig-ar, time.Microsecond).Seconds()
	return HostRing{Call: call, Step: step, Bandwidth: bw,
		Source: fmt.Sprintf("timed on the ranks' link: a broadcast of one element a rank %v, an all-reduce of one %v, of %d MiB %v over %d ranks",
			bc.Round(time.Microsecond/10), ar.Round(time.Microsecond/10), int64(bytes)>>20, arBig.Round(time.Microsecond), n)}, nil
}

// scratch is get, which allocates temporaries on d, and free, which
// frees every one get made.
func scratch(d cuda.Device) (get func(dt cuda.DType, n int) (*cuda.Buffer, error), free func()) {
	var bufs []*cuda.Buffer
	get = func(dt cuda.DType, n int) (*cuda.Buffer, error) {
		b, err := d.Alloc(cuda.Temporaries, dt, n)
		if err == nil {
			bufs = append(bufs, b)
		}
		return b, err
	}
	free = func() {
		for _, b := range bufs {
			d.Free(b)
		}
	}
	return get, free
}

// HostNetwork is the network of n host ranks joined by ring: one node of
// n, each collective and send costed as trainmem's ring runs it over the
// timed link, an offload copy at copyBW bytes a second (host memory to
// host memory: the card's bandwidth).
func HostNetwork(name string, n int, ring HostRing, copyBW float64) Network {
	return Network{Name: name, GPUsPerNode: n, Intra: LinkSpeed{ring.Bandwidth, 1}, Inter: LinkSpeed{ring.Bandwidth, 1},
		PCIe: LinkSpeed{copyBW, 1}, Ring: &ring, Source: ring.Source}
}

// SameHost is how many of c's group's ranks run on rank 0's machine (the
// same host name and boot), how many threads they use together, given
// this rank's, and how many cores they run on (the union of their CPU
// affinities, /proc/self/status's Cpus_allowed_list: mpirun binds each rank
// to cores of its own, torchrun leaves every rank the whole machine): a
// broadcast of rank 0's machine and a sum and a union over the ranks.
// Ranks that together use more threads than their cores share them
// (cuda.Roofline.Shared).
func SameHost(c *Comm, threads int) (ranks, total, cores int, err error) {
	d := c.Device()
	get, free := scratch(d)
	defer free()
	alloc := func(n int) (*cuda.Buffer, error) { return get(cuda.I32, n) }
	h := fnv.New64a()
	name, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	h.Write([]byte(name + "\x00" + strings.TrimSpace(string(boot))))
	sum := h.Sum64()
	id := []int32{int32(uint32(sum)), int32(uint32(sum >> 32))}
	got := make([]int32, 2)
	// mine: [on rank 0's machine, threads, then a flag a CPU].
	mine := make([]int32, 2+maxCPUs)
	a, err := alloc(len(mine))
	if err != nil {
		return 0, 0, 0, err
	}
	b, err := alloc(len(mine))
	if err != nil {
		return 0, 0, 0, err
	}
	if err := d.Upload(a.View(0, 2), id); err != nil {
		return 0, 0, 0, err
	}
	if err := c.Broadcast(a.View(0, 2), b.View(0, 2), 0); err != nil {
		return 0, 0, 0, err
	}
	if err := d.Download(got, b.View(0, 2)); err != nil {
		return 0, 0, 0, err
	}
	if got[0] == id[0] && got[1] == id[1] {
		mine[0], mine[1] = 1, int32(threads)
		for _, cpu := range allowedCPUs() {
			mine[2+cpu] = 1
		}
	}
	// The sums of the first two, then the union of the CPUs (a flag
	// summed over the ranks, counted where it is not 0).
	if err := d.Upload(a, mine); err != nil {
		return 0, 0, 0, err
	}
	if err := c.AllReduce(a, b, Sum); err != nil {
		return 0, 0, 0, err
	}
	if err := d.Download(mine, b); err != nil {
		return 0, 0, 0, err
	}
	for _, f := range mine[2:] {
		if f > 0 {
			cores++
		}
	}
	return int(mine[0]), int(mine[1]), cores, nil
}

// maxCPUs is the most CPUs SameHost tells apart.
const maxCPUs = 1024

// allowedCPUs is the CPUs this process may run on: its
// Cpus_allowed_list, or 0 to runtime.NumCPU()-1 where it cannot be read.
func allowedCPUs() []int {
	if st, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(st), "\n") {
			if list, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				if cpus, ok := parseCPUList(list); ok {
					return cpus
				}
			}
		}
	}
	return firstCPUs()
}

// parseCPUList reads a list of CPUs as Linux writes it ("0-3,8,10-11"),
// those below maxCPUs; false for one it cannot read or an empty one.
func parseCPUList(list string) ([]int, bool) {
	var cpus []int
	for _, part := range strings.Split(strings.TrimSpace(list), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		l, err := strconv.Atoi(lo)
		if err != nil {
			return nil, false
		}
		h := l
		if isRange {
			if h, err = strconv.Atoi(hi); err != nil {
				return nil, false
			}
		}
		if l < 0 || h < l {
			return nil, false
		}
		for cpu := l; cpu <= h && cpu < maxCPUs; cpu++ {
			cpus = append(cpus, cpu)
		}
	}
	return cpus, len(cpus) > 0
}

func firstCPUs() []int {
	var cpus []int
	for cpu := range min(runtime.NumCPU(), maxCPUs) {
		cpus = append(cpus, cpu)
	}
	return cpus
}
