// CpuBackend: forwards each kernel family to engine/cpu/<family>.cpp and times it on request.
//
// Non-obvious decision: the backend owns the thread configuration of the process: OpenMP gets
// `threads` threads and OpenBLAS is pinned to one thread (matmul.cpp splits GEMMs itself), so the
// two thread pools never compete for the same cores.
#include "engine/cpu/cpu_backend.h"

#include <omp.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "engine/core/error.h"
#include "engine/cpu/adamw.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/encoder.h"
#include "engine/cpu/gelu.h"
#include "engine/cpu/global_norm.h"
#include "engine/cpu/layernorm.h"
#include "engine/cpu/lora.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/matmul_bf16.h"
#include "engine/cpu/nf4_matmul.h"
#include "engine/cpu/residual.h"
#include "engine/cpu/rmsnorm.h"
#include "engine/cpu/rope.h"
#include "engine/cpu/simd.h"
#include "engine/cpu/softmax_crossentropy.h"
#include "engine/cpu/swiglu.h"

namespace flotilla::cpu {

// Wall time and the process's CPU time (all threads): on a shared machine the wall time of a
// kernel grows with the other load, its CPU time much less (at one thread not at all), so a
// profile taken under load is read by CPU time (OMP_WAIT_POLICY=passive keeps the threads that
// wait at a barrier from adding their spinning to it at more than one thread).
class CpuBackend::Timer {
 public:
  Timer(CpuBackend* b, Family f) : b_(b->profiling_ ? b : nullptr), f_(f) {
    if (b_ == nullptr) return;
    t0_ = std::chrono::steady_clock::now();
    cpu0_ = process_cpu_seconds();
  }
  ~Timer() {
    if (b_ == nullptr) return;
    b_->seconds_[f_] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    b_->cpu_seconds_[f_] += process_cpu_seconds() - cpu0_;
    b_->calls_[f_] += 1;
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

 private:
  CpuBackend* b_;
  Family f_;
  std::chrono::steady_clock::time_point t0_{};
  double cpu0_ = 0;

  static double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
};

CpuBackend::CpuBackend() { set_threads(0); }

std::string CpuBackend::describe() const {
  std::string s =
      "cpu: " + std::to_string(threads_) + " threads, " + simd_level() + ", BLAS " + blas_core_name();
  if (matmul_dtype_ == DType::kBF16) s += ", bf16 matmuls " + bf16_matmul_path();
  return s;
}

void CpuBackend::set_matmul_dtype(DType t) {
  if (t == DType::kBF16) {
    const std::string why = bf16_matmul_refusal();
    if (!why.empty()) throw_config(why);
  }
  matmul_dtype_ = t;
}

bool CpuBackend::supports(BackendFeature feature) const {
  switch (feature) {
    case BackendFeature::kFp32:
    case BackendFeature::kHostMemory:
    case BackendFeature::kDeterministic:
    case BackendFeature::kProfile:
      return true;
    case BackendFeature::kBf16Storage:
      return false;
  }
  return false;
}

void CpuBackend::set_deterministic(bool on) {
  set_thread_independent_gemm(on);
  if (on == deterministic_) return;
  deterministic_ = on;
  // OMP_DYNAMIC=true would let the runtime shrink a team below threads_; the kernels' own
  // reductions do not depend on the team size, but their speed and the off-mode matmul split do.
  if (on) initial_dynamic_ = omp_get_dynamic();
  omp_set_dynamic(on ? 0 : initial_dynamic_);
}

void CpuBackend::set_threads(int n) {
  // "All cores" honours OMP_NUM_THREADS when the user set it (e.g. to share a machine).
  static const int default_threads =
      std::getenv("OMP_NUM_THREADS") != nullptr ? omp_get_max_threads() : omp_get_num_procs();
  threads_ = n > 0 ? n : default_threads;
  omp_set_num_threads(threads_);
  blas_single_thread();
}

float* CpuBackend::allocate(size_t floats) {
  // Large buffers (parameters, the logits) go on 2 MiB boundaries and ask for transparent huge
  // pages, which cuts TLB misses in the vocabulary-sized passes; small ones only need 64 bytes.
  constexpr size_t kHuge = size_t{2} << 20;
  const bool huge = floats * sizeof(float) >= 2 * kHuge;
  const size_t align = huge ? kHuge : 64;
  const size_t bytes = std::max<size_t>((floats * sizeof(float) + align - 1) / align * align, align);
  void* p = std::aligned_alloc(align, bytes);
  if (p != nullptr && huge) madvise(p, bytes, MADV_HUGEPAGE);
  if (p == nullptr)
    throw Error(ExitCode::kOutOfMemory, "cannot allocate " + std::to_string(bytes >> 20) +
                                            " MiB on the CPU; use a smaller model, batch or sequence length");
  fill_zero(static_cast<float*>(p), floats);
  return static_cast<float*>(p);
}

void CpuBackend::release(float* p) { std::free(p); }

void CpuBackend::fill_zero(float* p, size_t n) {
  // Parallel first touch: pages are faulted in by the threads that will use them.
  const long chunks = static_cast<long>((n + 65535) / 65536);
#pragma omp parallel for schedule(static)
  for (long c = 0; c < chunks; ++c) {
    const size_t i0 = static_cast<size_t>(c) * 65536;
    const size_t len = i0 + 65536 < n ? 65536 : n - i0;
    std::memset(p + i0, 0, len * sizeof(float));
  }
}

// Large fills (zero_grad: every gradient, 121 MB for GPT-2 `small`) are split over the threads:
// one thread alone leaves the others idle at the start of each step.
void CpuBackend::fill_zero_bytes(void* p, size_t bytes) {
  constexpr size_t kChunk = size_t{1} << 20;
  if (bytes < 4 * kChunk || threads_ <= 1) {
    std::memset(p, 0, bytes);
    return;
  }
  const long chunks = static_cast<long>((bytes + kChunk - 1) / kChunk);
  char* base = static_cast<char*>(p);
#pragma omp parallel for schedule(static)
  for (long c = 0; c < chunks; ++c) {
    const size_t at = static_cast<size_t>(c) * kChunk;
    std::memset(base + at, 0, std::min(kChunk, bytes - at));
  }
}
void CpuBackend::copy(void* dst, const void* src, size_t bytes) { std::memcpy(dst, src, bytes); }
void CpuBackend::upload(void* dst, const void* host, size_t bytes) {
  if (dst != host) std::memcpy(dst, host, bytes);
}
void CpuBackend::download(void* host, const void* src, size_t bytes) {
  if (host != src) std::memcpy(host, src, bytes);
}

void CpuBackend::encoder_forward(float* out, const int32_t* ids, const float* wte, const float* wpe,
                                 const int32_t* pos, int B, int T, int C) {
  Timer t(this, kEncoder);
  cpu::encoder_forward(out, ids, wte, wpe, pos, B, T, C);
}
void CpuBackend::encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids,
                                  const int32_t* pos, int B, int T, int C) {
  Timer t(this, kEncoder);
  cpu::encoder_backward(dwte, dwpe, dout, ids, pos, B, T, C);
}
void CpuBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                   const float* weight, const float* bias, long N, int C) {
  Timer t(this, kLayernorm);
  cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
}
void CpuBackend::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                    const float* inp, const float* weight, const float* mean,
                                    const float* rstd, long N, int C) {
  Timer t(this, kLayernorm);
  cpu::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}
void CpuBackend::rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, long N,
                                 int C, float eps) {
  Timer t(this, kRmsnorm);
  cpu::rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
}
void CpuBackend::rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                  const float* weight, const float* rstd, long N, int C) {
  Timer t(this, kRmsnorm);
  cpu::rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
}
void CpuBackend::matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                                int IC, int OC, float* gelu_out) {
  {
    Timer t(this, kMatmul);
    if (matmul_dtype_ == DType::kBF16)
      matmul_forward_bf16(out, inp, weight, bias, N, IC, OC);
    else
      cpu::matmul_forward(out, inp, weight, bias, N, IC, OC);
  }
  if (gelu_out != nullptr) gelu_forward(gelu_out, out, static_cast<size_t>(N) * static_cast<size_t>(OC));
}
void CpuBackend::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                 const float* inp, const float* weight, int N, int IC, int OC) {
  Timer t(this, kMatmul);
  if (matmul_dtype_ == DType::kBF16)
    matmul_backward_bf16(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
  else
    cpu::matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}
void CpuBackend::attention_forward(float* out, float* lse, const float* qkv, const int32_t* pos, int B, int T,
                                   int NH, int NKV, int HD) {
  Timer t(this, kAttention);
  cpu::attention_forward(out, lse, qkv, pos, B, T, NH, NKV, HD);
}
void CpuBackend::attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                                    const float* lse, const int32_t* pos, int B, int T, int NH, int NKV,
                                    int HD) {
  Timer t(this, kAttention);
  cpu::attention_backward(dqkv, dout, qkv, out, lse, pos, B, T, NH, NKV, HD);
}
void CpuBackend::attention_cached_forward(float* out, const float* qkv, float* kcache, float* vcache,
                                          const int32_t* pos, int row0, int B, int T, int NH, int NKV, int HD,
                                          int max_len) {
  Timer t(this, kAttention);
  cpu::attention_cached_forward(out, qkv, kcache, vcache, pos, row0, B, T, NH, NKV, HD, max_len);
}
void CpuBackend::rope_forward(float* qkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH,
                              int NKV, int HD) {
  Timer t(this, kRope);
  cpu::rope_forward(qkv, pos, inv_freq, B, T, NH, NKV, HD);
}
void CpuBackend::rope_backward(float* dqkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH,
                               int NKV, int HD) {
  Timer t(this, kRope);
  cpu::rope_backward(dqkv, pos, inv_freq, B, T, NH, NKV, HD);
}
void CpuBackend::qk_norm_forward(float* out, float* rstd, const float* inp, const float* qw, const float* kw,
                                 long N, int NH, int NKV, int HD, float eps) {
  Timer t(this, kRmsnorm);
  cpu::qk_norm_forward(out, rstd, inp, qw, kw, N, NH, NKV, HD, eps);
}
void CpuBackend::qk_norm_backward(float* dinp, float* dqw, float* dkw, const float* dout, const float* inp,
                                  const float* qw, const float* kw, const float* rstd, long N, int NH,
                                  int NKV, int HD) {
  Timer t(this, kRmsnorm);
  cpu::qk_norm_backward(dinp, dqw, dkw, dout, inp, qw, kw, rstd, N, NH, NKV, HD);
}
void CpuBackend::gelu_forward(float* out, const float* inp, size_t n) {
  Timer t(this, kGelu);
  cpu::gelu_forward(out, inp, n);
}
void CpuBackend::gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  Timer t(this, kGelu);
  cpu::gelu_backward(dinp, inp, dout, n);
}
void CpuBackend::swiglu_forward(float* out, const float* inp, long N, int F) {
  Timer t(this, kSwiglu);
  cpu::swiglu_forward(out, inp, N, F);
}
void CpuBackend::swiglu_backward(float* dinp, const float* dout, const float* inp, long N, int F) {
  Timer t(this, kSwiglu);
  cpu::swiglu_backward(dinp, dout, inp, N, F);
}
void CpuBackend::residual_forward(float* out, const float* a, const float* b, size_t n) {
  Timer t(this, kResidual);
  cpu::residual_forward(out, a, b, n);
}
void CpuBackend::softmax_crossentropy_forward(float* losses, float* lse, const float* logits,
                                              const int32_t* targets, long N, int V, int Vp) {
  Timer t(this, kSoftmaxCe);
  cpu::softmax_crossentropy_forward(losses, lse, logits, targets, N, V, Vp);
}
void CpuBackend::softmax_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                               const int32_t* targets, float dloss, long N, int V, int Vp) {
  Timer t(this, kSoftmaxCe);
  cpu::softmax_crossentropy_backward(dlogits, logits, lse, targets, dloss, N, V, Vp);
}
void CpuBackend::gather_target_logits(float* out, const float* logits, const int32_t* targets, long N,
                                      int Vp) {
  cpu::gather_target_logits(out, logits, targets, N, Vp);
}
double CpuBackend::sum_values(const float* x, size_t n) {
  double sum = 0.0;  // in index order: the mean loss is the same bits for any thread count
  for (size_t i = 0; i < n; ++i) sum += x[i];
  return sum;
}
void CpuBackend::lora_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                           const float* B, int ldb, float beta, float* C, int ldc) {
  Timer t(this, kLora);
  cpu::gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void CpuBackend::dropout(float* out, const float* in, long N, int n, float p, uint64_t key, int ld,
                         int col0) {
  Timer t(this, kLora);
  cpu::dropout(out, in, N, n, p, key, ld, col0);
}
void CpuBackend::nf4_matmul_forward(float* out, int ldo, const float* inp, const nf4::View& w,
                                    const float* bias, int N) {
  Timer t(this, kMatmul);
  cpu::nf4_matmul_forward(out, ldo, inp, w, bias, N, matmul_dtype_ == DType::kBF16);
}
void CpuBackend::nf4_matmul_backward(float* dinp, const float* dout, int ldd, const nf4::View& w, int N,
                                     bool accumulate) {
  Timer t(this, kMatmul);
  cpu::nf4_matmul_backward(dinp, dout, ldd, w, N, accumulate, matmul_dtype_ == DType::kBF16);
}
void CpuBackend::nf4_dequantize(float* out, const nf4::View& w) { cpu::nf4_dequantize(out, w); }
void CpuBackend::adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                              const AdamWArgs& a) {
  Timer t(this, kAdamw);
  cpu::adamw_update(params, grads, m, v, n, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.t, a.grad_scale);
}
double CpuBackend::sum_squares(const float* g, size_t n) {
  Timer t(this, kGlobalNorm);
  return cpu::sum_squares(g, n);
}
void CpuBackend::scale_values(float* g, size_t n, float s) {
  Timer t(this, kGlobalNorm);
  cpu::scale_values(g, n, s);
}

std::vector<KernelTime> CpuBackend::profile() const {
  static const char* names[kCount] = {
      "encoder", "layernorm", "matmul", "attention", "gelu",        "residual", "softmax_crossentropy",
      "rmsnorm", "rope",      "swiglu", "adamw",     "global_norm", "lora"};
  std::vector<KernelTime> out;
  for (int f = 0; f < kCount; ++f)
    out.push_back(KernelTime{names[f], seconds_[f], calls_[f], cpu_seconds_[f]});
  return out;
}

void CpuBackend::reset_profile() {
  seconds_.fill(0);
  cpu_seconds_.fill(0);
  calls_.fill(0);
}

}  // namespace flotilla::cpu
