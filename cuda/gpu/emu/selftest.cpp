// The emulated GPU checked against what a GPU does and refuses, with
// kernels of its own: a barrier not every thread reaches, collectives whose
// mask holds a lane that has exited or is past the block, lanes in
// different collectives, shared memory read before it is written (poisoned),
// a race that the reverse schedule exposes, host pointers, calls without the
// current context, launches over the limits, modules whose PTX lacks an
// entry, and cuBLAS's refusals and column-major definition. Built and run by
// make test-cuda-emu against the fake driver and cuBLAS (the kernels of
// kernels.cu are left out: this binary's table has its own).

#define CUBLASAPI
#include <cublas_api.h>
#include <cuda.h>

#include "cuda_emu.h"
#include "emu_table.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

// ---------------------------------------------------------------- kernels

static float scratch[64]; // the test kernels' shared memory (poisoned per block)

extern "C" {
__global__ void k_divergent_barrier(int *out) {
	if (threadIdx.x < 16) __syncthreads();
	out[threadIdx.x] = 1;
}
__global__ void k_shfl_exited(int *out) {
	if (threadIdx.x == 5) return;
	out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1);
}
__global__ void k_mask_past_block(int *out) { out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, (int)threadIdx.x, 1); }
__global__ void k_mixed_collectives(int *out) {
	if (threadIdx.x == 0)
		out[0] = __shfl_xor_sync(0xffffffffu, 1, 1);
	else
		out[threadIdx.x] = (int)__ballot_sync(0xffffffffu, 1);
}
__global__ void k_shuffle_sum(int *out) {
	int v = (int)threadIdx.x;
	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
	out[threadIdx.x] = v;
}
__global__ void k_ballot(unsigned *out) { out[threadIdx.x] = __ballot_sync(0xffffffffu, threadIdx.x % 3 == 0); }
__global__ void k_read_unwritten(float *out) { out[threadIdx.x] = scratch[threadIdx.x]; }
// Each thread reads its neighbour's shared value: without a barrier it is
// a race (whether the neighbour ran first decides); with one it is not.
__global__ void k_race(float *out) {
	scratch[threadIdx.x] = (float)threadIdx.x;
	out[threadIdx.x] = scratch[(threadIdx.x + 1) % blockDim.x];
}
__global__ void k_no_race(float *out) {
	scratch[threadIdx.x] = (float)threadIdx.x;
	__syncthreads();
	out[threadIdx.x] = scratch[(threadIdx.x + 1) % blockDim.x];
}
__global__ void k_fill(float *out, long long n) {
	for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) out[i] = (float)i;
}
}

extern "C" const emu_entry emu_entries[] = {
    EMU_ENTRY(k_divergent_barrier) EMU_ENTRY(k_shfl_exited) EMU_ENTRY(k_mask_past_block) EMU_ENTRY(k_mixed_collectives)
        EMU_ENTRY(k_shuffle_sum) EMU_ENTRY(k_ballot) EMU_ENTRY(k_read_unwritten) EMU_ENTRY(k_race) EMU_ENTRY(k_no_race)
            EMU_ENTRY(k_fill)};
extern "C" const int emu_entry_count = sizeof emu_entries / sizeof emu_entries[0];
extern "C" const emu_region emu_shared_regions[] = {{scratch, sizeof scratch}};
extern "C" const int emu_shared_count = 1;

// The module's PTX: each entry with its parameters, and the instructions
// that tell the emulator whether it synchronizes.
static std::string entry(const char *name, int params, const char *body) {
	std::string s = std::string(".visible .entry ") + name + "(\n";
	for (int i = 0; i < params; i++) s += "\t.param .u64 " + std::string(name) + "_param_" + std::to_string(i) + (i + 1 < params ? ",\n" : "\n");
	return s + ")\n{\n\t" + body + "\n}\n";
}
static std::string module_ptx() {
	return ".version 7.8\n.target sm_80\n.address_size 64\n" + entry("k_divergent_barrier", 1, "bar.sync 0;") +
	       entry("k_shfl_exited", 1, "shfl.sync.bfly.b32 %r1, %r2, 1, 31, -1;") +
	       entry("k_mask_past_block", 1, "shfl.sync.bfly.b32 %r1, %r2, 1, 31, -1;") +
	       entry("k_mixed_collectives", 1, "shfl.sync.bfly.b32 %r1; vote.sync.ballot.b32 %r2;") +
	       entry("k_shuffle_sum", 1, "shfl.sync.bfly.b32 %r1, %r2, 1, 31, -1;") + entry("k_ballot", 1, "vote.sync.ballot.b32 %r1;") +
	       entry("k_read_unwritten", 1, ".shared .align 4 .b8 scratch[256];\n\tret;") +
	       entry("k_race", 1, ".shared .align 4 .b8 scratch[256];\n\tret;") +
	       entry("k_no_race", 1, ".shared .align 4 .b8 scratch[256];\n\tbar.sync 0;") + entry("k_fill", 2, "ret;") +
	       entry("k_not_compiled", 1, "ret;");
}

// ------------------------------------------------------------------ checks

static int failures;
static void check(bool ok, const char *what) {
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok) failures++;
}

static CUfunction fn(CUmodule m, const char *name) {
	CUfunction f = nullptr;
	if (cuModuleGetFunction(&f, m, name) != CUDA_SUCCESS) printf("FAIL cuModuleGetFunction(%s)\n", name), failures++;
	return f;
}

static CUresult launch1(CUfunction f, unsigned block, void *arg) {
	void *params[] = {&arg};
	return cuLaunchKernel(f, 1, 1, 1, block, 1, 1, 0, nullptr, params, nullptr);
}

int main() {
	const char *sched = getenv("TRAINMEM_EMU_SCHEDULE");
	bool reverse = sched && strcmp(sched, "reverse") == 0;
	check(cuInit(0) == CUDA_SUCCESS, "cuInit");
	CUdevice dev;
	CUcontext ctx;
	cuDeviceGet(&dev, 0);
	CUdeviceptr p0;
	check(cuMemAlloc(&p0, 64) == CUDA_ERROR_INVALID_CONTEXT, "cuMemAlloc without a current context is refused");
	cuDevicePrimaryCtxRetain(&ctx, dev);
	cuCtxSetCurrent(ctx);
	std::thread([&] {
		CUdeviceptr p;
		check(cuMemAlloc(&p, 64) == CUDA_ERROR_INVALID_CONTEXT, "the context is current on one OS thread only");
	}).join();

	CUmodule m;
	std::string ptx = module_ptx();
	check(cuModuleLoadData(&m, ptx.c_str()) == CUDA_SUCCESS, "cuModuleLoadData");
	CUfunction f;
	check(cuModuleGetFunction(&f, m, "k_not_compiled") == CUDA_ERROR_NOT_FOUND, "an entry the emulator has not compiled is refused");
	check(cuModuleGetFunction(&f, m, "k_absent") == CUDA_ERROR_NOT_FOUND, "a function the PTX lacks is refused");
	std::string bad = ".version 7.8\n.target sm_80\n" + entry("k_fill", 1, "ret;");
	check(cuModuleLoadData(&m, bad.c_str()) == CUDA_ERROR_INVALID_PTX, "an entry whose PTX parameters differ from the compiled kernel's is refused");
	char log[256] = "";
	CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[] = {log, (void *)(uintptr_t)sizeof log};
	CUmodule m2;
	check(cuModuleLoadDataEx(&m2, "not PTX", 2, opts, vals) == CUDA_ERROR_INVALID_PTX && strstr(log, "not PTX"),
	      "cuModuleLoadDataEx writes why it refused to the error log");
	cuModuleLoadData(&m, ptx.c_str());

	CUdeviceptr d;
	cuMemAlloc(&d, 4096);
	int *di = (int *)d;
	float *df = (float *)d;
	int hostbuf[64];
	check(launch1(fn(m, "k_shuffle_sum"), 32, hostbuf) == CUDA_ERROR_INVALID_VALUE, "a host pointer as a kernel argument is refused");
	check(launch1(fn(m, "k_shuffle_sum"), 2048, di) == CUDA_ERROR_INVALID_VALUE, "a block of 2048 threads is refused");
	check(cuMemcpyHtoDAsync(d + 4000, hostbuf, 200, nullptr) == CUDA_ERROR_INVALID_VALUE, "a copy past an allocation's end is refused");

	check(launch1(fn(m, "k_shuffle_sum"), 32, di) == CUDA_SUCCESS && di[0] == 496 && di[31] == 496, "a warp's butterfly sum");
	void *pd[] = {&d};
	cuLaunchKernel(fn(m, "k_ballot"), 1, 1, 1, 64, 1, 1, 0, nullptr, pd, nullptr);
	check(((unsigned *)d)[0] == 0x49249249u && ((unsigned *)d)[40] == 0x92492492u, "__ballot_sync per warp");
	check(launch1(fn(m, "k_divergent_barrier"), 32, di) == CUDA_ERROR_LAUNCH_FAILED, "a barrier half the block never reaches fails the launch");
	check(launch1(fn(m, "k_shfl_exited"), 32, di) == CUDA_ERROR_LAUNCH_FAILED, "a shuffle whose mask holds an exited lane fails the launch");
	check(launch1(fn(m, "k_mask_past_block"), 16, di) == CUDA_ERROR_LAUNCH_FAILED, "a full mask in a block of 16 threads fails the launch");
	check(launch1(fn(m, "k_mixed_collectives"), 32, di) == CUDA_ERROR_LAUNCH_FAILED, "lanes in different collectives fail the launch");

	check(launch1(fn(m, "k_read_unwritten"), 32, df) == CUDA_SUCCESS && std::isnan(df[0]) && std::isnan(df[31]),
	      "shared memory is poisoned (NaN) at a block's start");
	check(launch1(fn(m, "k_no_race"), 32, df) == CUDA_SUCCESS && df[0] == 1 && df[31] == 0, "with its barrier, the neighbour's value");
	launch1(fn(m, "k_race"), 32, df);
	// Forward: thread 0 reads thread 1's slot before thread 1 ran (poison);
	// reverse: after. The two schedules disagree: the race shows.
	check(reverse ? df[0] == 1 : std::isnan(df[0]), reverse ? "the race, reverse schedule: the neighbour ran first" : "the race, forward schedule: the neighbour had not run");

	void *params[] = {&d, nullptr};
	long long n = 1000;
	params[1] = &n;
	check(cuLaunchKernel(fn(m, "k_fill"), 3, 1, 1, 128, 1, 1, 0, nullptr, params, nullptr) == CUDA_SUCCESS && df[999] == 999 && df[384] == 384,
	      "a grid-stride loop over three blocks");

	// cuBLAS.
	cublasHandle_t h;
	check(cublasCreate_v2(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate");
	CUdeviceptr ws;
	cuMemAlloc(&ws, 1 << 20);
	float one = 1, zero = 0;
	CUdeviceptr a, b, c;
	cuMemAlloc(&a, 6 * 4);
	cuMemAlloc(&b, 6 * 4);
	cuMemAlloc(&c, 4 * 4);
	float A[6] = {1, 2, 3, 4, 5, 6}, B[6] = {1, 0, 2, 1, 0, 3};
	cuMemcpyHtoDAsync(a, A, sizeof A, nullptr);
	cuMemcpyHtoDAsync(b, B, sizeof B, nullptr);
	check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, (void *)a, CUDA_R_32F, 2, (void *)b, CUDA_R_32F, 3, &zero,
	                   (void *)c, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_EXECUTION_FAILED,
	      "cuBLAS without a workspace from trainmem is refused");
	cublasSetWorkspace_v2(h, (void *)ws, 1 << 20);
	// Column-major: A is 2×3 (columns (1,2), (3,4), (5,6)), B 3×2; C = A·B.
	check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, (void *)a, CUDA_R_32F, 2, (void *)b, CUDA_R_32F, 3, &zero,
	                   (void *)c, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS,
	      "cublasGemmEx");
	float C[4];
	cuMemcpyDtoHAsync(C, c, sizeof C, nullptr);
	// A = [1 3 5; 2 4 6], B = [1 1; 0 0; 2 3]: C = [11 16; 14 20].
	check(C[0] == 11 && C[1] == 14 && C[2] == 16 && C[3] == 20, "C = A·B by cuBLAS's column-major definition");
	check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, (void *)a, CUDA_R_32F, 1, (void *)b, CUDA_R_32F, 3, &zero,
	                   (void *)c, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_INVALID_VALUE,
	      "lda below the rows of A is refused");
	check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, (void *)a, CUDA_R_32F, 3, (void *)b, CUDA_R_32F, 3, &zero,
	                   (void *)c, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_EXECUTION_FAILED,
	      "an operand past its allocation is refused");
	check(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, (void *)a, CUDA_R_16F, 2, (void *)b, CUDA_R_32F, 3, &zero,
	                   (void *)c, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_NOT_SUPPORTED,
	      "mixed operand types are refused");
	cublasDestroy_v2(h);

	printf("emulator self-test: %d failures\n", failures);
	return failures == 0 ? 0 : 1;
}
