package host

import (
	"fmt"
	"math"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"trainmem/cuda"
)

// PeakGFLOPS is the fp32 peak of the machine's cores, for reporting
// GEMM speed as a fraction of it: cores × FMA units × SIMD lanes × 2 flops
// × clock. /proc/cpuinfo gives the cores, the microarchitecture (vendor,
// family, model) and a clock ("cpu MHz"); in a virtual machine that is the
// nominal clock, below the boost clock the cores run at (2.596 GHz where
// they run at 3.69 GHz), so the clock is also timed, with a chain of
// dependent one-cycle additions, and the higher of the two is used. how
// says how the number was found, in words. TRAINMEM_PEAK_GFLOPS overrides
// it. gflops is 0 when nothing is known. The first call takes about 30 ms.
func PeakGFLOPS() (gflops float64, how string) {
	switch v, ok, err := cuda.PeakOverride(); {
	case err != nil:
		return 0, err.Error()
	case ok:
		return v, fmt.Sprintf("%s=%s", cuda.PeakEnv, os.Getenv(cuda.PeakEnv))
	}
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0, fmt.Sprintf("unknown (no /proc/cpuinfo: %v); set TRAINMEM_PEAK_GFLOPS", err)
	}
	return peakFromCPUInfo(string(data), runtime.NumCPU(), timedClock())
}

var timedClock = sync.OnceValue(measureClockGHz)

// measureClockGHz times a chain of dependent rotate-and-add steps, two
// one-cycle instructions each on every x86-64 and arm64 core, and returns
// the clock of the fastest of 20 trials (preemption only makes a trial
// slower).
func measureClockGHz() float64 {
	const n = 2_000_000
	best := time.Duration(math.MaxInt64)
	var sink uint64
	for k := 0; k < 20; k++ {
		t := time.Now()
		sink += clockChain(n, uint64(k))
		if d := time.Since(t); d < best {
			best = d
		}
	}
	runtime.KeepAlive(sink)
	return 2 * n / best.Seconds() / 1e9
}

//go:noinline
func clockChain(n int, x uint64) uint64 {
	for i := 0; i < n; i++ {
		x = bits.RotateLeft64(x, 7) + 0x9e3779b97f4a7c15
	}
	return x
}

// cpuModel is what peakFromCPUInfo reads about the machine.
type cpuModel struct {
	vendor        string
	family, model int
	flags         map[string]bool
	mhz           float64
	logical       int // processors listed
	physical      int // distinct (physical id, core id) pairs
}

func parseCPUInfo(text string) cpuModel {
	var m cpuModel
	cores := map[string]bool{}
	var phys, core string
	flush := func() {
		if phys != "" || core != "" {
			cores[phys+"/"+core] = true
		}
		phys, core = "", ""
	}
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "processor":
			flush()
			m.logical++
		case "vendor_id":
			m.vendor = v
		case "cpu family":
			m.family, _ = strconv.Atoi(v)
		case "model":
			m.model, _ = strconv.Atoi(v)
		case "flags":
			if m.flags == nil {
				m.flags = map[string]bool{}
				for _, f := range strings.Fields(v) {
					m.flags[f] = true
				}
			}
		case "cpu MHz":
			if f, err := strconv.ParseFloat(v, 64); err == nil && f > m.mhz {
				m.mhz = f
			}
		case "physical id":
			phys = v
		case "core id":
			core = v
		}
	}
	flush()
	m.physical = len(cores)
	if m.physical == 0 {
		m.physical = m.logical
	}
	return m
}

// simd is a microarchitecture's fp32 FMA throughput per core and cycle.
type simd struct {
	name         string
	units, lanes int // FMA pipes, fp32 lanes each
	note         string
}

func classifyCPU(m cpuModel) simd {
	switch {
	case m.vendor == "AuthenticAMD" && m.family == 23 && m.model < 0x30:
		return simd{"Zen/Zen+", 2, 4, "its FMA pipes are 128 bits wide, AVX2 runs as two halves"}
	case m.vendor == "AuthenticAMD" && m.family == 23:
		return simd{"Zen 2", 2, 8, "two 256-bit FMA pipes"}
	case m.vendor == "AuthenticAMD" && m.family == 25 &&
		(m.model >= 0x10 && m.model <= 0x1f || m.model >= 0x60 && m.model <= 0x7f || m.model >= 0xa0 && m.model <= 0xaf):
		return simd{"Zen 4", 2, 8, "AVX-512 is executed as two 256-bit halves on two 256-bit FMA pipes"}
	case m.vendor == "AuthenticAMD" && m.family == 25:
		return simd{"Zen 3", 2, 8, "two 256-bit FMA pipes"}
	case m.vendor == "AuthenticAMD" && m.family == 26:
		return simd{"Zen 5", 2, 16, "two 512-bit FMA pipes (mobile parts have 256-bit ones)"}
	case m.flags["avx512f"]:
		return simd{"AVX-512", 2, 16, "assumed two 512-bit FMA units (some Xeon SKUs have one)"}
	case m.flags["avx2"] && m.flags["fma"]:
		return simd{"AVX2+FMA", 2, 8, "assumed two 256-bit FMA units"}
	case m.flags["avx"]:
		return simd{"AVX", 1, 8, "no FMA: one 256-bit multiply and one add per cycle count as one FMA"}
	}
	return simd{"unknown", 1, 4, "an unknown CPU: assumed one 128-bit FMA unit"}
}

// peakFromCPUInfo computes the peak from /proc/cpuinfo's text, for at most
// numCPU logical processors (the ones the process may run on), at the
// higher of cpuinfo's clock and timedGHz (0: not timed).
func peakFromCPUInfo(text string, numCPU int, timedGHz float64) (float64, string) {
	m := parseCPUInfo(text)
	if m.logical == 0 || (m.mhz == 0 && timedGHz == 0) {
		return 0, "unknown (no processors or no clock in /proc/cpuinfo); set TRAINMEM_PEAK_GFLOPS"
	}
	cores := m.physical
	if numCPU > 0 && numCPU < m.logical {
		// Restricted to fewer processors: count cores in proportion.
		cores = max(1, m.physical*numCPU/m.logical)
	}
	s := classifyCPU(m)
	ghz := m.mhz / 1000
	clock := fmt.Sprintf("/proc/cpuinfo's \"cpu MHz\" (%.0f)", m.mhz)
	if timedGHz > ghz {
		clock = fmt.Sprintf("timed: a chain of dependent one-cycle additions ran at %.3f GHz, above /proc/cpuinfo's \"cpu MHz\" (%.0f), the nominal clock", timedGHz, m.mhz)
		ghz = timedGHz
	} else if timedGHz > 0 {
		clock += fmt.Sprintf(", not below the timed %.3f GHz", timedGHz)
	}
	g := float64(cores*s.units*s.lanes*2) * ghz
	how := fmt.Sprintf("%d cores × %d FMA units × %d fp32 lanes × 2 flops × %.3f GHz = %.1f GFLOP/s: "+
		"%s family %d model %d is %s (%s); the clock is %s",
		cores, s.units, s.lanes, ghz, g, m.vendor, m.family, m.model, s.name, s.note, clock)
	return g, how
}
