// The engine's one handle on oneDNN: the bf16 matrix multiply behind CPU mixed precision
// (train.dtype = "bf16" on run.device = "cpu"; matmul_bf16.h), and the fp32 sgemm the engine
// prefers to OpenBLAS's where oneDNN is present (blas.h says why).
//
// Decision: oneDNN (Debian's libdnnl, the library PyTorch's CPU path uses) rather than a kernel of
// our own: its matmul dispatches by instruction set (AVX512_BF16's vdpbf16ps, AMX tiles on CPUs
// that have them) with bf16 sources and an fp32 destination, and it is kept up by its vendor. It
// is loaded at run time like OpenBLAS (dlopen of libdnnl.so.2), so the worker and its fp32 path
// start and run where it is absent; only bf16 on the CPU needs it, and says so. Every call runs on
// the calling thread with a primitive created for ONE thread: the caller (matmul_bf16.cpp) splits
// the output across OpenMP threads exactly as the fp32 path splits its sgemm calls, so a
// primitive's blocking — and so every bit — depends on its shape alone, never on the thread count.
#pragma once

#include <string>

#include "engine/core/bf16.h"
#include "engine/cpu/cpu_features.h"

namespace flotilla::cpu {

struct OnednnInfo {
  bool loaded = false;
  std::string library;  // the file dlopen()ed
  std::string version;  // "2.6.3"
  std::string error;    // why it is not loaded (empty when loaded)
};

// Loads oneDNN once (thread-safe); never throws.
const OnednnInfo& onednn_info();

// C (M, N) = op(A) @ op(B) + beta * C, row-major, op(X) = X^T when the flag is set; A and B bf16,
// products accumulated in fp32 into the fp32 C; beta is 0 or 1. Runs on the calling thread only
// (call it from inside an OpenMP region for threading). Throws Error(kConfig) when oneDNN is not
// loaded, Error(kInternal) when oneDNN rejects the shape.
void onednn_gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const bf16_t* A, int lda,
                      const bf16_t* B, int ldb, float beta, float* C, int ldc);

// dnnl_sgemm (fp32, row-major): C = alpha op(A) op(B) + beta C on the calling thread only, like the
// bf16 matmul. Returns false, doing nothing, when oneDNN is not loaded; throws Error(kInternal)
// when oneDNN rejects the call.
bool onednn_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc);

// The instruction set oneDNN dispatches to on this CPU (chosen by oneDNN from cpuid features, not
// a model table), e.g. "avx512_core_bf16"; "" when oneDNN is not loaded.
std::string onednn_isa_name();
// The fp32 kernel path that ISA stands for (kAvx512 for avx512_core*, kAvx2 for avx2*, else kSse).
KernelPath onednn_fp32_path();

// The implementation oneDNN chose for the last shape created, e.g. "gemm:jit" or
// "brg:avx512_core_bf16" (for bench's kernel-path line); "" before any call.
std::string onednn_last_impl();

}  // namespace flotilla::cpu
