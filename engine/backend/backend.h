// The compute backend interface: one interface, one implementation per device (STYLE.md §4).
//
// One non-obvious decision: the interface is the list of kernel families themselves (encoder,
// layernorm, rmsnorm, matmul, attention, rope, qk_norm, gelu, swiglu, residual,
// softmax_crossentropy, adamw, global_norm), each with the CPU kernel's shapes and semantics,
// rather than a generic tensor-op graph. Each architecture's model (engine/model/*_pass.cpp) calls
// them in order, like llm.c, once, for every backend: the families that hold activations come in
// two storage types, float and bf16_t (arithmetic and statistics are fp32 in both), so the same
// pass code runs in fp32 on the CPU and in bf16 or fp32 on a GPU. A backend says through
// supports() what it can do (bf16 storage, host memory); a family it lacks for a type throws
// Error(kConfig) naming it. Pointers passed to a backend point into memory it allocated, except
// the *host* arguments of upload/download. Only engine/backend/registry.cpp knows the concrete
// backends.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/bf16.h"
#include "engine/core/nf4.h"
#include "engine/core/targets.h"

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
  double cpu_seconds = -1;  // the process's CPU time in it, where the backend measures it (CPU); else -1
};

// The arguments of one AdamW update call (Backend::adamw_update).
struct AdamWArgs {
  float lr = 0, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0;
  int64_t t = 1;               // step, >= 1: the bias corrections 1 - beta^t
  float grad_scale = 1.0f;     // gradients are multiplied by this as they are read (clipping)
  uint32_t rounding_seed = 0;  // bf16 working copy: 0 = round to nearest even, else stochastic
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

  // Mixed precision on fp32 storage (the CPU's train.dtype = "bf16"): with kBF16 the fp32
  // matmul_forward / matmul_backward round their operands to bf16 and sum the products in fp32;
  // parameters, gradients, activations and the optimizer stay fp32. Throws Error(kConfig), naming
  // train.dtype and what is missing, where this backend or machine cannot (the default: kF32 only;
  // a GPU gets bf16 through bf16 storage instead, kBf16Storage).
  virtual void set_matmul_dtype(DType t);
  virtual DType matmul_dtype() const { return DType::kF32; }

  // --- memory ---
  // Zero-filled buffer of `floats` floats, aligned for SIMD; release() frees it.
  virtual float* allocate(size_t floats) = 0;
  virtual void release(float* p) = 0;
  // p[0..n) = 0.
  virtual void fill_zero(float* p, size_t n) = 0;
  void* allocate_bytes(size_t bytes) { return allocate((bytes + 3) / 4); }
  void release_bytes(void* p) { release(static_cast<float*>(p)); }
  virtual void fill_zero_bytes(void* p, size_t bytes) = 0;
  // Alignment (bytes) the model's arenas give every tensor they carve.
  virtual size_t alignment() const { return 64; }
  // dst = src, both backend memory (may not overlap).
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Host -> backend memory; the host buffer may be reused as soon as this returns.
  virtual void upload(void* dst, const void* host, size_t bytes) = 0;
  // Backend -> host memory, after every queued kernel (synchronises).
  virtual void download(void* host, const void* src, size_t bytes) = 0;
  // Waits for queued work (the CPU runs synchronously; CUDA streams will not).
  virtual void synchronize() = 0;
  // The stream a device backend queues on (cudaStream_t), for the collectives that must order
  // after its kernels (ProcessGroup::set_device_stream); nullptr on the CPU.
  virtual void* stream() { return nullptr; }

  // --- kernel families; shapes and semantics as documented in engine/cpu/<family>.h ---
  // S is float or bf16_t: the storage of activations, weights and gradients.

  // out (B,T,C) = wte[ids] + wpe[pos]; pos == nullptr: position t of each row; wpe == nullptr: no
  // position term; ids < 0 contribute 0 (a row another TP rank holds). Backward: dwte, dwpe +=
  // scatter of dout (ids < 0 skipped; dwpe may be null).
  virtual void encoder_forward(float* out, const int32_t* ids, const float* wte, const float* wpe,
                               const int32_t* pos, int B, int T, int C) = 0;
  virtual void encoder_forward(bf16_t* out, const int32_t* ids, const bf16_t* wte, const bf16_t* wpe,
                               const int32_t* pos, int B, int T, int C);
  virtual void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids,
                                const int32_t* pos, int B, int T, int C) = 0;
  virtual void encoder_backward(bf16_t* dwte, bf16_t* dwpe, const bf16_t* dout, const int32_t* ids,
                                const int32_t* pos, int B, int T, int C);
  // LayerNorm over C with eps 1e-5 (mean, rstd fp32); backward accumulates into dinp, dweight,
  // dbias. residual_layernorm_forward: residual = a + b, then out = layernorm(residual).
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, long N, int C) = 0;
  virtual void layernorm_forward(bf16_t* out, float* mean, float* rstd, const bf16_t* inp,
                                 const bf16_t* weight, const bf16_t* bias, long N, int C);
  virtual void residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd,
                                          const float* a, const float* b, const float* weight,
                                          const float* bias, long N, int C);
  virtual void residual_layernorm_forward(bf16_t* residual, bf16_t* out, float* mean, float* rstd,
                                          const bf16_t* a, const bf16_t* b, const bf16_t* weight,
                                          const bf16_t* bias, long N, int C);
  virtual void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                                  const float* inp, const float* weight, const float* mean, const float* rstd,
                                  long N, int C) = 0;
  virtual void layernorm_backward(bf16_t* dinp, bf16_t* dweight, bf16_t* dbias, const bf16_t* dout,
                                  const bf16_t* inp, const bf16_t* weight, const float* mean,
                                  const float* rstd, long N, int C);
  // RMSNorm over C: out = inp * rstd * weight, rstd = 1/sqrt(mean(inp^2) + eps) in fp32 (kept for
  // backward); backward accumulates into dinp and dweight (skipped when null). residual_rmsnorm_forward:
  // residual = a + b, then out = rmsnorm(residual).
  virtual void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, long N, int C,
                               float eps);
  virtual void rmsnorm_forward(bf16_t* out, float* rstd, const bf16_t* inp, const bf16_t* weight, long N,
                               int C, float eps);
  virtual void residual_rmsnorm_forward(float* residual, float* out, float* rstd, const float* a,
                                        const float* b, const float* weight, long N, int C, float eps);
  virtual void residual_rmsnorm_forward(bf16_t* residual, bf16_t* out, float* rstd, const bf16_t* a,
                                        const bf16_t* b, const bf16_t* weight, long N, int C, float eps);
  virtual void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                                const float* weight, const float* rstd, long N, int C);
  virtual void rmsnorm_backward(bf16_t* dinp, bf16_t* dweight, const bf16_t* dout, const bf16_t* inp,
                                const bf16_t* weight, const float* rstd, long N, int C);
  // out (N,OC) = inp (N,IC) @ weight (OC,IC)^T + bias (bias may be null); gelu_out != nullptr also
  // writes gelu(out) (fused where the backend can). Backward: dinp overwritten, dweight and dbias
  // accumulate; each is skipped when null (a frozen weight: LoRA's base).
  virtual void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                              int IC, int OC, float* gelu_out) = 0;
  virtual void matmul_forward(bf16_t* out, const bf16_t* inp, const bf16_t* weight, const bf16_t* bias, int N,
                              int IC, int OC, bf16_t* gelu_out);
  virtual void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, int N, int IC, int OC) = 0;
  virtual void matmul_backward(bf16_t* dinp, bf16_t* dweight, bf16_t* dbias, const bf16_t* dout,
                               const bf16_t* inp, const bf16_t* weight, int N, int IC, int OC);
  // Causal grouped-query attention. qkv (B,T,(NH+2*NKV)*HD): per token [q heads | k heads | v
  // heads]; query head h reads K/V head h / (NH/NKV); out (B,T,NH*HD); lse (B,NH,T) fp32. pos ==
  // nullptr: query t sees keys 0..t; else keys t - pos[t] .. t of its row (packed documents).
  // Backward overwrites dqkv; the K/V gradient is summed over each group's query heads.
  virtual void attention_forward(float* out, float* lse, const float* qkv, const int32_t* pos, int B, int T,
                                 int NH, int NKV, int HD) = 0;
  virtual void attention_forward(bf16_t* out, float* lse, const bf16_t* qkv, const int32_t* pos, int B, int T,
                                 int NH, int NKV, int HD);
  virtual void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                                  const float* lse, const int32_t* pos, int B, int T, int NH, int NKV,
                                  int HD) = 0;
  virtual void attention_backward(bf16_t* dqkv, const bf16_t* dout, const bf16_t* qkv, const bf16_t* out,
                                  const float* lse, const int32_t* pos, int B, int T, int NH, int NKV,
                                  int HD);
  // Attention of new tokens against a KV cache (inference; no backward). qkv as attention_forward:
  // B rows of T new tokens, q / k / v heads (RoPE already applied); kcache and vcache (rows, max_len,
  // NKV*HD) per layer. First every new token's k and v are written into cache row row0 + b at its
  // absolute position pos[b*T + t] (pos: B*T ints in backend memory, each < max_len); then query
  // (b, t) attends over positions 0 .. pos[b*T + t] of its cache row. A right-padded prefill writes
  // junk at the padded positions; the row's next decode step overwrites each before any query reads it.
  virtual void attention_cached_forward(float* out, const float* qkv, float* kcache, float* vcache,
                                        const int32_t* pos, int row0, int B, int T, int NH, int NKV, int HD,
                                        int max_len);
  virtual void attention_cached_forward(bf16_t* out, const bf16_t* qkv, bf16_t* kcache, bf16_t* vcache,
                                        const int32_t* pos, int row0, int B, int T, int NH, int NKV, int HD,
                                        int max_len);
  // Rotate-half RoPE in place on the q and k heads of qkv (layout as attention): element j of a head
  // pairs with j + HD/2, angle = pos * inv_freq[j mod HD/2] (pos null: t); inv_freq (HD/2) fp32 in
  // backend memory. Backward rotates d(q), d(k) by the negative angle, in place.
  virtual void rope_forward(float* qkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH,
                            int NKV, int HD);
  virtual void rope_forward(bf16_t* qkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH,
                            int NKV, int HD);
  virtual void rope_backward(float* dqkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH,
                             int NKV, int HD);
  virtual void rope_backward(bf16_t* dqkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH,
                             int NKV, int HD);
  // Per-head RMSNorm of q and k (Qwen 3): out = inp with every q head normalised and scaled by
  // qw (HD), every k head by kw, v copied; rstd (N, NH+NKV) fp32. Backward overwrites dinp (v
  // copied through) and accumulates dqw, dkw (skipped when null).
  virtual void qk_norm_forward(float* out, float* rstd, const float* inp, const float* qw, const float* kw,
                               long N, int NH, int NKV, int HD, float eps);
  virtual void qk_norm_forward(bf16_t* out, float* rstd, const bf16_t* inp, const bf16_t* qw,
                               const bf16_t* kw, long N, int NH, int NKV, int HD, float eps);
  virtual void qk_norm_backward(float* dinp, float* dqw, float* dkw, const float* dout, const float* inp,
                                const float* qw, const float* kw, const float* rstd, long N, int NH, int NKV,
                                int HD);
  virtual void qk_norm_backward(bf16_t* dinp, bf16_t* dqw, bf16_t* dkw, const bf16_t* dout, const bf16_t* inp,
                                const bf16_t* qw, const bf16_t* kw, const float* rstd, long N, int NH,
                                int NKV, int HD);
  // GELU (tanh approximation); backward may run in place (dinp == dout).
  virtual void gelu_forward(float* out, const float* inp, size_t n) = 0;
  virtual void gelu_forward(bf16_t* out, const bf16_t* inp, size_t n);
  virtual void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) = 0;
  virtual void gelu_backward(bf16_t* dinp, const bf16_t* inp, const bf16_t* dout, size_t n);
  // SwiGLU: out (N,F) = silu(gate) * up with inp (N,2F) = [gate | up] per row; backward writes
  // dinp (N,2F) from dout (N,F).
  virtual void swiglu_forward(float* out, const float* inp, long N, int F);
  virtual void swiglu_forward(bf16_t* out, const bf16_t* inp, long N, int F);
  virtual void swiglu_backward(float* dinp, const float* dout, const float* inp, long N, int F);
  virtual void swiglu_backward(bf16_t* dinp, const bf16_t* dout, const bf16_t* inp, long N, int F);
  // out = a + b (out may alias a or b).
  virtual void residual_forward(float* out, const float* a, const float* b, size_t n) = 0;
  virtual void residual_forward(bf16_t* out, const bf16_t* a, const bf16_t* b, size_t n);
  // Per-row cross-entropy over the first V of Vp columns (losses, lse fp32). targets[r] ==
  // kIgnoreTarget: loss 0, gradient 0; other targets[r] < 0: the target column is on another TP
  // rank (loss = lse, no one-hot in backward). Backward writes dloss * (p - onehot), in place
  // when dlogits == logits; gather_target_logits: out[r] = logits[r, targets[r]] (0 when < 0).
  virtual void softmax_crossentropy_forward(float* losses, float* lse, const float* logits,
                                            const int32_t* targets, long N, int V, int Vp) = 0;
  virtual void softmax_crossentropy_forward(float* losses, float* lse, const bf16_t* logits,
                                            const int32_t* targets, long N, int V, int Vp);
  virtual void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                             const int32_t* targets, float dloss, long N, int V, int Vp) = 0;
  virtual void softmax_crossentropy_backward(bf16_t* dlogits, const bf16_t* logits, const float* lse,
                                             const int32_t* targets, float dloss, long N, int V, int Vp);
  virtual void gather_target_logits(float* out, const float* logits, const int32_t* targets, long N, int Vp);
  virtual void gather_target_logits(float* out, const bf16_t* logits, const int32_t* targets, long N, int Vp);
  // LoRA's adapter path (engine/model/lora.h). lora_gemm: C (M x N, rows ldc apart) = alpha op(A) op(B)
  // + beta C on row-major matrices with leading dimensions: op(A) = A (M x K, rows lda apart) or, with
  // ta, A^T of an A stored K x M; op(B) likewise (K x N, or N x K stored, with tb); fp32 arithmetic.
  // The adapters' products read and write the base projections' columns in place through the
  // leading dimensions (a fused q|k|v or gate|up output, or its gradient) and accumulate with beta =
  // 1, so no slice is ever copied. dropout: out = in * keep / (1 - p), keep from
  // engine/core/lora_mask.h (may run in place; the same call is its own backward). in and out are
  // (N, n); element (r, j) draws mask index r * ld + col0 + j, so a tensor-parallel slice of columns
  // draws the whole tensor's mask.
  virtual void lora_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                         const float* B, int ldb, float beta, float* C, int ldc);
  virtual void lora_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const bf16_t* A, int lda,
                         const bf16_t* B, int ldb, float beta, bf16_t* C, int ldc);
  virtual void dropout(float* out, const float* in, long N, int n, float p, uint64_t key, int ld, int col0);
  virtual void dropout(bf16_t* out, const bf16_t* in, long N, int n, float p, uint64_t key, int ld, int col0);
  // QLoRA's frozen 4-bit base (engine/core/nf4.h: a View of one module's slice, in this backend's
  // memory). nf4_matmul_forward: out (N rows, ldo apart; columns [0, w.rows)) = inp (N, w.cols) W^T
  // + bias (w.rows floats/values, may be null), overwritten; W is dequantised tile by tile into fast
  // memory, never whole; products in the compute dtype (bf16 storage: bf16; fp32 storage:
  // matmul_dtype()), summed in fp32. nf4_matmul_backward: dinp (N, w.cols) = dout (N rows, ldd
  // apart; columns [0, w.rows)) W, added into dinp when accumulate (the fused q|k|v input gradient
  // sums three modules). nf4_dequantize: out (w.rows x w.cols, row-major) = W (export, tests).
  virtual void nf4_matmul_forward(float* out, int ldo, const float* inp, const nf4::View& w, const float* bias,
                                  int N);
  virtual void nf4_matmul_forward(bf16_t* out, int ldo, const bf16_t* inp, const nf4::View& w,
                                  const bf16_t* bias, int N);
  virtual void nf4_matmul_backward(float* dinp, const float* dout, int ldd, const nf4::View& w, int N,
                                   bool accumulate);
  virtual void nf4_matmul_backward(bf16_t* dinp, const bf16_t* dout, int ldd, const nf4::View& w, int N,
                                   bool accumulate);
  virtual void nf4_dequantize(float* out, const nf4::View& w);
  virtual void nf4_dequantize(bf16_t* out, const nf4::View& w);
  // fp32 <-> bf16 (round to nearest even).
  virtual void convert(bf16_t* out, const float* in, size_t n);
  virtual void convert(float* out, const bf16_t* in, size_t n);
  // sum of x in double, in a fixed order (the same result for any thread count); synchronises.
  virtual double sum_values(const float* x, size_t n);
  // One AdamW step (PyTorch semantics, engine/cpu/adamw.h) on n parameters, the gradients
  // multiplied by a.grad_scale as they are read; weight_decay 0 for non-decaying tensors. The mixed
  // forms update fp32 master weights from fp32 or bf16 gradients and write the bf16 working copy
  // in the same pass (round to nearest, or stochastically with a.rounding_seed != 0).
  virtual void adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                            const AdamWArgs& a) = 0;
  virtual void adamw_update(bf16_t* params, float* master, const float* grads, float* m, float* v, size_t n,
                            const AdamWArgs& a);
  virtual void adamw_update(bf16_t* params, float* master, const bf16_t* grads, float* m, float* v, size_t n,
                            const AdamWArgs& a);
  void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int64_t t) {
    adamw_update(params, grads, m, v, n, AdamWArgs{lr, beta1, beta2, eps, weight_decay, t});
  }
  // sum of g^2 (double, independent of the thread count) / g *= s.
  virtual double sum_squares(const float* g, size_t n) = 0;
  virtual void scale_values(float* g, size_t n, float s) = 0;

  // --- the original GPT-2-shaped entry points (callers and tests of the fp32 kernels) ---
  void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T,
                       int C) {
    encoder_forward(out, inp, wte, wpe, nullptr, B, T, C);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T,
                        int C) {
    encoder_backward(dwte, dwpe, dout, inp, nullptr, B, T, C);
  }
  void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                      int OC) {
    matmul_forward(out, inp, weight, bias, N, IC, OC, static_cast<float*>(nullptr));
  }
  // qkv (B,T,3C), NH heads of C/NH.
  void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
    attention_forward(out, lse, qkv, nullptr, B, T, NH, NH, C / NH);
  }
  void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                          const float* lse, int B, int T, int C, int NH) {
    attention_backward(dqkv, dout, qkv, out, lse, nullptr, B, T, NH, NH, C / NH);
  }

  // --- profiling (when supports(kProfile)) ---
  virtual void set_profiling(bool on) = 0;
  virtual std::vector<KernelTime> profile() const = 0;
  virtual void reset_profile() = 0;

 protected:
  // Throws Error(kConfig): this backend has no `family` kernel for `type` storage.
  [[noreturn]] void unsupported(const char* family, const char* type) const;
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
  size_t size() const { return size_; }  // floats (4-byte units)
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(data_);
  }

 private:
  Backend* backend_ = nullptr;
  float* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace flotilla
