// Package gpu is the NVIDIA GPU as a trainmem device (Device, New): the
// kernels of kernels/kernels.cu, loaded as PTX through gorgonia.org/cu,
// cuBLAS for matrix products, and segments from cuMemAlloc behind the
// caching allocator of package alloc. It builds only with the
// trainmem_cuda tag and the CUDA build kit (scripts/install-cuda-kit.sh);
// the driver is bound at run time (shim.c), so a cuda build starts on any
// machine and says why when no GPU can be opened.
package gpu
