// What every kernel family shares: the storage types and their loads and
// stores in the compute type, the fixed-order reductions (warp, block,
// column sums), the bad-token-id record, the grid-stride loop and ENTRY2,
// which makes a family's two entry points. Conventions: kernels.cu.
#pragma once

#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef long long i64;

enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2, DT_F64 = 3 };

// Kernel codes for bad token ids, as cuda/gpu/device.go's statusKernels names them.
enum {
	K_EMBEDDING = 1,
	K_EMBEDDING_BWD_TOKENS = 2,
	K_CROSS_ENTROPY = 3,
	K_CROSS_ENTROPY_BWD = 4,
	K_CROSS_ENTROPY_PART_SUMS = 5,
	K_CROSS_ENTROPY_PART_BWD = 6
};

// ---------------------------------------------------------------- storage

// ld_f loads element i of a buffer of type dt as fp32 (fp64 rounds to
// nearest even, as the host's decode into float32 does).
__device__ __forceinline__ float ld_f(const void *p, i64 dt, i64 i) {
	switch (dt) {
	case DT_F32: return ((const float *)p)[i];
	case DT_F16: return __half2float(((const __half *)p)[i]);
	case DT_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
	default: return __double2float_rn(((const double *)p)[i]);
	}
}

// ld_d loads element i exactly as fp64.
__device__ __forceinline__ double ld_d(const void *p, i64 dt, i64 i) {
	switch (dt) {
	case DT_F32: return (double)((const float *)p)[i];
	case DT_F16: return (double)__half2float(((const __half *)p)[i]);
	case DT_BF16: return (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
	default: return ((const double *)p)[i];
	}
}

// f64_to_f32_odd rounds to fp32 with round-to-odd; rounding that to a
// format of at most 22 significand bits to nearest even gives x correctly
// rounded (cuda/half.go's f64ToF32Odd).
__device__ __forceinline__ float f64_to_f32_odd(double x) {
	float r = __double2float_rz(x);
	if ((double)r != x) r = __int_as_float(__float_as_int(r) | 1);
	return r;
}

// st_f stores an fp32 value rounded once to dt (to nearest even).
__device__ __forceinline__ void st_f(void *p, i64 dt, i64 i, float v) {
	switch (dt) {
	case DT_F32: ((float *)p)[i] = v; break;
	case DT_F16: ((__half *)p)[i] = __float2half_rn(v); break;
	case DT_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
	default: ((double *)p)[i] = (double)v; break;
	}
}

// st_d stores an fp64 value rounded once to dt.
__device__ __forceinline__ void st_d(void *p, i64 dt, i64 i, double v) {
	switch (dt) {
	case DT_F32: ((float *)p)[i] = __double2float_rn(v); break;
	case DT_F16: ((__half *)p)[i] = __float2half_rn(f64_to_f32_odd(v)); break;
	case DT_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(f64_to_f32_odd(v)); break;
	default: ((double *)p)[i] = v; break;
	}
}

// ld and st in the compute type T: a kernel computing in fp32 loads fp32
// values and rounds its fp32 results into the storage type, as the host's
// vec[float32] does; one computing in fp64 (every operand fp64) is exact.
template <typename T> __device__ __forceinline__ T ld(const void *p, i64 dt, i64 i);
template <> __device__ __forceinline__ float ld<float>(const void *p, i64 dt, i64 i) { return ld_f(p, dt, i); }
template <> __device__ __forceinline__ double ld<double>(const void *p, i64 dt, i64 i) { return ld_d(p, dt, i); }
__device__ __forceinline__ void st(void *p, i64 dt, i64 i, float v) { st_f(p, dt, i, v); }
__device__ __forceinline__ void st(void *p, i64 dt, i64 i, double v) { st_d(p, dt, i, v); }

template <typename T> __device__ __forceinline__ T neg_inf();
template <> __device__ __forceinline__ float neg_inf<float>() { return __int_as_float(0xff800000); }
template <> __device__ __forceinline__ double neg_inf<double>() { return __longlong_as_double(0xfff0000000000000ULL); }

// ----------------------------------------------------------- reductions

__device__ __forceinline__ double warp_sum(double v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

template <typename T> __device__ __forceinline__ T warp_max(T v) {
	for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// block_sum sums v over a block of a multiple of 32 threads (at most 1024)
// in a fixed tree and returns the total to every thread. sh holds 32
// doubles; the block must call it uniformly.
__device__ double block_sum(double v, double *sh) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	__syncthreads(); // sh may still be read by a previous call
	if (lane == 0) sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : 0.0;
	return warp_sum(v);
}

template <typename T> __device__ T block_max(T v, T *sh) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0) sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : neg_inf<T>();
	return warp_max(v);
}

// bad_id records the first bad token id the device sees.
__device__ void bad_id(int *status, int kernel, i64 pos, int id) {
	if (atomicCAS(&status[0], 0, 1) == 0) {
		status[1] = kernel;
		status[2] = (int)pos;
		status[3] = id;
	}
}

#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

// column_sums: dst[c] = Σ_i term(i, c) over N rows (LayerNormBackwardW,
// RMSNormBackwardW, SumRows: each family gives its term). A block of 32×32
// threads per 32 channels (the entries carry __launch_bounds__(1024), so that
// nvcc keeps them within the 64 registers a thread such a block allows);
// thread (c, g) sums rows g, g+32, ... in fp64, then thread (c, 0) adds the
// 32 partial sums in order g = 0..31. Fixed order, no atomics.
#define CS_ROWS 32
template <typename T, typename Term> __device__ void column_sums(void *dst, i64 ddt, i64 N, i64 C, Term term) {
	__shared__ double part[CS_ROWS][33];
	i64 c = (i64)blockIdx.x * 32 + threadIdx.x;
	double acc = 0;
	if (c < C) {
		for (i64 i = threadIdx.y; i < N; i += CS_ROWS) acc += (double)term(i, c);
	}
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		double s = 0;
		for (int g = 0; g < CS_ROWS; g++) s += part[g][threadIdx.x];
		st(dst, ddt, c, (T)s);
	}
}

// Each templated family gets NAME_f32 and NAME_f64. The parameter lists are
// spelled out once, in the family's file, and mirrored by its builder in
// cuda/gpu/<family>.go.
#define ENTRY2(name, params, args)                                                                                     \
	extern "C" __global__ void name##_f32 params { name<float> args; }                                            \
	extern "C" __global__ void name##_f64 params { name<double> args; }
