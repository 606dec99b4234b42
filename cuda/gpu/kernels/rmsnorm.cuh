// The RMSNorm family (Kernels.RMSNormStats, RMSNorm, RMSNormBackwardX,
// RMSNormBackwardW): cuda/host/rmsnorm.go's.
#pragma once
#include "common.cuh"

// rms_norm_stats: a block per row; the sum of squares in fp64, as the host.
template <typename T> __device__ void rms_norm_stats(void *stats, i64 sdt, const void *x, i64 xdt, i64 N, i64 C, double eps) {
	__shared__ double sh[32];
	for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
		double ss = 0;
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
			double v = (double)ld<T>(x, xdt, i * C + c);
			ss += v * v;
		}
		ss = block_sum(ss, sh);
		if (threadIdx.x == 0) st(stats, sdt, i, (T)(1.0 / sqrt(ss / (double)C + eps)));
	}
}

template <typename T>
__device__ void rms_norm(void *y, i64 ydt, const void *x, i64 xdt, const void *stats, i64 sdt, const void *w, i64 wdt, i64 N,
                         i64 C) {
	GRID_STRIDE(k, N * C) {
		i64 i = k / C, c = k % C;
		st(y, ydt, k, ld<T>(x, xdt, k) * ld<T>(stats, sdt, i) * ld<T>(w, wdt, c));
	}
}

// rms_norm_backward_x: a block per row; the mean of g·xhat in fp64.
template <typename T>
__device__ void rms_norm_backward_x(void *dx, i64 dxdt, const void *dy, i64 dydt, const void *x, i64 xdt, const void *stats,
                                    i64 sdt, const void *w, i64 wdt, i64 N, i64 C) {
	__shared__ double sh[32];
	for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
		T rstd = ld<T>(stats, sdt, i);
		double sgx = 0;
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
			T g = ld<T>(dy, dydt, i * C + c) * ld<T>(w, wdt, c);
			sgx += (double)(g * (ld<T>(x, xdt, i * C + c) * rstd));
		}
		sgx = block_sum(sgx, sh);
		T mgx = (T)(sgx / (double)C);
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
			T xhat = ld<T>(x, xdt, i * C + c) * rstd;
			st(dx, dxdt, i * C + c, rstd * (ld<T>(dy, dydt, i * C + c) * ld<T>(w, wdt, c) - xhat * mgx));
		}
	}
}

// The terms of an RMSNorm gain's gradient, dy[i, c]·xhat[i, c], for
// column_sums.
template <typename T> struct rms_norm_dw_term {
	const void *dy, *x, *stats;
	i64 dydt, xdt, sdt, C;
	__device__ __forceinline__ T operator()(i64 i, i64 c) const {
		return ld<T>(dy, dydt, i * C + c) * (ld<T>(x, xdt, i * C + c) * ld<T>(stats, sdt, i));
	}
};

ENTRY2(rms_norm_stats, (void *stats, i64 sdt, const void *x, i64 xdt, i64 N, i64 C, double eps),
       (stats, sdt, x, xdt, N, C, eps))
ENTRY2(rms_norm,
       (void *y, i64 ydt, const void *x, i64 xdt, const void *stats, i64 sdt, const void *w, i64 wdt, i64 N, i64 C),
       (y, ydt, x, xdt, stats, sdt, w, wdt, N, C))
ENTRY2(rms_norm_backward_x,
       (void *dx, i64 dxdt, const void *dy, i64 dydt, const void *x, i64 xdt, const void *stats, i64 sdt, const void *w,
        i64 wdt, i64 N, i64 C),
       (dx, dxdt, dy, dydt, x, xdt, stats, sdt, w, wdt, N, C))

extern "C" __global__ void __launch_bounds__(1024) rms_norm_backward_w_f32(void *dw, i64 wdt, const void *dy, i64 dydt,
                                                                           const void *x, i64 xdt, const void *stats,
                                                                           i64 sdt, i64 N, i64 C) {
	column_sums<float>(dw, wdt, N, C, rms_norm_dw_term<float>{dy, x, stats, dydt, xdt, sdt, C});
}
extern "C" __global__ void __launch_bounds__(1024) rms_norm_backward_w_f64(void *dw, i64 wdt, const void *dy, i64 dydt,
                                                                           const void *x, i64 xdt, const void *stats,
                                                                           i64 sdt, i64 N, i64 C) {
	column_sums<double>(dw, wdt, N, C, rms_norm_dw_term<double>{dy, x, stats, dydt, xdt, sdt, C});
}
