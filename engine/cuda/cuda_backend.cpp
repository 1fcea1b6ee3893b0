// CudaBackend: forwards each kernel family to engine/cuda/<family>.cu on one stream.
//
// Non-obvious decision: profiling synchronises the stream around each call (host clock), which
// serialises the GPU but attributes time to the right family; with profiling off nothing waits
// except the calls that return a value to the host (sum_squares) and encoder_backward's token copy.
#include "engine/cuda/cuda_backend.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "engine/core/error.h"
#include "engine/cuda/adamw.h"
#include "engine/cuda/attention.h"
#include "engine/cuda/context.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/encoder.h"
#include "engine/cuda/gelu.h"
#include "engine/cuda/global_norm.h"
#include "engine/cuda/layernorm.h"
#include "engine/cuda/lora.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/nf4.h"
#include "engine/cuda/residual.h"
#include "engine/cuda/rmsnorm.h"
#include "engine/cuda/rope.h"
#include "engine/cuda/softmax_crossentropy.h"
#include "engine/cuda/swiglu.h"
#include "engine/launch/gpu_pinning.h"

namespace flotilla::cuda {

bool device_available(std::string* reason) { return cuda_device_present(reason); }

class CudaBackend::Timer {
 public:
  Timer(CudaBackend* b, Family f) : b_(b->profiling_ ? b : nullptr), f_(f) {
    if (b_ == nullptr) return;
    b_->synchronize();
    t0_ = std::chrono::steady_clock::now();
  }
  ~Timer() {
    if (b_ == nullptr) return;
    cudaStreamSynchronize(b_->ctx_->stream());  // no throw from a destructor; errors surface on the next call
    b_->seconds_[f_] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    b_->calls_[f_] += 1;
  }
  Timer(const Timer&) = delete;
  Timer& operator=(const Timer&) = delete;

 private:
  CudaBackend* b_;
  Family f_;
  std::chrono::steady_clock::time_point t0_;
};

CudaBackend::CudaBackend() {
  std::string reason;
  if (!cuda_device_present(&reason)) throw_config("run.device = cuda but no CUDA device: " + reason);
  // One GPU per rank (engine/launch/gpu_pinning.h): selected before the first allocation.
  int count = 0;
  check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  const char* local = std::getenv("LOCAL_RANK");
  device_ = rank_cuda_device(std::getenv(kCudaDeviceEnv), local != nullptr ? std::atoi(local) : 0, count);
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  ctx_ = std::make_unique<Context>();
}

void CudaBackend::set_deterministic(bool on) { ctx_->deterministic = on; }
bool CudaBackend::deterministic() const { return ctx_->deterministic; }

CudaBackend::~CudaBackend() = default;

std::string CudaBackend::describe() const {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device_) != cudaSuccess) return "cuda (device properties unavailable)";
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  char buf[512];
  std::snprintf(
      buf, sizeof(buf),
      "cuda device %d: %s, sm_%d%d, %d SMs, %.1f GiB; CUDA runtime %d.%d, driver %d.%d, cuBLASLt %zu",
      device_, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
      static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), runtime / 1000,
      (runtime % 1000) / 10, driver / 1000, (driver % 1000) / 10, cublasLtGetVersion());
  return buf;
}

bool CudaBackend::supports(BackendFeature feature) const {
  switch (feature) {
    case BackendFeature::kFp32:
    case BackendFeature::kBf16Storage:
    case BackendFeature::kDeterministic:
    case BackendFeature::kProfile:
      return true;
    case BackendFeature::kHostMemory:
      return false;
  }
  return false;
}

float* CudaBackend::allocate(size_t floats) {
  void* p = nullptr;
  const size_t bytes = (floats > 0 ? floats : 1) * sizeof(float);
  check_cuda(cudaMalloc(&p, bytes), "cudaMalloc");
  check_cuda(cudaMemsetAsync(p, 0, bytes, ctx_->stream()), "cudaMemsetAsync");
  return static_cast<float*>(p);
}

void CudaBackend::release(float* p) {
  if (p == nullptr) return;
  cudaStreamSynchronize(ctx_->stream());
  cudaFree(p);
}

void CudaBackend::fill_zero(float* p, size_t n) {
  if (n > 0) check_cuda(cudaMemsetAsync(p, 0, n * sizeof(float), ctx_->stream()), "cudaMemsetAsync");
}

void CudaBackend::fill_zero_bytes(void* p, size_t bytes) {
  if (bytes > 0) check_cuda(cudaMemsetAsync(p, 0, bytes, ctx_->stream()), "cudaMemsetAsync");
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0)
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx_->stream()),
               "cudaMemcpyAsync (device)");
}

void CudaBackend::upload(void* dst, const void* host, size_t bytes) {
  // From pageable memory the call returns once the bytes are staged, so `host` may be reused.
  if (bytes > 0)
    check_cuda(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, ctx_->stream()),
               "cudaMemcpyAsync (to device)");
}

void CudaBackend::download(void* host, const void* src, size_t bytes) {
  if (bytes > 0)
    check_cuda(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, ctx_->stream()),
               "cudaMemcpyAsync (to host)");
  ctx_->synchronize();
}

void CudaBackend::synchronize() { ctx_->synchronize(); }
void* CudaBackend::stream() { return ctx_->stream(); }

namespace {
// The engine's host bf16 and CUDA's __nv_bfloat16 have one layout.
inline float* dev(float* p) { return p; }
inline const float* dev(const float* p) { return p; }
inline bf16* dev(bf16_t* p) { return reinterpret_cast<bf16*>(p); }
inline const bf16* dev(const bf16_t* p) { return reinterpret_cast<const bf16*>(p); }
}  // namespace

#define FLOTILLA_CUDA_FAMILIES(S)                                                                            \
  void CudaBackend::encoder_forward(S* out, const int32_t* ids, const S* wte, const S* wpe,                  \
                                    const int32_t* pos, int B, int T, int C) {                               \
    Timer t(this, kEncoder);                                                                                 \
    cuda::encoder_forward(*ctx_, dev(out), ids, dev(wte), dev(wpe), pos, B, T, C);                           \
  }                                                                                                          \
  void CudaBackend::encoder_backward(S* dwte, S* dwpe, const S* dout, const int32_t* ids,                    \
                                     const int32_t* pos, int B, int T, int C) {                              \
    Timer t(this, kEncoder);                                                                                 \
    cuda::encoder_backward(*ctx_, dev(dwte), dev(dwpe), dev(dout), ids, pos, B, T, C);                       \
  }                                                                                                          \
  void CudaBackend::layernorm_forward(S* out, float* mean, float* rstd, const S* inp, const S* weight,       \
                                      const S* bias, long N, int C) {                                        \
    Timer t(this, kLayernorm);                                                                               \
    cuda::layernorm_forward(*ctx_, dev(out), mean, rstd, dev(inp), dev(weight), dev(bias), N, C);            \
  }                                                                                                          \
  void CudaBackend::residual_layernorm_forward(S* residual, S* out, float* mean, float* rstd, const S* a,    \
                                               const S* b, const S* weight, const S* bias, long N, int C) {  \
    Timer t(this, kLayernorm);                                                                               \
    cuda::residual_layernorm_forward(*ctx_, dev(residual), dev(out), mean, rstd, dev(a), dev(b),             \
                                     dev(weight), dev(bias), N, C);                                          \
  }                                                                                                          \
  void CudaBackend::layernorm_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,           \
                                       const S* weight, const float* mean, const float* rstd, long N,        \
                                       int C) {                                                              \
    Timer t(this, kLayernorm);                                                                               \
    cuda::layernorm_backward(*ctx_, dev(dinp), dev(dweight), dev(dbias), dev(dout), dev(inp), dev(weight),   \
                             mean, rstd, N, C);                                                              \
  }                                                                                                          \
  void CudaBackend::rmsnorm_forward(S* out, float* rstd, const S* inp, const S* weight, long N, int C,       \
                                    float eps) {                                                             \
    Timer t(this, kRmsnorm);                                                                                 \
    cuda::rmsnorm_forward(*ctx_, dev(out), rstd, dev(inp), dev(weight), N, C, eps);                          \
  }                                                                                                          \
  void CudaBackend::residual_rmsnorm_forward(S* residual, S* out, float* rstd, const S* a, const S* b,       \
                                             const S* weight, long N, int C, float eps) {                    \
    Timer t(this, kRmsnorm);                                                                                 \
    cuda::residual_rmsnorm_forward(*ctx_, dev(residual), dev(out), rstd, dev(a), dev(b), dev(weight), N, C,  \
                                   eps);                                                                     \
  }                                                                                                          \
  void CudaBackend::rmsnorm_backward(S* dinp, S* dweight, const S* dout, const S* inp, const S* weight,      \
                                     const float* rstd, long N, int C) {                                     \
    Timer t(this, kRmsnorm);                                                                                 \
    cuda::rmsnorm_backward(*ctx_, dev(dinp), dev(dweight), dev(dout), dev(inp), dev(weight), rstd, N, C);    \
  }                                                                                                          \
  void CudaBackend::matmul_forward(S* out, const S* inp, const S* weight, const S* bias, int N, int IC,      \
                                   int OC, S* gelu_out) {                                                    \
    Timer t(this, kMatmul);                                                                                  \
    cuda::matmul_forward(*ctx_, dev(out), dev(inp), dev(weight), dev(bias), N, IC, OC, dev(gelu_out));       \
  }                                                                                                          \
  void CudaBackend::matmul_backward(S* dinp, S* dweight, S* dbias, const S* dout, const S* inp,              \
                                    const S* weight, int N, int IC, int OC) {                                \
    Timer t(this, kMatmul);                                                                                  \
    cuda::matmul_backward(*ctx_, dev(dinp), dev(dweight), dev(dbias), dev(dout), dev(inp), dev(weight), N,   \
                          IC, OC);                                                                           \
  }                                                                                                          \
  void CudaBackend::attention_forward(S* out, float* lse, const S* qkv, const int32_t* pos, int B, int T,    \
                                      int NH, int NKV, int HD) {                                             \
    Timer t(this, kAttention);                                                                               \
    cuda::attention_forward(*ctx_, dev(out), lse, dev(qkv), pos, B, T, NH, NKV, HD);                         \
  }                                                                                                          \
  void CudaBackend::attention_backward(S* dqkv, const S* dout, const S* qkv, const S* out, const float* lse, \
                                       const int32_t* pos, int B, int T, int NH, int NKV, int HD) {          \
    Timer t(this, kAttention);                                                                               \
    cuda::attention_backward(*ctx_, dev(dqkv), dev(dout), dev(qkv), dev(out), lse, pos, B, T, NH, NKV, HD);  \
  }                                                                                                          \
  void CudaBackend::attention_cached_forward(S* out, const S* qkv, S* kcache, S* vcache, const int32_t* pos,    \
                                             int row0, int B, int T, int NH, int NKV, int HD, int max_len) {   \
    Timer t(this, kAttention);                                                                               \
    cuda::attention_cached_forward(*ctx_, dev(out), dev(qkv), dev(kcache), dev(vcache), pos, row0, B, T, NH,  \
                                   NKV, HD, max_len);                                                        \
  }                                                                                                          \
  void CudaBackend::rope_forward(S* qkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH,    \
                                 int NKV, int HD) {                                                          \
    Timer t(this, kRope);                                                                                    \
    cuda::rope_forward(*ctx_, dev(qkv), pos, inv_freq, B, T, NH, NKV, HD);                                   \
  }                                                                                                          \
  void CudaBackend::rope_backward(S* dqkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH,  \
                                  int NKV, int HD) {                                                         \
    Timer t(this, kRope);                                                                                    \
    cuda::rope_backward(*ctx_, dev(dqkv), pos, inv_freq, B, T, NH, NKV, HD);                                 \
  }                                                                                                          \
  void CudaBackend::qk_norm_forward(S* out, float* rstd, const S* inp, const S* qw, const S* kw, long N,     \
                                    int NH, int NKV, int HD, float eps) {                                    \
    Timer t(this, kRmsnorm);                                                                                 \
    cuda::qk_norm_forward(*ctx_, dev(out), rstd, dev(inp), dev(qw), dev(kw), N, NH, NKV, HD, eps);           \
  }                                                                                                          \
  void CudaBackend::qk_norm_backward(S* dinp, S* dqw, S* dkw, const S* dout, const S* inp, const S* qw,      \
                                     const S* kw, const float* rstd, long N, int NH, int NKV, int HD) {      \
    Timer t(this, kRmsnorm);                                                                                 \
    cuda::qk_norm_backward(*ctx_, dev(dinp), dev(dqw), dev(dkw), dev(dout), dev(inp), dev(qw), dev(kw),      \
                           rstd, N, NH, NKV, HD);                                                            \
  }                                                                                                          \
  void CudaBackend::gelu_forward(S* out, const S* inp, size_t n) {                                           \
    Timer t(this, kGelu);                                                                                    \
    cuda::gelu_forward(*ctx_, dev(out), dev(inp), n);                                                        \
  }                                                                                                          \
  void CudaBackend::gelu_backward(S* dinp, const S* inp, const S* dout, size_t n) {                          \
    Timer t(this, kGelu);                                                                                    \
    cuda::gelu_backward(*ctx_, dev(dinp), dev(inp), dev(dout), n);                                           \
  }                                                                                                          \
  void CudaBackend::swiglu_forward(S* out, const S* inp, long N, int F) {                                    \
    Timer t(this, kSwiglu);                                                                                  \
    cuda::swiglu_forward(*ctx_, dev(out), dev(inp), N, F);                                                   \
  }                                                                                                          \
  void CudaBackend::swiglu_backward(S* dinp, const S* dout, const S* inp, long N, int F) {                   \
    Timer t(this, kSwiglu);                                                                                  \
    cuda::swiglu_backward(*ctx_, dev(dinp), dev(dout), dev(inp), N, F);                                      \
  }                                                                                                          \
  void CudaBackend::residual_forward(S* out, const S* a, const S* b, size_t n) {                             \
    Timer t(this, kResidual);                                                                                \
    cuda::residual_forward(*ctx_, dev(out), dev(a), dev(b), n);                                              \
  }                                                                                                          \
  void CudaBackend::softmax_crossentropy_forward(float* losses, float* lse, const S* logits,                 \
                                                 const int32_t* targets, long N, int V, int Vp) {            \
    Timer t(this, kSoftmaxCe);                                                                               \
    cuda::softmax_crossentropy_forward(*ctx_, losses, lse, dev(logits), targets, N, V, Vp);                  \
  }                                                                                                          \
  void CudaBackend::softmax_crossentropy_backward(S* dlogits, const S* logits, const float* lse,             \
                                                  const int32_t* targets, float dloss, long N, int V,        \
                                                  int Vp) {                                                  \
    Timer t(this, kSoftmaxCe);                                                                               \
    cuda::softmax_crossentropy_backward(*ctx_, dev(dlogits), dev(logits), lse, targets, dloss, N, V, Vp);    \
  }                                                                                                          \
  void CudaBackend::gather_target_logits(float* out, const S* logits, const int32_t* targets, long N,        \
                                         int Vp) {                                                           \
    Timer t(this, kSoftmaxCe);                                                                               \
    cuda::gather_target_logits(*ctx_, out, dev(logits), targets, N, Vp);                                     \
  }                                                                                                          \
  void CudaBackend::lora_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const S* A, int lda,          \
                              const S* B, int ldb, float beta, S* C, int ldc) {                             \
    Timer t(this, kLora);                                                                                    \
    cuda::gemm_row_major(*ctx_, ta, tb, M, N, K, alpha, dev(A), lda, dev(B), ldb, beta, dev(C), ldc);         \
  }                                                                                                          \
  void CudaBackend::dropout(S* out, const S* in, long N, int n, float p, uint64_t key, int ld, int col0) {   \
    Timer t(this, kLora);                                                                                    \
    cuda::dropout(*ctx_, dev(out), dev(in), N, n, p, key, ld, col0);                                         \
  }                                                                                                          \
  void CudaBackend::nf4_matmul_forward(S* out, int ldo, const S* inp, const nf4::View& w, const S* bias,     \
                                       int N) {                                                              \
    Timer t(this, kMatmul);                                                                                  \
    cuda::nf4_matmul_forward(*ctx_, dev(out), ldo, dev(inp), w, dev(bias), N);                               \
  }                                                                                                          \
  void CudaBackend::nf4_matmul_backward(S* dinp, const S* dout, int ldd, const nf4::View& w, int N,          \
                                        bool accumulate) {                                                   \
    Timer t(this, kMatmul);                                                                                  \
    cuda::nf4_matmul_backward(*ctx_, dev(dinp), dev(dout), ldd, w, N, accumulate);                           \
  }                                                                                                          \
  void CudaBackend::nf4_dequantize(S* out, const nf4::View& w) {                                             \
    Timer t(this, kMatmul);                                                                                  \
    cuda::nf4_dequantize(*ctx_, dev(out), w);                                                                \
  }
FLOTILLA_CUDA_FAMILIES(float)
FLOTILLA_CUDA_FAMILIES(bf16_t)
#undef FLOTILLA_CUDA_FAMILIES

void CudaBackend::convert(bf16_t* out, const float* in, size_t n) { cuda::convert(*ctx_, dev(out), in, n); }
void CudaBackend::convert(float* out, const bf16_t* in, size_t n) { cuda::convert(*ctx_, out, dev(in), n); }
double CudaBackend::sum_values(const float* x, size_t n) { return cuda::sum_values(*ctx_, x, n); }

void CudaBackend::adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                               const AdamWArgs& a) {
  Timer tm(this, kAdamw);
  cuda::adamw_update(*ctx_, params, grads, m, v, n, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.t,
                     a.grad_scale);
}
void CudaBackend::adamw_update(bf16_t* params, float* master, const float* grads, float* m, float* v,
                               size_t n, const AdamWArgs& a) {
  Timer tm(this, kAdamw);
  cuda::adamw_update_mixed<float>(*ctx_, dev(params), master, grads, m, v, n, a.grad_scale, a.lr, a.beta1,
                                  a.beta2, a.eps, a.weight_decay, a.t, a.rounding_seed);
}
void CudaBackend::adamw_update(bf16_t* params, float* master, const bf16_t* grads, float* m, float* v,
                               size_t n, const AdamWArgs& a) {
  Timer tm(this, kAdamw);
  cuda::adamw_update_mixed<bf16>(*ctx_, dev(params), master, dev(grads), m, v, n, a.grad_scale, a.lr, a.beta1,
                                 a.beta2, a.eps, a.weight_decay, a.t, a.rounding_seed);
}

double CudaBackend::sum_squares(const float* g, size_t n) {
  Timer t(this, kGlobalNorm);
  return cuda::sum_squares<float>(*ctx_, g, n);
}

void CudaBackend::scale_values(float* g, size_t n, float s) {
  Timer t(this, kGlobalNorm);
  cuda::scale_values(*ctx_, g, n, s);
}

std::vector<KernelTime> CudaBackend::profile() const {
  static const char* const kNames[kCount] = {
      "encoder", "layernorm", "matmul", "attention", "gelu",        "residual", "softmax_crossentropy",
      "rmsnorm", "rope",      "swiglu", "adamw",     "global_norm", "lora"};
  std::vector<KernelTime> out;
  for (int f = 0; f < kCount; ++f)
    if (calls_[static_cast<size_t>(f)] > 0)
      out.push_back({kNames[f], seconds_[static_cast<size_t>(f)], calls_[static_cast<size_t>(f)]});
  return out;
}

void CudaBackend::reset_profile() {
  seconds_.fill(0);
  calls_.fill(0);
}

}  // namespace flotilla::cuda
