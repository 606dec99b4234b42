// kernels.cu as host C++ (under cuda_emu.h), and its table of entry points
// for the fake driver. emu_entries.inc lists the PTX's entry names, so that
// a kernel nvcc compiles and the emulator does not is a build error, not a
// silent gap.

#include "cuda_emu.h"

// EMU_KERNELS names another copy of kernels.cu (the Makefile's mutation
// check compiles deliberately broken ones).
#ifndef EMU_KERNELS
#define EMU_KERNELS "../kernels/kernels.cu"
#endif
#include EMU_KERNELS

#include "emu_table.h"

extern "C" const emu_entry emu_entries[] = {
#include "emu_entries.inc"
};

extern "C" const int emu_entry_count = sizeof emu_entries / sizeof emu_entries[0];
