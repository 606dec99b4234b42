// The layer-norm family (Kernels.LayerNormStats, LayerNorm,
// LayerNormBackwardX, LayerNormBackwardW): cuda/host/layernorm.go's.
#pragma once
#include "common.cuh"

// layer_norm_stats: a block per row; mean and the biased variance from two
// passes in fp64, as the host.
template <typename T>
__device__ void layer_norm_stats(void *stats, i64 sdt, const void *x, i64 xdt, i64 N, i64 C, double eps) {
	__shared__ double sh[32];
	for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
		double s = 0;
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) s += (double)ld<T>(x, xdt, i * C + c);
		double mean = block_sum(s, sh) / (double)C;
		double ss = 0;
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
			double d = (double)ld<T>(x, xdt, i * C + c) - mean;
			ss += d * d;
		}
		ss = block_sum(ss, sh);
		if (threadIdx.x == 0) {
			st(stats, sdt, 2 * i, (T)mean);
			st(stats, sdt, 2 * i + 1, (T)(1.0 / sqrt(ss / (double)C + eps)));
		}
	}
}

template <typename T>
__device__ void layer_norm(void *y, i64 ydt, const void *x, i64 xdt, const void *stats, i64 sdt, const void *w, i64 wdt,
                          const void *b, i64 bdt, i64 N, i64 C) {
	GRID_STRIDE(k, N * C) {
		i64 i = k / C, c = k % C;
		T mean = ld<T>(stats, sdt, 2 * i), rstd = ld<T>(stats, sdt, 2 * i + 1);
		st(y, ydt, k, (ld<T>(x, xdt, k) - mean) * rstd * ld<T>(w, wdt, c) + ld<T>(b, bdt, c));
	}
}

// layer_norm_backward_x: a block per row; the two means in fp64.
template <typename T>
__device__ void layer_norm_backward_x(void *dx, i64 dxdt, const void *dy, i64 dydt, const void *x, i64 xdt, const void *stats,
                                i64 sdt, const void *w, i64 wdt, i64 N, i64 C) {
	__shared__ double sh[32];
	for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
		T mean = ld<T>(stats, sdt, 2 * i), rstd = ld<T>(stats, sdt, 2 * i + 1);
		double sg = 0, sgx = 0;
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
			T g = ld<T>(dy, dydt, i * C + c) * ld<T>(w, wdt, c);
			sg += (double)g;
			sgx += (double)(g * (ld<T>(x, xdt, i * C + c) - mean) * rstd);
		}
		sg = block_sum(sg, sh);
		sgx = block_sum(sgx, sh);
		T mg = (T)(sg / (double)C), mgx = (T)(sgx / (double)C);
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
			T xhat = (ld<T>(x, xdt, i * C + c) - mean) * rstd;
			st(dx, dxdt, i * C + c, rstd * (ld<T>(dy, dydt, i * C + c) * ld<T>(w, wdt, c) - mg - xhat * mgx));
		}
	}
}

// The terms of a layer norm gain's gradient, dy[i, c]·xhat[i, c], for
// column_sums.
template <typename T> struct layer_norm_dw_term {
	const void *dy, *x, *stats;
	i64 dydt, xdt, sdt, C;
	__device__ __forceinline__ T operator()(i64 i, i64 c) const {
		T mean = ld<T>(stats, sdt, 2 * i), rstd = ld<T>(stats, sdt, 2 * i + 1);
		return ld<T>(dy, dydt, i * C + c) * ((ld<T>(x, xdt, i * C + c) - mean) * rstd);
	}
};

ENTRY2(layer_norm_stats, (void *stats, i64 sdt, const void *x, i64 xdt, i64 N, i64 C, double eps),
       (stats, sdt, x, xdt, N, C, eps))
ENTRY2(layer_norm,
       (void *y, i64 ydt, const void *x, i64 xdt, const void *stats, i64 sdt, const void *w, i64 wdt, const void *b,
        i64 bdt, i64 N, i64 C),
       (y, ydt, x, xdt, stats, sdt, w, wdt, b, bdt, N, C))
ENTRY2(layer_norm_backward_x,
       (void *dx, i64 dxdt, const void *dy, i64 dydt, const void *x, i64 xdt, const void *stats, i64 sdt, const void *w,
        i64 wdt, i64 N, i64 C),
       (dx, dxdt, dy, dydt, x, xdt, stats, sdt, w, wdt, N, C))

extern "C" __global__ void __launch_bounds__(1024) layer_norm_backward_w_f32(void *dw, i64 wdt, const void *dy, i64 dydt, const void *x, i64 xdt,
                                               const void *stats, i64 sdt, i64 N, i64 C) {
	column_sums<float>(dw, wdt, N, C, layer_norm_dw_term<float>{dy, x, stats, dydt, xdt, sdt, C});
}
extern "C" __global__ void __launch_bounds__(1024) layer_norm_backward_w_f64(void *dw, i64 wdt, const void *dy, i64 dydt, const void *x, i64 xdt,
                                               const void *stats, i64 sdt, i64 N, i64 C) {
	column_sums<double>(dw, wdt, N, C, layer_norm_dw_term<double>{dy, x, stats, dydt, xdt, sdt, C});
}
