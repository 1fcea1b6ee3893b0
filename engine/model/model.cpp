// Model: parameters, gradients, slots and the stage API, for every architecture and backend
// (the forward and backward themselves are the architecture's: gpt2_pass.cpp, llama_pass.cpp).
//
// Non-obvious decision: the activation arena's layout is a pure function of (dims, shard, B, T,
// options) shared with activation_bytes_for(), so the planner's memory prediction and what the
// model holds cannot drift apart. Host-side work that must see the whole micro-batch (token-id
// checks, the tensor-parallel id mapping, counting the targets with a loss) happens here, once,
// before the ids are uploaded; a pass only ever touches backend memory.
#include "engine/model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/backend/registry.h"
#include "engine/core/lora_mask.h"
#include "engine/core/rng.h"
#include "engine/model/base_weights.h"
#include "engine/model/llama.h"
#include "engine/model/model_impl.h"

namespace flotilla {
namespace {

// Per-chunk RNG streams make initialisation parallel and independent of the thread count.
uint64_t mix_seed(uint64_t seed, uint64_t tensor, uint64_t chunk) {
  uint64_t z = seed ^ (tensor * 0x9E3779B97F4A7C15ull) ^ (chunk * 0xD1B54A32D192ED03ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <typename F>
decltype(auto) by_dtype(const Model::Impl& m, F&& f) {
  if (m.bf16()) return f(bf16_t{});
  return f(float{});
}

}  // namespace

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

SlotHead carve_head(const ActivationPlan& p, Carver& c) {
  const size_t N = p.N(), NC = N * static_cast<size_t>(p.d.n_embd);
  const size_t tpn = static_cast<size_t>(p.s.tp);
  SlotHead h;
  h.inputs = c.take<int32_t>(N);
  h.targets = c.take<int32_t>(N);
  h.positions = c.take<int32_t>(N);
  if (p.s.tp > 1 && p.bf16()) h.tp_sum = c.take<float>(NC);
  if (p.s.tp > 1 && p.s.last_stage()) h.vp_stats = c.take<float>((tpn + 1) * N);
  if (p.bf16() && !p.s.last_stage()) h.out_f32 = c.take<float>(NC);
  if (p.bf16() && !p.s.first_stage()) h.dinput_f32 = c.take<float>(NC);
  return h;
}

ActivationPlan Model::Impl::plan(int B, int T) const {
  ActivationPlan p;
  p.d = d;
  p.s = s;
  p.B = B;
  p.T = T;
  p.recompute = recompute;
  p.opt = opt;
  p.align = be->alignment();
  return p;
}

ActivationSizes Model::Impl::activation_sizes(int B, int T) const {
  const ActivationPlan p = plan(B, T);
  return d.llama() ? llama::activation_sizes(p) : gpt2::activation_sizes(p);
}

size_t activation_bytes_for(const ModelDims& dims, const ModelShard& shard, int B, int T, bool recompute,
                            const ModelOptions& options, size_t alignment, int slots) {
  ActivationPlan p;
  p.d = dims;
  p.s = resolve_shard(dims, shard);
  p.B = B;
  p.T = T;
  p.recompute = recompute;
  p.opt = options;
  p.align = alignment;
  const ActivationSizes a = dims.llama() ? llama::activation_sizes(p) : gpt2::activation_sizes(p);
  const size_t NC = p.N() * static_cast<size_t>(dims.n_embd);
  const size_t stage = p.s.pp > 1 && options.stage_buffers ? 2 * ((NC + 15) / 16 * 16) * 4 : 0;
  return static_cast<size_t>(std::max(slots, 1)) * ((a.arena + 3) / 4 * 4) + (a.block + 3) / 4 * 4 + stage;
}

int logits_chunk_rows(const ModelDims& dims, const ModelShard& shard, size_t bytes_per_value, double chunk_mb,
                      long N) {
  if (N < 1) return 0;
  if (!(chunk_mb > 0)) return static_cast<int>(std::min<long>(N, std::numeric_limits<int>::max()));
  const double vl = static_cast<double>(dims.padded_vocab) / std::max(shard.tp, 1);
  const double fit = chunk_mb * 1048576.0 / (vl * static_cast<double>(std::max<size_t>(bytes_per_value, 1)));
  long rows = fit >= 1e9 ? 1000000000L : static_cast<long>(fit) / 64 * 64;
  rows = std::max(rows, 256L);
  if (rows >= N) return static_cast<int>(N);
  // As many chunks as that takes, evenly sized (rounded up to 64, never above the budget): the last
  // chunk, the one backward does not recompute, is then a whole chunk rather than a remainder.
  const long chunks = (N + rows - 1) / rows;
  return static_cast<int>(std::min(rows, ((N + chunks - 1) / chunks + 63) / 64 * 64));
}

void ParamSet::allocate(Backend& be, const ModelShard& s, size_t es, size_t capacity, bool frozen_set,
                        const std::vector<int>& absent) {
  sizes = local_param_sizes(layout, s);
  for (int i : absent) sizes[static_cast<size_t>(i)] = 0;
  offsets.assign(sizes.size(), 0);
  size_t off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    offsets[i] = off;
    off += sizes[i];
  }
  n = off;
  layers = s.local_layers();
  goffsets = offsets;
  layer_goff.assign(sizes.size(), 0);
  frozen = frozen_set;
  params = BackendBuffer(be, (std::max(off, capacity) * es + 3) / 4);
  if (!frozen) grads = BackendBuffer(be, (off * es + 3) / 4);
}

void ParamSet::enable_staging(Backend& be, size_t es) {
  if (staged || frozen) return;
  size_t compact = 0, layer = 0;
  for (int i = 0; i < layout.size(); ++i) {
    const auto u = static_cast<size_t>(i);
    if (layout[i].per_layer()) {
      layer_goff[u] = layer;
      layer += sizes[u] / static_cast<size_t>(layers);
    } else {
      goffsets[u] = compact;
      compact += sizes[u];
    }
  }
  grads = BackendBuffer(be, (compact * es + 3) / 4);
  staging = BackendBuffer(be, (2 * layer * es + 3) / 4);
  layer_floats = layer;
  staged = true;
  zero_grad(be, es);
}

void ParamSet::zero_grad(Backend& be, size_t es) {
  if (frozen) return;
  be.fill_zero_bytes(grads.data(), (staged ? grads.size() * 4 : n * es));
  if (staged) be.fill_zero_bytes(staging.data(), 2 * layer_floats * es);
}

size_t ParamSet::layer_grad_floats() const {
  if (staged) return layer_floats;
  size_t layer = 0;
  for (int i = 0; i < layout.size(); ++i)
    if (layout[i].per_layer()) layer += per_layer(i);
  return layer;
}

namespace {

// The view of this shard's slice of module m: column-parallel modules (q, k, v, gate, up) keep
// their 1/tp of the output rows, row-parallel ones (o, down) their 1/tp of the input column blocks
// (nf4_layout_problem has checked that both cut on block boundaries).
nf4::View module_slice(const ModelDims& d, const ModelShard& s, int module) {
  const BaseModule g = base_module(d, module);
  nf4::View v;
  v.module_cblocks = g.in / nf4::kBlock;
  if (lora_column_parallel(module)) {
    v.rows = g.out / s.tp;
    v.cols = g.in;
    v.row0 = static_cast<int64_t>(s.tp_rank) * v.rows;
  } else {
    v.rows = g.out;
    v.cols = g.in / s.tp;
    v.cb0 = s.tp_rank * (v.cols / nf4::kBlock);
  }
  return v;
}

// Lays out every local layer's module slices in one buffer (packed codes, the slice's block
// absmaxes, the whole module's group absmaxes; the dynamic map once), counting with a null base.
// Returns the bytes; nf4_base_bytes_for counts with it, so a device's memory plan cannot drift.
size_t carve_quant_views(const ModelDims& d, const ModelShard& s, bool dq, size_t alignment, void* base,
                         std::vector<nf4::View>& views) {
  Carver c(base, alignment);
  const float* code2 = dq ? c.take<float>(256) : nullptr;
  views.clear();
  for (int l = 0; l < s.local_layers(); ++l)
    for (int mod = 0; mod < kBaseModules; ++mod) {
      nf4::View v = module_slice(d, s, mod);
      const BaseModule g = base_module(d, mod);
      const size_t n = static_cast<size_t>(v.rows) * static_cast<size_t>(v.cols);
      v.packed = c.take<uint8_t>(n / 2);
      if (dq) {
        const size_t module_blocks = static_cast<size_t>(g.out) * static_cast<size_t>(g.in) / nf4::kBlock;
        v.absmax_q = c.take<uint8_t>(n / nf4::kBlock);
        v.absmax2 = c.take<float>((module_blocks + nf4::kGroup - 1) / nf4::kGroup);
        v.code2 = code2;
      } else {
        v.absmax = c.take<float>(n / nf4::kBlock);
      }
      views.push_back(v);
    }
  return c.used();
}

void carve_quant_base(Model::Impl& m, void* base) {
  m.q4.bytes = carve_quant_views(m.d, m.s, m.opt.lora.double_quant, m.be->alignment(), base, m.q4.views);
}

void allocate_quant_base(Model::Impl& m) {
  carve_quant_base(m, nullptr);
  m.q4.buf = BackendBuffer(*m.be, (m.q4.bytes + 3) / 4);
  carve_quant_base(m, m.q4.buf.data());  // not zeroed: set_base writes every byte a kernel reads
  if (m.opt.lora.double_quant) m.be->upload(m.q4.buf.data(), nf4::dynamic_map(), 256 * sizeof(float));
}

}  // namespace

size_t nf4_base_bytes_for(const ModelDims& dims, const ModelShard& shard, const LoraSpec& lora,
                          size_t alignment) {
  if (!lora.enabled() || !lora.nf4) return 0;
  std::vector<nf4::View> views;
  const size_t bytes =
      carve_quant_views(dims, resolve_shard(dims, shard), lora.double_quant, alignment, nullptr, views);
  return (bytes + 3) / 4 * 4;  // the buffer's floats, as allocate_quant_base asks for them
}

Model::Model(const ModelDims& dims, const ModelShard& shard, Backend* backend, const ModelOptions& options)
    : impl_(std::make_unique<Impl>(dims)) {
  Impl& m = *impl_;
  if (const std::string p = dims_problem(dims); !p.empty()) throw_config("invalid model dimensions: " + p);
  m.s = resolve_shard(dims, shard);
  m.opt = options;
  m.be = backend != nullptr ? backend : &get_backend("cpu");
  if (m.bf16() && !m.be->supports(BackendFeature::kBf16Storage))
    throw_config(std::string("train.dtype = \"bf16\" needs a backend with bf16 storage; the ") +
                 m.be->name() + " backend has none (use fp32)");
  const bool lora = options.lora.enabled();
  if (lora && !dims.llama())
    throw_config("lora.enabled: LoRA adapters train the Llama family (model.arch = \"llama\"), not " +
                 std::string(arch_name(dims.arch)));
  if (options.lora.nf4 && !lora)
    throw_config(
        "lora.base_quant = \"nf4\" quantises the frozen base of a LoRA run; set lora.enabled = true");
  std::vector<int> absent;  // QLoRA: the projections live quantised (q4), not in the base buffer
  if (m.nf4()) {
    if (const std::string p = nf4_layout_problem(dims, m.s.tp); !p.empty()) throw_config(p);
    absent = {llama::kQkv, llama::kAttnOut, llama::kGateUp, llama::kDown};
  }
  // The parameter capacity (ZeRO-1's padded all-gather) belongs to what trains.
  m.base.allocate(*m.be, m.s, m.es(), lora ? 0 : options.param_capacity, lora, absent);
  if (m.nf4()) allocate_quant_base(m);
  if (lora) {
    m.adapters = std::make_unique<ParamSet>(ParamLayout(dims, options.lora));
    m.adapters->allocate(*m.be, m.s, m.es(), options.param_capacity, false);
  }
  m.slots.resize(1);
  if (dims.llama()) {
    const std::vector<float> f = llama::rope_inv_freq(dims);
    m.rope = BackendBuffer(*m.be, f.size());
    m.be->upload(m.rope.data(), f.data(), f.size() * sizeof(float));
  }
}

Model::~Model() {
  if (impl_ && impl_->be) impl_->be->synchronize();
}

const ModelDims& Model::dims() const { return impl_->d; }
const ModelShard& Model::shard() const { return impl_->s; }
const ParamLayout& Model::layout() const { return impl_->train().layout; }
const ParamLayout& Model::base_layout() const { return impl_->base.layout; }
const LoraSpec& Model::lora() const { return impl_->opt.lora; }
const ModelOptions& Model::options() const { return impl_->opt; }
Backend& Model::backend() { return *impl_->be; }
DType Model::dtype() const { return impl_->opt.dtype; }

namespace {
void require_host_f32(const Model::Impl& m, const char* what) {
  if (!m.be->supports(BackendFeature::kHostMemory) || m.bf16())
    throw Error(ExitCode::kInternal, std::string("Model::") + what + ": host fp32 view of a " + m.be->name() +
                                         " " + dtype_name(m.opt.dtype) + " model; use get_params/set_params");
}
}  // namespace

float* Model::params() {
  require_host_f32(*impl_, "params");
  return impl_->train().params.data();
}
const float* Model::params() const {
  require_host_f32(*impl_, "params");
  return impl_->train().params.data();
}
float* Model::grads() {
  require_host_f32(*impl_, "grads");
  if (impl_->train().staged)
    throw Error(ExitCode::kInternal,
                "Model::grads(): the layer gradients are staged (ZeRO-2); "
                "use grad_tensor() for the non-layer tensors and layer_grad_slot()");
  return impl_->train().grads.data();
}
float* Model::param_tensor(int index) {
  require_host_f32(*impl_, "param_tensor");
  return impl_->train().P<float>(index);
}
float* Model::grad_tensor(int index) {
  require_host_f32(*impl_, "grad_tensor");
  ParamSet& t = impl_->train();
  if (t.staged && t.layout[index].per_layer())
    throw Error(ExitCode::kInternal,
                "Model::grad_tensor(" + t.layout[index].name + "): per-layer gradients are staged (ZeRO-2)");
  return t.G<float>(index);
}
void* Model::param_data() { return impl_->train().params.data(); }
void* Model::grad_data() { return impl_->train().grads.data(); }
size_t Model::num_params() const { return impl_->train().n; }
size_t Model::param_offset(int index) const { return impl_->train().offsets[static_cast<size_t>(index)]; }
size_t Model::param_size(int index) const { return impl_->train().sizes[static_cast<size_t>(index)]; }
size_t Model::grad_offset(int index) const { return impl_->train().goffsets[static_cast<size_t>(index)]; }
int Model::tied_tensor() const {
  const ParamLayout& l = impl_->train().layout;
  return l.tied() ? l.embedding() : -1;
}
size_t Model::num_base_params() const { return impl_->base.n; }
void* Model::base_param_data() { return impl_->base.params.data(); }
void Model::set_training(bool on) { impl_->training = on; }
void Model::set_dropout_step(int64_t step, int stream) {
  impl_->drop_step = step;
  impl_->drop_stream = stream;
  impl_->drop_micro = 0;
}

void Model::zero_grad() { impl_->train().zero_grad(*impl_->be, impl_->es()); }

void Model::enable_layer_grad_staging() { impl_->train().enable_staging(*impl_->be, impl_->es()); }

bool Model::layer_grad_staged() const { return impl_->train().staged; }
size_t Model::layer_grad_floats() const { return impl_->train().layer_grad_floats(); }
size_t Model::layer_grad_offset(int index) const {
  return impl_->train().layer_goff[static_cast<size_t>(index)];
}
void* Model::layer_grad_slot_data(int slot) {
  ParamSet& t = impl_->train();
  if (!t.staged || slot < 0 || slot > 1)
    throw Error(ExitCode::kInternal, "Model::layer_grad_slot: no staging slot " + std::to_string(slot));
  return static_cast<char*>(static_cast<void*>(t.staging.data())) +
         static_cast<size_t>(slot) * t.layer_floats * impl_->es();
}
float* Model::layer_grad_slot(int slot) {
  require_host_f32(*impl_, "layer_grad_slot");
  return static_cast<float*>(layer_grad_slot_data(slot));
}
size_t Model::grad_bytes() const {
  const ParamSet& t = impl_->train();
  return (t.grads.size() + t.staging.size()) * sizeof(float);
}
void Model::set_tensor_parallel_group(comm::ProcessGroup* tp) { impl_->tp = tp; }

namespace {
// The fused LM head keeps one chunk of a forward with targets: its logits are not the whole (B, T, Vp).
void require_whole_logits(const Model::Impl& m, const char* what) {
  if (m.slots[static_cast<size_t>(m.last_forward_slot)].chunked)
    throw Error(ExitCode::kInternal, std::string("Model::") + what +
                                         ": the last forward computed its logits in chunks (logits_chunk_rows) "
                                         "and kept only the last; forward without targets for every logit");
}
}  // namespace

const float* Model::logits() const {
  const Impl& m = *impl_;
  if (m.last_forward_slot < 0 || !m.be->supports(BackendFeature::kHostMemory) || m.bf16()) return nullptr;
  require_whole_logits(m, "logits");
  Impl& mm = const_cast<Impl&>(m);
  return by_dtype(m, [&](auto t) -> const float* {
    using S = decltype(t);
    if constexpr (sizeof(S) == sizeof(float))
      return m.d.llama() ? llama::logits<float>(mm, m.last_forward_slot)
                         : gpt2::logits<float>(mm, m.last_forward_slot);
    return nullptr;
  });
}

void Model::copy_logits(float* host) const {
  Impl& m = const_cast<Impl&>(*impl_);
  if (m.last_forward_slot < 0) throw Error(ExitCode::kInternal, "Model::copy_logits before a forward");
  const Impl::Slot& sl = m.slot(m.last_forward_slot);
  require_whole_logits(m, "copy_logits");
  const size_t count = static_cast<size_t>(sl.logit_rows) * static_cast<size_t>(m.Vl());
  by_dtype(m, [&](auto t) {
    using S = decltype(t);
    S* lg = m.d.llama() ? llama::logits<S>(m, m.last_forward_slot) : gpt2::logits<S>(m, m.last_forward_slot);
    if constexpr (sizeof(S) == sizeof(float)) {
      m.be->download(host, lg, count * sizeof(float));
    } else {
      std::vector<bf16_t> raw(count);
      m.be->download(raw.data(), lg, count * sizeof(bf16_t));
      for (size_t i = 0; i < count; ++i) host[i] = from_bf16(raw[i]);
    }
  });
}

size_t Model::activation_bytes() const {
  size_t bytes = impl_->block.size() * 4 + impl_->stage_bufs.size() * 4 + impl_->wide_logits.size() * 4;
  for (const auto& sl : impl_->slots) bytes += sl.arena.size() * 4;
  return bytes;
}

size_t Model::activation_bytes_for(int B, int T) const {
  const Impl& m = *impl_;
  return flotilla::activation_bytes_for(m.d, m.s, B, T, m.recompute, m.opt, m.be->alignment(),
                                        static_cast<int>(m.slots.size()));
}

void Model::reserve(int B, int T) {
  Impl& m = *impl_;
  const ActivationSizes need = m.activation_sizes(B, T);
  for (auto& sl : m.slots)
    if (sl.arena.size() * 4 < need.arena) {
      sl.arena.reset();
      sl.arena = BackendBuffer(*m.be, (need.arena + 3) / 4);
    }
  if (m.block.size() * 4 < need.block) {
    m.block.reset();
    m.block = BackendBuffer(*m.be, (need.block + 3) / 4);
  }
  if (m.s.pp > 1 && m.opt.stage_buffers) {
    m.stage_N = B * T;
    stage_recv_buffer(false);
  }
}

float* Model::stage_recv_buffer(bool grad) {
  Impl& m = *impl_;
  size_t N = 0;
  for (const auto& sl : m.slots) N = std::max(N, static_cast<size_t>(sl.B) * static_cast<size_t>(sl.T));
  N = std::max(N, static_cast<size_t>(m.stage_N));
  const size_t NC = N * static_cast<size_t>(m.d.n_embd), half = (NC + 15) / 16 * 16;
  if (m.stage_bufs.size() < 2 * half) {
    m.stage_bufs.reset();
    m.stage_bufs = BackendBuffer(*m.be, 2 * half);
  }
  return m.stage_bufs.data() + (grad ? half : 0);
}

void Model::set_recompute(bool on) {
  Impl& m = *impl_;
  if (m.recompute == on) return;
  m.recompute = on;
  for (auto& sl : m.slots) sl = Impl::Slot{};
  m.block.reset();
  m.block_slot = m.block_layer = -1;
  m.last_forward_slot = -1;
  m.last_backward_slot = -1;
}

bool Model::recompute() const { return impl_->recompute; }

void Model::set_activation_slots(int slots) {
  if (slots < 1) throw Error(ExitCode::kInternal, "Model: at least one activation slot");
  impl_->slots.resize(static_cast<size_t>(slots));
  impl_->block_slot = impl_->block_layer = -1;
  impl_->last_forward_slot = -1;
  impl_->last_backward_slot = -1;
}

int Model::activation_slots() const { return static_cast<int>(impl_->slots.size()); }

namespace {

// Host fp32 <-> a parameter set's buffer (this shard's local layout), any backend and storage.
void get_set(const Model::Impl& m, const ParamSet& ps, float* host) {
  if (!m.bf16()) {
    m.be->download(host, ps.params.data(), ps.n * sizeof(float));
    return;
  }
  std::vector<bf16_t> raw(ps.n);
  m.be->download(raw.data(), ps.params.data(), ps.n * sizeof(bf16_t));
  for (size_t i = 0; i < ps.n; ++i) host[i] = from_bf16(raw[i]);
}

void set_set(Model::Impl& m, ParamSet& ps, const float* host) {
  if (!m.bf16()) {
    m.be->upload(ps.params.data(), host, ps.n * sizeof(float));
    return;
  }
  std::vector<bf16_t> raw(ps.n);
  for (size_t i = 0; i < ps.n; ++i) raw[i] = to_bf16(host[i]);
  m.be->upload(ps.params.data(), raw.data(), ps.n * sizeof(bf16_t));
}

bool host_f32(const Model::Impl& m) { return m.be->supports(BackendFeature::kHostMemory) && !m.bf16(); }

// Every tensor of `ps` initialised by init(i, whole tensor, floats), this shard taking its slice.
template <typename F>
void init_set(Model::Impl& m, ParamSet& ps, F init) {
  std::vector<float> full, local;
  const bool direct = host_f32(m);
  if (!direct) local.assign(ps.n, 0.0f);
  float* dst = direct ? ps.params.data() : local.data();
  for (int i = 0; i < ps.layout.size(); ++i) {
    const size_t n = ps.layout.full_size(i);
    if (n == 0 || ps.sizes[static_cast<size_t>(i)] == 0) continue;
    float* out = dst + ps.offsets[static_cast<size_t>(i)];
    if (m.s.whole()) {
      init(i, out, n);
      continue;
    }
    full.resize(n);  // one tensor at a time: the shard takes its slice
    init(i, full.data(), n);
    for (const ShardRun& r : shard_runs(ps.layout, m.s, i))
      std::memcpy(out + r.local, full.data() + r.full, r.count * sizeof(float));
  }
  if (!direct) set_set(m, ps, local.data());
}

void set_from_full(Model::Impl& m, ParamSet& ps, const float* full) {
  if (host_f32(m)) {
    full_to_shard(ps.layout, m.s, full, ps.params.data());
    return;
  }
  std::vector<float> local(ps.n);
  full_to_shard(ps.layout, m.s, full, local.data());
  set_set(m, ps, local.data());
}

void to_full(const Model::Impl& m, const ParamSet& ps, float* full) {
  if (host_f32(m)) {
    shard_to_full(ps.layout, m.s, ps.params.data(), full);
    return;
  }
  std::vector<float> local(ps.n);
  get_set(m, ps, local.data());
  shard_to_full(ps.layout, m.s, local.data(), full);
}

}  // namespace

void Model::init_random(uint64_t seed, bool base) {
  Impl& m = *impl_;
  const auto arch_init = [&](int i, float* t, size_t n) {
    if (m.d.llama())
      llama::init_tensor(m.d, i, t, n, seed);
    else
      gpt2::init_tensor(m.d, i, t, n, seed);
  };
  if (base && m.nf4())  // the initialisation's projections, quantised
    set_base(random_base_weights(m.d, seed, true, m.opt.lora.double_quant, m.s.layer_begin, m.s.layer_end));
  else if (base)
    init_set(m, m.base, arch_init);
  if (m.adapters)
    init_set(m, *m.adapters,
             [&](int i, float* t, size_t n) { lora_init_tensor(m.d, m.opt.lora, i, t, n, seed); });
}

void Model::set_params_from_full(const float* full) { set_from_full(*impl_, impl_->train(), full); }
void Model::params_to_full(float* full) const { to_full(*impl_, impl_->train(), full); }
void Model::set_base_from_full(const float* full) {
  Impl& m = *impl_;
  if (!m.nf4()) {
    set_from_full(m, m.base, full);
    return;
  }
  const ParamLayout& layout = m.base.layout;
  std::vector<size_t> offset(static_cast<size_t>(layout.size()), 0);
  for (int i = 1; i < layout.size(); ++i)
    offset[static_cast<size_t>(i)] = offset[static_cast<size_t>(i - 1)] + layout.full_size(i - 1);
  set_base(make_base_weights(
      m.d, true, m.opt.lora.double_quant,
      [&](int i, float* t, size_t n) {
        std::memcpy(t, full + offset[static_cast<size_t>(i)], n * sizeof(float));
      },
      m.s.layer_begin, m.s.layer_end));
}

void Model::base_to_full(float* full) const {
  const Impl& m = *impl_;
  if (!m.nf4()) {
    to_full(m, m.base, full);
    return;
  }
  // The dense tensors tensor by tensor (the projections hold nothing in the base buffer).
  const ParamLayout& layout = m.base.layout;
  std::vector<float> local(m.base.n);
  get_set(m, m.base, local.data());
  std::vector<size_t> offset(static_cast<size_t>(layout.size()), 0);
  for (int i = 1; i < layout.size(); ++i)
    offset[static_cast<size_t>(i)] = offset[static_cast<size_t>(i - 1)] + layout.full_size(i - 1);
  for (int i = 0; i < layout.size(); ++i) {
    if (m.base.sizes[static_cast<size_t>(i)] == 0) continue;
    for (const ShardRun& r : shard_runs(layout, m.s, i))
      std::memcpy(full + offset[static_cast<size_t>(i)] + r.full,
                  local.data() + m.base.offsets[static_cast<size_t>(i)] + r.local, r.count * sizeof(float));
  }
  // Each module slice dequantised by the backend, scattered into its rows / columns.
  std::vector<float> host;
  for (int l = 0; l < m.s.local_layers(); ++l)
    for (int mod = 0; mod < kBaseModules; ++mod) {
      const nf4::View& v = m.qview(l, mod);
      const BaseModule g = base_module(m.d, mod);
      const size_t n = static_cast<size_t>(v.rows) * static_cast<size_t>(v.cols);
      BackendBuffer tmp(*m.be, n);
      m.be->nf4_dequantize(tmp.data(), v);
      host.resize(n);
      m.be->download(host.data(), tmp.data(), n * sizeof(float));
      const TensorSpec& t = layout[g.tensor];
      float* dst = full + offset[static_cast<size_t>(g.tensor)] +
                   static_cast<size_t>(m.s.layer_begin + l) * t.rows * t.cols;
      for (int r = 0; r < v.rows; ++r)
        std::memcpy(dst +
                        (static_cast<size_t>(g.row0) + static_cast<size_t>(v.row0) + static_cast<size_t>(r)) *
                            static_cast<size_t>(g.in) +
                        static_cast<size_t>(v.cb0) * nf4::kBlock,
                    host.data() + static_cast<size_t>(r) * static_cast<size_t>(v.cols),
                    static_cast<size_t>(v.cols) * sizeof(float));
    }
}

void Model::set_base(const BaseWeights& b) { set_base_impl(const_cast<BaseWeights&>(b), false); }
void Model::set_base(BaseWeights&& b) { set_base_impl(b, true); }

void Model::set_base_impl(BaseWeights& b, bool consume) {
  Impl& m = *impl_;
  const ParamLayout& layout = m.base.layout;
  if (b.nf4 != m.nf4() || (m.nf4() && b.double_quant != m.opt.lora.double_quant) ||
      b.dense.size() != static_cast<size_t>(layout.size()) || b.dims.n_layer != m.d.n_layer ||
      b.dims.n_embd != m.d.n_embd || b.dims.padded_vocab != m.d.padded_vocab)
    throw Error(ExitCode::kInternal, std::string("Model::set_base: base weights ") +
                                         (b.nf4 ? "nf4" : "dense") +
                                         (b.double_quant ? "" : " (no double quant)") + " for a model " +
                                         (m.nf4() ? "with" : "without") + " an nf4 base, or of other dims");
  // The dense tensors: this shard's runs of each (straight into a host fp32 buffer).
  std::vector<float> local(host_f32(m) ? 0 : m.base.n, 0.0f);
  float* dst = host_f32(m) ? m.base.params.data() : local.data();
  for (int i = 0; i < layout.size(); ++i) {
    if (m.base.sizes[static_cast<size_t>(i)] == 0) {
      if (consume) std::vector<float>().swap(b.dense[static_cast<size_t>(i)]);
      continue;
    }
    const std::vector<float>& t = b.dense[static_cast<size_t>(i)];
    if (t.size() != layout.full_size(i))
      throw Error(ExitCode::kInternal, "Model::set_base: tensor " + layout[i].name + " has " +
                                           std::to_string(t.size()) + " floats, expected " +
                                           std::to_string(layout.full_size(i)));
    for (const ShardRun& r : shard_runs(layout, m.s, i))
      std::memcpy(dst + m.base.offsets[static_cast<size_t>(i)] + r.local, t.data() + r.full,
                  r.count * sizeof(float));
    if (consume) std::vector<float>().swap(b.dense[static_cast<size_t>(i)]);
  }
  if (!host_f32(m)) set_set(m, m.base, local.data());
  if (!m.nf4()) return;
  // Each module's slice: whole rows of the module (column-parallel) or each row's run of column
  // blocks (row-parallel); the statistics of the same blocks, and the module's group absmaxes whole.
  const bool dq = m.opt.lora.double_quant;
  std::vector<uint8_t> packed, codes;
  std::vector<float> absmax;
  for (int l = 0; l < m.s.local_layers(); ++l)
    for (int mod = 0; mod < kBaseModules; ++mod) {
      const int layer = m.s.layer_begin + l;
      if (!b.holds_layer(layer))
        throw Error(ExitCode::kInternal,
                    "Model::set_base: the base weights hold layers " + std::to_string(b.layer_begin) + "-" +
                        std::to_string(b.layer_end) + ", not layer " + std::to_string(layer));
      const nf4::Quantized& q = b.module(layer, mod);
      const BaseModule g = base_module(m.d, mod);
      if (q.numel != static_cast<int64_t>(g.out) * g.in || q.double_quant != dq)
        throw Error(ExitCode::kInternal, std::string("Model::set_base: ") + lora_target_name(mod) +
                                             " of layer " + std::to_string(layer) + " has " +
                                             std::to_string(q.numel) + " elements, expected " +
                                             std::to_string(g.out) + " x " + std::to_string(g.in));
      nf4::View& v = m.q4.views[static_cast<size_t>(l) * kBaseModules + static_cast<size_t>(mod)];
      const size_t cols = static_cast<size_t>(v.cols), in = static_cast<size_t>(g.in);
      const size_t bpr = cols / nf4::kBlock, mbpr = in / nf4::kBlock;  // blocks per slice / module row
      packed.resize(static_cast<size_t>(v.rows) * cols / 2);
      codes.resize(dq ? static_cast<size_t>(v.rows) * bpr : 0);
      absmax.resize(dq ? 0 : static_cast<size_t>(v.rows) * bpr);
      for (int r = 0; r < v.rows; ++r) {
        const size_t row = static_cast<size_t>(v.row0) + static_cast<size_t>(r), rr = static_cast<size_t>(r);
        const size_t cb0 = static_cast<size_t>(v.cb0);
        std::memcpy(packed.data() + rr * cols / 2, q.packed.data() + row * in / 2 + cb0 * nf4::kBlock / 2,
                    cols / 2);
        if (dq)
          std::memcpy(codes.data() + rr * bpr, q.absmax_q.data() + row * mbpr + cb0, bpr);
        else
          std::memcpy(absmax.data() + rr * bpr, q.absmax.data() + row * mbpr + cb0, bpr * sizeof(float));
      }
      m.be->upload(const_cast<uint8_t*>(v.packed), packed.data(), packed.size());
      if (dq) {
        m.be->upload(const_cast<uint8_t*>(v.absmax_q), codes.data(), codes.size());
        m.be->upload(const_cast<float*>(v.absmax2), q.absmax2.data(), q.absmax2.size() * sizeof(float));
        v.offset = q.offset;
      } else {
        m.be->upload(const_cast<float*>(v.absmax), absmax.data(), absmax.size() * sizeof(float));
      }
      if (consume) b.module(layer, mod) = nf4::Quantized{};
    }
}

bool Model::nf4_base() const { return impl_->nf4(); }
size_t Model::base_quant_bytes() const { return impl_->q4.bytes; }
nf4::View Model::base_module_view(int layer, int module) const {
  const Impl& m = *impl_;
  if (!m.nf4() || layer < 0 || layer >= m.s.local_layers() || module < 0 || module >= kBaseModules)
    throw Error(ExitCode::kInternal, "Model::base_module_view(" + std::to_string(layer) + ", " +
                                         std::to_string(module) + "): no such quantised module");
  return m.qview(layer, module);
}
void Model::get_params(float* host) const { get_set(*impl_, impl_->train(), host); }
void Model::set_params(const float* host) { set_set(*impl_, impl_->train(), host); }

float Model::forward(const int32_t* inputs, const int32_t* targets, int B, int T, const int32_t* positions) {
  if (impl_->s.pp != 1)
    throw Error(ExitCode::kInternal, "Model::forward() on a pipeline stage; use forward_stage()");
  return forward_stage(0, inputs, nullptr, targets, B, T, positions);
}

void Model::backward(float loss_scale) {
  if (impl_->s.pp != 1)
    throw Error(ExitCode::kInternal, "Model::backward() on a pipeline stage; use backward_stage()");
  backward_stage(0, nullptr, loss_scale);
}

int64_t Model::counted_targets(int slot) const { return const_cast<Impl&>(*impl_).slot(slot).counted; }

void Model::set_layer_backward_hook(std::function<void(int layer)> hook) {
  impl_->layer_hook = std::move(hook);
}

namespace {

void check_tokens(const Model::Impl& m, const int32_t* tokens, size_t n, const char* what, bool targets) {
  for (size_t i = 0; i < n; ++i) {
    if (targets && tokens[i] == kIgnoreTarget) continue;
    if (tokens[i] < 0 || tokens[i] >= m.d.vocab_size)
      throw_data(std::string(what) + " token id " + std::to_string(tokens[i]) + " at position " +
                 std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(m.d.vocab_size) +
                 "); check that the data was tokenized for model.vocab_size");
  }
}

void check_positions(const int32_t* pos, int B, int T) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const int32_t p = pos[static_cast<size_t>(b) * static_cast<size_t>(T) + static_cast<size_t>(t)];
      if (p < 0 || p > t)
        throw_data("position " + std::to_string(p) + " of token " + std::to_string(t) + " in row " +
                   std::to_string(b) + " is outside [0, " + std::to_string(t) +
                   "] (a document cannot start before its row); re-run data prepare");
    }
}

}  // namespace

float Model::forward_stage(int slot, const int32_t* inputs, const float* stage_in, const int32_t* targets,
                           int B, int T, const int32_t* positions) {
  Impl& m = *impl_;
  const ModelDims& d = m.d;
  const ModelShard& s = m.s;
  if (B < 1 || T < 1)
    throw_config("batch " + std::to_string(B) + " x sequence " + std::to_string(T) + " is empty");
  if (T > d.max_seq_len)
    throw_config("sequence length " + std::to_string(T) + " exceeds model.max_seq_len " +
                 std::to_string(d.max_seq_len) + "; lower train.seq_len or raise model.max_seq_len");
  if (s.tp > 1 && (m.tp == nullptr || m.tp->size() != s.tp))
    throw Error(ExitCode::kInternal, "Model (" + s.describe() + "): no tensor-parallel group of size " +
                                         std::to_string(s.tp) + " was set");
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  if (s.first_stage()) {
    if (inputs == nullptr) throw Error(ExitCode::kInternal, "Model: the first stage needs input tokens");
    check_tokens(m, inputs, N, "input", false);
  } else if (stage_in == nullptr) {
    throw Error(ExitCode::kInternal,
                "Model: stage " + std::to_string(s.stage) + " needs an input activation");
  }
  const bool with_targets = s.last_stage() && targets != nullptr;
  if (with_targets) check_tokens(m, targets, N, "target", true);
  if (positions != nullptr && !m.kv.active)
    check_positions(positions, B, T);  // forward_cached checked its own

  Impl::Slot& sl = m.slot(slot);
  const ActivationSizes need = m.activation_sizes(B, T);
  if (sl.arena.size() * 4 < need.arena) {
    sl.arena.reset();
    sl.arena = BackendBuffer(*m.be, (need.arena + 3) / 4);
  }
  if (m.block.size() * 4 < need.block) {  // other slots re-point at the new region in their backward
    m.block.reset();
    m.block = BackendBuffer(*m.be, (need.block + 3) / 4);
  }
  m.block_slot = m.block_layer = -1;
  sl.B = B;
  sl.T = T;
  sl.forwarded = true;
  sl.have_targets = with_targets;
  sl.logits_valid = false;
  sl.has_positions = positions != nullptr;
  sl.counted = 0;
  sl.drop_key = 0;
  sl.logit_rows = B * T;
  sl.wide_logits = false;
  sl.chunked = false;
  if (m.adapters && m.training && m.opt.lora.dropout > 0.0f) {
    sl.drop_key = lora_forward_key(m.opt.lora.seed, m.drop_step, m.drop_stream, m.drop_micro);
    ++m.drop_micro;
  }
  m.last_forward_slot = slot;
  Carver c(sl.arena.data(), m.be->alignment());
  const SlotHead h = carve_head(m.plan(B, T), c);
  // Ids to backend memory; under TP as rows of this rank's vocabulary slice (-1 where another rank
  // holds the row or the target column; kIgnoreTarget stays).
  auto upload_ids = [&](int32_t* dst, const int32_t* ids, int real) {
    const int32_t* src = ids;
    if (s.tp > 1) {
      const int lo = m.v0();
      m.host_ids.resize(N);
      for (size_t i = 0; i < N; ++i)
        m.host_ids[i] = ids[i] == kIgnoreTarget              ? kIgnoreTarget
                        : ids[i] >= lo && ids[i] < lo + real ? ids[i] - lo
                                                             : -1;
      src = m.host_ids.data();
    }
    m.be->upload(dst, src, N * sizeof(int32_t));
  };
  if (s.first_stage()) upload_ids(h.inputs, inputs, m.Vl());
  if (with_targets) {
    upload_ids(h.targets, targets, m.v_real());
    for (size_t i = 0; i < N; ++i) sl.counted += targets[i] != kIgnoreTarget ? 1 : 0;
  }
  if (positions != nullptr) m.be->upload(h.positions, positions, N * sizeof(int32_t));
  return by_dtype(m, [&](auto t) {
    using S = decltype(t);
    return d.llama() ? llama::forward<S>(m, slot, stage_in, targets)
                     : gpt2::forward<S>(m, slot, stage_in, targets);
  });
}

const float* Model::stage_output(int slot) {
  Impl& m = *impl_;
  if (!m.slot(slot).forwarded) throw Error(ExitCode::kInternal, "Model::stage_output: slot has no forward");
  return by_dtype(m, [&](auto t) {
    using S = decltype(t);
    return m.d.llama() ? llama::stage_output<S>(m, slot) : gpt2::stage_output<S>(m, slot);
  });
}

const float* Model::stage_input_grad() {
  Impl& m = *impl_;
  if (m.last_backward_slot < 0) throw Error(ExitCode::kInternal, "Model::stage_input_grad before backward");
  return by_dtype(m, [&](auto t) {
    using S = decltype(t);
    return m.d.llama() ? llama::stage_input_grad<S>(m, m.last_backward_slot)
                       : gpt2::stage_input_grad<S>(m, m.last_backward_slot);
  });
}

void Model::backward_stage(int slot, const float* dout, float loss_scale) {
  Impl& m = *impl_;
  const ModelShard& s = m.s;
  Impl::Slot& sl = m.slot(slot);
  if (!sl.forwarded || (s.last_stage() && (!sl.have_targets || !sl.logits_valid)))
    throw Error(ExitCode::kInternal,
                "Model::backward() needs a preceding forward() with targets, once per forward");
  if (!s.last_stage() && dout == nullptr)
    throw Error(ExitCode::kInternal, "Model: stage " + std::to_string(s.stage) + " needs d(output)");
  if (m.train().staged && !m.layer_hook)
    throw Error(
        ExitCode::kInternal,
        "Model::backward: layer-gradient staging (ZeRO-2) needs a layer backward hook to drain each layer's "
        "staging slot");
  by_dtype(m, [&](auto t) {
    using S = decltype(t);
    if (m.d.llama())
      llama::backward<S>(m, slot, dout, loss_scale);
    else
      gpt2::backward<S>(m, slot, dout, loss_scale);
  });
  sl.forwarded = false;
  if (m.block_slot == slot) m.block_slot = m.block_layer = -1;  // its forward is consumed
  m.last_backward_slot = slot;
}

}  // namespace flotilla
