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
#include "engine/cuda/matmul.h"
#include "engine/cuda/residual.h"
#include "engine/cuda/softmax_crossentropy.h"
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
  std::snprintf(buf, sizeof(buf), "cuda device %d: %s, sm_%d%d, %d SMs, %.1f GiB; CUDA runtime %d.%d, driver %d.%d, cuBLASLt %zu",
                device_, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), runtime / 1000,
                (runtime % 1000) / 10, driver / 1000, (driver % 1000) / 10, cublasLtGetVersion());
  return buf;
}

bool CudaBackend::supports(BackendFeature feature) const {
  switch (feature) {
    case BackendFeature::kFp32:
    case BackendFeature::kDeterministic:
    case BackendFeature::kProfile:
      return true;
    case BackendFeature::kBf16Storage:  // bf16 kernels exist (engine/cuda/*.h) but not behind this float* interface
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

void CudaBackend::synchronize() { ctx_->synchronize(); }

void CudaBackend::encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T,
                                  int C) {
  Timer t(this, kEncoder);
  cuda::encoder_forward<float>(*ctx_, out, inp, wte, wpe, B, T, C);
}

void CudaBackend::encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T,
                                   int C) {
  Timer t(this, kEncoder);
  cuda::encoder_backward<float>(*ctx_, dwte, dwpe, dout, inp, B, T, C);
}

void CudaBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                    const float* bias, long N, int C) {
  Timer t(this, kLayernorm);
  cuda::layernorm_forward<float>(*ctx_, out, mean, rstd, inp, weight, bias, N, C);
}

void CudaBackend::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                     const float* weight, const float* mean, const float* rstd, long N, int C) {
  Timer t(this, kLayernorm);
  cuda::layernorm_backward<float>(*ctx_, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

void CudaBackend::matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                                 int OC) {
  Timer t(this, kMatmul);
  cuda::matmul_forward<float>(*ctx_, out, inp, weight, bias, N, IC, OC);
}

void CudaBackend::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* weight, int N, int IC, int OC) {
  Timer t(this, kMatmul);
  cuda::matmul_backward<float>(*ctx_, dinp, dweight, dbias, dout, inp, weight, N, IC, OC);
}

void CudaBackend::attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  Timer t(this, kAttention);
  cuda::attention_forward<float>(*ctx_, out, lse, qkv, B, T, C, NH);
}

void CudaBackend::attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                                     const float* lse, int B, int T, int C, int NH) {
  Timer t(this, kAttention);
  cuda::attention_backward<float>(*ctx_, dqkv, dout, qkv, out, lse, B, T, C, NH);
}

void CudaBackend::gelu_forward(float* out, const float* inp, size_t n) {
  Timer t(this, kGelu);
  cuda::gelu_forward<float>(*ctx_, out, inp, n);
}

void CudaBackend::gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  Timer t(this, kGelu);
  cuda::gelu_backward<float>(*ctx_, dinp, inp, dout, n);
}

void CudaBackend::residual_forward(float* out, const float* a, const float* b, size_t n) {
  Timer t(this, kResidual);
  cuda::residual_forward<float>(*ctx_, out, a, b, n);
}

void CudaBackend::softmax_crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                               long N, int V, int Vp) {
  Timer t(this, kSoftmaxCe);
  cuda::softmax_crossentropy_forward<float>(*ctx_, losses, lse, logits, targets, N, V, Vp);
}

void CudaBackend::softmax_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                                const int32_t* targets, float dloss, long N, int V, int Vp) {
  Timer t(this, kSoftmaxCe);
  cuda::softmax_crossentropy_backward<float>(*ctx_, dlogits, logits, lse, targets, dloss, N, V, Vp);
}

void CudaBackend::adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                               float beta2, float eps, float weight_decay, int64_t t) {
  Timer tm(this, kAdamw);
  cuda::adamw_update(*ctx_, params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
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
  static const char* const kNames[kCount] = {"encoder", "layernorm", "matmul", "attention", "gelu",
                                             "residual", "softmax_crossentropy", "adamw", "global_norm"};
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
