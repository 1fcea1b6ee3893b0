// GptModel: GPT-2 forward and backward as an explicit sequence of backend kernels (llm.c style).
//
// One non-obvious decision: all activations live in one arena whose layout (gpt_activations.h) is
// a pure function of (dims, B, T), shared with activation_floats(), so the planner's memory
// prediction and what the model holds cannot drift apart. To keep the arena lean, the GELU output
// (N, 4C) is not kept per layer: backward recomputes it from the stored pre-activation, and the
// logits buffer is reused in place for dlogits. Gradients accumulate (+=) into grads().
#include <cmath>
#include <cstring>
#include <string>

#include "engine/backend/registry.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_activations.h"

namespace flotilla {

struct GptModel::Impl {
  GptDims d;
  Backend* be = nullptr;
  std::array<size_t, kNumParamTensors> offsets{};
  BackendBuffer params;
  BackendBuffer grads;
  BackendBuffer arena;
  GptActivations acts;
  int B = 0, T = 0;
  bool have_targets = false;
  bool logits_valid = false;            // false once backward has overwritten them with dlogits
  int gelu_layer = -1;                  // layer whose GELU output the scratch holds, -1 if none
  std::function<void(int)> layer_hook;  // data-parallel overlap (set_layer_backward_hook)

  float* p(int index) { return params.data() + offsets[static_cast<size_t>(index)]; }
  float* g(int index) { return grads.data() + offsets[static_cast<size_t>(index)]; }

  void check_tokens(const int32_t* tokens, size_t n, const char* what) const {
    for (size_t i = 0; i < n; ++i) {
      if (tokens[i] < 0 || tokens[i] >= d.vocab_size)
        throw_data(std::string(what) + " token id " + std::to_string(tokens[i]) + " at position " +
                   std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(d.vocab_size) +
                   "); check that the data was tokenized for model.vocab_size");
    }
  }
};

namespace {

// Per-chunk RNG streams make initialisation parallel and independent of the thread count.
uint64_t mix_seed(uint64_t seed, uint64_t tensor, uint64_t chunk) {
  uint64_t z = seed ^ (tensor * 0x9E3779B97F4A7C15ull) ^ (chunk * 0xD1B54A32D192ED03ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void fill_normal(float* out, size_t n, float stddev, uint64_t seed, uint64_t tensor) {
  constexpr size_t kChunk = 65536;
  const long chunks = static_cast<long>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
  for (long c = 0; c < chunks; ++c) {
    Rng rng(mix_seed(seed, tensor, static_cast<uint64_t>(c)));
    const size_t i0 = static_cast<size_t>(c) * kChunk;
    const size_t i1 = i0 + kChunk < n ? i0 + kChunk : n;
    for (size_t i = i0; i < i1; ++i) out[i] = static_cast<float>(rng.normal() * stddev);
  }
}

}  // namespace

GptModel::GptModel(const GptDims& dims) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (dims.n_layer < 1 || dims.n_head < 1 || dims.n_embd < 1 || dims.n_embd % dims.n_head != 0 ||
      dims.vocab_size < 1 || dims.padded_vocab < dims.vocab_size || dims.max_seq_len < 1)
    throw_config("invalid model dimensions (n_layer " + std::to_string(dims.n_layer) + ", n_head " +
                 std::to_string(dims.n_head) + ", n_embd " + std::to_string(dims.n_embd) + ", vocab " +
                 std::to_string(dims.vocab_size) + "): n_head must divide n_embd and all must be positive");
  m.d = dims;
  m.be = &get_backend("cpu");
  const auto sizes = param_sizes(dims);
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    m.offsets[static_cast<size_t>(i)] = off;
    off += sizes[static_cast<size_t>(i)];
  }
  m.params = BackendBuffer(*m.be, off);
  m.grads = BackendBuffer(*m.be, off);
}

GptModel::~GptModel() = default;

const GptDims& GptModel::dims() const { return impl_->d; }
float* GptModel::params() { return impl_->params.data(); }
const float* GptModel::params() const { return impl_->params.data(); }
float* GptModel::grads() { return impl_->grads.data(); }
size_t GptModel::num_params() const { return impl_->params.size(); }
float* GptModel::param_tensor(int index) { return impl_->p(index); }
float* GptModel::grad_tensor(int index) { return impl_->g(index); }
size_t GptModel::param_offset(int index) const { return impl_->offsets[static_cast<size_t>(index)]; }
void GptModel::zero_grad() { impl_->be->fill_zero(impl_->grads.data(), impl_->grads.size()); }
const float* GptModel::logits() const { return impl_->acts.logits; }
size_t GptModel::activation_bytes() const { return impl_->arena.size() * sizeof(float); }

void GptModel::init_random(uint64_t seed) {
  Impl& m = *impl_;
  const auto sizes = param_sizes(m.d);
  const float kStd = 0.02f;
  const float resid_std = kStd / std::sqrt(2.0f * static_cast<float>(m.d.n_layer));
  for (int i = 0; i < kNumParamTensors; ++i) {
    float* t = m.p(i);
    const size_t n = sizes[static_cast<size_t>(i)];
    const auto tensor = static_cast<uint64_t>(i);
    switch (i) {
      case kWte: {  // real vocabulary rows only; padding rows stay zero
        const size_t real = static_cast<size_t>(m.d.vocab_size) * static_cast<size_t>(m.d.n_embd);
        fill_normal(t, real, kStd, seed, tensor);
        std::memset(t + real, 0, (n - real) * sizeof(float));
        break;
      }
      case kWpe:
      case kQkvw:
      case kFcw:
        fill_normal(t, n, kStd, seed, tensor);
        break;
      case kAttprojw:
      case kFcprojw:
        fill_normal(t, n, resid_std, seed, tensor);
        break;
      case kLn1w:
      case kLn2w:
      case kLnfw:
        for (size_t j = 0; j < n; ++j) t[j] = 1.0f;
        break;
      default:  // biases
        std::memset(t, 0, n * sizeof(float));
        break;
    }
  }
}

float GptModel::forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  Impl& m = *impl_;
  const GptDims& d = m.d;
  if (B < 1 || T < 1)
    throw_config("batch " + std::to_string(B) + " x sequence " + std::to_string(T) + " is empty");
  if (T > d.max_seq_len)
    throw_config("sequence length " + std::to_string(T) + " exceeds model.max_seq_len " +
                 std::to_string(d.max_seq_len) + "; lower train.seq_len or raise model.max_seq_len");
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  m.check_tokens(inputs, N, "input");
  if (targets != nullptr) m.check_tokens(targets, N, "target");

  const size_t need = activation_arena_floats(d, B, T);
  if (m.arena.size() < need) {
    m.arena.reset();
    m.arena = BackendBuffer(*m.be, need);
  }
  m.acts = layout_activations(d, B, T, m.arena.data());
  m.B = B;
  m.T = T;
  std::memcpy(m.acts.input_ids, inputs, N * sizeof(int32_t));
  m.have_targets = targets != nullptr;
  if (m.have_targets) std::memcpy(m.acts.target_ids, targets, N * sizeof(int32_t));

  Backend& be = *m.be;
  const GptActivations& a = m.acts;
  const int C = d.n_embd, L = d.n_layer, NH = d.n_head, Vp = d.padded_vocab;
  const int n = static_cast<int>(N);
  const size_t NC = N * static_cast<size_t>(C);
  const size_t C_ = static_cast<size_t>(C);

  be.encoder_forward(a.encoded, a.input_ids, m.p(kWte), m.p(kWpe), B, T, C);
  for (int l = 0; l < L; ++l) {
    const size_t ul = static_cast<size_t>(l);
    const float* residual = l == 0 ? a.encoded : a.residual3(l - 1);
    be.layernorm_forward(a.ln1(l), a.ln1_mean(l), a.ln1_rstd(l), residual, m.p(kLn1w) + ul * C_,
                         m.p(kLn1b) + ul * C_, static_cast<long>(N), C);
    be.matmul_forward(a.qkv(l), a.ln1(l), m.p(kQkvw) + ul * 3 * C_ * C_, m.p(kQkvb) + ul * 3 * C_, n, C,
                      3 * C);
    be.attention_forward(a.atty(l), a.att_lse(l), a.qkv(l), B, T, C, NH);
    be.matmul_forward(a.proj, a.atty(l), m.p(kAttprojw) + ul * C_ * C_, m.p(kAttprojb) + ul * C_, n, C, C);
    be.residual_forward(a.residual2(l), residual, a.proj, NC);
    be.layernorm_forward(a.ln2(l), a.ln2_mean(l), a.ln2_rstd(l), a.residual2(l), m.p(kLn2w) + ul * C_,
                         m.p(kLn2b) + ul * C_, static_cast<long>(N), C);
    be.matmul_forward(a.fch(l), a.ln2(l), m.p(kFcw) + ul * 4 * C_ * C_, m.p(kFcb) + ul * 4 * C_, n, C, 4 * C);
    be.gelu_forward(a.gelu, a.fch(l), 4 * NC);
    be.matmul_forward(a.proj, a.gelu, m.p(kFcprojw) + ul * 4 * C_ * C_, m.p(kFcprojb) + ul * C_, n, 4 * C, C);
    be.residual_forward(a.residual3(l), a.residual2(l), a.proj, NC);
  }
  m.gelu_layer = L - 1;
  be.layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, a.residual3(L - 1), m.p(kLnfw), m.p(kLnfb),
                       static_cast<long>(N), C);
  be.matmul_forward(a.logits, a.lnf, m.p(kWte), nullptr, n, C, Vp);
  m.logits_valid = true;
  if (!m.have_targets) return -1.0f;

  be.softmax_crossentropy_forward(a.losses, a.loss_lse, a.logits, a.target_ids, static_cast<long>(N),
                                  d.vocab_size, Vp);
  be.synchronize();
  double sum = 0.0;
  for (size_t i = 0; i < N; ++i) sum += a.losses[i];
  return static_cast<float>(sum / static_cast<double>(N));
}

void GptModel::set_layer_backward_hook(std::function<void(int layer)> hook) {
  impl_->layer_hook = std::move(hook);
}

void GptModel::backward(float loss_scale) {
  Impl& m = *impl_;
  if (!m.have_targets || !m.logits_valid)
    throw Error(ExitCode::kInternal,
                "GptModel::backward() needs a preceding forward() with targets, once per forward");
  const GptDims& d = m.d;
  Backend& be = *m.be;
  const GptActivations& a = m.acts;
  const int B = m.B, T = m.T, C = d.n_embd, L = d.n_layer, NH = d.n_head, Vp = d.padded_vocab;
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  const int n = static_cast<int>(N);
  const size_t NC = N * static_cast<size_t>(C);
  const size_t C_ = static_cast<size_t>(C);

  // Loss -> logits (in place) -> final LayerNorm.
  const float dloss = loss_scale / static_cast<float>(N);
  be.softmax_crossentropy_backward(a.logits, a.logits, a.loss_lse, a.target_ids, dloss, static_cast<long>(N),
                                   d.vocab_size, Vp);
  m.logits_valid = false;
  be.matmul_backward(a.dln, m.g(kWte), nullptr, a.logits, a.lnf, m.p(kWte), n, C, Vp);
  be.fill_zero(a.dresidual, NC);
  be.layernorm_backward(a.dresidual, m.g(kLnfw), m.g(kLnfb), a.dln, a.residual3(L - 1), m.p(kLnfw),
                        a.lnf_mean, a.lnf_rstd, static_cast<long>(N), C);

  // dresidual holds d(residual3[l]) on entry to layer l and d(residual3[l-1]) on exit.
  for (int l = L - 1; l >= 0; --l) {
    const size_t ul = static_cast<size_t>(l);
    const float* residual = l == 0 ? a.encoded : a.residual3(l - 1);
    // MLP block: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))).
    if (m.gelu_layer != l) be.gelu_forward(a.gelu, a.fch(l), 4 * NC);
    m.gelu_layer = -1;
    be.matmul_backward(a.dbig, m.g(kFcprojw) + ul * 4 * C_ * C_, m.g(kFcprojb) + ul * C_, a.dresidual, a.gelu,
                       m.p(kFcprojw) + ul * 4 * C_ * C_, n, 4 * C, C);
    be.gelu_backward(a.dbig, a.fch(l), a.dbig, 4 * NC);
    be.matmul_backward(a.dln, m.g(kFcw) + ul * 4 * C_ * C_, m.g(kFcb) + ul * 4 * C_, a.dbig, a.ln2(l),
                       m.p(kFcw) + ul * 4 * C_ * C_, n, C, 4 * C);
    be.layernorm_backward(a.dresidual, m.g(kLn2w) + ul * C_, m.g(kLn2b) + ul * C_, a.dln, a.residual2(l),
                          m.p(kLn2w) + ul * C_, a.ln2_mean(l), a.ln2_rstd(l), static_cast<long>(N), C);
    // Attention block: residual2 = residual + attproj(attention(qkv(ln1(residual)))).
    be.matmul_backward(a.proj, m.g(kAttprojw) + ul * C_ * C_, m.g(kAttprojb) + ul * C_, a.dresidual,
                       a.atty(l), m.p(kAttprojw) + ul * C_ * C_, n, C, C);
    be.attention_backward(a.dbig, a.proj, a.qkv(l), a.atty(l), a.att_lse(l), B, T, C, NH);
    be.matmul_backward(a.dln, m.g(kQkvw) + ul * 3 * C_ * C_, m.g(kQkvb) + ul * 3 * C_, a.dbig, a.ln1(l),
                       m.p(kQkvw) + ul * 3 * C_ * C_, n, C, 3 * C);
    be.layernorm_backward(a.dresidual, m.g(kLn1w) + ul * C_, m.g(kLn1b) + ul * C_, a.dln, residual,
                          m.p(kLn1w) + ul * C_, a.ln1_mean(l), a.ln1_rstd(l), static_cast<long>(N), C);
    if (m.layer_hook) {
      be.synchronize();
      m.layer_hook(l);
    }
  }
  be.encoder_backward(m.g(kWte), m.g(kWpe), a.dresidual, a.input_ids, B, T, C);
  be.synchronize();
}

}  // namespace flotilla
