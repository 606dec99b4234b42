//go:build trainmem_cuda && linux && amd64

// The CUDA driver, bound at run time. gorgonia.org/cu calls the driver API
// directly (cuMemAlloc_v2, cuLaunchKernel, ...) and its package init calls
// cuInit and exits the process when that fails. Linked against libcuda as
// cu asks, a binary could not even start on a machine without the NVIDIA
// driver, and would exit at start on one without a GPU.
//
// This file defines every driver function cu uses (shim_syms.h) in the
// executable itself, as a hidden symbol: a one-instruction trampoline that
// jumps through a pointer. The linker resolves cu's references to these
// definitions, so with -Wl,--as-needed libcuda is not a dependency of the
// binary at all. cuInit, which cu's init calls first, opens libcuda.so.1
// with dlopen, points every trampoline at the driver's function, calls the
// real cuInit, records its result and the reason for any failure, and
// returns success to cu: cu's init goes on, and trainmem decides (Go side,
// driver_shim.go) what a missing driver or GPU means: an error from
// --device cuda, a skipped test. Before cuInit, and for a driver that lacks
// a function, a trampoline's pointer leads to a stub that returns
// CUDA_ERROR_NOT_INITIALIZED or CUDA_ERROR_NOT_FOUND.
//
// The symbols are hidden (not exported from the executable), so the
// driver's own internal calls are never routed through them.

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#define TMCU_HIDDEN __attribute__((visibility("hidden")))

static int tmcu_not_initialized(void) { return 3; } // CUDA_ERROR_NOT_INITIALIZED
static int tmcu_not_found(void) { return 500; }     // CUDA_ERROR_NOT_FOUND

#define TMCU_SYM(name) TMCU_HIDDEN void *tmcu_ptr_##name = (void *)tmcu_not_initialized;
#include "shim_syms.h"
#undef TMCU_SYM

#define TMCU_SYM(name)                                                                                                 \
	".globl " #name "\n"                                                                                           \
	".hidden " #name "\n"                                                                                          \
	".type " #name ", @function\n" #name ":\n"                                                                     \
	"\tjmp *tmcu_ptr_" #name "(%rip)\n"                                                                            \
	".size " #name ", .-" #name "\n"
__asm__(".text\n"
#include "shim_syms.h"
);
#undef TMCU_SYM

// What cuInit found, for driver_shim.go: the real cuInit's result (-1 when
// libcuda.so.1 did not load), dlopen's message, and the driver functions
// that libcuda lacks (names separated by spaces).
TMCU_HIDDEN int tmcu_init_result = -1;
TMCU_HIDDEN int tmcu_init_called = 0;
TMCU_HIDDEN char tmcu_dlerror[512];
TMCU_HIDDEN char tmcu_missing[4096];

static void tmcu_append(char *dst, size_t cap, const char *s) {
	size_t n = strlen(dst), m = strlen(s);
	if (n + m + 2 >= cap) return;
	if (n > 0) dst[n++] = ' ';
	memcpy(dst + n, s, m + 1);
}

TMCU_HIDDEN int cuInit(unsigned int flags) {
	tmcu_init_called = 1;
	void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		const char *e = dlerror();
		strncpy(tmcu_dlerror, e != NULL ? e : "dlopen(libcuda.so.1) failed", sizeof tmcu_dlerror - 1);
		return 0;
	}
#define TMCU_SYM(name)                                                                                                 \
	{                                                                                                              \
		void *p = dlsym(lib, #name);                                                                           \
		if (p != NULL) {                                                                                       \
			tmcu_ptr_##name = p;                                                                           \
		} else {                                                                                               \
			tmcu_ptr_##name = (void *)tmcu_not_found;                                                      \
			tmcu_append(tmcu_missing, sizeof tmcu_missing, #name);                                         \
		}                                                                                                      \
	}
#include "shim_syms.h"
#undef TMCU_SYM
	int (*real)(unsigned int) = (int (*)(unsigned int))dlsym(lib, "cuInit");
	tmcu_init_result = real != NULL ? real(flags) : 500;
	return 0;
}
