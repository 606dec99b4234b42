// The emulated GPU's kernel table: one row per extern "C" entry point of
// kernels.cu, made in the kernels' translation unit (emu_kernels.cpp) from
// emu_entries.inc (the PTX's entry names, listed by the Makefile) and read
// by the fake driver (fakecuda.cpp).

#ifndef TRAINMEM_EMU_TABLE_H
#define TRAINMEM_EMU_TABLE_H

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

struct emu_entry {
	const char *name;
	void (*call)(void **params); // loads the 8-byte argument slots and runs one CUDA thread
	int arity;                   // parameters
	uint64_t ptrmask;            // bit i: parameter i is a pointer
};

// EMU_ENTRY(name) is a table row for the extern "C" kernel name, its
// caller and facts made from the kernel's own parameter types.
#define EMU_ENTRY(name) {#name, &emu_invoker<&name>::call, emu_invoker<&name>::arity, emu_invoker<&name>::pointers()},

template <typename T> T emu_load_arg(void *slot) {
	static_assert(sizeof(T) == 8, "every kernel parameter is an 8-byte slot (kernels.cu's conventions)");
	T v;
	std::memcpy(&v, slot, sizeof v);
	return v;
}

template <auto F> struct emu_invoker;
template <typename... A, void (*F)(A...)> struct emu_invoker<F> {
	static constexpr int arity = sizeof...(A);
	static void call(void **p) { call_with(p, std::index_sequence_for<A...>{}); }
	template <size_t... I> static void call_with(void **p, std::index_sequence<I...>) { F(emu_load_arg<A>(p[I])...); }
	static constexpr uint64_t pointers() {
		uint64_t m = 0;
		int i = 0;
		((m |= (std::is_pointer<A>::value ? uint64_t(1) << i : 0), i++), ...);
		return m;
	}
};

extern "C" const emu_entry emu_entries[];
extern "C" const int emu_entry_count;

// The kernels' shared memory: their __shared__ arrays, which cuda_emu.h
// makes function-local statics, listed with their sizes by the Makefile
// from the kernels' object (nm) into emu_shared.cpp, which links them by
// their mangled names (a static in a function that is not a template has
// no global symbol: the link fails, and the function must be made one).
struct emu_region {
	void *p;
	unsigned long n;
};
extern "C" const emu_region emu_shared_regions[];
extern "C" const int emu_shared_count;

#endif
