// The compute backend interface: one interface, one implementation per device (STYLE.md §4).
//
// One non-obvious decision: the interface is the list of kernel families themselves (encoder,
// layernorm, matmul, attention, gelu, residual, softmax_crossentropy, adamw, global_norm), each
// with the CPU kernel's shapes and semantics, rather than a generic tensor-op graph. The model
// calls them in order, like llm.c; a CUDA backend implements the same families (its kernels are
// tested against the CPU ones op by op) and says through supports() what else it can do (bf16
// storage, non-host memory). Pointers passed to a backend point into memory it allocated.
// Only engine/backend/registry.cpp knows the concrete backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace flotilla {

enum class BackendFeature {
  kFp32,           // fp32 storage and arithmetic
  kBf16Storage,    // bf16 weights/activations with fp32 master weights
  kHostMemory,     // allocate() returns host memory the caller may read and write directly
  kDeterministic,  // bit-identical results run to run for the same thread/device configuration
  kProfile,        // per-kernel-family timers (set_profiling / profile)
};

// Time spent in one kernel family since the last reset_profile().
struct KernelTime {
  std::string family;
  double seconds = 0;
  long calls = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or "cuda": the name used in run.device and by the registry.
  virtual const char* name() const = 0;
  // One line for logs and `bench`: threads, instruction set, BLAS library and kernel.
  virtual std::string describe() const = 0;
  // Whether this backend has `feature`.
  virtual bool supports(BackendFeature feature) const = 0;

  // Worker threads the kernels use; set_threads(0) means all cores of the machine.
  virtual int threads() const = 0;
  virtual void set_threads(int n) = 0;

  // Deterministic mode (train.deterministic): results bit-identical run to run. cpu: matmuls
  // in fixed chunks independent of the thread count, OpenMP teams of exactly threads() (no
  // dynamic adjustment); cuda: cuBLASLt algorithms without split-K reductions, one algorithm per
  // shape for the whole run. Off: whatever is fastest (cpu: bit-identical for one thread count).
  virtual void set_deterministic(bool on) = 0;
  virtual bool deterministic() const = 0;

  // Zero-filled buffer of `floats` floats, aligned for SIMD; release() frees it.
  virtual float* allocate(size_t floats) = 0;
  virtual void release(float* p) = 0;
  // p[0..n) = 0.
  virtual void fill_zero(float* p, size_t n) = 0;
  // Waits for queued work (the CPU runs synchronously; CUDA streams will not).
  virtual void synchronize() = 0;

  // --- kernel families; shapes and semantics as documented in engine/cpu/<family>.h ---

  // out (B,T,C) = wte[inp] + wpe[t]  /  dwte, dwpe += scatter of dout.
  virtual void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                               int T, int C) = 0;
  virtual void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T,
                                int C) = 0;
  // LayerNorm over C with eps 1e-5; backward accumulates into dinp, dweight, dbias.
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, long N, int C) = 0;
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, const float* mean, const float* rstd,
                                  long N, int C) = 0;
  // out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias  /  dinp overwritten, dweight and dbias accumulate.
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                              int IC, int OC) = 0;
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, int N, int IC, int OC) = 0;
  // Causal attention on qkv (B,T,3C) with NH heads; lse (B,NH,T); backward overwrites dqkv.
  virtual void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) = 0;
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                                  const float* lse, int B, int T, int C, int NH) = 0;
  // GELU (tanh approximation); backward may run in place (dinp == dout).
  virtual void gelu_forward(float* out, const float* inp, size_t n) = 0;
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) = 0;
  // out = a + b.
  virtual void residual_forward(float* out, const float* a, const float* b, size_t n) = 0;
  // Per-row cross-entropy over the first V of Vp columns; backward writes dloss * (p - onehot).
  virtual void softmax_crossentropy_forward(float* losses, float* lse, const float* logits,
                                            const int32_t* targets, long N, int V, int Vp) = 0;
  virtual void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                             const int32_t* targets, float dloss, long N, int V, int Vp) = 0;
  // One AdamW step (PyTorch semantics) on n parameters; weight_decay 0 for non-decaying tensors.
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr,
                            float beta1, float beta2, float eps, float weight_decay, int64_t t) = 0;
  // sum of g^2 (double, independent of the thread count) / g *= s.
  virtual double sum_squares(const float* g, size_t n) = 0;
  virtual void scale_values(float* g, size_t n, float s) = 0;

  // --- profiling (when supports(kProfile)) ---
  virtual void set_profiling(bool on) = 0;
  virtual std::vector<KernelTime> profile() const = 0;
  virtual void reset_profile() = 0;
};

// A buffer owned by a backend, released when it goes out of scope.
class BackendBuffer {
 public:
  BackendBuffer() = default;
  BackendBuffer(Backend& backend, size_t floats)
      : backend_(&backend), data_(backend.allocate(floats)), size_(floats) {}
  ~BackendBuffer() { reset(); }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  BackendBuffer(BackendBuffer&& o) noexcept : backend_(o.backend_), data_(o.data_), size_(o.size_) {
    o.data_ = nullptr;
    o.size_ = 0;
  }
  BackendBuffer& operator=(BackendBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      backend_ = o.backend_;
      data_ = o.data_;
      size_ = o.size_;
      o.data_ = nullptr;
      o.size_ = 0;
    }
    return *this;
  }
  void reset() {
    if (data_ != nullptr) backend_->release(data_);
    data_ = nullptr;
    size_ = 0;
  }
  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Backend* backend_ = nullptr;
  float* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace flotilla
