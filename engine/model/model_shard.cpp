// Shard resolution: layer ranges per stage and the TP divisibility rules of each architecture.
#include "engine/model/model_shard.h"

#include <tuple>

#include "engine/core/error.h"

namespace flotilla {

std::string ModelShard::describe() const {
  return "tp rank " + std::to_string(tp_rank) + " of " + std::to_string(tp) + ", stage " +
         std::to_string(stage) + " of " + std::to_string(pp) + " (layers " + std::to_string(layer_begin) +
         "-" + std::to_string(layer_end - 1) + ")";
}

std::pair<int, int> stage_layer_range(int n_layer, int pp, int stage) {
  const int base = n_layer / pp, extra = n_layer % pp;
  const int begin = stage * base + (stage < extra ? stage : extra);
  return {begin, begin + base + (stage < extra ? 1 : 0)};
}

std::string tp_problem(const ModelDims& d, int tp) {
  const auto n = [](int v) { return std::to_string(v); };
  if (tp < 1) return "parallel.tp=" + n(tp) + " must be at least 1";
  if (d.n_head % tp != 0) return "parallel.tp=" + n(tp) + " does not divide model.n_head=" + n(d.n_head);
  if (d.llama() && d.kv_heads() % tp != 0)
    return "parallel.tp=" + n(tp) + " does not divide model.n_kv_head=" + n(d.kv_heads()) +
           " (each TP rank holds whole K/V heads; use a tp that divides " + n(d.kv_heads()) + ")";
  if (d.llama() && d.ffn() % tp != 0)
    return "parallel.tp=" + n(tp) + " does not divide model.ffn_dim=" + n(d.ffn());
  if (d.padded_vocab % tp != 0)
    return "parallel.tp=" + n(tp) + " does not divide the padded vocabulary " + n(d.padded_vocab);
  return "";
}

ModelShard resolve_shard(const ModelDims& d, ModelShard s) {
  if (s.tp < 1 || s.pp < 1 || s.tp_rank < 0 || s.tp_rank >= s.tp || s.stage < 0 || s.stage >= s.pp)
    throw_config("invalid model shard: tp rank " + std::to_string(s.tp_rank) + " of " + std::to_string(s.tp) +
                 ", stage " + std::to_string(s.stage) + " of " + std::to_string(s.pp));
  if (const std::string p = tp_problem(d, s.tp); !p.empty()) throw_config(p);
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

ModelShard make_shard(const ModelDims& d, int tp, int tp_rank, int pp, int stage) {
  ModelShard s;
  s.tp = tp;
  s.tp_rank = tp_rank;
  s.pp = pp;
  s.stage = stage;
  return resolve_shard(d, s);
}

}  // namespace flotilla
