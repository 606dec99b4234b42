// A stand-in libcuda.so.1 for testing the driver shim (cuda/gpu/shim.c) on a
// machine without an NVIDIA driver: .ci/run builds it with
//
//	gcc -shared -fPIC -o DIR/libcuda.so.1 cuda/gpu/testdata/fakecuda.c
//
// and runs the trainmem_cuda test binary with LD_LIBRARY_PATH=DIR and
// TRAINMEM_FAKE_LIBCUDA=1. It has a working cuInit that reports no device,
// and cuDriverGetVersion and cuDeviceGetCount, which must reach it through
// the shim's trampolines with their arguments intact.
int cuInit(unsigned int flags) { return flags == 0 ? 100 : 1; } // CUDA_ERROR_NO_DEVICE
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) { *n = 0; return 0; }
