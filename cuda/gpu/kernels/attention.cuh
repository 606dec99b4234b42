// The attention family (Kernels.AttentionProbs; AttentionOut and
// AttentionBackward are products on cuBLAS or gemm_generic around
// attention_backward_softmax and attention_kv_store): cuda/host/attention.go's.
#pragma once
#include "common.cuh"

// attention_probs: p (B, NH, T, T) = causal softmax(q·kᵀ·scale), query
// head h with key head h/(NH/KV) of rows W = C + 2·KV·hd. A block of
// 256 threads takes 32 query rows of one head: warp w the rows 4w..4w+3,
// lane l the key column l of each 32-wide key tile. Scores are computed in
// the compute type over head-dimension chunks of 64 staged in shared memory
// (fixed order), so both passes see the same scores. Pass 1 keeps each
// row's running maximum and the fp64 sum of exp(s - max), rescaled when the
// maximum grows; pass 2 writes p = (e rounded to T)·(1/sum), as the host's
// causalSoftmax, and exact zeros after the diagonal.
#define AP_ROWS 32
#define AP_DC 64
template <typename T>
__device__ __forceinline__ void ap_scores(T s[4], T (*qs)[AP_DC + 1], T (*ks)[AP_DC + 1], const void *qkv, i64 qdt, i64 b,
                                          i64 h, i64 g, i64 t0, i64 kt, i64 Tn, i64 C, i64 W, i64 hd) {
	int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
#pragma unroll
	for (int r = 0; r < 4; r++) s[r] = 0;
	for (i64 d0 = 0; d0 < hd; d0 += AP_DC) {
		for (int k = tid; k < AP_ROWS * AP_DC; k += blockDim.x) {
			int r = k / AP_DC, d = k % AP_DC;
			i64 tq = t0 + r, tk = kt * 32 + r;
			bool dok = d0 + d < hd;
			qs[r][d] = (tq < Tn && dok) ? ld<T>(qkv, qdt, ((b * Tn + tq) * W) + h * hd + d0 + d) : (T)0;
			ks[r][d] = (tk < Tn && dok) ? ld<T>(qkv, qdt, ((b * Tn + tk) * W) + C + g * hd + d0 + d) : (T)0;
		}
		__syncthreads();
		int dc = (int)min((i64)AP_DC, hd - d0);
		for (int d = 0; d < dc; d++) {
			T kv = ks[lane][d];
#pragma unroll
			for (int r = 0; r < 4; r++) s[r] += qs[4 * w + r][d] * kv;
		}
		__syncthreads();
	}
}

template <typename T>
__device__ void attention_probs(void *p, i64 pdt, const void *qkv, i64 qdt, i64 B, i64 Tn, i64 C, i64 NH, i64 KV) {
	__shared__ T qs[AP_ROWS][AP_DC + 1];
	__shared__ T ks[32][AP_DC + 1];
	i64 h = blockIdx.y, b = blockIdx.z, t0 = (i64)blockIdx.x * AP_ROWS;
	i64 hd = C / NH, g = h / (NH / KV), W = C + 2 * KV * hd;
	int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
	T scale = (T)(1.0 / sqrt((double)hd));
	T m[4];
	double sum[4];
#pragma unroll
	for (int r = 0; r < 4; r++) {
		m[r] = neg_inf<T>();
		sum[r] = 0;
	}
	i64 last = min(t0 + AP_ROWS - 1, Tn - 1); // the block's last query row
	i64 ntiles = last / 32 + 1;               // key tiles up to the diagonal
	T s[4];
	for (i64 kt = 0; kt < ntiles; kt++) {
		ap_scores<T>(s, qs, ks, qkv, qdt, b, h, g, t0, kt, Tn, C, W, hd);
		i64 j = kt * 32 + lane;
#pragma unroll
		for (int r = 0; r < 4; r++) {
			i64 t = t0 + 4 * w + r;
			bool valid = t < Tn && j <= t;
			T sc = s[r] * scale;
			T tm = warp_max(valid ? sc : neg_inf<T>());
			if (tm > m[r]) {
				sum[r] *= exp((double)m[r] - (double)tm);
				m[r] = tm;
			}
			double e = valid ? exp((double)sc - (double)m[r]) : 0.0;
			sum[r] += warp_sum(e);
		}
	}
	i64 all = (Tn + 31) / 32;
	for (i64 kt = 0; kt < all; kt++) {
		if (kt < ntiles) ap_scores<T>(s, qs, ks, qkv, qdt, b, h, g, t0, kt, Tn, C, W, hd);
		i64 j = kt * 32 + lane;
#pragma unroll
		for (int r = 0; r < 4; r++) {
			i64 t = t0 + 4 * w + r;
			if (t >= Tn || j >= Tn) continue;
			T pv = 0;
			if (kt < ntiles && j <= t) {
				T e = (T)exp((double)(s[r] * scale) - (double)m[r]);
				pv = (T)((double)e * (1.0 / sum[r]));
			}
			st(p, pdt, ((b * NH + h) * Tn + t) * Tn + j, pv);
		}
	}
}

// attention_backward_softmax: for one batch element, in place on the scratch
// that holds dP (NH·T rows of T): dS = P ⊙ (dP - rowsum(P ⊙ dP))·scale for
// j ≤ t, exact zeros after; a warp per row, the dot in fp64.
template <typename T>
__device__ void attention_backward_softmax(void *ds, i64 sdt, const void *p, i64 pdt, i64 rows, i64 Tn, double scale) {
	int lane = threadIdx.x & 31;
	i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
	for (i64 r = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); r < rows; r += warps) {
		i64 t = r % Tn, base = r * Tn;
		double dot = 0;
		for (i64 j = lane; j <= t; j += 32) dot += (double)ld<T>(p, pdt, base + j) * (double)ld<T>(ds, sdt, base + j);
		dot = warp_sum(dot);
		for (i64 j = lane; j < Tn; j += 32) {
			T v = 0;
			if (j <= t) v = (T)((double)ld<T>(p, pdt, base + j) * ((double)ld<T>(ds, sdt, base + j) - dot) * scale);
			st(ds, sdt, base + j, v);
		}
	}
}

// attention_kv_store: acc (rows of n, a group's summed key or value
// gradients in the scratch's type) rounded once into dqkv's rows of W at
// column off, as the host rounds its compute type's sums to the storage.
template <typename T>
__device__ void attention_kv_store(void *dqkv, i64 ddt, const void *acc, i64 adt, i64 rows, i64 n, i64 W, i64 off) {
	GRID_STRIDE(k, rows * n) {
		i64 r = k / n, c = k - r * n;
		st(dqkv, ddt, r * W + off + c, ld<T>(acc, adt, k));
	}
}

ENTRY2(attention_probs, (void *p, i64 pdt, const void *qkv, i64 qdt, i64 B, i64 Tn, i64 C, i64 NH, i64 KV),
       (p, pdt, qkv, qdt, B, Tn, C, NH, KV))
ENTRY2(attention_backward_softmax, (void *ds, i64 sdt, const void *p, i64 pdt, i64 rows, i64 Tn, double scale),
       (ds, sdt, p, pdt, rows, Tn, scale))
ENTRY2(attention_kv_store, (void *dqkv, i64 ddt, const void *acc, i64 adt, i64 rows, i64 n, i64 W, i64 off),
       (dqkv, ddt, acc, adt, rows, n, W, off))
