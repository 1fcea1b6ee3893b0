// A hand-written AVX512_BF16 GEMM (vdpbf16ps) for the bf16 linear layers, one thread per call:
// C (M, N) = op(A) @ op(B) + beta * C, bf16 A and B, fp32 C, the products of bf16 pairs summed in
// fp32 (the same arithmetic as oneDNN's bf16 gemm; not the same order, so not the same bits).
//
// Non-obvious decision: the project prefers libraries, and oneDNN stays the default wherever it is
// faster. This kernel exists because oneDNN 2.6.3's bf16 gemm API re-packs both operands on every
// call and reached ~76% of the bf16 dot ceiling on the training shapes (N x C by C x F with N =
// B*T rows); a GotoBLAS-style loop (B packed in VNNI pairs per KC x NC block, A per MC x KC block,
// a 12 x 32 register tile of 24 zmm accumulators) keeps the dot units fed on those shapes. Which
// one runs is measured on this machine per transpose case (matmul_bf16.cpp, bf16_gemm_choice), never
// taken from a table of CPU models. Each output element is summed in an order fixed by K alone
// (KC blocks in sequence, pairs of k within), so the result of a slice does not depend on where the
// slice sits or how many threads there are: gemm_split.h's determinism holds.
#pragma once

#include "engine/core/bf16.h"

namespace flotilla::cpu {

// Single-threaded; needs AVX512_BF16 (the caller checks cpu_features()). beta 0 or 1.
void gemm_bf16_avx512(bool trans_a, bool trans_b, int M, int N, int K, const bf16_t* A, int lda,
                      const bf16_t* B, int ldb, float beta, float* C, int ldc);

}  // namespace flotilla::cpu
