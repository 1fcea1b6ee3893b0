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
#include <utility>
#include <vector>

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

// The weights rounded once per optimizer step instead of at every call. While a Bf16FixedWeights
// lives, the caller promises that the fp32 values in its ranges do not change; a matmul_*_bf16 whose
// weight lies inside one of them rounds it on first use and reuses that bf16 copy for every later
// forward and backward (every micro-batch, recompute, LM-head chunk) until end() / destruction.
// The copies are the same bits that rounding at each call gives, so results are bit-identical.
// A weight outside the ranges (or a call with no scope alive: evaluation, sampling, tests) is
// rounded per call as before. The trainer opens one after the step's zero_grad() and ends it
// before the gradient all-reduce / optimizer update (ZeRO's parameter all-gather, checkpoint loads
// and LoRA base loads all happen outside it); bench does the same around forward + backward.
// Memory: each cached weight's bf16 copy stays allocated between steps (2 bytes per weight
// element of every matmul weight this process runs; the planner counts it), and a copy not used
// in a scope is freed when the scope ends. One scope at a time, one calling thread (like the
// scratch buffers above).
class Bf16FixedWeights {
 public:
  explicit Bf16FixedWeights(std::vector<std::pair<const float*, size_t>> ranges);
  ~Bf16FixedWeights() { end(); }
  Bf16FixedWeights(const Bf16FixedWeights&) = delete;
  Bf16FixedWeights& operator=(const Bf16FixedWeights&) = delete;
  void end();  // the weights may change from here on (idempotent)

 private:
  bool open_ = true;
};

// Bytes of bf16 weight copies Bf16FixedWeights keeps now (tests, memory accounting).
size_t bf16_weight_cache_bytes();

// Which GEMM runs each transpose case of the bf16 matmuls: oneDNN's or the hand-written AVX512_BF16
// kernel (gemm_bf16_avx512.h), whichever the measurement on this machine found faster (the hand
// kernel must win by more than 2%; op(A) and op(B) both transposed always stays on oneDNN). The
// first process measures both on one thread (thread CPU time, best of three, a per-thread slice of
// a Llama-135M-sized layer per case) and keeps the figures in sgemm-choice.json (peak_cache.h) so
// every rank and every later run uses the same kernels, and so the same bits. FLOTILLA_BF16_GEMM =
// onednn | avx512 overrides it.
enum Bf16GemmCase { kBf16Forward, kBf16InputGrad, kBf16WeightGrad, kBf16GemmCases };  // NT, NN, TN
struct Bf16GemmChoice {
  bool hand[kBf16GemmCases] = {false, false, false};
  double onednn_gflops[kBf16GemmCases] = {0, 0, 0};  // 0: not measured (override, or no AVX512_BF16)
  double hand_gflops[kBf16GemmCases] = {0, 0, 0};
  std::string source;  // "measured now, kept in ...", "kept in ...", "FLOTILLA_BF16_GEMM=onednn"
};
const Bf16GemmChoice& bf16_gemm_choice();
const char* bf16_gemm_case_name(int c);  // "forward (NT)", ...
// The case's key in sgemm-choice.json: the CPU (brand, family, model), oneDNN's version, the case
// and the hand kernel's revision (figures of an older kernel are not used).
std::string bf16_gemm_choice_key(int c);

// Why bf16 matmuls cannot run with these features, this kernel choice (FLOTILLA_CPU_PATH may
// narrow it) and this oneDNN, naming train.dtype and what is missing; "" when they can.
std::string bf16_matmul_refusal(const CpuFeatures& f, const KernelChoice& choice, const OnednnInfo& lib);
// The same for this process (cpu_features(), blas_info().choice, onednn_info()).
std::string bf16_matmul_refusal();

// The kernel path the bf16 matmuls run on this machine, e.g. "avx512_bf16 (oneDNN 2.6.3 gemm:jit)".
std::string bf16_matmul_path();

}  // namespace flotilla::cpu
