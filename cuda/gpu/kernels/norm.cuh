// The norm family (Kernels.NormStats, Norm, NormBackwardX, NormBackwardW),
// both variants: cuda/host/norm.go's loops. kind is cuda.Norm: NORM_LAYER,
// the layer norm (stats (mean, rstd) a row, a bias), or NORM_RMS, RMSNorm
// (stats rstd a row, the mean taken as 0, no bias). kind is the same for
// every thread of a launch, so the branches on it never diverge.
#pragma once
#include "common.cuh"

enum { NORM_LAYER = 0, NORM_RMS = 1 };

// norm_row_stats reads row i's mean and rstd; RMSNorm's mean is 0.
template <typename T>
__device__ __forceinline__ void norm_row_stats(const void *stats, i64 sdt, i64 kind, i64 i, T *mean, T *rstd) {
	if (kind == NORM_RMS) {
		*mean = (T)0;
		*rstd = ld<T>(stats, sdt, i);
	} else {
		*mean = ld<T>(stats, sdt, 2 * i);
		*rstd = ld<T>(stats, sdt, 2 * i + 1);
	}
}

// norm_stats: a block per row; the mean (a layer norm's) and the squared
// deviations from it (from 0: RMSNorm's Σ x²) in fp64, as the host.
template <typename T>
__device__ void norm_stats(i64 kind, void *stats, i64 sdt, const void *x, i64 xdt, i64 N, i64 C, double eps) {
	__shared__ double sh[32];
	for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
		double mean = 0;
		if (kind != NORM_RMS) {
			double s = 0;
			for (i64 c = threadIdx.x; c < C; c += blockDim.x) s += (double)ld<T>(x, xdt, i * C + c);
			mean = block_sum(s, sh) / (double)C;
		}
		double ss = 0;
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
			double d = (double)ld<T>(x, xdt, i * C + c) - mean;
			ss += d * d;
		}
		ss = block_sum(ss, sh);
		if (threadIdx.x == 0) {
			T rstd = (T)(1.0 / sqrt(ss / (double)C + eps));
			if (kind == NORM_RMS) {
				st(stats, sdt, i, rstd);
			} else {
				st(stats, sdt, 2 * i, (T)mean);
				st(stats, sdt, 2 * i + 1, rstd);
			}
		}
	}
}

template <typename T>
__device__ void norm(i64 kind, void *y, i64 ydt, const void *x, i64 xdt, const void *stats, i64 sdt, const void *w, i64 wdt,
                     const void *b, i64 bdt, i64 N, i64 C) {
	GRID_STRIDE(k, N * C) {
		i64 i = k / C, c = k % C;
		T mean, rstd;
		norm_row_stats<T>(stats, sdt, kind, i, &mean, &rstd);
		T v = (ld<T>(x, xdt, k) - mean) * rstd * ld<T>(w, wdt, c);
		if (kind != NORM_RMS) v += ld<T>(b, bdt, c);
		st(y, ydt, k, v);
	}
}

// norm_backward_x: a block per row; the means in fp64. RMSNorm has no
// bias, so no mean_c(g) term.
template <typename T>
__device__ void norm_backward_x(i64 kind, void *dx, i64 dxdt, const void *dy, i64 dydt, const void *x, i64 xdt, const void *stats,
                                i64 sdt, const void *w, i64 wdt, i64 N, i64 C) {
	__shared__ double sh[32];
	for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
		T mean, rstd;
		norm_row_stats<T>(stats, sdt, kind, i, &mean, &rstd);
		double sg = 0, sgx = 0;
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
			T g = ld<T>(dy, dydt, i * C + c) * ld<T>(w, wdt, c);
			sg += (double)g;
			sgx += (double)(g * (ld<T>(x, xdt, i * C + c) - mean) * rstd);
		}
		sg = block_sum(sg, sh);
		sgx = block_sum(sgx, sh);
		T mg = kind == NORM_RMS ? (T)0 : (T)(sg / (double)C), mgx = (T)(sgx / (double)C);
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
			T xhat = (ld<T>(x, xdt, i * C + c) - mean) * rstd;
			st(dx, dxdt, i * C + c, rstd * (ld<T>(dy, dydt, i * C + c) * ld<T>(w, wdt, c) - mg - xhat * mgx));
		}
	}
}

// The terms of a norm gain's gradient, dy[i, c]·xhat[i, c], for
// column_sums.
template <typename T> struct norm_dw_term {
	const void *dy, *x, *stats;
	i64 dydt, xdt, sdt, C, kind;
	__device__ __forceinline__ T operator()(i64 i, i64 c) const {
		T mean, rstd;
		norm_row_stats<T>(stats, sdt, kind, i, &mean, &rstd);
		return ld<T>(dy, dydt, i * C + c) * ((ld<T>(x, xdt, i * C + c) - mean) * rstd);
	}
};

ENTRY2(norm_stats, (i64 kind, void *stats, i64 sdt, const void *x, i64 xdt, i64 N, i64 C, double eps),
       (kind, stats, sdt, x, xdt, N, C, eps))
ENTRY2(norm,
       (i64 kind, void *y, i64 ydt, const void *x, i64 xdt, const void *stats, i64 sdt, const void *w, i64 wdt, const void *b,
        i64 bdt, i64 N, i64 C),
       (kind, y, ydt, x, xdt, stats, sdt, w, wdt, b, bdt, N, C))
ENTRY2(norm_backward_x,
       (i64 kind, void *dx, i64 dxdt, const void *dy, i64 dydt, const void *x, i64 xdt, const void *stats, i64 sdt,
        const void *w, i64 wdt, i64 N, i64 C),
       (kind, dx, dxdt, dy, dydt, x, xdt, stats, sdt, w, wdt, N, C))

extern "C" __global__ void __launch_bounds__(1024) norm_backward_w_f32(i64 kind, void *dw, i64 wdt, const void *dy, i64 dydt,
                                                                     const void *x, i64 xdt, const void *stats, i64 sdt, i64 N,
                                                                     i64 C) {
	column_sums<float>(dw, wdt, N, C, norm_dw_term<float>{dy, x, stats, dydt, xdt, sdt, C, kind});
}
extern "C" __global__ void __launch_bounds__(1024) norm_backward_w_f64(i64 kind, void *dw, i64 wdt, const void *dy, i64 dydt,
                                                                     const void *x, i64 xdt, const void *stats, i64 sdt, i64 N,
                                                                     i64 C) {
	column_sums<double>(dw, wdt, N, C, norm_dw_term<double>{dy, x, stats, dydt, xdt, sdt, C, kind});
}
