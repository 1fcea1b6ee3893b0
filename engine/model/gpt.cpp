// GptModel: parameters, initialisation and accessors (forward/backward are in gpt_pass.cpp).
//
// One non-obvious decision: all activations live in one arena whose layout (gpt_activations.h) is
// a pure function of (dims, shard, B, T), shared with activation_floats(), so the planner's memory
// prediction and what the model holds cannot drift apart. To keep the arena lean, the GELU output
// (N, 4C) is not kept per layer: backward recomputes it from the stored pre-activation, and the
// logits buffer is reused in place for dlogits. Gradients accumulate (+=) into grads().
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "engine/core/rng.h"
#include "engine/model/gpt_impl.h"

namespace flotilla {
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

// The whole model's tensor `i` (n floats) as GPT-2 initialises it.
void init_full_tensor(const GptDims& d, int i, float* t, size_t n, uint64_t seed) {
  const float kStd = 0.02f;
  const float resid_std = kStd / std::sqrt(2.0f * static_cast<float>(d.n_layer));
  const auto tensor = static_cast<uint64_t>(i);
  switch (i) {
    case kWte: {  // real vocabulary rows only; padding rows stay zero
      const size_t real = static_cast<size_t>(d.vocab_size) * static_cast<size_t>(d.n_embd);
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

}  // namespace

GptModel::GptModel(const GptDims& dims) : GptModel(dims, GptShard{}) {}

GptModel::GptModel(const GptDims& dims, const GptShard& shard) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  if (dims.n_layer < 1 || dims.n_head < 1 || dims.n_embd < 1 || dims.n_embd % dims.n_head != 0 ||
      dims.vocab_size < 1 || dims.padded_vocab < dims.vocab_size || dims.max_seq_len < 1)
    throw_config("invalid model dimensions (n_layer " + std::to_string(dims.n_layer) + ", n_head " +
                 std::to_string(dims.n_head) + ", n_embd " + std::to_string(dims.n_embd) + ", vocab " +
                 std::to_string(dims.vocab_size) + "): n_head must divide n_embd and all must be positive");
  m.d = dims;
  m.s = resolve_shard(dims, shard);
  m.be = &get_backend("cpu");
  m.sizes = local_param_sizes(dims, m.s);
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    m.offsets[static_cast<size_t>(i)] = off;
    off += m.sizes[static_cast<size_t>(i)];
  }
  m.goffsets = m.offsets;
  m.params = BackendBuffer(*m.be, off);
  m.grads = BackendBuffer(*m.be, off);
  m.slots.resize(1);
}

GptModel::~GptModel() = default;

const GptDims& GptModel::dims() const { return impl_->d; }
const GptShard& GptModel::shard() const { return impl_->s; }
float* GptModel::params() { return impl_->params.data(); }
const float* GptModel::params() const { return impl_->params.data(); }
float* GptModel::grads() {
  if (impl_->staged)
    throw Error(ExitCode::kInternal,
                "GptModel::grads(): the layer gradients are staged (ZeRO-2); "
                "use grad_tensor() for wte/wpe/lnf and layer_grad_slot()");
  return impl_->grads.data();
}
size_t GptModel::num_params() const { return impl_->params.size(); }
float* GptModel::param_tensor(int index) { return impl_->p(index); }
float* GptModel::grad_tensor(int index) {
  if (impl_->staged && is_layer_param(index))
    throw Error(ExitCode::kInternal, std::string("GptModel::grad_tensor(") + param_name(index) +
                                         "): per-layer gradients are staged (ZeRO-2)");
  return impl_->g(index);
}
size_t GptModel::param_offset(int index) const { return impl_->offsets[static_cast<size_t>(index)]; }
size_t GptModel::param_size(int index) const { return impl_->sizes[static_cast<size_t>(index)]; }
void GptModel::zero_grad() {
  impl_->be->fill_zero(impl_->grads.data(), impl_->grads.size());
  if (impl_->staged) impl_->be->fill_zero(impl_->staging.data(), impl_->staging.size());
}

void GptModel::enable_layer_grad_staging() {
  Impl& m = *impl_;
  if (m.staged) return;
  const auto L = static_cast<size_t>(m.s.local_layers());
  size_t compact = 0, layer = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    const auto u = static_cast<size_t>(i);
    if (is_layer_param(i)) {
      m.layer_goff[u] = layer;
      layer += m.sizes[u] / L;
    } else {
      m.goffsets[u] = compact;
      compact += m.sizes[u];
    }
  }
  m.grads = BackendBuffer(*m.be, compact);
  m.staging = BackendBuffer(*m.be, 2 * layer);
  m.layer_floats = layer;
  m.staged = true;
  zero_grad();
}

bool GptModel::layer_grad_staged() const { return impl_->staged; }
size_t GptModel::layer_grad_floats() const {
  const Impl& m = *impl_;
  if (m.staged) return m.layer_floats;
  size_t layer = 0;
  for (int i = 0; i < kNumParamTensors; ++i)
    if (is_layer_param(i)) layer += m.sizes[static_cast<size_t>(i)] / static_cast<size_t>(m.s.local_layers());
  return layer;
}
float* GptModel::layer_grad_slot(int slot) {
  if (!impl_->staged || slot < 0 || slot > 1)
    throw Error(ExitCode::kInternal, "GptModel::layer_grad_slot: no staging slot " + std::to_string(slot));
  return impl_->staging.data() + static_cast<size_t>(slot) * impl_->layer_floats;
}
size_t GptModel::grad_bytes() const { return (impl_->grads.size() + impl_->staging.size()) * sizeof(float); }
void GptModel::set_tensor_parallel_group(parallel::ProcessGroup* tp) { impl_->tp = tp; }
const float* GptModel::logits() const { return impl_->last_forward ? impl_->last_forward->logits : nullptr; }

size_t GptModel::activation_bytes() const {
  size_t floats = impl_->block.size();
  for (const auto& sl : impl_->slots) floats += sl.arena.size();
  return floats * sizeof(float);
}

void GptModel::set_recompute(bool on) {
  Impl& m = *impl_;
  if (m.recompute == on) return;
  m.recompute = on;
  for (auto& sl : m.slots) sl = Impl::Slot{};
  m.block.reset();
  m.block_slot = m.block_layer = -1;
  m.last_forward = nullptr;
  m.last_backward_slot = -1;
}

bool GptModel::recompute() const { return impl_->recompute; }

void GptModel::set_activation_slots(int slots) {
  if (slots < 1) throw Error(ExitCode::kInternal, "GptModel: at least one activation slot");
  impl_->slots.resize(static_cast<size_t>(slots));
  impl_->block_slot = impl_->block_layer = -1;
  impl_->last_forward = nullptr;
  impl_->last_backward_slot = -1;
}

int GptModel::activation_slots() const { return static_cast<int>(impl_->slots.size()); }

void GptModel::init_random(uint64_t seed) {
  Impl& m = *impl_;
  const auto full_sizes = param_sizes(m.d);
  std::vector<float> full;
  for (int i = 0; i < kNumParamTensors; ++i) {
    const size_t n = full_sizes[static_cast<size_t>(i)];
    if (m.s.whole()) {
      init_full_tensor(m.d, i, m.p(i), n, seed);
      continue;
    }
    if (m.sizes[static_cast<size_t>(i)] == 0) continue;
    full.resize(n);  // one tensor at a time: the shard takes its slice
    init_full_tensor(m.d, i, full.data(), n, seed);
    for (const ShardRun& r : shard_runs(m.d, m.s, i))
      std::memcpy(m.p(i) + r.local, full.data() + r.full, r.count * sizeof(float));
  }
}

void GptModel::set_params_from_full(const float* full) { full_to_shard(impl_->d, impl_->s, full, params()); }

void GptModel::params_to_full(float* full) const { shard_to_full(impl_->d, impl_->s, params(), full); }

float GptModel::forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  if (impl_->s.pp != 1)
    throw Error(ExitCode::kInternal, "GptModel::forward() on a pipeline stage; use forward_stage()");
  return forward_stage(0, inputs, nullptr, targets, B, T);
}

void GptModel::backward(float loss_scale) {
  if (impl_->s.pp != 1)
    throw Error(ExitCode::kInternal, "GptModel::backward() on a pipeline stage; use backward_stage()");
  backward_stage(0, nullptr, loss_scale);
}

void GptModel::set_layer_backward_hook(std::function<void(int layer)> hook) {
  impl_->layer_hook = std::move(hook);
}

}  // namespace flotilla
