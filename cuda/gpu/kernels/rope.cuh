// The rotary family (Kernels.RoPE, RoPEBackward): cuda/host/rope.go's.
#pragma once
#include "common.cuh"

// Rows [q | k | v] of W = C + 2·KV·hs: NH query heads and KV key and value
// heads of hs = C/NH channels, q's and k's heads one after the other in
// the first R = (NH + KV)·hs channels. Their channel pairs (i, i + hs/2)
// rotated by sign·t·theta^(-2i/hs), t = row mod T, in fp64, v copied, as
// cuda/host/rope.go's ropeKernel.
template <typename T>
__device__ void rope_rotate(void *y, i64 ydt, const void *x, i64 xdt, i64 N, i64 Tn, i64 C, i64 NH, i64 KV, double theta,
                            double sign) {
	i64 hs = C / NH, half = hs / 2, R = (NH + KV) * hs, W = R + KV * hs;
	i64 pairs = R / 2; // a row's
	GRID_STRIDE(k, N * pairs) { // one pair of q or k a k: N rows × (NH + KV) heads × half
		i64 r = k / pairs, rem = k - r * pairs;
		i64 hd = rem / half, i = rem - hd * half;
		i64 base = r * W + hd * hs;
		double ang = (double)(r % Tn) * pow(theta, -2.0 * (double)i / (double)hs);
		double s, c;
		sincos(ang, &s, &c);
		s *= sign;
		double a = (double)ld<T>(x, xdt, base + i), b = (double)ld<T>(x, xdt, base + i + half);
		st(y, ydt, base + i, (T)(a * c - b * s));
		st(y, ydt, base + i + half, (T)(b * c + a * s));
	}
	i64 vw = KV * hs;
	GRID_STRIDE(k, N * vw) { // v
		i64 r = k / vw, j = k - r * vw;
		st(y, ydt, r * W + R + j, ld<T>(x, xdt, r * W + R + j));
	}
}

template <typename T>
__device__ void rope(void *y, i64 ydt, const void *x, i64 xdt, i64 N, i64 Tn, i64 C, i64 NH, i64 KV, double theta) {
	rope_rotate<T>(y, ydt, x, xdt, N, Tn, C, NH, KV, theta, 1.0);
}

template <typename T>
__device__ void rope_backward(void *dx, i64 dxdt, const void *dy, i64 dydt, i64 N, i64 Tn, i64 C, i64 NH, i64 KV, double theta) {
	rope_rotate<T>(dx, dxdt, dy, dydt, N, Tn, C, NH, KV, theta, -1.0);
}

ENTRY2(rope, (void *y, i64 ydt, const void *x, i64 xdt, i64 N, i64 Tn, i64 C, i64 NH, i64 KV, double theta),
       (y, ydt, x, xdt, N, Tn, C, NH, KV, theta))
ENTRY2(rope_backward, (void *dx, i64 dxdt, const void *dy, i64 dydt, i64 N, i64 Tn, i64 C, i64 NH, i64 KV, double theta),
       (dx, dxdt, dy, dydt, N, Tn, C, NH, KV, theta))
