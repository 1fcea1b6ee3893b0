// Loading a checkpoint's model weights and dimensions (see model_checkpoint.h).
#include "engine/checkpoint/model_checkpoint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint.h"
#include "engine/config/config_schema.h"
#include "engine/core/error.h"
#include "engine/model/lora.h"
#include "engine/model/param_layout.h"
#include "engine/parallel/rank_grid.h"

namespace flotilla {
namespace {

namespace fs = std::filesystem;

bool is_dir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

bool has_step_dirs(const std::string& root) {
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind("step-", 0) == 0) return true;
  return false;
}

LoadedCheckpoint load_params_section(const std::string& dir, std::vector<std::string>* warnings) {
  if (!is_dir(dir)) throw_checkpoint("checkpoint directory " + dir + " does not exist");
  const fs::path p = fs::path(dir).lexically_normal();
  const fs::path named = p.has_filename() ? p : p.parent_path();
  if (fs::exists(p / "MANIFEST") || named.filename().string().rfind("step-", 0) == 0) {
    const std::string parent = named.parent_path().string();
    return CheckpointStore(parent.empty() ? "." : parent).load_dir(dir, 0, {"params"});
  }
  std::string root = dir;
  if (!has_step_dirs(root) && is_dir(dir + "/checkpoints")) root = dir + "/checkpoints";
  if (!has_step_dirs(root))
    throw_checkpoint(
        "no checkpoint in " + dir +
        ": pass a step-N directory (with a MANIFEST), a checkpoints directory or a run directory");
  std::vector<std::string> local;
  CheckpointStore store(root);
  auto loaded = store.load_latest(0, warnings ? warnings : &local, {"params"});
  if (!loaded)
    throw_checkpoint("no checkpoint in " + root + " verifies:\n" + describe_faults(store.load_faults()) +
                     "pass an older step-N directory that verifies, or restore the damaged files");
  return *loaded;
}

// The checkpoint's resolved config: every [model] and [lora] key its trainer.json has (older
// checkpoints: GPT-2's only; the rest keep their defaults, which describe GPT-2 without LoRA).
RunConfig config_from_trainer_json(const LoadedCheckpoint& c) {
  const auto j = nlohmann::json::parse(c.trainer_state_json, nullptr, false);
  const std::string where = c.dir + "/trainer.json";
  if (j.is_discarded() || !j.is_object())
    throw_checkpoint(where + " is missing or not JSON; cannot tell the model's dimensions");
  const auto cfg = j.find("config");
  if (cfg == j.end() || !cfg->is_object() || !cfg->contains("model") || !(*cfg)["model"].is_object())
    throw_checkpoint(where + " has no config.model; cannot tell the model's dimensions");
  const auto& m = (*cfg)["model"];
  auto get = [&](const char* key) {
    if (!m.contains(key) || !m[key].is_number_integer() || m[key].get<int64_t>() <= 0 ||
        m[key].get<int64_t>() > (1 << 24))
      throw_checkpoint(where + ": config.model." + key + " is missing or not a positive integer");
    return m[key].get<int>();
  };
  get("n_layer");
  get("n_head");
  get("n_embd");
  get("vocab_size");
  get("max_seq_len");
  RunConfig rc;
  for (const ConfigKey& key : config_keys()) {
    if (key.section != "model" && key.section != "lora") continue;
    if (!cfg->contains(key.section) || !(*cfg)[key.section].is_object()) continue;
    const auto& sec = (*cfg)[key.section];
    if (!sec.contains(key.name)) continue;
    const auto& v = sec[key.name];
    void* field = field_ptr(key, rc);
    const bool ok = key.storage == FieldStorage::kString   ? v.is_string()
                    : key.storage == FieldStorage::kBool   ? v.is_boolean()
                    : key.storage == FieldStorage::kDouble ? v.is_number()
                                                           : v.is_number_integer();
    if (!ok) throw_checkpoint(where + ": config." + key.path() + " has the wrong type");
    switch (key.storage) {
      case FieldStorage::kString:
        *static_cast<std::string*>(field) = v.get<std::string>();
        break;
      case FieldStorage::kBool:
        *static_cast<bool*>(field) = v.get<bool>();
        break;
      case FieldStorage::kDouble:
        *static_cast<double*>(field) = v.get<double>();
        break;
      case FieldStorage::kInt32:
        *static_cast<int*>(field) = v.get<int>();
        break;
      case FieldStorage::kInt64:
        *static_cast<int64_t*>(field) = v.get<int64_t>();
        break;
      case FieldStorage::kUint64:
        *static_cast<uint64_t*>(field) = v.get<uint64_t>();
        break;
    }
  }
  const ModelDims d = dims_from_config(rc.model);
  if (const std::string problem = dims_problem(d); !problem.empty()) throw_checkpoint(where + ": " + problem);
  if (rc.lora.enabled) {
    try {
      if (rc.lora.rank < 1) throw_config("lora.rank " + std::to_string(rc.lora.rank) + " is below 1");
      (void)parse_lora_targets(rc.lora.targets);
    } catch (const Error& e) {
      throw_checkpoint(where + ": config.lora is not valid: " + e.what());
    }
    // The base the adapters were trained over: one this engine cannot rebuild (a quantisation it
    // does not have) would be read as the unquantised base and merge or sample another model.
    if (rc.lora.base_quant != "none" && rc.lora.base_quant != "nf4")
      throw_checkpoint(where + ": config.lora.base_quant = \"" + rc.lora.base_quant +
                       "\" is not a base quantisation this engine has (\"none\" or \"nf4\"); the adapters "
                       "were trained over a base it cannot rebuild, so they are not exported or sampled");
  }
  return rc;
}

}  // namespace

SavedLayout saved_layout(const std::string& trainer_state_json) {
  SavedLayout l;
  const auto j = nlohmann::json::parse(trainer_state_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return l;
  l.world = j.value("world_size", 1);
  l.dp = l.world;
  l.zero = j.value("zero", 0);
  if (const auto par = j.find("parallel"); par != j.end() && par->is_object()) {
    l.dp = par->value("dp", l.world);
    l.tp = par->value("tp", 1);
    l.pp = par->value("pp", 1);
  }
  return l;
}

// Every shard's "params" lives in the file of its first DP replica; its moments there too without
// ZeRO, else one contiguous piece of ceil(n / dp) floats (the last padded) in each DP replica's
// file. Each file is read once, and only the sections asked for are kept.
void gather_full_state(const LoadedCheckpoint& rank0, const ModelDims& d, const ParamLayout& table,
                       const SavedLayout& l, bool moments, FullState& out) {
  if (l.world < 1 || l.dp < 1 || l.tp < 1 || l.pp < 1 || int64_t{l.dp} * l.tp * l.pp != l.world)
    throw_checkpoint(rank0.dir + "/trainer.json: its layout dp=" + std::to_string(l.dp) +
                     " x tp=" + std::to_string(l.tp) + " x pp=" + std::to_string(l.pp) + " is not its " +
                     std::to_string(l.world) + " rank(s)");
  const parallel::RankGrid grid(l.world, l.dp, l.tp, l.pp);
  const fs::path dir = fs::path(rank0.dir).lexically_normal();
  const std::string parent = (dir.has_filename() ? dir : dir.parent_path()).parent_path().string();
  CheckpointStore store(parent.empty() ? "." : parent);
  const bool zero = l.zero > 0 && l.dp > 1;
  out.params.assign(table.full_params(), 0.0f);
  out.m.assign(moments ? table.full_params() : 0, 0.0f);
  out.v.assign(moments ? table.full_params() : 0, 0.0f);
  std::vector<float> local_m, local_v;
  for (int stage = 0; stage < l.pp; ++stage) {
    for (int t = 0; t < l.tp; ++t) {
      const ModelShard shard = make_shard(d, l.tp, t, l.pp, stage);
      size_t n = 0;
      for (size_t k : local_param_sizes(table, shard)) n += k;
      const size_t chunk = zero ? (n + static_cast<size_t>(l.dp) - 1) / static_cast<size_t>(l.dp) : n;
      local_m.assign(moments ? chunk * static_cast<size_t>(zero ? l.dp : 1) : 0, 0.0f);
      local_v.assign(local_m.size(), 0.0f);
      const int replicas = moments && zero ? l.dp : 1;
      for (int r = 0; r < replicas; ++r) {
        const int rank = grid.rank_of({r, t, stage});
        std::vector<std::string> want;
        if (r == 0) want.push_back("params");
        if (moments) want.insert(want.end(), {"adam_m", "adam_v"});
        const bool have_all = rank == 0 && [&] {
          for (const std::string& w : want) {
            bool found = false;
            for (const LoadedTensor& x : rank0.tensors) found = found || x.name == w;
            if (!found) return false;
          }
          return true;
        }();
        const LoadedCheckpoint c = have_all ? rank0 : store.load_dir(rank0.dir, rank, want);
        const std::string where =
            rank0.dir + "/rank-" + std::to_string(rank) + ".bin (" + shard.describe() + ")";
        for (const std::string& w : want) {
          const LoadedTensor* x = nullptr;
          for (const LoadedTensor& y : c.tensors)
            if (y.name == w) x = &y;
          if (!x) throw_checkpoint(where + " has no \"" + w + "\" section");
          const size_t expect = w == "params" ? n : chunk;
          if (x->data.size() != expect * sizeof(float))
            throw_checkpoint(where + ": section \"" + w + "\" holds " + std::to_string(x->data.size() / 4) +
                             " floats, its layout (dp=" + std::to_string(l.dp) + ", ZeRO-" +
                             std::to_string(zero ? l.zero : 0) + ") needs " + std::to_string(expect));
          const auto* f = reinterpret_cast<const float*>(x->data.data());
          if (w == "params") shard_to_full(table, shard, f, out.params.data());
          if (w == "adam_m")
            std::copy(f, f + chunk, local_m.begin() + static_cast<std::ptrdiff_t>(r * chunk));
          if (w == "adam_v")
            std::copy(f, f + chunk, local_v.begin() + static_cast<std::ptrdiff_t>(r * chunk));
        }
      }
      if (moments) {
        shard_to_full(table, shard, local_m.data(), out.m.data());
        shard_to_full(table, shard, local_v.data(), out.v.data());
      }
    }
  }
}

ModelCheckpoint load_model_checkpoint(const std::string& path, std::vector<std::string>* warnings) {
  const LoadedCheckpoint c = load_params_section(path, warnings);
  ModelCheckpoint out;
  out.dir = c.dir;
  out.step = c.step;
  const RunConfig rc = config_from_trainer_json(c);
  out.dims = dims_from_config(rc.model);
  out.lora = lora_spec(rc);
  out.init_from = rc.model.init_from;
  out.trainer_state_json = c.trainer_state_json;
  if (const auto j = nlohmann::json::parse(c.trainer_state_json, nullptr, false); j.is_object()) {
    if (const auto base = j.find("lora_base");
        base != j.end() && base->is_object() && base->contains("weights") && (*base)["weights"].is_string())
      out.base_weights = (*base)["weights"].get<std::string>();
  }
  const ParamLayout table = out.lora.enabled() ? ParamLayout(out.dims, out.lora) : ParamLayout(out.dims);
  const SavedLayout layout = saved_layout(c.trainer_state_json);
  if (layout.tp > 1 || layout.pp > 1) {
    FullState full;
    gather_full_state(c, out.dims, table, layout, false, full);
    out.params = std::move(full.params);
    return out;
  }
  const size_t n = table.full_params();
  for (const LoadedTensor& t : c.tensors) {
    if (t.name != "params") continue;
    if (t.data.size() != n * sizeof(float))
      throw_checkpoint(
          c.dir + ": the params section holds " + std::to_string(t.data.size() / 4) + " floats, but " +
          (out.lora.enabled() ? "config.lora's adapters need " : "config.model needs ") + std::to_string(n));
    out.params.resize(n);
    std::memcpy(out.params.data(), t.data.data(), t.data.size());
    return out;
  }
  throw_checkpoint(c.dir + "/rank-0.bin has no \"params\" section");
}

}  // namespace flotilla
