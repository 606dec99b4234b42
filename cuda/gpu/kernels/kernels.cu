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
// fp32 operand times a 16-bit one) to gemm_generic (matmul.cuh).
//
// One file a kernel family (kernels/<family>.cuh, as llm.c keeps
// llmc/<family>.cuh), named as the family's files of the host
// (cuda/host/<family>.go) and the CUDA device (cuda/gpu/<family>.go, whose
// builders launch its entry points); what they share is common.cuh. This
// file only lists them.
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

#include "common.cuh"

#include "elementwise.cuh"
#include "bias.cuh"
#include "gelu.cuh"
#include "swiglu.cuh"
#include "rope.cuh"
#include "embedding.cuh"
#include "norm.cuh"
#include "attention.cuh"
#include "flash.cuh"
#include "matmul.cuh"
#include "crossentropy.cuh"
#include "optim.cuh"
#include "quant.cuh"
