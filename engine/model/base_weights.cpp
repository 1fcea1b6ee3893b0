// The host-side frozen base (base_weights.h).
#include "engine/model/base_weights.h"

#include <algorithm>
#include <cstring>

#include "engine/core/error.h"
#include "engine/model/llama.h"
#include "engine/model/model_impl.h"
#include "engine/model/model_shard.h"
#include "engine/model/param_layout.h"

namespace flotilla {

BaseModule base_module(const ModelDims& d, int module) {
  const int C = d.n_embd, Q = d.q_dim(), KV = d.kv_dim(), F = d.ffn();
  switch (module) {
    case kLoraQ:
      return {llama::kQkv, 0, Q, C};
    case kLoraK:
      return {llama::kQkv, Q, KV, C};
    case kLoraV:
      return {llama::kQkv, Q + KV, KV, C};
    case kLoraO:
      return {llama::kAttnOut, 0, C, Q};
    case kLoraGate:
      return {llama::kGateUp, 0, F, C};
    case kLoraUp:
      return {llama::kGateUp, F, F, C};
    default:
      return {llama::kDown, 0, C, F};
  }
}

bool is_projection_tensor(int tensor) {
  return tensor == llama::kQkv || tensor == llama::kAttnOut || tensor == llama::kGateUp ||
         tensor == llama::kDown;
}

std::string nf4_layout_problem(const ModelDims& d, int tp) {
  if (!d.llama())
    return "lora.base_quant = \"nf4\" quantises the Llama family's projections (model.arch = \"llama\")";
  const auto n = [](int v) { return std::to_string(v); };
  const char* key[kBaseModules] = {
      "model.n_embd", "model.n_embd", "model.n_embd", "model.n_head x model.head_dim",
      "model.n_embd", "model.n_embd", "model.ffn_dim"};
  for (int m = 0; m < kBaseModules; ++m) {
    const BaseModule g = base_module(d, m);
    if (g.in % nf4::kBlock != 0)
      return std::string(lora_target_name(m)) + "'s input width " + key[m] + " = " + n(g.in) +
             " is not a multiple of 64: NF4 quantises in blocks of 64 along a row, and the engine's kernels "
             "need whole blocks per row; this model cannot be trained with lora.base_quant = \"nf4\" "
             "(use \"none\")";
  }
  if (tp > 1)
    for (int m : {kLoraO, kLoraDown}) {
      const BaseModule g = base_module(d, m);
      if (g.in % tp == 0 && (g.in / tp) % nf4::kBlock == 0) continue;
      // The largest tp below this one that cuts every row-parallel module on a block boundary.
      int fit = 1;
      for (int t = tp - 1; t > 1; --t) {
        const BaseModule o = base_module(d, kLoraO), dn = base_module(d, kLoraDown);
        if (tp_problem(d, t).empty() && (o.in / t) % nf4::kBlock == 0 && o.in % t == 0 &&
            (dn.in / t) % nf4::kBlock == 0 && dn.in % t == 0) {
          fit = t;
          break;
        }
      }
      return "parallel.tp = " + n(tp) + " cuts " + lora_target_name(m) + "'s input width " + key[m] + " = " +
             n(g.in) + " into slices of " + n(g.in / tp) + " columns, not a multiple of 64 (" +
             n(g.in / nf4::kBlock) + " NF4 blocks per row cannot be split " + n(tp) +
             " ways): tensor parallelism must cut the quantised weights on block boundaries; use parallel.tp "
             "= " +
             n(fit) + (fit == 1 ? " (no tensor parallelism)" : "") + " or lora.base_quant = \"none\"";
    }
  return "";
}

const nf4::Quantized& BaseWeights::module(int layer, int m) const {
  if (!nf4 || !holds_layer(layer) || m < 0 || m >= kBaseModules)
    throw Error(ExitCode::kInternal, "BaseWeights: no quantised module " + std::to_string(m) + " of layer " +
                                         std::to_string(layer));
  return modules[static_cast<size_t>((layer - layer_begin) * kBaseModules + m)];
}

nf4::Quantized& BaseWeights::module(int layer, int m) {
  return const_cast<nf4::Quantized&>(static_cast<const BaseWeights&>(*this).module(layer, m));
}

size_t BaseWeights::dense_bytes() const {
  size_t n = 0;
  for (const auto& t : dense) n += t.size() * sizeof(float);
  return n;
}

size_t BaseWeights::quantized_bytes() const {
  size_t n = 0;
  for (const auto& q : modules) n += q.bytes();
  return n;
}

BaseWeights make_base_weights(const ModelDims& d, bool nf4, bool double_quant, const BaseTensorFill& fill,
                              int layer_begin, int layer_end) {
  if (nf4 && !d.llama())
    throw_config(
        "lora.base_quant = \"nf4\" quantises the Llama family's projections (model.arch = \"llama\")");
  const ParamLayout layout(d);
  BaseWeights b;
  b.dims = d;
  b.nf4 = nf4;
  b.double_quant = double_quant;
  b.layer_begin = nf4 ? layer_begin : 0;
  b.layer_end = nf4 ? (layer_end < 0 ? d.n_layer : layer_end) : d.n_layer;
  b.dense.resize(static_cast<size_t>(layout.size()));
  if (nf4) b.modules.resize(static_cast<size_t>((b.layer_end - b.layer_begin) * kBaseModules));
  std::vector<float> scratch;
  for (int i = 0; i < layout.size(); ++i) {
    const size_t n = layout.full_size(i);
    if (!nf4 || !is_projection_tensor(i)) {
      b.dense[static_cast<size_t>(i)].assign(n, 0.0f);
      if (n > 0) fill(i, b.dense[static_cast<size_t>(i)].data(), n);
      continue;
    }
    scratch.assign(n, 0.0f);  // one projection tensor in flight
    fill(i, scratch.data(), n);
    const size_t per_layer = layout[i].rows * layout[i].cols;
    for (int m = 0; m < kBaseModules; ++m) {
      const BaseModule g = base_module(d, m);
      if (g.tensor != i) continue;
      for (int l = b.layer_begin; l < b.layer_end; ++l) {
        const float* src = scratch.data() + static_cast<size_t>(l) * per_layer +
                           static_cast<size_t>(g.row0) * static_cast<size_t>(g.in);
        b.module(l, m) = nf4::quantize(src, static_cast<int64_t>(g.out) * g.in, {g.out, g.in}, double_quant);
      }
    }
  }
  return b;
}

BaseWeights random_base_weights(const ModelDims& d, uint64_t seed, bool nf4, bool double_quant,
                                int layer_begin, int layer_end) {
  return make_base_weights(
      d, nf4, double_quant, [&](int i, float* t, size_t n) { llama::init_tensor(d, i, t, n, seed); },
      layer_begin, layer_end);
}

BaseWeights base_weights_from_full(const ModelDims& d, const float* full, bool nf4, bool double_quant) {
  const ParamLayout layout(d);
  std::vector<size_t> offset(static_cast<size_t>(layout.size()), 0);
  for (int i = 1; i < layout.size(); ++i)
    offset[static_cast<size_t>(i)] = offset[static_cast<size_t>(i - 1)] + layout.full_size(i - 1);
  return make_base_weights(d, nf4, double_quant, [&](int i, float* t, size_t n) {
    std::memcpy(t, full + offset[static_cast<size_t>(i)], n * sizeof(float));
  });
}

void base_weights_to_full(const BaseWeights& b, float* full) {
  const ParamLayout layout(b.dims);
  size_t off = 0;
  std::vector<float> w;
  for (int i = 0; i < layout.size(); ++i) {
    const auto& t = b.dense[static_cast<size_t>(i)];
    if (!t.empty()) std::memcpy(full + off, t.data(), t.size() * sizeof(float));
    if (b.nf4 && is_projection_tensor(i)) {
      const size_t per_layer = layout[i].rows * layout[i].cols;
      for (int m = 0; m < kBaseModules; ++m) {
        const BaseModule g = base_module(b.dims, m);
        if (g.tensor != i) continue;
        for (int l = b.layer_begin; l < b.layer_end; ++l)
          nf4::dequantize(b.module(l, m), full + off + static_cast<size_t>(l) * per_layer +
                                              static_cast<size_t>(g.row0) * static_cast<size_t>(g.in));
      }
    }
    off += layout.full_size(i);
  }
}

}  // namespace flotilla
