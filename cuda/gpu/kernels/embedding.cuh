// The embedding family (Kernels.Embedding and the gradients of its two
// tables): cuda/host/embedding.go's.
#pragma once
#include "common.cuh"

// embedding: a table of rows ids lo .. lo+rows-1 of a vocabulary of V (the
// whole one: lo 0, rows V); a token outside it embeds to zero, and the
// positions are added when pos is 1 (cuda.VocabPart).
template <typename T>
__device__ void embedding(void *out, i64 odt, const int *tokens, const void *wte, i64 edt, const void *wpe, i64 pdt,
                          i64 N, i64 Tn, i64 C, i64 V, i64 lo, i64 rows, i64 pos, int *status) {
	GRID_STRIDE(k, N * C) {
		i64 i = k / C, c = k % C;
		int tok = tokens[i];
		if (tok < 0 || tok >= V) {
			if (c == 0) bad_id(status, K_EMBEDDING, i, tok);
			continue;
		}
		i64 row = (i64)tok - lo;
		T v = (row >= 0 && row < rows) ? ld<T>(wte, edt, row * C + c) : (T)0;
		if (pos) v += ld<T>(wpe, pdt, (i % Tn) * C + c);
		st(out, odt, k, v);
	}
}

// embedding_backward_tokens: dwte (zeroed before, or with acc 1 holding an
// earlier term of the gradient) row tok = its value + Σ dout rows of the
// positions holding tok, in position order, in fp64, rounded once. One warp
// per position; only the first position of each token (no earlier position
// holds it) sums, so every row has one writer and no atomics are needed.
// Lanes compare 32 ids at a time (ballot). Each lane keeps EBT_CPL
// channels' sums.
#define EBT_CPL 8
// The table holds rows ids lo .. lo+rows-1 of a vocabulary of V; a token
// outside them has no row here.
template <typename T>
__device__ void embedding_backward_tokens(void *dwte, i64 wdt, const void *dout, i64 ddt, const int *tokens, i64 N, i64 C,
                                     i64 V, i64 lo, i64 rows, i64 acc0, int *status) {
	int lane = threadIdx.x & 31;
	i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
	for (i64 i = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); i < N; i += warps) {
		int tok = tokens[i];
		if (tok < 0 || tok >= V) {
			if (lane == 0) bad_id(status, K_EMBEDDING_BWD_TOKENS, i, tok);
			continue;
		}
		if ((i64)tok < lo || (i64)tok >= lo + rows) continue;
		bool first = true;
		for (i64 j0 = 0; j0 < i && first; j0 += 32) {
			i64 j = j0 + lane;
			unsigned m = __ballot_sync(0xffffffffu, j < i && tokens[j] == tok);
			first = m == 0;
		}
		if (!first) continue;
		for (i64 c0 = 0; c0 < C; c0 += 32 * EBT_CPL) {
			double acc[EBT_CPL];
#pragma unroll
			for (int q = 0; q < EBT_CPL; q++) {
				i64 c = c0 + lane + 32 * q;
				acc[q] = (acc0 && c < C) ? (double)ld<T>(dwte, wdt, ((i64)tok - lo) * C + c) : 0;
			}
			for (i64 j0 = i; j0 < N; j0 += 32) {
				i64 j = j0 + lane;
				unsigned m = __ballot_sync(0xffffffffu, j < N && tokens[j] == tok);
				while (m) {
					int b = __ffs(m) - 1;
					m &= m - 1;
					i64 row = (j0 + b) * C;
#pragma unroll
					for (int q = 0; q < EBT_CPL; q++) {
						i64 c = c0 + lane + 32 * q;
						if (c < C) acc[q] += (double)ld<T>(dout, ddt, row + c);
					}
				}
			}
#pragma unroll
			for (int q = 0; q < EBT_CPL; q++) {
				i64 c = c0 + lane + 32 * q;
				if (c < C) st(dwte, wdt, ((i64)tok - lo) * C + c, (T)acc[q]);
			}
		}
	}
}

// embedding_backward_positions: dwpe[t, c] = Σ_b dout[b·T+t, c], b ascending,
// in fp64 (rows t ≥ T are zeroed before).
template <typename T>
__device__ void embedding_backward_positions(void *dwpe, i64 wdt, const void *dout, i64 ddt, i64 B, i64 Tn, i64 C) {
	GRID_STRIDE(k, Tn * C) {
		double acc = 0;
		for (i64 b = 0; b < B; b++) acc += (double)ld<T>(dout, ddt, b * Tn * C + k);
		st(dwpe, wdt, k, (T)acc);
	}
}

ENTRY2(embedding,
       (void *out, i64 odt, const int *tokens, const void *wte, i64 edt, const void *wpe, i64 pdt, i64 N, i64 Tn, i64 C,
        i64 V, i64 lo, i64 rows, i64 pos, int *status),
       (out, odt, tokens, wte, edt, wpe, pdt, N, Tn, C, V, lo, rows, pos, status))
ENTRY2(embedding_backward_tokens,
       (void *dwte, i64 wdt, const void *dout, i64 ddt, const int *tokens, i64 N, i64 C, i64 V, i64 lo, i64 rows,
        i64 acc, int *status),
       (dwte, wdt, dout, ddt, tokens, N, C, V, lo, rows, acc, status))
ENTRY2(embedding_backward_positions, (void *dwpe, i64 wdt, const void *dout, i64 ddt, i64 B, i64 Tn, i64 C),
       (dwpe, wdt, dout, ddt, B, Tn, C))
