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

ENTRY2(cross_entropy_rows,
       (void *losses, i64 ldt, const void *logits, i64 gdt, const int *targets, i64 N, i64 V, int *status),
       (losses, ldt, logits, gdt, targets, N, V, status))
ENTRY2(cross_entropy_mean, (void *loss, i64 ldt, const void *losses, i64 sdt, i64 N), (loss, ldt, losses, sdt, N))
ENTRY2(cross_entropy_backward,
       (void *dlogits, i64 ddt, const void *dloss, i64 lsdt, const void *logits, i64 gdt, const int *targets, i64 N,
        i64 V, int *status),
       (dlogits, ddt, dloss, lsdt, logits, gdt, targets, N, V, status))
