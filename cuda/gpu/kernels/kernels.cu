// trainmem's CUDA kernels: one per kernel family of cuda.Kernels (cuda/device.go),
// each the same algorithm as its host twin (cuda/host/<family>.go) so that the
// conformance tolerances carry over: the same expression order, the same
// float64 accumulators where the host sums in float64, the same rounding
// (compute in the kernel's type, round once to the storage type). Results
// agree with the host's within those tolerances, not bit for bit: nvcc
// contracts multiply-adds into FMAs (its default, kept: see
// docs/architecture.md) and CUDA's exp, log and sqrt are not Go's. They are
// reference kernels, plain and checked, not fast ones: matrix products go to
// cuBLAS (cuda/gpu/blas.go), and what cuBLAS cannot take (mixed operand types, an
// fp32 operand times a 16-bit one) to gemm_generic below.
//
// Conventions (the Go side, cuda/gpu/calls.go and device.go, relies on them):
//   - every kernel parameter is 8 bytes: pointers, `long long` (i64) for
//     integers and dtype codes, `double` for scalars (a float32 widened
//     exactly); gorgonia.org/cu's Launch passes 8-byte slots;
//   - dtype codes are cuda.DType's: 0 fp32, 1 fp16, 2 bf16, 3 fp64;
//   - a family with a compute type has two entry points, NAME_f32 (fp32
//     arithmetic, the default) and NAME_f64 (every float operand fp64);
//   - no float atomics: every output element is made by one thread in a
//     fixed order, and reductions run in a fixed tree, so results are
//     deterministic run to run;
//   - token ids are checked: an id outside [0, V) is not read and is
//     recorded in the device status words (status[0] = 1, then kernel,
//     position and id), which the Go side turns into an error.
//
// Build: `make ptx` (nvcc -ptx for compute_80 and compute_90; see Makefile).

#include <cuda_fp16.h>
#include <cuda_bf16.h>

typedef long long i64;

enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2, DT_F64 = 3 };

// Kernel codes for bad token ids, as cuda/gpu/device.go's statusKernels names them.
enum { K_EMBEDDING = 1, K_EMBEDDING_BWD_TOKENS = 2, K_CROSS_ENTROPY = 3, K_CROSS_ENTROPY_BWD = 4 };

// ---------------------------------------------------------------- storage

// ld_f loads element i of a buffer of type dt as fp32 (fp64 rounds to
// nearest even, as the host's decode into float32 does).
__device__ __forceinline__ float ld_f(const void *p, i64 dt, i64 i) {
	switch (dt) {
	case DT_F32: return ((const float *)p)[i];
	case DT_F16: return __half2float(((const __half *)p)[i]);
	case DT_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
	default: return __double2float_rn(((const double *)p)[i]);
	}
}

// ld_d loads element i exactly as fp64.
__device__ __forceinline__ double ld_d(const void *p, i64 dt, i64 i) {
	switch (dt) {
	case DT_F32: return (double)((const float *)p)[i];
	case DT_F16: return (double)__half2float(((const __half *)p)[i]);
	case DT_BF16: return (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
	default: return ((const double *)p)[i];
	}
}

// f64_to_f32_odd rounds to fp32 with round-to-odd; rounding that to a
// format of at most 22 significand bits to nearest even gives x correctly
// rounded (cuda/half.go's f64ToF32Odd).
__device__ __forceinline__ float f64_to_f32_odd(double x) {
	float r = __double2float_rz(x);
	if ((double)r != x) r = __int_as_float(__float_as_int(r) | 1);
	return r;
}

// st_f stores an fp32 value rounded once to dt (to nearest even).
__device__ __forceinline__ void st_f(void *p, i64 dt, i64 i, float v) {
	switch (dt) {
	case DT_F32: ((float *)p)[i] = v; break;
	case DT_F16: ((__half *)p)[i] = __float2half_rn(v); break;
	case DT_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
	default: ((double *)p)[i] = (double)v; break;
	}
}

// st_d stores an fp64 value rounded once to dt.
__device__ __forceinline__ void st_d(void *p, i64 dt, i64 i, double v) {
	switch (dt) {
	case DT_F32: ((float *)p)[i] = __double2float_rn(v); break;
	case DT_F16: ((__half *)p)[i] = __float2half_rn(f64_to_f32_odd(v)); break;
	case DT_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(f64_to_f32_odd(v)); break;
	default: ((double *)p)[i] = v; break;
	}
}

// ld and st in the compute type T: a kernel computing in fp32 loads fp32
// values and rounds its fp32 results into the storage type, as the host's
// vec[float32] does; one computing in fp64 (every operand fp64) is exact.
template <typename T> __device__ __forceinline__ T ld(const void *p, i64 dt, i64 i);
template <> __device__ __forceinline__ float ld<float>(const void *p, i64 dt, i64 i) { return ld_f(p, dt, i); }
template <> __device__ __forceinline__ double ld<double>(const void *p, i64 dt, i64 i) { return ld_d(p, dt, i); }
__device__ __forceinline__ void st(void *p, i64 dt, i64 i, float v) { st_f(p, dt, i, v); }
__device__ __forceinline__ void st(void *p, i64 dt, i64 i, double v) { st_d(p, dt, i, v); }

template <typename T> __device__ __forceinline__ T neg_inf();
template <> __device__ __forceinline__ float neg_inf<float>() { return __int_as_float(0xff800000); }
template <> __device__ __forceinline__ double neg_inf<double>() { return __longlong_as_double(0xfff0000000000000ULL); }

// ----------------------------------------------------------- reductions

__device__ __forceinline__ double warp_sum(double v) {
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

template <typename T> __device__ __forceinline__ T warp_max(T v) {
	for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

// block_sum sums v over a block of a multiple of 32 threads (at most 1024)
// in a fixed tree and returns the total to every thread. sh holds 32
// doubles; the block must call it uniformly.
__device__ double block_sum(double v, double *sh) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	__syncthreads(); // sh may still be read by a previous call
	if (lane == 0) sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : 0.0;
	return warp_sum(v);
}

template <typename T> __device__ T block_max(T v, T *sh) {
	int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0) sh[w] = v;
	__syncthreads();
	v = lane < nw ? sh[lane] : neg_inf<T>();
	return warp_max(v);
}

// bad_id records the first bad token id the device sees.
__device__ void bad_id(int *status, int kernel, i64 pos, int id) {
	if (atomicCAS(&status[0], 0, 1) == 0) {
		status[1] = kernel;
		status[2] = (int)pos;
		status[3] = id;
	}
}

#define GRID_STRIDE(i, n) for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (i64)gridDim.x * blockDim.x)

// ------------------------------------------------------------- elementwise

extern "C" __global__ void fill(void *dst, i64 dt, i64 n, double v) {
	GRID_STRIDE(i, n) { st_f(dst, dt, i, (float)v); }
}

// cast widens exactly and rounds once, whatever the two types (Host.Cast).
extern "C" __global__ void cast(void *dst, i64 ddt, const void *src, i64 sdt, i64 n) {
	GRID_STRIDE(i, n) { st_d(dst, ddt, i, ld_d(src, sdt, i)); }
}

template <typename T> __device__ void add(void *y, i64 ydt, const void *a, i64 adt, const void *b, i64 bdt, i64 n) {
	GRID_STRIDE(i, n) { st(y, ydt, i, ld<T>(a, adt, i) + ld<T>(b, bdt, i)); }
}

template <typename T> __device__ void add_bias(void *y, i64 ydt, const void *b, i64 bdt, i64 N, i64 C) {
	GRID_STRIDE(i, N * C) { st(y, ydt, i, ld<T>(y, ydt, i) + ld<T>(b, bdt, i % C)); }
}

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

// non_finite sets *flag when x holds an Inf or a NaN (an exponent of all
// ones); the flag is only ever set, so no atomics are needed.
extern "C" __global__ void non_finite(const void *x, i64 dt, i64 n, int *flag) {
	GRID_STRIDE(i, n) {
		bool bad;
		switch (dt) {
		case DT_F32: bad = (((const unsigned *)x)[i] & 0x7f800000u) == 0x7f800000u; break;
		case DT_F16: bad = (((const unsigned short *)x)[i] & 0x7c00u) == 0x7c00u; break;
		case DT_BF16: bad = (((const unsigned short *)x)[i] & 0x7f80u) == 0x7f80u; break;
		default: bad = (((const unsigned long long *)x)[i] & 0x7ff0000000000000ULL) == 0x7ff0000000000000ULL; break;
		}
		if (bad) *flag = 1;
	}
}

// --------------------------------------------------------------- embedding

template <typename T>
__device__ void embedding(void *out, i64 odt, const int *tokens, const void *wte, i64 edt, const void *wpe, i64 pdt,
                          i64 N, i64 Tn, i64 C, i64 V, int *status) {
	GRID_STRIDE(k, N * C) {
		i64 i = k / C, c = k % C;
		int tok = tokens[i];
		if (tok < 0 || tok >= V) {
			if (c == 0) bad_id(status, K_EMBEDDING, i, tok);
			continue;
		}
		st(out, odt, k, ld<T>(wte, edt, (i64)tok * C + c) + ld<T>(wpe, pdt, (i % Tn) * C + c));
	}
}

// embedding_backward_tokens: dwte (zeroed before) row tok = Σ dout rows of the
// positions holding tok, in position order, in fp64, rounded once. One warp
// per position; only the first position of each token (no earlier position
// holds it) sums, so every row has one writer and no atomics are needed.
// Lanes compare 32 ids at a time (ballot). Each lane keeps EBT_CPL
// channels' sums.
#define EBT_CPL 8
template <typename T>
__device__ void embedding_backward_tokens(void *dwte, i64 wdt, const void *dout, i64 ddt, const int *tokens, i64 N, i64 C,
                                     i64 V, int *status) {
	int lane = threadIdx.x & 31;
	i64 warps = (i64)gridDim.x * (blockDim.x >> 5);
	for (i64 i = (i64)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); i < N; i += warps) {
		int tok = tokens[i];
		if (tok < 0 || tok >= V) {
			if (lane == 0) bad_id(status, K_EMBEDDING_BWD_TOKENS, i, tok);
			continue;
		}
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
			for (int q = 0; q < EBT_CPL; q++) acc[q] = 0;
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
				if (c < C) st(dwte, wdt, (i64)tok * C + c, (T)acc[q]);
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

// -------------------------------------------------------------- layer norm

// layer_norm_stats: a block per row; mean and the biased variance from two
// passes in fp64, as the host.
template <typename T>
__device__ void layer_norm_stats(void *stats, i64 sdt, const void *x, i64 xdt, i64 N, i64 C, double eps) {
	__shared__ double sh[32];
	for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
		double s = 0;
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) s += (double)ld<T>(x, xdt, i * C + c);
		double mean = block_sum(s, sh) / (double)C;
		double ss = 0;
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
			double d = (double)ld<T>(x, xdt, i * C + c) - mean;
			ss += d * d;
		}
		ss = block_sum(ss, sh);
		if (threadIdx.x == 0) {
			st(stats, sdt, 2 * i, (T)mean);
			st(stats, sdt, 2 * i + 1, (T)(1.0 / sqrt(ss / (double)C + eps)));
		}
	}
}

template <typename T>
__device__ void layer_norm(void *y, i64 ydt, const void *x, i64 xdt, const void *stats, i64 sdt, const void *w, i64 wdt,
                          const void *b, i64 bdt, i64 N, i64 C) {
	GRID_STRIDE(k, N * C) {
		i64 i = k / C, c = k % C;
		T mean = ld<T>(stats, sdt, 2 * i), rstd = ld<T>(stats, sdt, 2 * i + 1);
		st(y, ydt, k, (ld<T>(x, xdt, k) - mean) * rstd * ld<T>(w, wdt, c) + ld<T>(b, bdt, c));
	}
}

// layer_norm_backward_x: a block per row; the two means in fp64.
template <typename T>
__device__ void layer_norm_backward_x(void *dx, i64 dxdt, const void *dy, i64 dydt, const void *x, i64 xdt, const void *stats,
                                i64 sdt, const void *w, i64 wdt, i64 N, i64 C) {
	__shared__ double sh[32];
	for (i64 i = blockIdx.x; i < N; i += gridDim.x) {
		T mean = ld<T>(stats, sdt, 2 * i), rstd = ld<T>(stats, sdt, 2 * i + 1);
		double sg = 0, sgx = 0;
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
			T g = ld<T>(dy, dydt, i * C + c) * ld<T>(w, wdt, c);
			sg += (double)g;
			sgx += (double)(g * (ld<T>(x, xdt, i * C + c) - mean) * rstd);
		}
		sg = block_sum(sg, sh);
		sgx = block_sum(sgx, sh);
		T mg = (T)(sg / (double)C), mgx = (T)(sgx / (double)C);
		for (i64 c = threadIdx.x; c < C; c += blockDim.x) {
			T xhat = (ld<T>(x, xdt, i * C + c) - mean) * rstd;
			st(dx, dxdt, i * C + c, rstd * (ld<T>(dy, dydt, i * C + c) * ld<T>(w, wdt, c) - mg - xhat * mgx));
		}
	}
}

// Column sums (LayerNormBackwardW, SumRows): a block of 32×32 threads per
// 32 channels (the entries carry __launch_bounds__(1024), so that nvcc keeps
// them within the 64 registers a thread such a block allows); thread (c, g) sums rows g, g+32, ... in fp64, then thread
// (c, 0) adds the 32 partial sums in order g = 0..31. Fixed order, no
// atomics.
#define CS_ROWS 32
template <typename T, bool LNW>
__device__ void column_sums(void *dst, i64 ddt, const void *src, i64 sdt, const void *x, i64 xdt, const void *stats,
                            i64 stdt, i64 N, i64 C) {
	__shared__ double part[CS_ROWS][33];
	i64 c = (i64)blockIdx.x * 32 + threadIdx.x;
	double acc = 0;
	if (c < C) {
		for (i64 i = threadIdx.y; i < N; i += CS_ROWS) {
			if (LNW) {
				T mean = ld<T>(stats, stdt, 2 * i), rstd = ld<T>(stats, stdt, 2 * i + 1);
				acc += (double)(ld<T>(src, sdt, i * C + c) * ((ld<T>(x, xdt, i * C + c) - mean) * rstd));
			} else {
				acc += (double)ld<T>(src, sdt, i * C + c);
			}
		}
	}
	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();
	if (threadIdx.y == 0 && c < C) {
		double s = 0;
		for (int g = 0; g < CS_ROWS; g++) s += part[g][threadIdx.x];
		st(dst, ddt, c, (T)s);
	}
}

// --------------------------------------------------------------- attention

// attention_probs: p (B, NH, T, T) = causal softmax(q·kᵀ·scale). A block of
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
                                          i64 h, i64 t0, i64 kt, i64 Tn, i64 C, i64 hd) {
	int tid = threadIdx.x, w = tid >> 5, lane = tid & 31;
#pragma unroll
	for (int r = 0; r < 4; r++) s[r] = 0;
	for (i64 d0 = 0; d0 < hd; d0 += AP_DC) {
		for (int k = tid; k < AP_ROWS * AP_DC; k += blockDim.x) {
			int r = k / AP_DC, d = k % AP_DC;
			i64 tq = t0 + r, tk = kt * 32 + r;
			bool dok = d0 + d < hd;
			qs[r][d] = (tq < Tn && dok) ? ld<T>(qkv, qdt, ((b * Tn + tq) * 3 * C) + h * hd + d0 + d) : (T)0;
			ks[r][d] = (tk < Tn && dok) ? ld<T>(qkv, qdt, ((b * Tn + tk) * 3 * C) + C + h * hd + d0 + d) : (T)0;
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
__device__ void attention_probs(void *p, i64 pdt, const void *qkv, i64 qdt, i64 B, i64 Tn, i64 C, i64 NH) {
	__shared__ T qs[AP_ROWS][AP_DC + 1];
	__shared__ T ks[32][AP_DC + 1];
	i64 h = blockIdx.y, b = blockIdx.z, t0 = (i64)blockIdx.x * AP_ROWS;
	i64 hd = C / NH;
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
		ap_scores<T>(s, qs, ks, qkv, qdt, b, h, t0, kt, Tn, C, hd);
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
		if (kt < ntiles) ap_scores<T>(s, qs, ks, qkv, qdt, b, h, t0, kt, Tn, C, hd);
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

// ------------------------------------------------------------ generic GEMM

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

// ------------------------------------------------------------ cross-entropy

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

// --------------------------------------------------------------- optimizers

// adam: cuda/host/optim.go's adamKernel, element by element. pb is the master
// copy when there is one (then param = pb rounded), else param itself. c1
// and c2 are cuda.AdamArgs.Corrections, 1/(1-β1^t) and 1/sqrt(1-β2^t).
template <typename T>
__device__ void adam(void *param, i64 pdt, const void *grad, i64 gdt, void *pb, i64 pbdt, void *m, i64 mdt, void *v,
                     i64 vdt, i64 n, double lr_, double b1_, double b2_, double eps_, double wd_, double gs_,
                     double c1_, double c2_, i64 decoupled, i64 has_master) {
	T lr = (T)lr_, b1 = (T)b1_, b2 = (T)b2_, eps = (T)eps_, wd = (T)wd_, gs = (T)gs_, c1 = (T)c1_, c2 = (T)c2_;
	GRID_STRIDE(i, n) {
		T p = ld<T>(pb, pbdt, i), g = ld<T>(grad, gdt, i) * gs;
		if (!decoupled) g += wd * p;
		T mi = b1 * ld<T>(m, mdt, i) + (1 - b1) * g;
		T vi = b2 * ld<T>(v, vdt, i) + (1 - b2) * g * g;
		st(m, mdt, i, mi);
		st(v, vdt, i, vi);
		T upd = (mi * c1) / ((T)sqrt((double)vi) * c2 + eps);
		if (decoupled) upd += wd * p;
		p = p - lr * upd;
		st(pb, pbdt, i, p);
		if (has_master) st(param, pdt, i, p);
	}
}

template <typename T>
__device__ void sgd(void *param, i64 pdt, const void *grad, i64 gdt, void *pb, i64 pbdt, void *mom, i64 mdt, i64 n,
                    double lr_, double mu_, double wd_, double gs_, i64 has_mom, i64 has_master) {
	T lr = (T)lr_, mu = (T)mu_, wd = (T)wd_, gs = (T)gs_;
	GRID_STRIDE(i, n) {
		T p = ld<T>(pb, pbdt, i);
		T g = ld<T>(grad, gdt, i) * gs + wd * p;
		if (has_mom) {
			T mi = mu * ld<T>(mom, mdt, i) + g;
			st(mom, mdt, i, mi);
			g = mi;
		}
		p -= lr * g;
		st(pb, pbdt, i, p);
		if (has_master) st(param, pdt, i, p);
	}
}

// ------------------------------------------------------------ entry points

// Each templated family gets NAME_f32 and NAME_f64. The parameter lists are
// spelled out once here and mirrored by cuda/gpu/calls.go.
#define ENTRY2(name, params, args)                                                                                     \
	extern "C" __global__ void name##_f32 params { name<float> args; }                                            \
	extern "C" __global__ void name##_f64 params { name<double> args; }

ENTRY2(add, (void *y, i64 ydt, const void *a, i64 adt, const void *b, i64 bdt, i64 n), (y, ydt, a, adt, b, bdt, n))
ENTRY2(add_bias, (void *y, i64 ydt, const void *b, i64 bdt, i64 N, i64 C), (y, ydt, b, bdt, N, C))
ENTRY2(gelu, (void *y, i64 ydt, const void *x, i64 xdt, i64 n), (y, ydt, x, xdt, n))
ENTRY2(gelu_backward, (void *dx, i64 dxdt, const void *dy, i64 dydt, const void *x, i64 xdt, i64 n),
       (dx, dxdt, dy, dydt, x, xdt, n))
ENTRY2(embedding,
       (void *out, i64 odt, const int *tokens, const void *wte, i64 edt, const void *wpe, i64 pdt, i64 N, i64 Tn, i64 C,
        i64 V, int *status),
       (out, odt, tokens, wte, edt, wpe, pdt, N, Tn, C, V, status))
ENTRY2(embedding_backward_tokens,
       (void *dwte, i64 wdt, const void *dout, i64 ddt, const int *tokens, i64 N, i64 C, i64 V, int *status),
       (dwte, wdt, dout, ddt, tokens, N, C, V, status))
ENTRY2(embedding_backward_positions, (void *dwpe, i64 wdt, const void *dout, i64 ddt, i64 B, i64 Tn, i64 C),
       (dwpe, wdt, dout, ddt, B, Tn, C))
ENTRY2(layer_norm_stats, (void *stats, i64 sdt, const void *x, i64 xdt, i64 N, i64 C, double eps),
       (stats, sdt, x, xdt, N, C, eps))
ENTRY2(layer_norm,
       (void *y, i64 ydt, const void *x, i64 xdt, const void *stats, i64 sdt, const void *w, i64 wdt, const void *b,
        i64 bdt, i64 N, i64 C),
       (y, ydt, x, xdt, stats, sdt, w, wdt, b, bdt, N, C))
ENTRY2(layer_norm_backward_x,
       (void *dx, i64 dxdt, const void *dy, i64 dydt, const void *x, i64 xdt, const void *stats, i64 sdt, const void *w,
        i64 wdt, i64 N, i64 C),
       (dx, dxdt, dy, dydt, x, xdt, stats, sdt, w, wdt, N, C))
ENTRY2(attention_probs, (void *p, i64 pdt, const void *qkv, i64 qdt, i64 B, i64 Tn, i64 C, i64 NH),
       (p, pdt, qkv, qdt, B, Tn, C, NH))
ENTRY2(attention_backward_softmax, (void *ds, i64 sdt, const void *p, i64 pdt, i64 rows, i64 Tn, double scale),
       (ds, sdt, p, pdt, rows, Tn, scale))
ENTRY2(gemm_generic,
       (i64 transA, i64 transB, i64 M, i64 N, i64 K, double alpha, const void *A, i64 adt, i64 lda, i64 sA,
        const void *B, i64 bdt, i64 ldb, i64 sB, double beta, void *Cm, i64 cdt, i64 ldc, i64 sC, i64 skip),
       (transA, transB, M, N, K, alpha, A, adt, lda, sA, B, bdt, ldb, sB, beta, Cm, cdt, ldc, sC, skip))
ENTRY2(cross_entropy_rows,
       (void *losses, i64 ldt, const void *logits, i64 gdt, const int *targets, i64 N, i64 V, int *status),
       (losses, ldt, logits, gdt, targets, N, V, status))
ENTRY2(cross_entropy_mean, (void *loss, i64 ldt, const void *losses, i64 sdt, i64 N), (loss, ldt, losses, sdt, N))
ENTRY2(cross_entropy_backward,
       (void *dlogits, i64 ddt, const void *dloss, i64 lsdt, const void *logits, i64 gdt, const int *targets, i64 N,
        i64 V, int *status),
       (dlogits, ddt, dloss, lsdt, logits, gdt, targets, N, V, status))
ENTRY2(adam,
       (void *param, i64 pdt, const void *grad, i64 gdt, void *pb, i64 pbdt, void *m, i64 mdt, void *v, i64 vdt, i64 n,
        double lr, double b1, double b2, double eps, double wd, double gs, double c1, double c2, i64 decoupled,
        i64 has_master),
       (param, pdt, grad, gdt, pb, pbdt, m, mdt, v, vdt, n, lr, b1, b2, eps, wd, gs, c1, c2, decoupled, has_master))
ENTRY2(sgd,
       (void *param, i64 pdt, const void *grad, i64 gdt, void *pb, i64 pbdt, void *mom, i64 mdt, i64 n, double lr,
        double mu, double wd, double gs, i64 has_mom, i64 has_master),
       (param, pdt, grad, gdt, pb, pbdt, mom, mdt, n, lr, mu, wd, gs, has_mom, has_master))

extern "C" __global__ void __launch_bounds__(1024) layer_norm_backward_w_f32(void *dw, i64 wdt, const void *dy, i64 dydt, const void *x, i64 xdt,
                                               const void *stats, i64 sdt, i64 N, i64 C) {
	column_sums<float, true>(dw, wdt, dy, dydt, x, xdt, stats, sdt, N, C);
}
extern "C" __global__ void __launch_bounds__(1024) layer_norm_backward_w_f64(void *dw, i64 wdt, const void *dy, i64 dydt, const void *x, i64 xdt,
                                               const void *stats, i64 sdt, i64 N, i64 C) {
	column_sums<double, true>(dw, wdt, dy, dydt, x, xdt, stats, sdt, N, C);
}
extern "C" __global__ void __launch_bounds__(1024) sum_rows_f32(void *dst, i64 ddt, const void *src, i64 sdt, i64 N, i64 C) {
	column_sums<float, false>(dst, ddt, src, sdt, 0, 0, 0, 0, N, C);
}
extern "C" __global__ void __launch_bounds__(1024) sum_rows_f64(void *dst, i64 ddt, const void *src, i64 sdt, i64 N, i64 C) {
	column_sums<double, false>(dst, ddt, src, sdt, 0, 0, 0, 0, N, C);
}
