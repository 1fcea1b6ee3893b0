// The CUDA backend: the Backend interface's fp32 kernel families on one GPU, plus the bf16
// variants (engine/cuda/<family>.h) for callers that hold device memory themselves.
//
// Non-obvious decision: this header has no CUDA include, so engine/backend/registry.cpp (the one
// file that knows concrete backends) can create it from plain C++; the stream, cuBLASLt handle and
// scratch live in a Context behind a pointer.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "engine/backend/backend.h"

namespace flotilla::cuda {

class Context;

// Whether a usable CUDA device exists; otherwise *reason says why. Never throws.
bool device_available(std::string* reason);

class CudaBackend final : public Backend {
 public:
  // Binds to the current CUDA device (0 unless the caller set another); throws flotilla::Error
  // when there is none.
  CudaBackend();
  ~CudaBackend() override;

  const char* name() const override { return "cuda"; }
  std::string describe() const override;
  bool supports(BackendFeature feature) const override;
  int threads() const override { return 1; }
  void set_threads(int) override {}
  void set_deterministic(bool on) override;
  bool deterministic() const override;

  // Device memory (cudaMalloc, zero-filled): the caller must not dereference it on the host.
  float* allocate(size_t floats) override;
  void release(float* p) override;
  void fill_zero(float* p, size_t n) override;
  void fill_zero_bytes(void* p, size_t bytes) override;
  size_t alignment() const override { return 256; }
  void copy(void* dst, const void* src, size_t bytes) override;
  // Asynchronous on the stream; a pageable host buffer has been staged when this returns.
  void upload(void* dst, const void* host, size_t bytes) override;
  void download(void* host, const void* src, size_t bytes) override;
  void synchronize() override;
  void* stream() override;

  // Every kernel family in fp32 and bf16 storage (engine/cuda/<family>.h).
#define FLOTILLA_CUDA_FAMILIES(S)                                                                            \
  void encoder_forward(S* out, const int32_t* ids, const S* wte, const S* wpe, const int32_t* pos, int B,    \
                       int T, int C) override;                                                               \
  void encoder_backward(S* dwte, S* dwpe, const S* dout, const int32_t* ids, const int32_t* pos, int B,      \
                        int T, int C) override;                                                              \
  void layernorm_forward(S* out, float* mean, float* rstd, const S* inp, const S* weight, const S* bias,     \
                         long N, int C) override;                                                            \
  void residual_layernorm_forward(S* residual, S* out, float* mean, float* rstd, const S* a, const S* b,     \
                                  const S* weight, const S* bias, long N, int C) override;                   \
  void layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight,       \
                          const float* mean, const float* rstd, long N, int C) override;                     \
  void rmsnorm_forward(S* out, float* rstd, const S* inp, const S* weight, long N, int C, float eps)         \
      override;                                                                                              \
  void residual_rmsnorm_forward(S* residual, S* out, float* rstd, const S* a, const S* b, const S* weight,   \
                                long N, int C, float eps) override;                                          \
  void rmsnorm_backward(S* dinp, S* dweight, const S* dout, const S* inp, const S* weight,                   \
                        const float* rstd, long N, int C) override;                                          \
  void matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int IC, int OC,           \
                      S* gelu_out) override;                                                                 \
  void matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp, const S* weight, int N,   \
                       int IC, int OC) override;                                                             \
  void attention_forward(S* out, float* lse, const S* qkv, const int32_t* pos, int B, int T, int NH,         \
                         int NKV, int HD) override;                                                          \
  void attention_backward(S* dqkv, const S* dout, const S* qkv, const S* out, const float* lse,              \
                          const int32_t* pos, int B, int T, int NH, int NKV, int HD) override;               \
  void attention_cached_forward(S* out, const S* qkv, S* kcache, S* vcache, const int32_t* pos, int row0,    \
                                int B, int T, int NH, int NKV, int HD, int max_len) override;                \
  void rope_forward(S* qkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH, int NKV,        \
                    int HD) override;                                                                        \
  void rope_backward(S* dqkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH, int NKV,      \
                     int HD) override;                                                                       \
  void qk_norm_forward(S* out, float* rstd, const S* inp, const S* qw, const S* kw, long N, int NH, int NKV, \
                       int HD, float eps) override;                                                          \
  void qk_norm_backward(S* dinp, S* dqw, S* dkw, const S* dout, const S* inp, const S* qw, const S* kw,      \
                        const float* rstd, long N, int NH, int NKV, int HD) override;                        \
  void gelu_forward(S* out, const S* inp, size_t n) override;                                                \
  void gelu_backward(S* dinp, const S* inp, const S* dout, size_t n) override;                               \
  void swiglu_forward(S* out, const S* inp, long N, int F) override;                                         \
  void swiglu_backward(S* dinp, const S* dout, const S* inp, long N, int F) override;                        \
  void residual_forward(S* out, const S* a, const S* b, size_t n) override;                                  \
  void softmax_crossentropy_forward(float* losses, float* lse, const S* logits, const int32_t* targets,      \
                                    long N, int V, int Vp) override;                                         \
  void softmax_crossentropy_backward(S* dlogits, const S* logits, const float* lse, const int32_t* targets,  \
                                     float dloss, long N, int V, int Vp) override;                           \
  void gather_target_logits(float* out, const S* logits, const int32_t* targets, long N, int Vp) override;   \
  void lora_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const S* A, int lda, const S* B,     \
                 int ldb, float beta, S* C, int ldc) override;                                         \
  void dropout(S* out, const S* in, long N, int n, float p, uint64_t key, int ld, int col0) override;       \
  void nf4_matmul_forward(S* out, int ldo, const S* inp, const nf4::View& w, const S* bias, int N) override; \
  void nf4_matmul_backward(S* dinp, const S* dout, int ldd, const nf4::View& w, int N, bool accumulate)      \
      override;                                                                                              \
  void nf4_dequantize(S* out, const nf4::View& w) override;
  FLOTILLA_CUDA_FAMILIES(float)
  FLOTILLA_CUDA_FAMILIES(bf16_t)
#undef FLOTILLA_CUDA_FAMILIES
  using Backend::attention_backward;
  using Backend::attention_forward;
  using Backend::encoder_backward;
  using Backend::encoder_forward;
  using Backend::matmul_forward;
  void convert(bf16_t* out, const float* in, size_t n) override;
  void convert(float* out, const bf16_t* in, size_t n) override;
  double sum_values(const float* x, size_t n) override;
  using Backend::adamw_update;
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                    const AdamWArgs& a) override;
  void adamw_update(bf16_t* params, float* master, const float* grads, float* m, float* v, size_t n,
                    const AdamWArgs& a) override;
  void adamw_update(bf16_t* params, float* master, const bf16_t* grads, float* m, float* v, size_t n,
                    const AdamWArgs& a) override;
  double sum_squares(const float* g, size_t n) override;
  void scale_values(float* g, size_t n, float s) override;

  void set_profiling(bool on) override { profiling_ = on; }
  std::vector<KernelTime> profile() const override;
  void reset_profile() override;

  // The stream/cuBLASLt context, for the bf16 kernels and device-side drivers (engine/cuda/*).
  Context& context() { return *ctx_; }

 private:
  enum Family {
    kEncoder,
    kLayernorm,
    kMatmul,
    kAttention,
    kGelu,
    kResidual,
    kSoftmaxCe,
    kRmsnorm,
    kRope,
    kSwiglu,
    kAdamw,
    kGlobalNorm,
    kLora,
    kCount
  };
  class Timer;

  std::unique_ptr<Context> ctx_;
  int device_ = 0;
  bool profiling_ = false;
  std::array<double, kCount> seconds_{};
  std::array<long, kCount> calls_{};
};

}  // namespace flotilla::cuda
