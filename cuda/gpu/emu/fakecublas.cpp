// The emulated GPU's cuBLAS: exactly the calls trainmem makes (cuda/gpu/blas.go)
// by cuBLAS's column-major definition, for the emulated driver's memory
// (fakecuda.cpp). C = α·op(A)·op(B) + β·C, op(X) = X or Xᵀ; A is m×k after
// op, B k×n, C m×n, column-major with leading dimensions lda, ldb, ldc; a
// strided batch offsets each by its stride. Products accumulate in the
// compute type (fp32, or fp64 for CUBLAS_COMPUTE_64F) in k order and round
// once to C's type, to nearest even; β = 0 does not read C.
//
// It refuses what cuBLAS refuses (CUBLAS_STATUS_INVALID_VALUE: negative
// sizes, a leading dimension below its matrix's rows, an unknown
// transpose; CUBLAS_STATUS_NOT_SUPPORTED: operand types cuBLAS does not
// pair with the compute type) and what a GPU would fault on: an operand,
// the whole region its sizes and strides span, that is not inside one
// allocation of the emulated device, and a handle without a workspace
// trainmem gave it.

#define CUBLASAPI __attribute__((visibility("default")))
#include <cublas_api.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

extern "C" int tmemu_device_range(unsigned long long p, unsigned long long n); // fakecuda.cpp

struct cublasContext {
	void *stream;
	void *workspace;
	size_t workspace_bytes;
	int math;
};

static void blas_log(const char *call, const char *why) { fprintf(stderr, "trainmem emulated cuBLAS: %s: %s\n", call, why); }

static int type_size(cudaDataType t) {
	switch (t) {
	case CUDA_R_32F: return 4;
	case CUDA_R_64F: return 8;
	case CUDA_R_16F: return 2;
	case CUDA_R_16BF: return 2;
	default: return 0;
	}
}

template <typename T> static T load(const void *p, cudaDataType t, long long i) {
	switch (t) {
	case CUDA_R_32F: return (T)((const float *)p)[i];
	case CUDA_R_64F: return (T)((const double *)p)[i];
	case CUDA_R_16F: return (T)__half2float(((const __half *)p)[i]);
	default: return (T)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
	}
}

template <typename T> static void store(void *p, cudaDataType t, long long i, T v) {
	switch (t) {
	case CUDA_R_32F: ((float *)p)[i] = (float)v; break;
	case CUDA_R_64F: ((double *)p)[i] = (double)v; break;
	case CUDA_R_16F: ((__half *)p)[i] = __float2half_rn((float)v); break;
	default: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
	}
}

// span is the bytes a column-major matrix of rows×cols with leading
// dimension ld spans, batch matrices stride elements apart.
static unsigned long long span(int rows, int cols, int ld, long long stride, int batch, int size) {
	if (rows == 0 || cols == 0 || batch == 0) return 0;
	unsigned long long last = (unsigned long long)(cols - 1) * ld + (rows - 1) + (unsigned long long)(batch - 1) * (unsigned long long)stride;
	return (last + 1) * size;
}

template <typename T>
static void gemm(bool ta, bool tb, int m, int n, int k, T alpha, const void *A, cudaDataType at, int lda, long long sa,
                 const void *B, cudaDataType bt, int ldb, long long sb, T beta, void *C, cudaDataType ct, int ldc,
                 long long sc, int batch) {
	for (int z = 0; z < batch; z++) {
		long long oa = z * sa, ob = z * sb, oc = z * sc;
		for (int j = 0; j < n; j++)
			for (int i = 0; i < m; i++) {
				T acc = 0;
				for (int l = 0; l < k; l++) {
					T a = load<T>(A, at, oa + (ta ? (long long)i * lda + l : (long long)l * lda + i));
					T b = load<T>(B, bt, ob + (tb ? (long long)l * ldb + j : (long long)j * ldb + l));
					acc += a * b;
				}
				long long idx = oc + (long long)j * ldc + i;
				T v = alpha * acc;
				if (beta != 0) v += beta * load<T>(C, ct, idx);
				store<T>(C, ct, idx, v);
			}
	}
}

static cublasStatus_t gemm_call(const char *call, cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                                int n, int k, const void *alpha, const void *A, cudaDataType at, int lda, long long sa,
                                const void *B, cudaDataType bt, int ldb, long long sb, const void *beta, void *C,
                                cudaDataType ct, int ldc, long long sc, int batch, cublasComputeType_t compute) {
	if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
	bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
	if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T && transa != CUBLAS_OP_C) ||
	    (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T && transb != CUBLAS_OP_C)) {
		blas_log(call, "unknown transpose");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	int arows = ta ? k : m, brows = tb ? n : k;
	if (m < 0 || n < 0 || k < 0 || batch < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) ||
	    ldc < (m > 1 ? m : 1) || sa < 0 || sb < 0 || sc < 0) {
		char why[160];
		snprintf(why, sizeof why, "m=%d n=%d k=%d lda=%d ldb=%d ldc=%d batch=%d: a size or leading dimension cuBLAS refuses", m, n, k,
		         lda, ldb, ldc, batch);
		blas_log(call, why);
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	bool f64 = compute == CUBLAS_COMPUTE_64F;
	bool ok = f64 ? (at == CUDA_R_64F && bt == CUDA_R_64F && ct == CUDA_R_64F)
	              : compute == CUBLAS_COMPUTE_32F && at == bt &&
	                    ((at == CUDA_R_32F && ct == CUDA_R_32F) || (at == CUDA_R_16F && (ct == CUDA_R_16F || ct == CUDA_R_32F)) ||
	                     (at == CUDA_R_16BF && (ct == CUDA_R_16BF || ct == CUDA_R_32F)));
	if (!ok) {
		blas_log(call, "operand types cuBLAS does not pair with the compute type");
		return CUBLAS_STATUS_NOT_SUPPORTED;
	}
	if (!h->workspace) {
		blas_log(call, "no workspace was set (cuda/gpu/blas.go gives cuBLAS its workspace from the allocator)");
		return CUBLAS_STATUS_EXECUTION_FAILED;
	}
	struct {
		const char *what;
		const void *p;
		unsigned long long n;
	} ops[] = {
	    {"A", A, span(arows, ta ? m : k, lda, sa, batch, type_size(at))},
	    {"B", B, span(brows, tb ? k : n, ldb, sb, batch, type_size(bt))},
	    {"C", C, span(m, n, ldc, sc, batch, type_size(ct))},
	};
	for (auto &o : ops)
		if (o.n > 0 && !tmemu_device_range((unsigned long long)o.p, o.n)) {
			char why[160];
			snprintf(why, sizeof why, "operand %s [%p, +%llu bytes) is not inside one device allocation", o.what, o.p, o.n);
			blas_log(call, why);
			return CUBLAS_STATUS_EXECUTION_FAILED;
		}
	if (f64)
		gemm<double>(ta, tb, m, n, k, *(const double *)alpha, A, at, lda, sa, B, bt, ldb, sb, *(const double *)beta, C, ct, ldc, sc,
		             batch);
	else
		gemm<float>(ta, tb, m, n, k, *(const float *)alpha, A, at, lda, sa, B, bt, ldb, sb, *(const float *)beta, C, ct, ldc, sc,
		            batch);
	return CUBLAS_STATUS_SUCCESS;
}

extern "C" {

// TRAINMEM_EMU_CUBLAS_BROKEN=13 makes cublasCreate of the library named
// libcublas.so.13 fail, as a cuBLAS newer than the driver does (=all: every
// one), so that trainmem's fallback to the next library is exercised.
static bool broken() {
	const char *b = getenv("TRAINMEM_EMU_CUBLAS_BROKEN");
	if (!b) return false;
	if (strcmp(b, "all") == 0) return true;
	Dl_info info;
	if (!dladdr((void *)&broken, &info) || !info.dli_fname) return false;
	std::string suffix = std::string(".so.") + b;
	std::string name = info.dli_fname;
	return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
	if (!h) return CUBLAS_STATUS_INVALID_VALUE;
	if (broken()) {
		blas_log("cublasCreate", "failing as TRAINMEM_EMU_CUBLAS_BROKEN asks");
		return CUBLAS_STATUS_NOT_INITIALIZED;
	}
	*h = new cublasContext{nullptr, nullptr, 0, 0};
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
	if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
	delete h;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
	if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
	h->stream = (void *)s;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *p, size_t n) {
	if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
	if (n > 0 && !tmemu_device_range((unsigned long long)p, n)) {
		blas_log("cublasSetWorkspace", "the workspace is not device memory");
		return CUBLAS_STATUS_INVALID_VALUE;
	}
	h->workspace = p;
	h->workspace_bytes = n;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
	if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
	h->math = (int)mode;
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t h, int *v) {
	if (!h || !v) return CUBLAS_STATUS_INVALID_VALUE;
	*v = 130000; // 13.0.0
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt,
                            int ldb, const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
	return gemm_call("cublasGemmEx", h, transa, transb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
	                 compute);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda, long long sa,
                                          const void *B, cudaDataType bt, int ldb, long long sb, const void *beta, void *C,
                                          cudaDataType ct, int ldc, long long sc, int batch, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo) {
	return gemm_call("cublasGemmStridedBatchedEx", h, transa, transb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C,
	                 ct, ldc, sc, batch, compute);
}

} // extern "C"
