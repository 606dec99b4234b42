// The matrix-product family's generic kernel (Kernels.MatMul where cuBLAS
// cannot take the operands): cuda/host/matmul.go's order of products.
#pragma once
#include "common.cuh"

// gemm_generic: C[z] = alpha·op(A[z])·op(B[z]) + beta·C[z], row-major, any
// storage type per operand, accumulated in the compute type. For what
// cuBLAS cannot take. Tiles of 64×64 with k-steps of 16; thread (tx, ty)
// makes rows ty+16·i and columns tx+16·j. skip: 0 none; 1 A is lower
// triangular (A[m, k] = 0 for k > m: the k loop stops after the block's
// last row); 2 A is upper triangular (A[m, k] = 0 for k < m: it starts at
// the block's first row). Skipped products are exact zeros. With beta = 0,
// C is not read.
#define GB 64
#define GK 16
template <typename T>
__device__ void gemm_generic(i64 transA, i64 transB, i64 M, i64 N, i64 K, double alpha, const void *A, i64 adt, i64 lda,
                             i64 sA, const void *B, i64 bdt, i64 ldb, i64 sB, double beta, void *Cm, i64 cdt, i64 ldc,
                             i64 sC, i64 skip) {
	__shared__ T As[GK][GB + 1];
	__shared__ T Bs[GK][GB + 1];
	int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
	i64 m0 = (i64)blockIdx.y * GB, n0 = (i64)blockIdx.x * GB, z = blockIdx.z;
	i64 oa = z * sA, ob = z * sB, oc = z * sC;
	T acc[4][4];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++) acc[i][j] = 0;
	i64 k0 = 0, k1 = K;
	if (skip == 1) k1 = min(K, m0 + GB);
	if (skip == 2) k0 = (min(m0, K) / GK) * GK;
	for (i64 kb = k0; kb < k1; kb += GK) {
		for (int e = threadIdx.x; e < GB * GK; e += blockDim.x) {
			int r = e / GK, kk = e % GK; // A tile: row r, k kk
			i64 m = m0 + r, k = kb + kk;
			T va = 0;
			if (m < M && k < K) va = ld<T>(A, adt, oa + (transA ? k * lda + m : m * lda + k));
			As[kk][r] = va;
			int cc = e % GB, kr = e / GB; // B tile: k kr, column cc
			i64 n = n0 + cc, k2 = kb + kr;
			T vb = 0;
			if (n < N && k2 < K) vb = ld<T>(B, bdt, ob + (transB ? n * ldb + k2 : k2 * ldb + n));
			Bs[kr][cc] = vb;
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < GK; kk++) {
			T a[4], bv[4];
#pragma unroll
			for (int i = 0; i < 4; i++) a[i] = As[kk][ty + 16 * i];
#pragma unroll
			for (int j = 0; j < 4; j++) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++) acc[i][j] += a[i] * bv[j];
		}
		__syncthreads();
	}
	T al = (T)alpha, be = (T)beta;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		i64 m = m0 + ty + 16 * i;
		if (m >= M) continue;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			i64 n = n0 + tx + 16 * j;
			if (n >= N) continue;
			i64 idx = oc + m * ldc + n;
			T v = al * acc[i][j];
			if (beta != 0) v += be * ld<T>(Cm, cdt, idx);
			st(Cm, cdt, idx, v);
		}
	}
}

ENTRY2(gemm_generic,
       (i64 transA, i64 transB, i64 M, i64 N, i64 K, double alpha, const void *A, i64 adt, i64 lda, i64 sA,
        const void *B, i64 bdt, i64 ldb, i64 sB, double beta, void *Cm, i64 cdt, i64 ldc, i64 sC, i64 skip),
       (transA, transB, M, N, K, alpha, A, adt, lda, sA, B, bdt, ldb, sB, beta, Cm, cdt, ldc, sC, skip))
