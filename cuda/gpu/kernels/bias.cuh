// The bias family (Kernels.AddBias, SumRows): cuda/host/bias.go's.
#pragma once
#include "common.cuh"

template <typename T> __device__ void add_bias(void *y, i64 ydt, const void *b, i64 bdt, i64 N, i64 C) {
	GRID_STRIDE(i, N * C) { st(y, ydt, i, ld<T>(y, ydt, i) + ld<T>(b, bdt, i % C)); }
}

ENTRY2(add_bias, (void *y, i64 ydt, const void *b, i64 bdt, i64 N, i64 C), (y, ydt, b, bdt, N, C))

// The terms of a bias gradient, src[i, c] itself, for column_sums.
template <typename T> struct sum_rows_term {
	const void *src;
	i64 sdt, C;
	__device__ __forceinline__ T operator()(i64 i, i64 c) const { return ld<T>(src, sdt, i * C + c); }
};

extern "C" __global__ void __launch_bounds__(1024) sum_rows_f32(void *dst, i64 ddt, const void *src, i64 sdt, i64 N, i64 C) {
	column_sums<float>(dst, ddt, N, C, sum_rows_term<float>{src, sdt, C});
}
extern "C" __global__ void __launch_bounds__(1024) sum_rows_f64(void *dst, i64 ddt, const void *src, i64 sdt, i64 N, i64 C) {
	column_sums<double>(dst, ddt, N, C, sum_rows_term<double>{src, sdt, C});
}
