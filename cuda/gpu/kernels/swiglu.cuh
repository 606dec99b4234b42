// The SwiGLU family (Kernels.SwiGLU, SwiGLUBackward): cuda/host/swiglu.go's.
#pragma once
#include "common.cuh"

// Each row of x is [g (F) | u (F)]; y = silu(g)·u, silu(g) = g·σ(g),
// evaluated in fp64 and rounded to the compute type, as cuda/host/swiglu.go.
__device__ __forceinline__ double swiglu_sigmoid(double g) { return 1.0 / (1.0 + exp(-g)); }

template <typename T> __device__ void swiglu(void *y, i64 ydt, const void *x, i64 xdt, i64 N, i64 F) {
	GRID_STRIDE(k, N * F) {
		i64 i = k / F, j = k - i * F;
		double g = (double)ld<T>(x, xdt, 2 * F * i + j), u = (double)ld<T>(x, xdt, 2 * F * i + F + j);
		st(y, ydt, k, (T)(g * swiglu_sigmoid(g) * u));
	}
}

// The gate's gradient dy·u·σ(g)·(1 + g·(1 - σ(g))), the projection's
// dy·g·σ(g).
template <typename T>
__device__ void swiglu_backward(void *dx, i64 dxdt, const void *dy, i64 dydt, const void *x, i64 xdt, i64 N, i64 F) {
	GRID_STRIDE(k, N * F) {
		i64 i = k / F, j = k - i * F;
		double g = (double)ld<T>(x, xdt, 2 * F * i + j), u = (double)ld<T>(x, xdt, 2 * F * i + F + j);
		double s = swiglu_sigmoid(g), d = (double)ld<T>(dy, dydt, k);
		st(dx, dxdt, 2 * F * i + j, (T)(d * u * s * (1.0 + g * (1.0 - s))));
		st(dx, dxdt, 2 * F * i + F + j, (T)(d * g * s));
	}
}

ENTRY2(swiglu, (void *y, i64 ydt, const void *x, i64 xdt, i64 N, i64 F), (y, ydt, x, xdt, N, F))
ENTRY2(swiglu_backward, (void *dx, i64 dxdt, const void *dy, i64 dydt, const void *x, i64 xdt, i64 N, i64 F),
       (dx, dxdt, dy, dydt, x, xdt, N, F))
