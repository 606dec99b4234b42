// The rotary family (Kernels.RoPE, RoPEBackward): cuda/host/rope.go's.
#pragma once
#include "common.cuh"

// Rows [q | k | v] of 3C, NH heads of hs = C/NH: q's and k's channel pairs
// (i, i + hs/2) of every head rotated by sign·t·theta^(-2i/hs), t = row mod
// T, in fp64, v copied, as cuda/host/rope.go's ropeKernel.
template <typename T>
__device__ void rope_rotate(void *y, i64 ydt, const void *x, i64 xdt, i64 N, i64 Tn, i64 C, i64 NH, double theta, double sign) {
	i64 hs = C / NH, half = hs / 2;
	GRID_STRIDE(k, N * C) { // one pair of q or k a k: N rows × 2 parts × NH heads × half
		i64 r = k / C, rem = k - r * C;
		i64 part = rem / (C / 2), within = rem - part * (C / 2);
		i64 hd = within / half, i = within - hd * half;
		i64 base = r * 3 * C + part * C + hd * hs;
		double ang = (double)(r % Tn) * pow(theta, -2.0 * (double)i / (double)hs);
		double s, c;
		sincos(ang, &s, &c);
		s *= sign;
		double a = (double)ld<T>(x, xdt, base + i), b = (double)ld<T>(x, xdt, base + i + half);
		st(y, ydt, base + i, (T)(a * c - b * s));
		st(y, ydt, base + i + half, (T)(b * c + a * s));
	}
	GRID_STRIDE(k, N * C) { // v
		i64 r = k / C, j = k - r * C;
		st(y, ydt, r * 3 * C + 2 * C + j, ld<T>(x, xdt, r * 3 * C + 2 * C + j));
	}
}

template <typename T> __device__ void rope(void *y, i64 ydt, const void *x, i64 xdt, i64 N, i64 Tn, i64 C, i64 NH, double theta) {
	rope_rotate<T>(y, ydt, x, xdt, N, Tn, C, NH, theta, 1.0);
}

template <typename T>
__device__ void rope_backward(void *dx, i64 dxdt, const void *dy, i64 dydt, i64 N, i64 Tn, i64 C, i64 NH, double theta) {
	rope_rotate<T>(dx, dxdt, dy, dydt, N, Tn, C, NH, theta, -1.0);
}

ENTRY2(rope, (void *y, i64 ydt, const void *x, i64 xdt, i64 N, i64 Tn, i64 C, i64 NH, double theta),
       (y, ydt, x, xdt, N, Tn, C, NH, theta))
ENTRY2(rope_backward, (void *dx, i64 dxdt, const void *dy, i64 dydt, i64 N, i64 Tn, i64 C, i64 NH, double theta),
       (dx, dxdt, dy, dydt, N, Tn, C, NH, theta))
