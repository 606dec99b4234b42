// The GELU family (Kernels.GELU, GELUBackward): cuda/host/gelu.go's.
#pragma once
#include "common.cuh"

// GELU as x·σ(2u), evaluated in fp64 and rounded to the compute type, as
// cuda/host/gelu.go's geluKernel.
#define GELU_K 0.7978845608028654 // sqrt(2/π)
__device__ __forceinline__ double gelu_sigmoid(double x) { return 1.0 / (1.0 + exp(-2.0 * GELU_K * (x + 0.044715 * x * x * x))); }

template <typename T> __device__ void gelu(void *y, i64 ydt, const void *x, i64 xdt, i64 n) {
	GRID_STRIDE(i, n) {
		double xv = (double)ld<T>(x, xdt, i);
		st(y, ydt, i, (T)(xv * gelu_sigmoid(xv)));
	}
}

template <typename T> __device__ void gelu_backward(void *dx, i64 dxdt, const void *dy, i64 dydt, const void *x, i64 xdt, i64 n) {
	GRID_STRIDE(i, n) {
		double xv = (double)ld<T>(x, xdt, i);
		double s = gelu_sigmoid(xv);
		double d = s + 2.0 * xv * s * (1.0 - s) * GELU_K * (1.0 + 3.0 * 0.044715 * xv * xv);
		st(dx, dxdt, i, (T)((double)ld<T>(dy, dydt, i) * d));
	}
}

ENTRY2(gelu, (void *y, i64 ydt, const void *x, i64 xdt, i64 n), (y, ydt, x, xdt, n))
ENTRY2(gelu_backward, (void *dx, i64 dxdt, const void *dy, i64 dydt, const void *x, i64 xdt, i64 n),
       (dx, dxdt, dy, dydt, x, xdt, n))
