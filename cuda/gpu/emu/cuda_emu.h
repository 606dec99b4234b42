// The CUDA surface kernels.cu uses, for compiling it unmodified as host C++
// (g++-11 or later; emu_kernels.cpp includes this header, then kernels.cu): trainmem's emulated GPU, which
// runs the real Go CUDA device on the CPU against a fake libcuda.so.1
// (fakecuda.cpp) so that the CUDA path is executed without a GPU (make
// test-cuda-emu; docs/architecture.md, "The emulated GPU").
//
// Every CUDA thread of a block is a fiber (fakecuda.cpp schedules them on
// the launching OS thread, one block after another): __syncthreads is a
// real barrier of the block, and the warp collectives release when every
// lane of their mask has arrived. It is strict where the hardware is
// unforgiving: a barrier that not every thread of the block reaches, a
// collective whose mask holds a lane that has exited, waits at a barrier,
// is past the block's end or is in another collective, or a block in which
// no thread can go on, aborts the launch with the kernel's name. __shared__
// arrays are the kernel's statics, poisoned (all bits set: NaN in every
// float type) at each block's start.
//
// With __CUDACC__ and __CUDA_ARCH__ undefined, CUDA's cuda_fp16.hpp and
// cuda_bf16.hpp convert in software, rounding to nearest even, as the GPU.
// What this cannot show: nvcc's code generation (its FMA contraction, its
// register allocation), the driver's JIT, memory ordering between blocks
// (blocks run one after another), occupancy and speed.
//
// This is not a CUDA implementation: only what kernels.cu needs is here,
// and a kernel that uses more does not compile.

#ifndef TRAINMEM_CUDA_EMU_H
#define TRAINMEM_CUDA_EMU_H

#ifdef __CUDACC__
#error "cuda_emu.h is for host compilers: nvcc compiles kernels.cu for the GPU"
#endif

#include <cmath>
#include <cstdint>
#include <cstring>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

struct emu_dim3 {
	unsigned x, y, z;
};

// The executing thread's indices, set by the scheduler whenever it runs a
// fiber: one kernel runs at a time in the process (the fake driver
// serializes launches), and one of its threads at a time.
extern emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

// (CUDA's host_defines.h, which cuda.h includes, gives them meanings of
// its own: these replace them.)
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#undef __constant__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// A block's shared memory: the kernel's statics, reused by each block in
// turn and poisoned at its start (the Makefile lists them from the
// kernels' symbol table, function-local statics whose names start with _ZZ,
// into emu_shared.cpp, which fakecuda.cpp reads).
#define __shared__ static
// Constant memory: tables initialized once, read by every thread.
#define __constant__

extern "C" {
// The scheduler's primitives (fakecuda.cpp).
void emu_syncthreads(void);
uint64_t emu_shfl_xor(unsigned mask, uint64_t bits, int lane_mask);
unsigned emu_ballot(unsigned mask, int pred);
}

inline void __syncthreads() { emu_syncthreads(); }

// __shfl_xor_sync for the 4- and 8-byte types kernels.cu shuffles; the
// value travels as its bits.
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
	static_assert(sizeof(T) == 4 || sizeof(T) == 8, "__shfl_xor_sync of a 4- or 8-byte value");
	uint64_t bits = 0;
	std::memcpy(&bits, &v, sizeof v);
	bits = emu_shfl_xor(mask, bits, lane_mask);
	T out;
	std::memcpy(&out, &bits, sizeof out);
	return out;
}

inline unsigned __ballot_sync(unsigned mask, int pred) { return emu_ballot(mask, pred != 0); }

// Blocks run one after another and a block's threads one at a time: an
// atomic is a plain read-modify-write.
inline int atomicCAS(int *p, int compare, int val) {
	int old = *p;
	if (old == compare) *p = val;
	return old;
}

inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }

// Bit casts and conversions.
inline float __int_as_float(int x) {
	float f;
	std::memcpy(&f, &x, 4);
	return f;
}
inline int __float_as_int(float f) {
	int x;
	std::memcpy(&x, &f, 4);
	return x;
}
inline double __longlong_as_double(long long x) {
	double d;
	std::memcpy(&d, &x, 8);
	return d;
}
// Round to nearest even: the C conversion in the default rounding mode.
inline float __double2float_rn(double x) { return (float)x; }
// Round toward zero: the nearest-even result, stepped toward zero when it
// rounded away.
inline float __double2float_rz(double x) {
	float r = (float)x;
	if (std::isfinite(x) && std::isinf(r)) return std::copysign(3.40282346638528859812e+38f, (float)x);
	if ((double)r != x && std::fabs((double)r) > std::fabs(x)) r = std::nextafter(r, 0.0f);
	return r;
}

// CUDA's device min and max: fminf/fmaxf for floats (a NaN operand gives
// the other), the plain comparison for integers.
inline float max(float a, float b) { return std::fmax(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline float min(float a, float b) { return std::fmin(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }

// The IEEE operations nvcc never contracts into a fused multiply-add:
// the plain ones (the host build does not contract either).
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }

using std::exp;
using std::log;
using std::signbit;
using std::sqrt;

#endif
