// The linear layers in bf16 mixed precision on the CPU (train.dtype = "bf16", run.device = "cpu"):
// fp32 in, fp32 out, the products of bf16-rounded operands summed in fp32 (oneDNN: onednn.h).
//
// Non-obvious decision: the CPU keeps fp32 storage for parameters, gradients and activations and
// rounds only the matmul operands to bf16, as each call needs them (PyTorch's autocast scheme);
// the GPU stores them in bf16 (docs/models.md "Mixed precision on the CPU" says why the CPU does
// not). Everything around the matmul — the model's pass, the fp32 master weights that the
// parameters already are, AdamW's fp32 moments, data/tensor/pipeline parallelism, checkpoints —
// is the fp32 path unchanged, so the mixed-precision step is not a second model. The output is
// split across threads as the fp32 path splits it (gemm_split.h): deterministic mode stays
// bit-identical for any thread count.
#pragma once

#include <cstddef>
#include <string>

#include "engine/core/bf16.h"
#include "engine/cpu/cpu_features.h"

namespace flotilla::cpu {

struct OnednnInfo;

// out[i] = in[i] rounded to bf16 (nearest even; vcvtneps2bf16 where the CPU has AVX512_BF16,
// which treats fp32 denormals as zero), threaded.
void round_to_bf16(bf16_t* out, const float* in, size_t n);

// C (M, N) = op(A) @ op(B) + beta * C with bf16 A and B (beta 0 or 1), split across the OpenMP
// threads like gemm().
void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const bf16_t* A, int lda, const bf16_t* B,
               int ldb, float beta, float* C, int ldc);

// matmul_forward / matmul_backward of matmul.h with the operands rounded to bf16 first: out (N,
// OC) = bf16(inp) @ bf16(weight)^T + bias; dinp = bf16(dout) @ bf16(weight) (overwritten; skipped
// when null); dweight += bf16(dout)^T @ bf16(inp); dbias += column sums of the fp32 dout. The
// rounded copies live in scratch buffers this file keeps (not reentrant: one caller at a time).
void matmul_forward_bf16(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                         int OC);
void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int N, int IC, int OC);

// Why bf16 matmuls cannot run with these features, this kernel choice (FLOTILLA_CPU_PATH may
// narrow it) and this oneDNN, naming train.dtype and what is missing; "" when they can.
std::string bf16_matmul_refusal(const CpuFeatures& f, const KernelChoice& choice, const OnednnInfo& lib);
// The same for this process (cpu_features(), blas_info().choice, onednn_info()).
std::string bf16_matmul_refusal();

// The kernel path the bf16 matmuls run on this machine, e.g. "avx512_bf16 (oneDNN 2.6.3 gemm:jit)".
std::string bf16_matmul_path();

}  // namespace flotilla::cpu
