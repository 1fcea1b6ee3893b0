// The CPU backend: fp32 kernels vectorised for AVX-512/AVX2 (runtime dispatch), threaded with
// OpenMP, matmuls on single-threaded OpenBLAS calls split across the OpenMP threads (or, with
// set_matmul_dtype(kBF16), on oneDNN's bf16 matmul split the same way: matmul_bf16.h).
#pragma once

#include <array>
#include <chrono>

#include "engine/backend/backend.h"

namespace flotilla::cpu {

class CpuBackend final : public Backend {
 public:
  CpuBackend();

  const char* name() const override { return "cpu"; }
  std::string describe() const override;
  bool supports(BackendFeature feature) const override;
  int threads() const override { return threads_; }
  void set_threads(int n) override;
  void set_deterministic(bool on) override;
  bool deterministic() const override { return deterministic_; }
  // kBF16: the linear layers run matmul_bf16.h (oneDNN); refused per bf16_matmul_refusal().
  void set_matmul_dtype(DType t) override;
  DType matmul_dtype() const override { return matmul_dtype_; }

  float* allocate(size_t floats) override;
  void release(float* p) override;
  void fill_zero(float* p, size_t n) override;
  void fill_zero_bytes(void* p, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void upload(void* dst, const void* host, size_t bytes) override;
  void download(void* host, const void* src, size_t bytes) override;
  void synchronize() override {}

  // The fp32 kernel families (the bf16 overloads are Backend's: unsupported on the CPU).
  using Backend::attention_backward;
  using Backend::attention_forward;
  using Backend::encoder_backward;
  using Backend::encoder_forward;
  using Backend::gather_target_logits;
  using Backend::gelu_backward;
  using Backend::gelu_forward;
  using Backend::layernorm_backward;
  using Backend::layernorm_forward;
  using Backend::matmul_backward;
  using Backend::matmul_forward;
  using Backend::qk_norm_backward;
  using Backend::qk_norm_forward;
  using Backend::residual_forward;
  using Backend::rmsnorm_backward;
  using Backend::rmsnorm_forward;
  using Backend::rope_backward;
  using Backend::rope_forward;
  using Backend::softmax_crossentropy_backward;
  using Backend::softmax_crossentropy_forward;
  using Backend::swiglu_backward;
  using Backend::swiglu_forward;
  void encoder_forward(float* out, const int32_t* ids, const float* wte, const float* wpe, const int32_t* pos,
                       int B, int T, int C) override;
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids, const int32_t* pos,
                        int B, int T, int C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                         const float* bias, long N, int C) override;
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, const float* mean, const float* rstd, long N, int C) override;
  void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, long N, int C,
                       float eps) override;
  void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                        const float* rstd, long N, int C) override;
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                      int OC, float* gelu_out) override;
  void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                       const float* weight, int N, int IC, int OC) override;
  void attention_forward(float* out, float* lse, const float* qkv, const int32_t* pos, int B, int T, int NH,
                         int NKV, int HD) override;
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* lse, const int32_t* pos, int B, int T, int NH, int NKV,
                          int HD) override;
  using Backend::attention_cached_forward;
  void attention_cached_forward(float* out, const float* qkv, float* kcache, float* vcache,
                                const int32_t* pos, int row0, int B, int T, int NH, int NKV, int HD,
                                int max_len) override;
  void rope_forward(float* qkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH, int NKV,
                    int HD) override;
  void rope_backward(float* dqkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH, int NKV,
                     int HD) override;
  void qk_norm_forward(float* out, float* rstd, const float* inp, const float* qw, const float* kw, long N,
                       int NH, int NKV, int HD, float eps) override;
  void qk_norm_backward(float* dinp, float* dqw, float* dkw, const float* dout, const float* inp,
                        const float* qw, const float* kw, const float* rstd, long N, int NH, int NKV,
                        int HD) override;
  void gelu_forward(float* out, const float* inp, size_t n) override;
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override;
  void swiglu_forward(float* out, const float* inp, long N, int F) override;
  void swiglu_backward(float* dinp, const float* dout, const float* inp, long N, int F) override;
  void residual_forward(float* out, const float* a, const float* b, size_t n) override;
  void softmax_crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                    long N, int V, int Vp) override;
  void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                     const int32_t* targets, float dloss, long N, int V, int Vp) override;
  void gather_target_logits(float* out, const float* logits, const int32_t* targets, long N, int Vp) override;
  double sum_values(const float* x, size_t n) override;
  using Backend::dropout;
  using Backend::lora_gemm;
  using Backend::nf4_dequantize;
  using Backend::nf4_matmul_backward;
  using Backend::nf4_matmul_forward;
  void lora_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda, const float* B,
                 int ldb, float beta, float* C, int ldc) override;
  void dropout(float* out, const float* in, long N, int n, float p, uint64_t key, int ld, int col0) override;
  // QLoRA's 4-bit base (nf4_matmul.h): fp32 storage, the products in matmul_dtype().
  void nf4_matmul_forward(float* out, int ldo, const float* inp, const nf4::View& w, const float* bias,
                          int N) override;
  void nf4_matmul_backward(float* dinp, const float* dout, int ldd, const nf4::View& w, int N,
                           bool accumulate) override;
  void nf4_dequantize(float* out, const nf4::View& w) override;
  using Backend::adamw_update;
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                    const AdamWArgs& a) override;
  double sum_squares(const float* g, size_t n) override;
  void scale_values(float* g, size_t n, float s) override;

  void set_profiling(bool on) override { profiling_ = on; }
  std::vector<KernelTime> profile() const override;
  void reset_profile() override;

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

  int threads_ = 1;
  bool deterministic_ = false;
  DType matmul_dtype_ = DType::kF32;
  int initial_dynamic_ = 0;  // omp_get_dynamic() before set_deterministic(true)
  bool profiling_ = false;
  std::array<double, kCount> seconds_{};
  std::array<double, kCount> cpu_seconds_{};
  std::array<long, kCount> calls_{};
};

}  // namespace flotilla::cpu
