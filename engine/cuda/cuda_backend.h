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
  void synchronize() override;

  void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T,
                       int C) override;
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T,
                        int C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, long N, int C) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, long N, int C) override;
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                      int OC) override;
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int IC, int OC) override;
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) override;
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* lse, int B, int T, int C, int NH) override;
  void gelu_forward(float* out, const float* inp, size_t n) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override;
  void residual_forward(float* out, const float* a, const float* b, size_t n) override;
  void softmax_crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                    long N, int V, int Vp) override;
  void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                     const int32_t* targets, float dloss, long N, int V, int Vp) override;
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int64_t t) override;
  double sum_squares(const float* g, size_t n) override;
  void scale_values(float* g, size_t n, float s) override;

  void set_profiling(bool on) override { profiling_ = on; }
  std::vector<KernelTime> profile() const override;
  void reset_profile() override;

  // The stream/cuBLASLt context, for the bf16 kernels and device-side drivers (engine/cuda/*).
  Context& context() { return *ctx_; }

 private:
  enum Family { kEncoder, kLayernorm, kMatmul, kAttention, kGelu, kResidual, kSoftmaxCe, kAdamw, kGlobalNorm, kCount };
  class Timer;

  std::unique_ptr<Context> ctx_;
  int device_ = 0;
  bool profiling_ = false;
  std::array<double, kCount> seconds_{};
  std::array<long, kCount> calls_{};
};

}  // namespace flotilla::cuda
