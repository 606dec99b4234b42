// trainmem's emulated GPU: a libcuda.so.1 whose kernels are kernels.cu
// itself, compiled as host C++ under cuda_emu.h, so that the real Go CUDA
// device (the driver shim, gorgonia.org/cu, the launches, the caching
// allocator) runs on the CPU. make emu builds it from this file and
// emu_kernels.cpp, which includes kernels.cu under cuda_emu.h; make
// test-cuda-emu runs the CUDA tests and trainmem over it
// (docs/architecture.md, "The emulated GPU"). It implements the driver functions the CUDA device calls
// (cuda/gpu/device.go's driverSymbols, and cuModuleLoadDataEx), refusing what a
// real driver refuses:
//
//   - device memory is host memory, mapped lazily, each allocation followed
//     by an inaccessible guard region; a copy, a memset or a kernel pointer
//     argument that is not inside one live allocation is an error;
//   - every call but the device queries needs the context current on the
//     calling OS thread (cuCtxSetCurrent), as with the real driver;
//   - a launch over the limits (1024 threads a block, 48 KiB of shared
//     memory, the grid's dimensions, the function's own maximum) is refused;
//   - cuModuleLoadData parses the PTX it is given: each function asked for
//     must be an entry of that PTX with as many parameters as the compiled
//     kernel, and its static shared memory is the PTX's.
//
// Copies, memsets and launches run synchronously on the calling thread, in
// stream order; events hold the host's clock. The device reports compute
// capability 9.0 (TRAINMEM_EMU_SM=80 for 8.0) and 16 GiB
// (TRAINMEM_EMU_MEMORY, in bytes).
//
// Kernels: a block's threads are fibers with stacks of their own, switched
// by a few instructions (emu_switch); each runs until it exits or waits at
// __syncthreads or a warp collective. TRAINMEM_EMU_SCHEDULE picks the order
// in which the scheduler runs the ready threads of a block: forward (the
// default), reverse, or shuffle:SEED. A kernel whose PTX has no barrier,
// collective or call runs its threads as plain calls, without fibers.

#include <cuda.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_emu.h"
#include "emu_table.h"

typedef long long i64;
typedef emu_entry entry;

emu_dim3 threadIdx, blockIdx, blockDim, gridDim; // one launch at a time: under mu

// ------------------------------------------------------------- reporting

static void emu_log(const char *fmt, ...) {
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "trainmem emulated GPU: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
}

static const entry *find_entry(const char *name) {
	for (int i = 0; i < emu_entry_count; i++)
		if (strcmp(emu_entries[i].name, name) == 0) return &emu_entries[i];
	return nullptr;
}

// --------------------------------------------------------------- state

static std::recursive_mutex mu;

// Up to max_devices GPUs (TRAINMEM_EMU_DEVICES, default 1), each with its
// own capacity and primary context; their memory is one address space.
static const int max_devices = 8;

struct alloc_t {
	size_t size;   // what was asked for
	size_t mapped; // with the guard
	int device;
};
static std::map<uintptr_t, alloc_t> allocs; // base → allocation
static size_t allocated[max_devices];      // per device

// The configuration, read once from the environment. (The driver keeps no
// function-local statics: the Makefile takes every _ZZ symbol of the
// kernels' object as a kernel's shared memory, which is poisoned.)
struct schedule {
	enum { FORWARD, REVERSE, SHUFFLE } kind = FORWARD;
	uint64_t seed = 0;
};
static struct {
	size_t capacity = (size_t)16 << 30;
	int sm = 90;
	int devices = 1;
	schedule sched;
} config;
static std::once_flag config_once;

// config_error reports a setting the emulator cannot take and exits with
// status 2: a test run on a silently different card would mislead.
[[noreturn]] static void config_error(const char *name, const char *value, const char *valid) {
	emu_log("%s=%s is not valid (valid: %s)", name, value, valid);
	exit(2);
}

// whole parses a decimal integer, the whole string.
static bool whole(const char *s, unsigned long long *v) {
	if (*s < '0' || *s > '9') return false;
	char *end;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return errno == 0 && *end == 0;
}

static void read_config() {
	unsigned long long v;
	if (const char *s = getenv("TRAINMEM_EMU_MEMORY")) {
		if (!whole(s, &v) || v == 0) config_error("TRAINMEM_EMU_MEMORY", s, "a positive number of bytes");
		config.capacity = (size_t)v;
	}
	if (const char *s = getenv("TRAINMEM_EMU_DEVICES")) {
		if (!whole(s, &v) || v == 0 || v > (unsigned long long)max_devices) config_error("TRAINMEM_EMU_DEVICES", s, "1 to 8");
		config.devices = (int)v;
	}
	if (const char *s = getenv("TRAINMEM_EMU_SM")) {
		if (strcmp(s, "80") != 0 && strcmp(s, "90") != 0) config_error("TRAINMEM_EMU_SM", s, "80, 90");
		config.sm = s[0] == '8' ? 80 : 90;
	}
	if (const char *s = getenv("TRAINMEM_EMU_SCHEDULE")) {
		if (strcmp(s, "reverse") == 0) config.sched.kind = schedule::REVERSE;
		else if (strncmp(s, "shuffle:", 8) == 0 && whole(s + 8, &v)) {
			config.sched.kind = schedule::SHUFFLE;
			config.sched.seed = v;
		} else if (strcmp(s, "forward") != 0)
			config_error("TRAINMEM_EMU_SCHEDULE", s, "forward, reverse, shuffle:SEED");
	}
}

static size_t capacity() {
	std::call_once(config_once, read_config);
	return config.capacity;
}

static int devices() {
	std::call_once(config_once, read_config);
	return config.devices;
}

static bool valid_device(CUdevice d) { return d >= 0 && d < devices(); }

static int sm() {
	std::call_once(config_once, read_config);
	return config.sm;
}

static const schedule &sched() {
	std::call_once(config_once, read_config);
	return config.sched;
}

// in_device reports whether [p, p+n) lies inside one live allocation.
static bool in_device(uintptr_t p, size_t n) {
	auto it = allocs.upper_bound(p);
	if (it == allocs.begin()) return false;
	--it;
	return p >= it->first && p - it->first <= it->second.size && n <= it->second.size - (p - it->first);
}

struct CUctx_st {
	int device;
};
static CUctx_st primaries[max_devices] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static thread_local CUcontext current = nullptr;

struct CUstream_st {
	int id;
};
struct CUevent_st {
	double ms;
	bool recorded;
};

struct func_t {
	const entry *e;
	int smem;  // static shared memory, bytes (from the PTX)
	bool sync; // the PTX has a barrier, a collective or a call
};
struct CUfunc_st {
	func_t f;
};
struct CUmod_st {
	std::map<std::string, func_t> fns;
};

static bool stream_ok(CUstream s) { return s == nullptr || s->id == 0x7472; }

#define NEED_CONTEXT()                                                                                                 \
	do {                                                                                                           \
		if (current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;                                             \
	} while (0)

// ----------------------------------------------------------- shared memory

// poison_shared sets every bit of the kernels' shared memory (their
// __shared__ arrays, emu_shared_regions: made from the kernels' object by
// the Makefile), NaN in every float type, at a block's start.
static void poison_shared() {
	for (int i = 0; i < emu_shared_count; i++) memset(emu_shared_regions[i].p, 0xff, emu_shared_regions[i].n);
}

// ---------------------------------------------------------------- fibers

extern "C" void emu_switch(void **save_sp, void *load_sp);
__asm__(".text\n"
        ".globl emu_switch\n"
        ".hidden emu_switch\n"
        ".type emu_switch, @function\n"
        "emu_switch:\n"
        "\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
        "\tmovq %rsp, (%rdi)\n"
        "\tmovq %rsi, %rsp\n"
        "\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n"
        "\tret\n"
        ".size emu_switch, .-emu_switch\n");

enum fstate { READY, BARRIER, COLLECTIVE, EXITED };
enum ckind { SHFL_XOR = 1, BALLOT = 2 };

struct collective {
	int kind;
	unsigned mask;
	int lane_mask;
	uint64_t bits;
	uint64_t out;
};

static const size_t stack_bytes = 64 << 10;

struct fiber {
	void *sp;
	fstate st;
	emu_dim3 idx;
	collective c;
};

// warp_state is a warp's collective in progress.
struct warp_state {
	int arrived; // lanes arrived
	collective c; // what the first lane asked
};

// block_run is the launch in progress on this OS thread.
struct block_run {
	const char *kernel;
	void (*call)(void **);
	void **params;
	int n;                  // threads in the block
	std::vector<fiber> *fs; // the block's fibers
	int current;            // the fiber running
	void *sched_sp;
	std::string failure;
	bool direct; // threads run as plain calls (no fibers)
	warp_state warps[32];
	int at_barrier; // threads waiting at __syncthreads
	int exited;     // threads that have exited
};
static block_run *run_now; // the launch in progress (under mu)

static char *stacks;          // 1024 fiber stacks
static std::vector<fiber> fibers;

struct emu_abort {}; // thrown to end a thread running as a plain call

// fail ends the launch: it records why and returns to the scheduler for
// good (the fiber is abandoned).
[[noreturn]] static void fail(const char *fmt, ...) {
	block_run *r = run_now;
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	if (r->failure.empty()) r->failure = buf;
	if (r->direct) throw emu_abort{};
	fiber &f = (*r->fs)[r->current];
	emu_switch(&f.sp, r->sched_sp);
	abort(); // never resumed
}

// wait gives the processor back to the scheduler until the fiber is ready.
static void wait() {
	block_run *r = run_now;
	fiber &f = (*r->fs)[r->current];
	emu_switch(&f.sp, r->sched_sp);
}

static const char *state_name(fstate s) {
	switch (s) {
	case READY: return "ready";
	case BARRIER: return "at __syncthreads";
	case COLLECTIVE: return "in a warp collective";
	default: return "exited";
	}
}

// check_no_waiter: thread t is leaving (exited) or holding (at a barrier);
// a lane of its warp waiting in a collective whose mask includes t can
// never be released.
static void check_no_waiter(int t, const char *doing) {
	block_run *r = run_now;
	if (r->warps[t / 32].arrived == 0) return; // no collective in progress
	std::vector<fiber> &fs = *r->fs;
	int base = t / 32 * 32;
	for (int l = 0; l < 32 && base + l < r->n; l++) {
		fiber &o = fs[base + l];
		if (o.st == COLLECTIVE && (o.c.mask >> (t % 32) & 1))
			fail("kernel %s, block (%u,%u,%u): thread %d waits in a warp collective whose mask holds lane %d, which %s",
			     r->kernel, blockIdx.x, blockIdx.y, blockIdx.z, base + l, t % 32, doing);
	}
}

extern "C" void emu_syncthreads(void) {
	block_run *r = run_now;
	if (r->direct) fail("kernel %s calls __syncthreads, but its PTX has no barrier", r->kernel);
	std::vector<fiber> &fs = *r->fs;
	int t = r->current;
	check_no_waiter(t, "waits at __syncthreads");
	if (r->exited > 0)
		for (int i = 0; i < r->n; i++)
			if (fs[i].st == EXITED)
				fail("kernel %s, block (%u,%u,%u): thread %d waits at __syncthreads, which thread %d, exited, never reaches",
				     r->kernel, blockIdx.x, blockIdx.y, blockIdx.z, t, i);
	fs[t].st = BARRIER;
	if (++r->at_barrier == r->n) {
		r->at_barrier = 0;
		for (int i = 0; i < r->n; i++) fs[i].st = READY;
		return;
	}
	wait();
}

// arrive records thread t's part in a warp collective and releases the
// warp when every lane of the mask has arrived at the same one. The first
// lane to arrive checks the mask against the block (every lane in it, not
// exited, not at a barrier); later lanes must match it; a lane that exits
// or waits at a barrier while a collective of its warp holds it in the mask
// fails the launch (check_no_waiter).
static uint64_t arrive(collective c) {
	block_run *r = run_now;
	if (r->direct) fail("kernel %s calls a warp collective, but its PTX has none", r->kernel);
	std::vector<fiber> &fs = *r->fs;
	int t = r->current, lane = t % 32, base = t - lane;
	if (!(c.mask >> lane & 1)) fail("kernel %s: thread %d calls a warp collective with mask %#x, which leaves it out", r->kernel, t, c.mask);
	warp_state &w = r->warps[t / 32];
	if (w.arrived == 0) {
		for (int l = 0; l < 32; l++) {
			if (!(c.mask >> l & 1)) continue;
			if (base + l >= r->n)
				fail("kernel %s, block (%u,%u,%u): thread %d's warp collective has mask %#x, but lane %d is past the block's %d threads",
				     r->kernel, blockIdx.x, blockIdx.y, blockIdx.z, t, c.mask, l, r->n);
			fstate st = fs[base + l].st;
			if (st == EXITED || st == BARRIER)
				fail("kernel %s, block (%u,%u,%u): thread %d waits in a warp collective whose mask holds lane %d, which %s",
				     r->kernel, blockIdx.x, blockIdx.y, blockIdx.z, t, l, state_name(st));
		}
		w.c = c;
	} else if (w.c.kind != c.kind || w.c.mask != c.mask || w.c.lane_mask != c.lane_mask) {
		fail("kernel %s, block (%u,%u,%u): lanes of warp %d are in different collectives (lane %d: kind %d, mask %#x, lane mask %d; another: kind %d, mask %#x, lane mask %d)",
		     r->kernel, blockIdx.x, blockIdx.y, blockIdx.z, t / 32, lane, c.kind, c.mask, c.lane_mask, w.c.kind, w.c.mask, w.c.lane_mask);
	}
	fs[t].c = c;
	fs[t].st = COLLECTIVE;
	if (++w.arrived < __builtin_popcount(c.mask)) {
		wait();
		return fs[t].c.out;
	}
	w.arrived = 0;
	uint64_t ballot = 0;
	if (c.kind == BALLOT)
		for (int l = 0; l < 32; l++)
			if ((c.mask >> l & 1) && fs[base + l].c.bits) ballot |= 1ull << l;
	for (int l = 0; l < 32; l++) {
		if (!(c.mask >> l & 1)) continue;
		fiber &o = fs[base + l];
		if (c.kind == BALLOT) {
			o.c.out = ballot;
		} else {
			int src = l ^ c.lane_mask;
			if (src >= 32 || !(c.mask >> src & 1))
				fail("kernel %s: lane %d shuffles from lane %d, which is not in the mask %#x", r->kernel, l, src, c.mask);
			o.c.out = fs[base + src].c.bits;
		}
		o.st = READY;
	}
	return fs[t].c.out;
}

extern "C" uint64_t emu_shfl_xor(unsigned mask, uint64_t bits, int lane_mask) {
	return arrive({SHFL_XOR, mask, lane_mask, bits, 0});
}

extern "C" unsigned emu_ballot(unsigned mask, int pred) { return (unsigned)arrive({BALLOT, mask, 0, pred ? 1ull : 0, 0}); }

// fiber_main runs one CUDA thread of the block and gives the processor
// back for good.
static void fiber_main() {
	block_run *r = run_now;
	r->call(r->params);
	fiber &f = (*r->fs)[r->current];
	check_no_waiter(r->current, "has exited");
	f.st = EXITED;
	r->exited++;
	if (r->at_barrier > 0)
		for (int i = 0; i < r->n; i++)
			if ((*r->fs)[i].st == BARRIER)
				fail("kernel %s, block (%u,%u,%u): thread %d exited while thread %d waits at __syncthreads", r->kernel,
				     blockIdx.x, blockIdx.y, blockIdx.z, r->current, i);
	emu_switch(&f.sp, r->sched_sp);
	abort();
}

static void fiber_start(fiber &f, int i) {
	// Tops staggered by cache lines: tops 64 KiB apart would all fall in
	// the same cache sets.
	char *top = stacks + (size_t)(i + 1) * stack_bytes - (size_t)(i % 61) * 64;
	void **sp = (void **)top;
	*--sp = nullptr;              // fiber_main's return address: it never returns
	*--sp = (void *)&fiber_main; // where emu_switch's ret goes
	for (int k = 0; k < 6; k++) *--sp = nullptr; // rbp, rbx, r12-r15
	f.sp = sp;
	f.st = READY;
}

// run_block runs one block; an empty string is success.
static std::string run_block(block_run &r, std::mt19937_64 &rng) {
	std::vector<fiber> &fs = fibers;
	r.fs = &fs;
	r.failure.clear();
	int n = r.n;
	if (r.direct) {
		for (int i = 0; i < n; i++) {
			int t = sched().kind == schedule::REVERSE ? n - 1 - i : i;
			threadIdx = {(unsigned)(t % blockDim.x), (unsigned)(t / blockDim.x % blockDim.y), (unsigned)(t / (blockDim.x * blockDim.y))};
			try {
				r.call(r.params);
			} catch (emu_abort &) {
				return r.failure;
			}
		}
		return "";
	}
	for (warp_state &w : r.warps) w.arrived = 0;
	r.at_barrier = r.exited = 0;
	for (int i = 0; i < n; i++) {
		fiber_start(fs[i], i);
		fs[i].idx = {(unsigned)(i % blockDim.x), (unsigned)(i / blockDim.x % blockDim.y), (unsigned)(i / (blockDim.x * blockDim.y))};
	}
	std::vector<int> order(n);
	for (int i = 0; i < n; i++) order[i] = sched().kind == schedule::REVERSE ? n - 1 - i : i;
	for (;;) {
		if (sched().kind == schedule::SHUFFLE) std::shuffle(order.begin(), order.end(), rng);
		bool ran = false;
		for (int t : order) {
			if (fs[t].st != READY) continue;
			ran = true;
			r.current = t;
			threadIdx = fs[t].idx;
			emu_switch(&r.sched_sp, fs[t].sp);
			if (!r.failure.empty()) return r.failure;
		}
		if (r.exited == n) return "";
		if (!ran) {
			std::string s = std::string("kernel ") + r.kernel + ": no thread of the block can go on:";
			for (int i = 0; i < n && i < 64; i++)
				if (fs[i].st != EXITED) s += " " + std::to_string(i) + " " + state_name(fs[i].st) + ";";
			return s;
		}
	}
}

static std::once_flag launch_once;

static std::string launch(const func_t &fn, emu_dim3 grid, emu_dim3 block, void **params) {
	std::call_once(launch_once, [] {
		void *m = mmap(nullptr, 1024 * stack_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m == MAP_FAILED) {
			emu_log("mapping the threads' stacks (%zu bytes): %s", 1024 * stack_bytes, strerror(errno));
			abort();
		}
		stacks = (char *)m;
		for (int i = 0; i < 1024; i++) // a guard under each stack
			if (mprotect(stacks + (size_t)i * stack_bytes, 4096, PROT_NONE) != 0) {
				emu_log("guarding thread stack %d: %s", i, strerror(errno));
				abort();
			}
		fibers.resize(1024);
	});
	block_run r{};
	r.kernel = fn.e->name;
	r.call = fn.e->call;
	r.params = params;
	r.n = (int)(block.x * block.y * block.z);
	r.direct = !fn.sync;
	block_run *saved = run_now;
	run_now = &r;
	gridDim = grid;
	blockDim = block;
	std::mt19937_64 rng(sched().seed);
	std::string failure;
	for (unsigned z = 0; z < grid.z && failure.empty(); z++)
		for (unsigned y = 0; y < grid.y && failure.empty(); y++)
			for (unsigned x = 0; x < grid.x && failure.empty(); x++) {
				blockIdx = {x, y, z};
				if (fn.smem > 0) poison_shared();
				failure = run_block(r, rng);
			}
	run_now = saved;
	return failure;
}

// ------------------------------------------------------------------ PTX

// parse_ptx finds each entry of the PTX text: its parameter count, its
// static shared memory and whether it synchronizes.
struct ptx_entry {
	int params = 0;
	int smem = 0;
	bool sync = false;
};
static bool parse_ptx(const char *ptx, std::map<std::string, ptx_entry> &out, std::string &why) {
	std::string s(ptx);
	if (s.find(".version") == std::string::npos || s.find(".target") == std::string::npos) {
		why = "not PTX: no .version and .target directives";
		return false;
	}
	size_t at = 0;
	while ((at = s.find(".entry ", at)) != std::string::npos) {
		size_t name0 = at + 7, paren = s.find('(', name0);
		if (paren == std::string::npos) {
			why = "an .entry without a parameter list";
			return false;
		}
		std::string name = s.substr(name0, paren - name0);
		size_t close = s.find(')', paren), open = s.find("\n{", paren), end = s.find("\n}\n", paren);
		if (close == std::string::npos || open == std::string::npos || end == std::string::npos) {
			why = "entry " + name + " has no body";
			return false;
		}
		ptx_entry e;
		for (size_t p = s.find(".param", paren); p != std::string::npos && p < close; p = s.find(".param", p + 6)) e.params++;
		std::string body = s.substr(open, end - open);
		e.sync = body.find("bar.sync") != std::string::npos || body.find("barrier") != std::string::npos ||
		         body.find("shfl.") != std::string::npos || body.find("vote.") != std::string::npos ||
		         body.find("\tcall") != std::string::npos;
		for (size_t p = body.find(".shared ."); p != std::string::npos; p = body.find(".shared .", p + 1)) {
			size_t lb = body.find('[', p), rb = body.find(']', p), nl = body.find('\n', p);
			if (lb < nl && rb < nl) e.smem += atoi(body.c_str() + lb + 1);
		}
		out[name] = e;
		at = end;
	}
	if (out.empty()) {
		why = "the PTX has no .entry";
		return false;
	}
	return true;
}

// --------------------------------------------------------- the driver API

extern "C" {

CUresult cuInit(unsigned int flags) { return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

CUresult cuDriverGetVersion(int *v) {
	if (!v) return CUDA_ERROR_INVALID_VALUE;
	*v = 13000;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n) {
	if (!n) return CUDA_ERROR_INVALID_VALUE;
	*n = devices();
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal) {
	if (!d) return CUDA_ERROR_INVALID_VALUE;
	if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
	if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
	if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, len, "trainmem emulated GPU (sm_%d)", sm());
	return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem(size_t *bytes, CUdevice d) {
	if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
	if (!bytes) return CUDA_ERROR_INVALID_VALUE;
	*bytes = capacity();
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
	if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
	if (!v) return CUDA_ERROR_INVALID_VALUE;
	switch (a) {
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: *v = 1024; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 2147483647; break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: *v = 65535; break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 49152; break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 4; break;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = sm() / 10; break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = sm() % 10; break;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
	if (!valid_device(d)) return CUDA_ERROR_INVALID_DEVICE;
	if (!c) return CUDA_ERROR_INVALID_VALUE;
	*c = &primaries[d];
	return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext c) {
	if (c != nullptr && (c < &primaries[0] || c >= &primaries[devices()])) return CUDA_ERROR_INVALID_CONTEXT;
	current = c;
	return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *c) {
	if (!c) return CUDA_ERROR_INVALID_VALUE;
	*c = current;
	return CUDA_SUCCESS;
}

CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
	NEED_CONTEXT();
	if (!s) return CUDA_ERROR_INVALID_VALUE;
	*s = new CUstream_st{0x7472};
	return CUDA_SUCCESS;
}

static void print_profile();

CUresult cuStreamDestroy(CUstream s) {
	NEED_CONTEXT();
	print_profile();
	if (!s || !stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
	s->id = 0;
	delete s;
	return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream s) {
	NEED_CONTEXT();
	return stream_ok(s) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuMemAlloc(CUdeviceptr *p, size_t n) {
	NEED_CONTEXT();
	if (!p || n == 0) return CUDA_ERROR_INVALID_VALUE;
	std::lock_guard<std::recursive_mutex> g(mu);
	const int dev = current->device;
	if (n > capacity() - allocated[dev]) return CUDA_ERROR_OUT_OF_MEMORY;
	const size_t guard = 64 << 10, page = 4096;
	size_t mapped = (n + page - 1) / page * page + guard;
	void *m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
	if (mprotect((char *)m + mapped - guard, guard, PROT_NONE) != 0) {
		munmap(m, mapped);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	allocs[(uintptr_t)m] = {n, mapped, dev};
	allocated[dev] += n;
	*p = (CUdeviceptr)m;
	return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr p) {
	NEED_CONTEXT();
	std::lock_guard<std::recursive_mutex> g(mu);
	auto it = allocs.find((uintptr_t)p);
	if (it == allocs.end()) {
		emu_log("cuMemFree(%#llx): not the start of a live allocation", (unsigned long long)p);
		return CUDA_ERROR_INVALID_VALUE;
	}
	munmap((void *)it->first, it->second.mapped);
	allocated[it->second.device] -= it->second.size;
	allocs.erase(it);
	return CUDA_SUCCESS;
}

CUresult cuMemGetInfo(size_t *free, size_t *total) {
	NEED_CONTEXT();
	if (!free || !total) return CUDA_ERROR_INVALID_VALUE;
	std::lock_guard<std::recursive_mutex> g(mu);
	*total = capacity();
	*free = capacity() - allocated[current->device];
	return CUDA_SUCCESS;
}

static CUresult check_range(const char *call, CUdeviceptr p, size_t n) {
	if (!in_device((uintptr_t)p, n)) {
		emu_log("%s: [%#llx, +%zu) is not inside one device allocation", call, (unsigned long long)p, n);
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s) {
	NEED_CONTEXT();
	if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
	std::lock_guard<std::recursive_mutex> g(mu);
	if (CUresult r = check_range("cuMemcpyHtoDAsync", dst, n)) return r;
	if (in_device((uintptr_t)src, 1)) {
		emu_log("cuMemcpyHtoDAsync: the source %p is device memory", src);
		return CUDA_ERROR_INVALID_VALUE;
	}
	memcpy((void *)dst, src, n);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s) {
	NEED_CONTEXT();
	if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
	std::lock_guard<std::recursive_mutex> g(mu);
	if (CUresult r = check_range("cuMemcpyDtoHAsync", src, n)) return r;
	if (in_device((uintptr_t)dst, 1)) {
		emu_log("cuMemcpyDtoHAsync: the destination %p is device memory", dst);
		return CUDA_ERROR_INVALID_VALUE;
	}
	memcpy(dst, (const void *)src, n);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
	NEED_CONTEXT();
	if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
	std::lock_guard<std::recursive_mutex> g(mu);
	if (CUresult r = check_range("cuMemcpyDtoDAsync (destination)", dst, n)) return r;
	if (CUresult r = check_range("cuMemcpyDtoDAsync (source)", src, n)) return r;
	memmove((void *)dst, (const void *)src, n);
	return CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
	NEED_CONTEXT();
	if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
	std::lock_guard<std::recursive_mutex> g(mu);
	if (CUresult r = check_range("cuMemsetD8Async", dst, n)) return r;
	memset((void *)dst, v, n);
	return CUDA_SUCCESS;
}

static CUresult load_module(CUmodule *m, const void *image, std::string &why) {
	if (!m || !image) {
		why = "no image";
		return CUDA_ERROR_INVALID_VALUE;
	}
	std::map<std::string, ptx_entry> es;
	if (!parse_ptx((const char *)image, es, why)) return CUDA_ERROR_INVALID_PTX;
	CUmod_st *mod = new CUmod_st;
	for (auto &kv : es) {
		const entry *e = find_entry(kv.first.c_str());
		if (!e) continue; // an entry the emulator has not compiled: cuModuleGetFunction refuses it
		if (e->arity != kv.second.params) {
			why = "entry " + kv.first + " has " + std::to_string(kv.second.params) + " parameters in the PTX, " +
			      std::to_string(e->arity) + " compiled";
			delete mod;
			return CUDA_ERROR_INVALID_PTX;
		}
		mod->fns[kv.first] = {e, kv.second.smem, kv.second.sync};
	}
	*m = mod;
	return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *m, const void *image) {
	NEED_CONTEXT();
	std::string why;
	CUresult r = load_module(m, image, why);
	if (r != CUDA_SUCCESS) emu_log("cuModuleLoadData: %s", why.c_str());
	return r;
}

// cuModuleLoadDataEx writes the JIT's logs where the options ask: the
// reason a module was refused to the error log, a line to the info log.
CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *opts, void **vals) {
	NEED_CONTEXT();
	std::string why;
	CUresult r = load_module(m, image, why);
	std::string info = r == CUDA_SUCCESS ? "emulated JIT: " + std::to_string((*m)->fns.size()) + " entries" : "";
	char *errbuf = nullptr, *infobuf = nullptr;
	size_t errcap = 0, infocap = 0;
	for (unsigned i = 0; i < n; i++) {
		switch (opts[i]) {
		case CU_JIT_ERROR_LOG_BUFFER: errbuf = (char *)vals[i]; break;
		case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: errcap = (size_t)(uintptr_t)vals[i]; break;
		case CU_JIT_INFO_LOG_BUFFER: infobuf = (char *)vals[i]; break;
		case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: infocap = (size_t)(uintptr_t)vals[i]; break;
		default: break;
		}
	}
	if (errbuf && errcap) snprintf(errbuf, errcap, "%s", why.c_str());
	if (infobuf && infocap) snprintf(infobuf, infocap, "%s", info.c_str());
	return r;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
	NEED_CONTEXT();
	if (!f || !m || !name) return CUDA_ERROR_INVALID_VALUE;
	auto it = m->fns.find(name);
	if (it == m->fns.end()) {
		emu_log("cuModuleGetFunction(%s): not an entry of the module (or not compiled by the emulator)", name);
		return CUDA_ERROR_NOT_FOUND;
	}
	*f = new CUfunc_st{it->second};
	return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
	NEED_CONTEXT();
	if (!v || !f) return CUDA_ERROR_INVALID_VALUE;
	switch (a) {
	case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
	case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *v = f->f.smem; break;
	case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = 32; break;
	default: *v = 0; break;
	}
	return CUDA_SUCCESS;
}

static double now_ms() {
	return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// TRAINMEM_EMU_PROFILE=1 prints each kernel's calls and time at exit.
struct prof {
	double ms = 0;
	long calls = 0;
};
static std::map<std::string, prof> profile;

// print_profile runs when a stream is destroyed (a device's Close): a Go
// program ends with exit_group, past C's destructors.
static void print_profile() {
	for (auto &kv : profile) emu_log("%-32s %6ld calls %10.1f ms", kv.first.c_str(), kv.second.calls, kv.second.ms);
	profile.clear();
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned smem, CUstream s, void **params, void **extra) {
	NEED_CONTEXT();
	if (!f) return CUDA_ERROR_INVALID_HANDLE;
	if (!stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
	const char *name = f->f.e->name;
	if (extra != nullptr || (params == nullptr && f->f.e->arity > 0)) {
		emu_log("cuLaunchKernel(%s): parameters must come in kernelParams", name);
		return CUDA_ERROR_INVALID_VALUE;
	}
	unsigned long long threads = (unsigned long long)bx * by * bz;
	if (gx == 0 || gy == 0 || gz == 0 || threads == 0 || bx > 1024 || by > 1024 || bz > 64 || threads > 1024 ||
	    gx > 2147483647u || gy > 65535 || gz > 65535 || smem + (unsigned)f->f.smem > 49152) {
		emu_log("cuLaunchKernel(%s): grid (%u,%u,%u), block (%u,%u,%u), %u + %d bytes of shared memory: over the limits",
		        name, gx, gy, gz, bx, by, bz, smem, f->f.smem);
		return CUDA_ERROR_INVALID_VALUE;
	}
	std::lock_guard<std::recursive_mutex> g(mu);
	for (int i = 0; i < f->f.e->arity; i++) {
		if (!(f->f.e->ptrmask >> i & 1)) continue;
		uintptr_t p;
		memcpy(&p, params[i], 8);
		if (p != 0 && !in_device(p, 1)) {
			emu_log("cuLaunchKernel(%s): parameter %d, %#llx, is not device memory", name, i, (unsigned long long)p);
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	double t0 = now_ms();
	std::string failure = launch(f->f, {gx, gy, gz}, {bx, by, bz}, params);
	if (getenv("TRAINMEM_EMU_PROFILE")) {
		profile[name].ms += now_ms() - t0;
		profile[name].calls++;
	}
	if (!failure.empty()) {
		emu_log("%s", failure.c_str());
		return CUDA_ERROR_LAUNCH_FAILED;
	}
	return CUDA_SUCCESS;
}


CUresult cuEventCreate(CUevent *e, unsigned int flags) {
	NEED_CONTEXT();
	if (!e) return CUDA_ERROR_INVALID_VALUE;
	*e = new CUevent_st{0, false};
	return CUDA_SUCCESS;
}

CUresult cuEventDestroy(CUevent e) {
	NEED_CONTEXT();
	if (!e) return CUDA_ERROR_INVALID_HANDLE;
	delete e;
	return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent e, CUstream s) {
	NEED_CONTEXT();
	if (!e || !stream_ok(s)) return CUDA_ERROR_INVALID_HANDLE;
	e->ms = now_ms();
	e->recorded = true;
	return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent e) {
	NEED_CONTEXT();
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
	NEED_CONTEXT();
	if (!ms || !a || !b) return CUDA_ERROR_INVALID_VALUE;
	if (!a->recorded || !b->recorded) return CUDA_ERROR_INVALID_HANDLE;
	*ms = (float)(b->ms - a->ms);
	return CUDA_SUCCESS;
}

// tmemu_device_range reports whether [p, p+n) is inside one device
// allocation: the fake cuBLAS checks its operands with it.
int tmemu_device_range(unsigned long long p, unsigned long long n) {
	std::lock_guard<std::recursive_mutex> g(mu);
	return in_device((uintptr_t)p, (size_t)n);
}

} // extern "C"
