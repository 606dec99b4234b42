// The elementwise family (Kernels.Fill, Cast, Add, NonFinite):
// cuda/host/elementwise.go's loops, one thread an element.
#pragma once
#include "common.cuh"

extern "C" __global__ void fill(void *dst, i64 dt, i64 n, double v) {
	GRID_STRIDE(i, n) { st_f(dst, dt, i, (float)v); }
}

// cast widens exactly and rounds once, whatever the two types (Host.Cast).
extern "C" __global__ void cast(void *dst, i64 ddt, const void *src, i64 sdt, i64 n) {
	GRID_STRIDE(i, n) { st_d(dst, ddt, i, ld_d(src, sdt, i)); }
}

template <typename T> __device__ void add(void *y, i64 ydt, const void *a, i64 adt, const void *b, i64 bdt, i64 n) {
	GRID_STRIDE(i, n) { st(y, ydt, i, ld<T>(a, adt, i) + ld<T>(b, bdt, i)); }
}

// non_finite sets *flag when x holds an Inf or a NaN (an exponent of all
// ones); the flag is only ever set, so no atomics are needed.
extern "C" __global__ void non_finite(const void *x, i64 dt, i64 n, int *flag) {
	GRID_STRIDE(i, n) {
		bool bad;
		switch (dt) {
		case DT_F32: bad = (((const unsigned *)x)[i] & 0x7f800000u) == 0x7f800000u; break;
		case DT_F16: bad = (((const unsigned short *)x)[i] & 0x7c00u) == 0x7c00u; break;
		case DT_BF16: bad = (((const unsigned short *)x)[i] & 0x7f80u) == 0x7f80u; break;
		default: bad = (((const unsigned long long *)x)[i] & 0x7ff0000000000000ULL) == 0x7ff0000000000000ULL; break;
		}
		if (bad) *flag = 1;
	}
}

ENTRY2(add, (void *y, i64 ydt, const void *a, i64 adt, const void *b, i64 bdt, i64 n), (y, ydt, a, adt, b, bdt, n))
