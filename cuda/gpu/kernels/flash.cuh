// The flash-attention family (Kernels.FlashAttentionStats, FlashAttentionOut,
// FlashAttentionBackward): cuda/host/flash.go's. A warp takes a row (a query
// row of one head, or a key row of one key and value head); lane l holds the
// head's channels l, l + 32, …, FL_PER of them; every score is the warp's
// fixed-order sum of the lanes' fp64 products, which every lane receives.
// Each output has one writer: no atomics.
#pragma once
#include "common.cuh"

#define FL_PER 8 // channels a lane holds: heads of up to 256 (cuda.FlashHeadDimMax)

// fl_load: the lane's channels of the head row at base (zeros past hd).
template <typename T> __device__ __forceinline__ void fl_load(T r[FL_PER], const void *x, i64 xdt, i64 base, i64 hd, int lane) {
#pragma unroll
	for (int i = 0; i < FL_PER; i++) {
		i64 d = lane + 32 * i;
		r[i] = d < hd ? ld<T>(x, xdt, base + d) : (T)0;
	}
}

// fl_dot: the warp's dot product of the lanes' channels r with the head row
// at base, in fp64.
template <typename T>
__device__ __forceinline__ double fl_dot(const T r[FL_PER], const void *x, i64 xdt, i64 base, i64 hd, int lane) {
	double s = 0;
#pragma unroll
	for (int i = 0; i < FL_PER; i++) {
		i64 d = lane + 32 * i;
		if (d < hd) s += (double)r[i] * (double)ld<T>(x, xdt, base + d);
	}
	return warp_sum(s);
}

// FL_ROWS loops warp w over rows w, w + warps, … of n.
#define FL_ROWS(r, n)                                                                                                  \
	for (i64 r = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < (n);                                   \
	     r += (i64)gridDim.x * (blockDim.x >> 5))

// flash_stats: lse[b, h, t] = log Σ_{s ≤ t} exp(q_t·k_s·scale), the running
// maximum m and sum of exp(sc − m) rescaled when m grows.
template <typename T>
__device__ void flash_stats(void *lse, i64 ldt, const void *qkv, i64 qdt, i64 B, i64 Tn, i64 C, i64 NH, i64 KV) {
	int lane = threadIdx.x & 31;
	i64 hd = C / NH, G = NH / KV, W = C + 2 * KV * hd;
	double scale = 1.0 / sqrt((double)hd);
	FL_ROWS(r, B * NH * Tn) {
		i64 b = r / (NH * Tn), h = (r / Tn) % NH, t = r % Tn, g = h / G;
		T q[FL_PER];
		fl_load<T>(q, qkv, qdt, (b * Tn + t) * W + h * hd, hd, lane);
		double m = neg_inf<double>(), sum = 0;
		for (i64 s = 0; s <= t; s++) {
			double sc = fl_dot<T>(q, qkv, qdt, (b * Tn + s) * W + C + g * hd, hd, lane) * scale;
			if (sc > m) {
				sum *= exp(m - sc);
				m = sc;
			}
			sum += exp(sc - m);
		}
		if (lane == 0) st(lse, ldt, r, (T)(m + log(sum)));
	}
}

// flash_out: y's query head h of row t = Σ_{s ≤ t} exp(q_t·k_s·scale −
// lse)·v_s, summed in fp64.
template <typename T>
__device__ void flash_out(void *y, i64 ydt, const void *qkv, i64 qdt, const void *lse, i64 ldt, i64 B, i64 Tn, i64 C, i64 NH,
                          i64 KV) {
	int lane = threadIdx.x & 31;
	i64 hd = C / NH, G = NH / KV, W = C + 2 * KV * hd;
	double scale = 1.0 / sqrt((double)hd);
	FL_ROWS(r, B * NH * Tn) {
		i64 b = r / (NH * Tn), h = (r / Tn) % NH, t = r % Tn, g = h / G;
		T q[FL_PER];
		fl_load<T>(q, qkv, qdt, (b * Tn + t) * W + h * hd, hd, lane);
		double L = (double)ld<T>(lse, ldt, r), acc[FL_PER];
#pragma unroll
		for (int i = 0; i < FL_PER; i++) acc[i] = 0;
		for (i64 s = 0; s <= t; s++) {
			i64 row = (b * Tn + s) * W;
			double p = exp(fl_dot<T>(q, qkv, qdt, row + C + g * hd, hd, lane) * scale - L);
#pragma unroll
			for (int i = 0; i < FL_PER; i++) {
				i64 d = lane + 32 * i;
				if (d < hd) acc[i] += p * (double)ld<T>(qkv, qdt, row + C + (KV + g) * hd + d);
			}
		}
#pragma unroll
		for (int i = 0; i < FL_PER; i++) {
			i64 d = lane + 32 * i;
			if (d < hd) st(y, ydt, (b * Tn + t) * C + h * hd + d, (T)acc[i]);
		}
	}
}

// flash_backward_d: D[r] = Σ_d dy·y of query row r (rows B·NH·T: b, h, t).
template <typename T>
__device__ void flash_backward_d(void *D, i64 ddt, const void *dy, i64 dydt, const void *y, i64 ydt, i64 rows, i64 Tn, i64 C,
                                 i64 NH) {
	int lane = threadIdx.x & 31;
	i64 hd = C / NH;
	FL_ROWS(r, rows) {
		i64 b = r / (NH * Tn), h = (r / Tn) % NH, t = r % Tn;
		i64 base = (b * Tn + t) * C + h * hd;
		T a[FL_PER];
		fl_load<T>(a, dy, dydt, base, hd, lane);
		double s = fl_dot<T>(a, y, ydt, base, hd, lane);
		if (lane == 0) st(D, ddt, r, (T)s);
	}
}

// flash_backward_dq: query row t of head h: dq = scale·Σ_{s ≤ t} dS·k_s,
// dS = p·(dy_t·v_s − D), p = exp(q_t·k_s·scale − lse).
template <typename T>
__device__ void flash_backward_dq(void *dqkv, i64 dqdt, const void *dy, i64 dydt, const void *qkv, i64 qdt, const void *lse,
                                  i64 ldt, const void *D, i64 ddt, i64 B, i64 Tn, i64 C, i64 NH, i64 KV) {
	int lane = threadIdx.x & 31;
	i64 hd = C / NH, G = NH / KV, W = C + 2 * KV * hd;
	double scale = 1.0 / sqrt((double)hd);
	FL_ROWS(r, B * NH * Tn) {
		i64 b = r / (NH * Tn), h = (r / Tn) % NH, t = r % Tn, g = h / G;
		T q[FL_PER], d[FL_PER];
		fl_load<T>(q, qkv, qdt, (b * Tn + t) * W + h * hd, hd, lane);
		fl_load<T>(d, dy, dydt, (b * Tn + t) * C + h * hd, hd, lane);
		double L = (double)ld<T>(lse, ldt, r), Dr = (double)ld<T>(D, ddt, r), acc[FL_PER];
#pragma unroll
		for (int i = 0; i < FL_PER; i++) acc[i] = 0;
		for (i64 s = 0; s <= t; s++) {
			i64 row = (b * Tn + s) * W;
			double p = exp(fl_dot<T>(q, qkv, qdt, row + C + g * hd, hd, lane) * scale - L);
			double ds = p * (fl_dot<T>(d, qkv, qdt, row + C + (KV + g) * hd, hd, lane) - Dr);
#pragma unroll
			for (int i = 0; i < FL_PER; i++) {
				i64 c = lane + 32 * i;
				if (c < hd) acc[i] += ds * (double)ld<T>(qkv, qdt, row + C + g * hd + c);
			}
		}
#pragma unroll
		for (int i = 0; i < FL_PER; i++) {
			i64 c = lane + 32 * i;
			if (c < hd) st(dqkv, dqdt, (b * Tn + t) * W + h * hd + c, (T)(acc[i] * scale));
		}
	}
}

// flash_backward_dkv: key row s of key and value head g: dk = scale·Σ dS·q_t
// and dv = Σ p·dy_t over the group's query heads h and the rows t ≥ s.
template <typename T>
__device__ void flash_backward_dkv(void *dqkv, i64 dqdt, const void *dy, i64 dydt, const void *qkv, i64 qdt, const void *lse,
                                   i64 ldt, const void *D, i64 ddt, i64 B, i64 Tn, i64 C, i64 NH, i64 KV) {
	int lane = threadIdx.x & 31;
	i64 hd = C / NH, G = NH / KV, W = C + 2 * KV * hd;
	double scale = 1.0 / sqrt((double)hd);
	FL_ROWS(r, B * KV * Tn) {
		i64 b = r / (KV * Tn), g = (r / Tn) % KV, s = r % Tn;
		i64 krow = (b * Tn + s) * W;
		T k[FL_PER], v[FL_PER];
		fl_load<T>(k, qkv, qdt, krow + C + g * hd, hd, lane);
		fl_load<T>(v, qkv, qdt, krow + C + (KV + g) * hd, hd, lane);
		double dk[FL_PER], dv[FL_PER];
#pragma unroll
		for (int i = 0; i < FL_PER; i++) dk[i] = dv[i] = 0;
		for (i64 h = g * G; h < (g + 1) * G; h++) {
			for (i64 t = s; t < Tn; t++) {
				i64 qb = (b * Tn + t) * W + h * hd, yb = (b * Tn + t) * C + h * hd, lr = (b * NH + h) * Tn + t;
				double p = exp(fl_dot<T>(k, qkv, qdt, qb, hd, lane) * scale - (double)ld<T>(lse, ldt, lr));
				double ds = p * (fl_dot<T>(v, dy, dydt, yb, hd, lane) - (double)ld<T>(D, ddt, lr));
#pragma unroll
				for (int i = 0; i < FL_PER; i++) {
					i64 c = lane + 32 * i;
					if (c < hd) {
						dk[i] += ds * (double)ld<T>(qkv, qdt, qb + c);
						dv[i] += p * (double)ld<T>(dy, dydt, yb + c);
					}
				}
			}
		}
#pragma unroll
		for (int i = 0; i < FL_PER; i++) {
			i64 c = lane + 32 * i;
			if (c < hd) {
				st(dqkv, dqdt, krow + C + g * hd + c, (T)(dk[i] * scale));
				st(dqkv, dqdt, krow + C + (KV + g) * hd + c, (T)dv[i]);
			}
		}
	}
}

ENTRY2(flash_stats, (void *lse, i64 ldt, const void *qkv, i64 qdt, i64 B, i64 Tn, i64 C, i64 NH, i64 KV),
       (lse, ldt, qkv, qdt, B, Tn, C, NH, KV))
ENTRY2(flash_out,
       (void *y, i64 ydt, const void *qkv, i64 qdt, const void *lse, i64 ldt, i64 B, i64 Tn, i64 C, i64 NH, i64 KV),
       (y, ydt, qkv, qdt, lse, ldt, B, Tn, C, NH, KV))
ENTRY2(flash_backward_d, (void *D, i64 ddt, const void *dy, i64 dydt, const void *y, i64 ydt, i64 rows, i64 Tn, i64 C, i64 NH),
       (D, ddt, dy, dydt, y, ydt, rows, Tn, C, NH))
ENTRY2(flash_backward_dq,
       (void *dqkv, i64 dqdt, const void *dy, i64 dydt, const void *qkv, i64 qdt, const void *lse, i64 ldt, const void *D,
        i64 ddt, i64 B, i64 Tn, i64 C, i64 NH, i64 KV),
       (dqkv, dqdt, dy, dydt, qkv, qdt, lse, ldt, D, ddt, B, Tn, C, NH, KV))
ENTRY2(flash_backward_dkv,
       (void *dqkv, i64 dqdt, const void *dy, i64 dydt, const void *qkv, i64 qdt, const void *lse, i64 ldt, const void *D,
        i64 ddt, i64 B, i64 Tn, i64 C, i64 NH, i64 KV),
       (dqkv, dqdt, dy, dydt, qkv, qdt, lse, ldt, D, ddt, B, Tn, C, NH, KV))
