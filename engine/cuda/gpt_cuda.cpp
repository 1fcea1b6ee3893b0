// CudaGpt: GptModel's kernel sequence (engine/model/gpt_pass.cpp) over device arenas, templated on
// the storage type. Non-obvious decisions: the GELU output is kept per layer (GPU memory is
// plentiful next to the CPU case, and it saves a recompute), the residual add is fused into the
// following LayerNorm (residual_layernorm_forward), and the logits buffer is reused in place for
// d(logits) as in the CPU model.
#include "engine/cuda/gpt_cuda.h"

#include <array>
#include <cmath>
#include <string>
#include <utility>

#include "engine/core/error.h"
#include "engine/cuda/adamw.h"
#include "engine/cuda/attention.h"
#include "engine/cuda/context.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/encoder.h"
#include "engine/cuda/gelu.h"
#include "engine/cuda/global_norm.h"
#include "engine/cuda/layernorm.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/residual.h"
#include "engine/cuda/softmax_crossentropy.h"
#include "engine/train/adamw.h"

namespace flotilla::cuda {
namespace {

// One cudaMalloc, carved in 256-byte aligned pieces; counts bytes when base is null.
class Arena {
 public:
  explicit Arena(size_t bytes = 0) {
    if (bytes > 0) check_cuda(cudaMalloc(&base_, bytes), "cudaMalloc (CudaGpt arena)");
    cap_ = bytes;
  }
  ~Arena() {
    if (base_) cudaFree(base_);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  template <typename T>
  T* take(size_t count) {
    const size_t at = used_;
    used_ += (count * sizeof(T) + 255) / 256 * 256;
    if (base_ == nullptr) return nullptr;
    if (used_ > cap_) throw Error(ExitCode::kInternal, "CudaGpt: arena layout overflow");
    return reinterpret_cast<T*>(static_cast<char*>(base_) + at);
  }
  size_t used() const { return used_; }
  void* base() const { return base_; }

 private:
  void* base_ = nullptr;
  size_t cap_ = 0, used_ = 0;
};

template <typename T>
struct Acts {
  T *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
  float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *att_lse;
  T *encoded, *lnf, *logits, *proj, *dresidual, *dln, *dbig;
  float *lnf_mean, *lnf_rstd, *losses, *loss_lse;
  int32_t *inputs, *targets;
};

template <typename T>
Acts<T> carve_acts(Arena& a, const GptDims& d, int B, int T_, bool recompute) {
  // With recompute, the per-block activations exist once (slot 0, rebuilt before each block's
  // backward); only the residual stream (residual3: every block's output) is kept per layer.
  const size_t Lall = static_cast<size_t>(d.n_layer), C = static_cast<size_t>(d.n_embd);
  const size_t L = recompute ? 1 : Lall;
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T_), NH = static_cast<size_t>(d.n_head);
  const size_t Vp = static_cast<size_t>(d.padded_vocab);
  Acts<T> x{};
  x.ln1 = a.take<T>(L * N * C);
  x.qkv = a.take<T>(L * N * 3 * C);
  x.atty = a.take<T>(L * N * C);
  x.residual2 = a.take<T>(L * N * C);
  x.ln2 = a.take<T>(L * N * C);
  x.fch = a.take<T>(L * N * 4 * C);
  x.fch_gelu = a.take<T>(L * N * 4 * C);
  x.residual3 = a.take<T>(Lall * N * C);
  x.ln1_mean = a.take<float>(L * N);
  x.ln1_rstd = a.take<float>(L * N);
  x.ln2_mean = a.take<float>(L * N);
  x.ln2_rstd = a.take<float>(L * N);
  x.att_lse = a.take<float>(L * NH * N);
  x.encoded = a.take<T>(N * C);
  x.lnf = a.take<T>(N * C);
  x.logits = a.take<T>(N * Vp);
  x.proj = a.take<T>(N * C);
  x.dresidual = a.take<T>(N * C);
  x.dln = a.take<T>(N * C);
  x.dbig = a.take<T>(N * 4 * C);
  x.lnf_mean = a.take<float>(N);
  x.lnf_rstd = a.take<float>(N);
  x.losses = a.take<float>(N);
  x.loss_lse = a.take<float>(N);
  x.inputs = a.take<int32_t>(N);
  x.targets = a.take<int32_t>(N);
  return x;
}

size_t param_count(const GptDims& d) { return num_parameters(d); }

}  // namespace

struct CudaGpt::Impl {
  CudaBackend* be = nullptr;
  Context* ctx = nullptr;
  GptDims d;
  int B = 0, T = 0;
  CudaGptOptions opt;
  size_t n = 0;
  std::array<size_t, kNumParamTensors> offsets{};
  std::unique_ptr<Arena> params, optim, acts;
  void* p = nullptr;  // T* parameters
  void* g = nullptr;  // T* gradients
  float *master = nullptr, *m = nullptr, *v = nullptr;
  // ZeRO-1: m and v cover [shard_begin, shard_begin + shard_count) only; the vector update()
  // writes in fp32 (master or p) has `padded` >= n values for the in-place all-gather.
  size_t shard_begin = 0, shard_count = 0, padded = 0;
  Acts<float> af{};
  Acts<bf16> ab{};
  CudaGpt::BackwardHook hook;  // set_backward_hook

  // backward = false: forward and loss only (evaluation; gradients untouched). accumulate: add
  // to the gradients instead of zeroing them first. dloss = loss_scale / N per row.
  template <typename S>
  float run(Acts<S>& a, const int32_t* inputs, const int32_t* targets, bool backward, bool accumulate,
            float loss_scale);
  template <typename S>
  S* P(int i) {
    return static_cast<S*>(p) + offsets[static_cast<size_t>(i)];
  }
  template <typename S>
  S* G(int i) {
    return static_cast<S*>(g) + offsets[static_cast<size_t>(i)];
  }
};

// Bytes of the parameter+gradient arena and of the optimizer arena (Impl allocates exactly these).
size_t round256(size_t b) { return (b + 255) / 256 * 256; }
size_t param_arena_bytes(size_t n, size_t padded, bool use_bf16) {
  const size_t es = use_bf16 ? 2 : 4;
  return round256((use_bf16 ? n : padded) * es) + round256(n * es);
}
size_t optim_arena_bytes(size_t padded, size_t shard, bool use_bf16) {
  return (use_bf16 ? round256(padded * 4) : 0) + 2 * round256(shard * 4);
}

size_t CudaGpt::predicted_bytes(const GptDims& dims, int B, int T, bool use_bf16, bool recompute, size_t shard_count,
                                size_t padded_params) {
  const size_t n = param_count(dims);
  const size_t padded = padded_params > n ? padded_params : n, shard = shard_count > 0 ? shard_count : n;
  Arena count;
  if (use_bf16)
    carve_acts<bf16>(count, dims, B, T, recompute);
  else
    carve_acts<float>(count, dims, B, T, recompute);
  return param_arena_bytes(n, padded, use_bf16) + optim_arena_bytes(padded, shard, use_bf16) + count.used();
}

CudaGpt::CudaGpt(CudaBackend& backend, const GptDims& dims, int B, int T, const CudaGptOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.be = &backend;
  s.ctx = &backend.context();
  s.d = dims;
  s.B = B;
  s.T = T;
  s.opt = options;
  s.n = param_count(dims);
  if (T > dims.max_seq_len) throw_config("CudaGpt: T " + std::to_string(T) + " exceeds max_seq_len");
  s.ctx->deterministic = options.deterministic;
  const auto sizes = param_sizes(dims);
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    s.offsets[static_cast<size_t>(i)] = off;
    off += sizes[static_cast<size_t>(i)];
  }
  const size_t es = options.bf16 ? 2 : 4;
  s.padded = options.padded_params > s.n ? options.padded_params : s.n;
  s.shard_begin = options.shard_begin;
  s.shard_count = options.shard_count > 0 ? options.shard_count : s.n;
  if (options.shard_count > 0 && options.stochastic_rounding != 0)
    throw Error(ExitCode::kInternal, "CudaGpt: a ZeRO shard with stochastic rounding would round differently on "
                                     "each rank");
  const size_t pbytes = param_arena_bytes(s.n, s.padded, options.bf16);
  s.params = std::make_unique<Arena>(pbytes);
  s.p = s.params->take<char>((options.bf16 ? s.n : s.padded) * es);
  s.g = s.params->take<char>(s.n * es);
  const size_t obytes = optim_arena_bytes(s.padded, s.shard_count, options.bf16);
  s.optim = std::make_unique<Arena>(obytes);
  if (options.bf16) s.master = s.optim->take<float>(s.padded);
  s.m = s.optim->take<float>(s.shard_count);
  s.v = s.optim->take<float>(s.shard_count);
  Arena count;
  if (options.bf16)
    carve_acts<bf16>(count, dims, B, T, options.recompute);
  else
    carve_acts<float>(count, dims, B, T, options.recompute);
  s.acts = std::make_unique<Arena>(count.used());
  if (options.bf16)
    s.ab = carve_acts<bf16>(*s.acts, dims, B, T, options.recompute);
  else
    s.af = carve_acts<float>(*s.acts, dims, B, T, options.recompute);
  check_cuda(cudaMemsetAsync(s.params->base(), 0, pbytes, s.ctx->stream()), "cudaMemsetAsync (params)");
  check_cuda(cudaMemsetAsync(s.optim->base(), 0, obytes, s.ctx->stream()),
             "cudaMemsetAsync (optimizer)");
  s.ctx->synchronize();
}

CudaGpt::~CudaGpt() {
  if (impl_ && impl_->ctx) cudaStreamSynchronize(impl_->ctx->stream());
}

size_t CudaGpt::parameter_bytes() const { return impl_->params->used(); }
size_t CudaGpt::optimizer_bytes() const { return impl_->optim->used(); }
size_t CudaGpt::activation_bytes() const { return impl_->acts->used(); }

void CudaGpt::set_params(const float* host) {
  Impl& s = *impl_;
  float* dst = s.opt.bf16 ? s.master : static_cast<float*>(s.p);
  check_cuda(cudaMemcpyAsync(dst, host, s.n * sizeof(float), cudaMemcpyHostToDevice, s.ctx->stream()),
             "cudaMemcpyAsync (parameters to device)");
  if (s.opt.bf16) convert(*s.ctx, static_cast<bf16*>(s.p), s.master, s.n);
  s.ctx->synchronize();
}

void CudaGpt::get_params(float* host) const {
  const Impl& s = *impl_;
  const float* src = s.opt.bf16 ? s.master : static_cast<const float*>(s.p);
  check_cuda(cudaMemcpyAsync(host, src, s.n * sizeof(float), cudaMemcpyDeviceToHost, s.ctx->stream()),
             "cudaMemcpyAsync (parameters to host)");
  s.ctx->synchronize();
}

template <typename S>
float CudaGpt::Impl::run(Acts<S>& a, const int32_t* inputs, const int32_t* targets, bool backward, bool accumulate,
                         float loss_scale) {
  Context& c = *ctx;
  const int L = d.n_layer, C = d.n_embd, NH = d.n_head, Vp = d.padded_vocab, V = d.vocab_size;
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  const int n_ = static_cast<int>(N);
  const long Nl = static_cast<long>(N);
  const size_t C_ = static_cast<size_t>(C), NC = N * C_;
  for (size_t i = 0; i < N; ++i)
    if (inputs[i] < 0 || inputs[i] >= V || targets[i] < 0 || targets[i] >= V)
      throw_data("token id outside the vocabulary at position " + std::to_string(i));
  check_cuda(cudaMemcpyAsync(a.inputs, inputs, N * sizeof(int32_t), cudaMemcpyHostToDevice, c.stream()),
             "cudaMemcpyAsync (inputs)");
  check_cuda(cudaMemcpyAsync(a.targets, targets, N * sizeof(int32_t), cudaMemcpyHostToDevice, c.stream()),
             "cudaMemcpyAsync (targets)");
  if (backward && !accumulate)
    check_cuda(cudaMemsetAsync(g, 0, n * sizeof(S), c.stream()), "cudaMemsetAsync (zero_grad)");

  auto lp = [&](int i, int l, size_t per) { return P<S>(i) + static_cast<size_t>(l) * per; };
  auto lg = [&](int i, int l, size_t per) { return G<S>(i) + static_cast<size_t>(l) * per; };
  // Block activations of layer l live in slot k(l): l, or 0 with recompute. The residual stream
  // (residual3) is indexed by l directly: it is kept for every layer either way.
  const auto k = [&](int l) { return opt.recompute ? 0 : l; };
  auto at = [&](S* base, int l, size_t per) { return base + static_cast<size_t>(k(l)) * per; };
  auto atf = [&](float* base, int l, size_t per) { return base + static_cast<size_t>(k(l)) * per; };
  auto res3 = [&](int l) { return a.residual3 + static_cast<size_t>(l) * NC; };
  const size_t lse_per = static_cast<size_t>(NH) * N;

  encoder_forward<S>(c, a.encoded, a.inputs, P<S>(kWte), P<S>(kWpe), B, T, C);
  layernorm_forward<S>(c, a.ln1, a.ln1_mean, a.ln1_rstd, a.encoded, P<S>(kLn1w), P<S>(kLn1b), Nl, C);
  // The block's forward from ln1 (already computed) up to the MLP activation; shared by the
  // forward pass and the rebuild before the backward under recompute.
  auto block_up_to_mlp = [&](int l) {
    const S* residual = l == 0 ? a.encoded : res3(l - 1);
    matmul_forward<S>(c, at(a.qkv, l, 3 * NC), at(a.ln1, l, NC), lp(kQkvw, l, 3 * C_ * C_), lp(kQkvb, l, 3 * C_), n_,
                      C, 3 * C);
    attention_forward<S>(c, at(a.atty, l, NC), atf(a.att_lse, l, lse_per), at(a.qkv, l, 3 * NC), B, T, C, NH);
    matmul_forward<S>(c, a.proj, at(a.atty, l, NC), lp(kAttprojw, l, C_ * C_), lp(kAttprojb, l, C_), n_, C, C);
    residual_layernorm_forward<S>(c, at(a.residual2, l, NC), at(a.ln2, l, NC), atf(a.ln2_mean, l, N),
                                  atf(a.ln2_rstd, l, N), residual, a.proj, lp(kLn2w, l, C_), lp(kLn2b, l, C_), Nl, C);
    if (opt.fuse_gelu) {
      matmul_forward<S>(c, at(a.fch, l, 4 * NC), at(a.ln2, l, NC), lp(kFcw, l, 4 * C_ * C_), lp(kFcb, l, 4 * C_), n_,
                        C, 4 * C, at(a.fch_gelu, l, 4 * NC));
    } else {
      matmul_forward<S>(c, at(a.fch, l, 4 * NC), at(a.ln2, l, NC), lp(kFcw, l, 4 * C_ * C_), lp(kFcb, l, 4 * C_), n_,
                        C, 4 * C);
      gelu_forward<S>(c, at(a.fch_gelu, l, 4 * NC), at(a.fch, l, 4 * NC), 4 * NC);
    }
  };
  for (int l = 0; l < L; ++l) {
    block_up_to_mlp(l);
    matmul_forward<S>(c, a.proj, at(a.fch_gelu, l, 4 * NC), lp(kFcprojw, l, 4 * C_ * C_), lp(kFcprojb, l, C_), n_,
                      4 * C, C);
    // residual3 = residual2 + proj, fused with the next LayerNorm (the next layer's ln1, or lnf).
    if (l + 1 < L)
      residual_layernorm_forward<S>(c, res3(l), at(a.ln1, l + 1, NC), atf(a.ln1_mean, l + 1, N),
                                    atf(a.ln1_rstd, l + 1, N), at(a.residual2, l, NC), a.proj, lp(kLn1w, l + 1, C_),
                                    lp(kLn1b, l + 1, C_), Nl, C);
    else
      residual_layernorm_forward<S>(c, res3(l), a.lnf, a.lnf_mean, a.lnf_rstd, at(a.residual2, l, NC),
                                    a.proj, P<S>(kLnfw), P<S>(kLnfb), Nl, C);
  }
  matmul_forward<S>(c, a.logits, a.lnf, P<S>(kWte), static_cast<const S*>(nullptr), n_, C, Vp);
  softmax_crossentropy_forward<S>(c, a.losses, a.loss_lse, a.logits, a.targets, Nl, V, Vp);
  const double loss_sum = sum_losses(c, a.losses, Nl);
  const float mean_loss = static_cast<float>(loss_sum / static_cast<double>(N));
  if (!backward) return mean_loss;

  // Backward (dloss = loss_scale/N per row, as GptModel::backward(loss_scale)).
  softmax_crossentropy_backward<S>(c, a.logits, a.logits, a.loss_lse, a.targets, loss_scale / static_cast<float>(N),
                                   Nl, V, Vp);
  matmul_backward<S>(c, a.dln, G<S>(kWte), static_cast<S*>(nullptr), a.logits, a.lnf, P<S>(kWte), n_, C, Vp);
  check_cuda(cudaMemsetAsync(a.dresidual, 0, NC * sizeof(S), c.stream()), "cudaMemsetAsync (dresidual)");
  layernorm_backward<S>(c, a.dresidual, G<S>(kLnfw), G<S>(kLnfb), a.dln, res3(L - 1), P<S>(kLnfw),
                        a.lnf_mean, a.lnf_rstd, Nl, C);
  for (int l = L - 1; l >= 0; --l) {
    const S* residual = l == 0 ? a.encoded : res3(l - 1);
    if (opt.recompute) {
      // Rebuild the block's activations from its stored input. LayerNorm of the stored residual
      // gives the bits the fused residual+LayerNorm kernel produced in the forward (it normalises
      // the residual after rounding it to S), so recompute on and off train identically.
      layernorm_forward<S>(c, at(a.ln1, l, NC), atf(a.ln1_mean, l, N), atf(a.ln1_rstd, l, N), residual,
                           lp(kLn1w, l, C_), lp(kLn1b, l, C_), Nl, C);
      block_up_to_mlp(l);
    }
    matmul_backward<S>(c, a.dbig, lg(kFcprojw, l, 4 * C_ * C_), lg(kFcprojb, l, C_), a.dresidual,
                       at(a.fch_gelu, l, 4 * NC), lp(kFcprojw, l, 4 * C_ * C_), n_, 4 * C, C);
    gelu_backward<S>(c, a.dbig, at(a.fch, l, 4 * NC), a.dbig, 4 * NC);
    matmul_backward<S>(c, a.dln, lg(kFcw, l, 4 * C_ * C_), lg(kFcb, l, 4 * C_), a.dbig, at(a.ln2, l, NC),
                       lp(kFcw, l, 4 * C_ * C_), n_, C, 4 * C);
    layernorm_backward<S>(c, a.dresidual, lg(kLn2w, l, C_), lg(kLn2b, l, C_), a.dln, at(a.residual2, l, NC),
                          lp(kLn2w, l, C_), atf(a.ln2_mean, l, N), atf(a.ln2_rstd, l, N), Nl, C);
    matmul_backward<S>(c, a.proj, lg(kAttprojw, l, C_ * C_), lg(kAttprojb, l, C_), a.dresidual, at(a.atty, l, NC),
                       lp(kAttprojw, l, C_ * C_), n_, C, C);
    attention_backward<S>(c, a.dbig, a.proj, at(a.qkv, l, 3 * NC), at(a.atty, l, NC), atf(a.att_lse, l, lse_per), B,
                          T, C, NH);
    matmul_backward<S>(c, a.dln, lg(kQkvw, l, 3 * C_ * C_), lg(kQkvb, l, 3 * C_), a.dbig, at(a.ln1, l, NC),
                       lp(kQkvw, l, 3 * C_ * C_), n_, C, 3 * C);
    layernorm_backward<S>(c, a.dresidual, lg(kLn1w, l, C_), lg(kLn1b, l, C_), a.dln, residual, lp(kLn1w, l, C_),
                          atf(a.ln1_mean, l, N), atf(a.ln1_rstd, l, N), Nl, C);
    if (hook) hook(l);  // layer l's gradients are final on the stream
  }
  encoder_backward<S>(c, G<S>(kWte), G<S>(kWpe), a.dresidual, a.inputs, B, T, C);
  if (hook) hook(-1);
  return mean_loss;
}

float CudaGpt::forward_backward(const int32_t* inputs, const int32_t* targets) {
  return forward_backward(inputs, targets, 1.0f, false);
}

float CudaGpt::forward_backward(const int32_t* inputs, const int32_t* targets, float loss_scale, bool accumulate) {
  Impl& s = *impl_;
  return s.opt.bf16 ? s.run<bf16>(s.ab, inputs, targets, true, accumulate, loss_scale)
                    : s.run<float>(s.af, inputs, targets, true, accumulate, loss_scale);
}

float CudaGpt::forward(const int32_t* inputs, const int32_t* targets) {
  Impl& s = *impl_;
  return s.opt.bf16 ? s.run<bf16>(s.ab, inputs, targets, false, false, 1.0f)
                    : s.run<float>(s.af, inputs, targets, false, false, 1.0f);
}

float CudaGpt::step(float lr, const AdamWHyper& h, float clip, int64_t t) {
  const float norm = grad_norm();
  update(lr, h, clip > 0.0f && norm > clip ? clip / norm : 1.0f, t);
  return norm;
}

float CudaGpt::grad_norm() {
  Impl& s = *impl_;
  Context& c = *s.ctx;
  const double sq = s.opt.bf16 ? sum_squares<bf16>(c, static_cast<const bf16*>(s.g), s.n)
                               : sum_squares<float>(c, static_cast<const float*>(s.g), s.n);
  return static_cast<float>(std::sqrt(sq));
}

void CudaGpt::update(float lr, const AdamWHyper& h, float scale, int64_t t) {
  Impl& s = *impl_;
  Context& c = *s.ctx;
  if (t < 1) throw Error(ExitCode::kInternal, "CudaGpt::update: step " + std::to_string(t) + " must be >= 1");
  if (!s.opt.bf16 && scale != 1.0f) scale_values(c, static_cast<float*>(s.g), s.n, scale);
  const size_t lo = s.shard_begin, hi = s.shard_begin + s.shard_count;
  for (const DecayRange& r : gpt_decay_ranges(s.d)) {
    // This rank's part of the range (all of it without ZeRO); m and v are indexed from lo.
    const size_t a = r.offset > lo ? r.offset : lo, b = r.offset + r.size < hi ? r.offset + r.size : hi;
    if (a >= b) continue;
    const float wd = r.decay ? h.weight_decay : 0.0f;
    if (s.opt.bf16)
      adamw_update_mixed<bf16>(c, static_cast<bf16*>(s.p) + a, s.master + a, static_cast<const bf16*>(s.g) + a,
                               s.m + (a - lo), s.v + (a - lo), b - a, scale, lr, h.beta1, h.beta2, h.eps, wd, t,
                               s.opt.stochastic_rounding);
    else
      adamw_update(c, static_cast<float*>(s.p) + a, static_cast<const float*>(s.g) + a, s.m + (a - lo),
                   s.v + (a - lo), b - a, lr, h.beta1, h.beta2, h.eps, wd, t);
  }
}

float* CudaGpt::updated_params() {
  Impl& s = *impl_;
  return s.opt.bf16 ? s.master : static_cast<float*>(s.p);
}

void CudaGpt::params_from_master() {
  Impl& s = *impl_;
  if (s.opt.bf16) convert(*s.ctx, static_cast<bf16*>(s.p), s.master, s.n);
}

void CudaGpt::set_moments(const float* m, const float* v) {
  Impl& s = *impl_;
  check_cuda(cudaMemcpyAsync(s.m, m, s.shard_count * sizeof(float), cudaMemcpyHostToDevice, s.ctx->stream()),
             "cudaMemcpyAsync (AdamW m to device)");
  check_cuda(cudaMemcpyAsync(s.v, v, s.shard_count * sizeof(float), cudaMemcpyHostToDevice, s.ctx->stream()),
             "cudaMemcpyAsync (AdamW v to device)");
  s.ctx->synchronize();
}

void CudaGpt::get_moments(float* m, float* v) const {
  const Impl& s = *impl_;
  check_cuda(cudaMemcpyAsync(m, s.m, s.shard_count * sizeof(float), cudaMemcpyDeviceToHost, s.ctx->stream()),
             "cudaMemcpyAsync (AdamW m to host)");
  check_cuda(cudaMemcpyAsync(v, s.v, s.shard_count * sizeof(float), cudaMemcpyDeviceToHost, s.ctx->stream()),
             "cudaMemcpyAsync (AdamW v to host)");
  s.ctx->synchronize();
}

void CudaGpt::set_backward_hook(BackwardHook hook) { impl_->hook = std::move(hook); }
void* CudaGpt::grads() { return impl_->g; }
size_t CudaGpt::num_params() const { return impl_->n; }
bool CudaGpt::bf16_storage() const { return impl_->opt.bf16; }
Context& CudaGpt::context() { return *impl_->ctx; }

}  // namespace flotilla::cuda
