// The cross-entropy family (Kernels.CrossEntropy, CrossEntropyBackward):
// cuda/host/crossentropy.go's.
#pragma once
#include "common.cuh"

// cross_entropy_rows: a block per row; losses[i] = log Σ exp(v - max) + max
// - v[target], the sum in fp64.
template <typename T>
__device__ void cross_entropy_rows(void *losses, i64 ldt, const void *logits, i64 gdt, const int *targets, i64 N, i64 V,
                                   int *status) {
	__shared__ double sh[32];
	__shared__ T shm[32];
	for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
		int tg = targets[i];
		if (tg < 0 || tg >= V) {
			if (threadIdx.x == 0) bad_id(status, K_CROSS_ENTROPY, i, tg);
			continue;
		}
		T mx = neg_inf<T>();
		for (i64 j = threadIdx.x; j < V; j += blockDim.x) mx = max(mx, ld<T>(logits, gdt, i * V + j));
		double m = (double)block_max(mx, shm);
		double s = 0;
		for (i64 j = threadIdx.x; j < V; j += blockDim.x) s += exp((double)ld<T>(logits, gdt, i * V + j) - m);
		s = block_sum(s, sh);
		if (threadIdx.x == 0) st(losses, ldt, i, (T)(log(s) + m - (double)ld<T>(logits, gdt, i * V + tg)));
	}
}

// cross_entropy_mean: one block; loss = Σ losses / N in fp64.
template <typename T> __device__ void cross_entropy_mean(void *loss, i64 ldt, const void *losses, i64 sdt, i64 N) {
	__shared__ double sh[32];
	double s = 0;
	for (i64 i = threadIdx.x; i < N; i += blockDim.x) s += (double)ld<T>(losses, sdt, i);
	s = block_sum(s, sh);
	if (threadIdx.x == 0) st(loss, ldt, 0, (T)(s / (double)N));
}

// cross_entropy_backward: a block per row; dlogits may be logits itself: every
// read of the row (max, sum, the target's exponential) happens before the
// block's barrier, and after it each thread reads an element just before
// writing it.
template <typename T>
__device__ void cross_entropy_backward(void *dlogits, i64 ddt, const void *dloss, i64 lsdt, const void *logits, i64 gdt,
                                  const int *targets, i64 N, i64 V, int *status) {
	__shared__ double sh[32];
	__shared__ T shm[32];
	double g = ld_d(dloss, lsdt, 0) / (double)N;
	for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
		int tg = targets[i];
		if (tg < 0 || tg >= V) {
			if (threadIdx.x == 0) bad_id(status, K_CROSS_ENTROPY_BWD, i, tg);
			continue;
		}
		T mx = neg_inf<T>();
		for (i64 j = threadIdx.x; j < V; j += blockDim.x) mx = max(mx, ld<T>(logits, gdt, i * V + j));
		double m = (double)block_max(mx, shm);
		double et = exp((double)ld<T>(logits, gdt, i * V + tg) - m);
		double s = 0;
		for (i64 j = threadIdx.x; j < V; j += blockDim.x) s += exp((double)ld<T>(logits, gdt, i * V + j) - m);
		s = block_sum(s, sh); // ends with every thread past a barrier: all reads done
		__syncthreads();
		double scale = g / s;
		for (i64 j = threadIdx.x; j < V; j += blockDim.x) {
			T e = (T)exp((double)ld<T>(logits, gdt, i * V + j) - m);
			T v = j == tg ? (T)((et / s - 1.0) * g) : (T)((double)e * scale);
			st(dlogits, ddt, i * V + j, v);
		}
		__syncthreads(); // the next row's reads come after this row's writes
	}
}

// The vocabulary-parallel cross entropy: a rank's (N, V) part of the logits,
// the ids lo .. lo+V-1 of a vocabulary of Vt; stats holds the rows' maxima,
// their sums of exponentials and their targets' logits, N each, which the
// ranks reduce between the steps (cuda/host/crossentropy.go's).

// cross_entropy_part_max: a block per row; stats[i] = the row's largest logit.
template <typename T>
__device__ void cross_entropy_part_max(void *stats, i64 sdt, const void *logits, i64 gdt, i64 N, i64 V) {
	__shared__ T shm[32];
	for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
		T mx = neg_inf<T>();
		for (i64 j = threadIdx.x; j < V; j += blockDim.x) mx = max(mx, ld<T>(logits, gdt, i * V + j));
		mx = block_max(mx, shm);
		if (threadIdx.x == 0) st(stats, sdt, i, mx);
	}
}

// cross_entropy_part_sums: a block per row; stats[N+i] = Σ exp(v - stats[i])
// in fp64, stats[2N+i] = the target's logit when the part holds it, else 0.
template <typename T>
__device__ void cross_entropy_part_sums(void *stats, i64 sdt, const void *logits, i64 gdt, const int *targets, i64 N,
                                        i64 V, i64 Vt, i64 lo, int *status) {
	__shared__ double sh[32];
	for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
		int tg = targets[i];
		if (tg < 0 || tg >= Vt) {
			if (threadIdx.x == 0) bad_id(status, K_CROSS_ENTROPY_PART_SUMS, i, tg);
			continue;
		}
		double m = ld_d(stats, sdt, i);
		double s = 0;
		for (i64 j = threadIdx.x; j < V; j += blockDim.x) s += exp((double)ld<T>(logits, gdt, i * V + j) - m);
		s = block_sum(s, sh);
		if (threadIdx.x == 0) {
			i64 t = (i64)tg - lo;
			st(stats, sdt, N + i, (T)s);
			st(stats, sdt, 2 * N + i, (t >= 0 && t < V) ? ld<T>(logits, gdt, i * V + t) : (T)0);
		}
	}
}

// cross_entropy_part_loss: one block; loss = Σ (log sum + max - target) / N in
// fp64.
template <typename T> __device__ void cross_entropy_part_loss(void *loss, i64 ldt, const void *stats, i64 sdt, i64 N) {
	__shared__ double sh[32];
	double s = 0;
	for (i64 i = threadIdx.x; i < N; i += blockDim.x)
		s += log(ld_d(stats, sdt, N + i)) + ld_d(stats, sdt, i) - ld_d(stats, sdt, 2 * N + i);
	s = block_sum(s, sh);
	if (threadIdx.x == 0) st(loss, ldt, 0, (T)(s / (double)N));
}

// cross_entropy_part_backward: grid-stride over the part's elements;
// dlogits = exp(v - max)·g/sum, less g at the target, each computed in fp64
// and rounded once. dlogits may be logits itself: each element is read just
// before it is written.
template <typename T>
__device__ void cross_entropy_part_backward(void *dlogits, i64 ddt, const void *dloss, i64 lsdt, const void *logits,
                                            i64 gdt, const int *targets, const void *stats, i64 sdt, i64 N, i64 V,
                                            i64 Vt, i64 lo, int *status) {
	double g = ld_d(dloss, lsdt, 0) / (double)N;
	GRID_STRIDE(k, N * V) {
		i64 i = k / V, j = k % V;
		int tg = targets[i];
		if (tg < 0 || tg >= Vt) {
			if (j == 0) bad_id(status, K_CROSS_ENTROPY_PART_BWD, i, tg);
			continue;
		}
		double p = exp((double)ld<T>(logits, gdt, k) - ld_d(stats, sdt, i)) * (g / ld_d(stats, sdt, N + i));
		if (j == (i64)tg - lo) p -= g;
		st(dlogits, ddt, k, (T)p);
	}
}

ENTRY2(cross_entropy_rows,
       (void *losses, i64 ldt, const void *logits, i64 gdt, const int *targets, i64 N, i64 V, int *status),
       (losses, ldt, logits, gdt, targets, N, V, status))
ENTRY2(cross_entropy_mean, (void *loss, i64 ldt, const void *losses, i64 sdt, i64 N), (loss, ldt, losses, sdt, N))
ENTRY2(cross_entropy_backward,
       (void *dlogits, i64 ddt, const void *dloss, i64 lsdt, const void *logits, i64 gdt, const int *targets, i64 N,
        i64 V, int *status),
       (dlogits, ddt, dloss, lsdt, logits, gdt, targets, N, V, status))
ENTRY2(cross_entropy_part_max, (void *stats, i64 sdt, const void *logits, i64 gdt, i64 N, i64 V),
       (stats, sdt, logits, gdt, N, V))
ENTRY2(cross_entropy_part_sums,
       (void *stats, i64 sdt, const void *logits, i64 gdt, const int *targets, i64 N, i64 V, i64 Vt, i64 lo,
        int *status),
       (stats, sdt, logits, gdt, targets, N, V, Vt, lo, status))
ENTRY2(cross_entropy_part_loss, (void *loss, i64 ldt, const void *stats, i64 sdt, i64 N), (loss, ldt, stats, sdt, N))
ENTRY2(cross_entropy_part_backward,
       (void *dlogits, i64 ddt, const void *dloss, i64 lsdt, const void *logits, i64 gdt, const int *targets,
        const void *stats, i64 sdt, i64 N, i64 V, i64 Vt, i64 lo, int *status),
       (dlogits, ddt, dloss, lsdt, logits, gdt, targets, stats, sdt, N, V, Vt, lo, status))
