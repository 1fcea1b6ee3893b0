// Helpers for the GPU tests: the no-device skip, device buffers of float or bf16 filled from host
// fp32 vectors, bf16 rounding on the host, and a max-error comparison with per-dtype tolerances.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "engine/backend/registry.h"
#include "engine/core/rng.h"
#include "engine/cuda/cuda_check.h"

namespace gpu_test {

using bf16 = __nv_bfloat16;

// True (after printing the SKIP line and checking the registry's error) when no device is present.
inline bool skip_without_gpu() {
  std::string reason;
  if (flotilla::cuda::cuda_device_present(&reason)) return false;
  CHECK_THROWS(flotilla::get_backend("cuda"), "run.device = cuda but no CUDA device");
  std::printf("SKIP: no CUDA device (%s)\n", reason.c_str());
  return true;
}

inline float round_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  u &= 0xFFFF0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}

inline std::vector<float> random_vec(size_t n, uint64_t seed, float scale = 1.0f, bool bf16_exact = false) {
  flotilla::Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = static_cast<float>(rng.normal()) * scale;
    if (bf16_exact) x = round_bf16(x);
  }
  return v;
}

template <typename T>
class DeviceBuf {
 public:
  explicit DeviceBuf(size_t n) : n_(n) {
    flotilla::cuda::check_cuda(cudaMalloc(&p_, (n > 0 ? n : 1) * sizeof(T)), "cudaMalloc (test)");
    flotilla::cuda::check_cuda(cudaMemset(p_, 0, (n > 0 ? n : 1) * sizeof(T)), "cudaMemset (test)");
    sync();
  }
  explicit DeviceBuf(const std::vector<float>& host) : DeviceBuf(host.size()) { upload(host); }
  ~DeviceBuf() { cudaFree(p_); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  T* get() { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<float>& host) {
    std::vector<T> t(host.size());
    for (size_t i = 0; i < host.size(); ++i) t[i] = static_cast<T>(host[i]);
    flotilla::cuda::check_cuda(cudaMemcpy(p_, t.data(), t.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
    sync();
  }
  // The kernels run on the Context's non-blocking stream, which the legacy-stream copies above do
  // not order against: wait for the whole device.
  static void sync() { flotilla::cuda::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (test)"); }
  std::vector<float> download() const {
    std::vector<T> t(n_);
    flotilla::cuda::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (test)");
    flotilla::cuda::check_cuda(cudaMemcpy(t.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    std::vector<float> out(n_);
    for (size_t i = 0; i < n_; ++i) out[i] = static_cast<float>(t[i]);
    return out;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

inline DeviceBuf<int32_t>* new_ids(const std::vector<int32_t>& ids) {
  auto* b = new DeviceBuf<int32_t>(ids.size());
  flotilla::cuda::check_cuda(cudaMemcpy(b->get(), ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), "ids");
  DeviceBuf<int32_t>::sync();
  return b;
}

// Tolerances per storage type: |got - want| <= atol * max|want| + rtol * |want|.
template <typename T>
struct Tol {
  static constexpr double rtol = 1e-4, atol = 1e-5;
};
template <>
struct Tol<bf16> {
  static constexpr double rtol = 2e-2, atol = 1e-2;
};

template <typename T>
void compare(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
  double scale = 0.0, worst = 0.0;
  size_t at = 0;
  for (float w : want) scale = std::fmax(scale, std::fabs(w));
  bool ok = got.size() == want.size() && scale > 0.0;
  for (size_t i = 0; ok && i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double bound = Tol<T>::atol * scale + Tol<T>::rtol * std::fabs(want[i]);
    if (err / bound > worst) {
      worst = err / bound;
      at = i;
    }
    if (!(err <= bound)) ok = false;
  }
  CHECK_MSG(ok, "%s (%s): worst error %.3g of the bound at %zu (got %.7g, want %.7g, scale %.3g)", what,
            sizeof(T) == 4 ? "fp32" : "bf16", worst, at, at < got.size() ? got[at] : 0.0,
            at < want.size() ? want[at] : 0.0, scale);
  std::printf("  %-36s %s max error %.3f of tolerance\n", what, sizeof(T) == 4 ? "fp32" : "bf16", worst);
}

}  // namespace gpu_test
