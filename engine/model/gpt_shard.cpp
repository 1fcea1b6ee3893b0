// Shard geometry of the GPT-2 model (see gpt_shard.h). Non-obvious decision: every mapping
// (initialisation, init_from, checkpoint gathering, tests) goes through shard_runs(), so the
// column/row split of each tensor is written down exactly once.
#include "engine/model/gpt_shard.h"

#include <cstring>
#include <tuple>

#include "engine/core/error.h"

namespace flotilla {

std::string GptShard::describe() const {
  return "tp rank " + std::to_string(tp_rank) + " of " + std::to_string(tp) + ", stage " +
         std::to_string(stage) + " of " + std::to_string(pp) + " (layers " + std::to_string(layer_begin) +
         "-" + std::to_string(layer_end - 1) + ")";
}

std::pair<int, int> stage_layer_range(int n_layer, int pp, int stage) {
  const int base = n_layer / pp, extra = n_layer % pp;
  const int begin = stage * base + (stage < extra ? stage : extra);
  return {begin, begin + base + (stage < extra ? 1 : 0)};
}

GptShard resolve_shard(const GptDims& d, GptShard s) {
  if (s.tp < 1 || s.pp < 1 || s.tp_rank < 0 || s.tp_rank >= s.tp || s.stage < 0 || s.stage >= s.pp)
    throw_config("invalid model shard: tp rank " + std::to_string(s.tp_rank) + " of " + std::to_string(s.tp) +
                 ", stage " + std::to_string(s.stage) + " of " + std::to_string(s.pp));
  if (d.n_head % s.tp != 0)
    throw_config("parallel.tp=" + std::to_string(s.tp) +
                 " does not divide model.n_head=" + std::to_string(d.n_head));
  if (d.padded_vocab % s.tp != 0)
    throw_config("parallel.tp=" + std::to_string(s.tp) + " does not divide the padded vocabulary " +
                 std::to_string(d.padded_vocab));
  if (s.pp > d.n_layer)
    throw_config("parallel.pp=" + std::to_string(s.pp) +
                 " exceeds model.n_layer=" + std::to_string(d.n_layer));
  if (s.layer_end < 0) {
    if (s.pp == 1) {
      s.layer_begin = 0;
      s.layer_end = d.n_layer;
    } else {
      std::tie(s.layer_begin, s.layer_end) = stage_layer_range(d.n_layer, s.pp, s.stage);
    }
  }
  if (s.layer_begin < 0 || s.layer_end > d.n_layer || s.layer_end <= s.layer_begin)
    throw_config("invalid layer range " + std::to_string(s.layer_begin) + "-" + std::to_string(s.layer_end) +
                 " for a model of " + std::to_string(d.n_layer) + " layers");
  return s;
}

GptShard make_shard(const GptDims& d, int tp, int tp_rank, int pp, int stage) {
  GptShard s;
  s.tp = tp;
  s.tp_rank = tp_rank;
  s.pp = pp;
  s.stage = stage;
  return resolve_shard(d, s);
}

bool replicated_over_tp(int tensor) {
  switch (tensor) {
    case kWte:
    case kQkvw:
    case kQkvb:
    case kAttprojw:
    case kFcw:
    case kFcb:
    case kFcprojw:
      return false;
    default:
      return true;
  }
}

bool counts_once(const GptShard& s, int tensor) {
  if (tensor == kWte && !s.first_stage()) return false;  // the last stage's copy of the tied wte
  return !replicated_over_tp(tensor) || s.tp_rank == 0;
}

std::vector<ShardRun> shard_runs(const GptDims& d, const GptShard& s, int tensor) {
  const size_t C = static_cast<size_t>(d.n_embd), Vp = static_cast<size_t>(d.padded_vocab);
  const size_t tp = static_cast<size_t>(s.tp), r = static_cast<size_t>(s.tp_rank);
  const size_t Ct = C / tp, Ft = 4 * C / tp;
  const size_t lb = static_cast<size_t>(s.layer_begin), nl = static_cast<size_t>(s.local_layers());
  std::vector<ShardRun> runs;
  // Per-layer tensors: `per_full` floats per layer in the full stack, `per_local` in the shard;
  // `within` lists the runs of one layer.
  auto layers = [&](size_t per_full, size_t per_local, const std::vector<ShardRun>& within) {
    for (size_t l = 0; l < nl; ++l)
      for (const ShardRun& w : within)
        runs.push_back({(lb + l) * per_full + w.full, l * per_local + w.local, w.count});
  };
  switch (tensor) {
    case kWte:
      if (s.has_wte()) runs.push_back({r * (Vp / tp) * C, 0, (Vp / tp) * C});
      break;
    case kWpe:
      if (s.first_stage()) runs.push_back({0, 0, static_cast<size_t>(d.max_seq_len) * C});
      break;
    case kLn1w:
    case kLn1b:
    case kLn2w:
    case kLn2b:
    case kAttprojb:
    case kFcprojb:
      layers(C, C, {{0, 0, C}});
      break;
    case kQkvw:  // rows of q, k and v for this rank's heads
      layers(3 * C * C, 3 * Ct * C,
             {{(0 * C + r * Ct) * C, 0 * Ct * C, Ct * C},
              {(1 * C + r * Ct) * C, 1 * Ct * C, Ct * C},
              {(2 * C + r * Ct) * C, 2 * Ct * C, Ct * C}});
      break;
    case kQkvb:
      layers(3 * C, 3 * Ct,
             {{0 * C + r * Ct, 0 * Ct, Ct}, {1 * C + r * Ct, 1 * Ct, Ct}, {2 * C + r * Ct, 2 * Ct, Ct}});
      break;
    case kAttprojw: {  // (C, C): every output row, this rank's input columns
      std::vector<ShardRun> w;
      for (size_t row = 0; row < C; ++row) w.push_back({row * C + r * Ct, row * Ct, Ct});
      layers(C * C, C * Ct, w);
      break;
    }
    case kFcw:
      layers(4 * C * C, Ft * C, {{r * Ft * C, 0, Ft * C}});
      break;
    case kFcb:
      layers(4 * C, Ft, {{r * Ft, 0, Ft}});
      break;
    case kFcprojw: {  // (C, 4C): every output row, this rank's input columns
      std::vector<ShardRun> w;
      for (size_t row = 0; row < C; ++row) w.push_back({row * 4 * C + r * Ft, row * Ft, Ft});
      layers(4 * C * C, C * Ft, w);
      break;
    }
    case kLnfw:
    case kLnfb:
      if (s.last_stage()) runs.push_back({0, 0, C});
      break;
    default:
      break;
  }
  return runs;
}

std::array<size_t, kNumParamTensors> local_param_sizes(const GptDims& d, const GptShard& s) {
  std::array<size_t, kNumParamTensors> out{};
  for (int i = 0; i < kNumParamTensors; ++i) {
    size_t n = 0;
    for (const ShardRun& run : shard_runs(d, s, i)) n += run.count;
    out[static_cast<size_t>(i)] = n;
  }
  return out;
}

namespace {
template <typename F>
void for_each_run(const GptDims& d, const GptShard& s, F f) {
  const auto full_sizes = param_sizes(d);
  const auto local_sizes = local_param_sizes(d, s);
  size_t full_base = 0, local_base = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    for (const ShardRun& run : shard_runs(d, s, i))
      f(full_base + run.full, local_base + run.local, run.count);
    full_base += full_sizes[static_cast<size_t>(i)];
    local_base += local_sizes[static_cast<size_t>(i)];
  }
}
}  // namespace

void full_to_shard(const GptDims& d, const GptShard& s, const float* full, float* local) {
  for_each_run(d, s,
               [&](size_t f, size_t l, size_t n) { std::memcpy(local + l, full + f, n * sizeof(float)); });
}

void shard_to_full(const GptDims& d, const GptShard& s, const float* local, float* full) {
  for_each_run(d, s,
               [&](size_t f, size_t l, size_t n) { std::memcpy(full + f, local + l, n * sizeof(float)); });
}

}  // namespace flotilla
