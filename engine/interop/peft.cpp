// PEFT LoRA adapter folders in and out, the merge, and base fingerprints (see peft.h).
//
// Non-obvious decisions:
// - adapter_config.json is parsed without exceptions and every key is type-checked before use, so a
//   malformed or hostile file is refused with the key named (tests/fuzz covers it); every PEFT
//   option that would change what the adapter computes (DoRA, biases, fan_in_fan_out, per-module
//   rank or alpha patterns, layer subsets, extra trainable modules) is refused rather than ignored.
// - The config written back has PEFT's own key set (the one `save_pretrained` of PEFT 0.21 writes,
//   tests/reference/README.md), with the defaults of a plain LoRA, so PEFT loads it without a warning.
#include "engine/interop/peft.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/core/checksum.h"
#include "engine/core/error.h"
#include "engine/cpu/matmul.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/hf_writer.h"
#include "engine/interop/model_source.h"
#include "engine/interop/safetensors.h"
#include "engine/interop/weights.h"
#include "engine/model/llama.h"
#include "engine/model/param_layout.h"

namespace flotilla::interop {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kMaxConfigBytes = 1 << 20;  // an adapter_config.json is a few KB

std::string read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_config(path + ": cannot be read");
  std::string text;
  char buf[4096];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxConfigBytes)
      throw_config(path + " is larger than 1 MiB; an adapter_config.json is a few KB");
  }
  return text;
}

// PEFT's module path of target t in layer l (without ".lora_A.weight").
std::string peft_module(int layer, int t) {
  const bool attention = t == kLoraQ || t == kLoraK || t == kLoraV || t == kLoraO;
  return "base_model.model.model.layers." + std::to_string(layer) + (attention ? ".self_attn." : ".mlp.") +
         lora_target_name(t);
}

// Offsets of the adapter table's tensors in the whole adapter vector.
std::vector<size_t> table_offsets(const ParamLayout& table) {
  std::vector<size_t> out;
  size_t off = 0;
  for (int i = 0; i < table.size(); ++i) {
    out.push_back(off);
    off += table.full_size(i);
  }
  return out;
}

std::string num_text(double v) {
  char buf[32];
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

bool is_null_or_empty(const json& v) {
  return v.is_null() || (v.is_object() && v.empty()) || (v.is_array() && v.empty()) ||
         (v.is_string() && v.get<std::string>().empty());
}

// The base tensor and row range a target's projection occupies in the engine's layout.
struct BaseRows {
  int tensor = 0;
  size_t row0 = 0;
};
BaseRows base_rows(const ModelDims& d, int t) {
  const size_t Q = static_cast<size_t>(d.q_dim()), KV = static_cast<size_t>(d.kv_dim());
  const size_t F = static_cast<size_t>(d.ffn());
  switch (t) {
    case kLoraQ:
      return {llama::kQkv, 0};
    case kLoraK:
      return {llama::kQkv, Q};
    case kLoraV:
      return {llama::kQkv, Q + KV};
    case kLoraO:
      return {llama::kAttnOut, 0};
    case kLoraGate:
      return {llama::kGateUp, 0};
    case kLoraUp:
      return {llama::kGateUp, F};
    default:
      return {llama::kDown, 0};
  }
}

uint32_t file_crc32c(const std::string& path, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io(path + ": cannot open: " + errno_string(errno));
  std::vector<char> buf(size_t{8} << 20);
  uint32_t crc = 0;
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      throw_io(path + ": read failed: " + errno_string(err));
    }
    if (n == 0) break;
    crc = crc32c(buf.data(), static_cast<size_t>(n), crc);
    total += static_cast<uint64_t>(n);
  }
  ::close(fd);
  *size = total;
  return crc;
}

std::map<std::string, std::string> fingerprint_lines(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = line.substr(sp + 1);
  }
  return out;
}

}  // namespace

PeftAdapterConfig read_peft_adapter_config(const std::string& dir_or_name) {
  const std::string dir = local_model_folder(dir_or_name, "lora.init_from", hub::FileSet::kAdapter);
  const std::string path = (fs::path(dir) / "adapter_config.json").string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw_config(dir +
                 " has no adapter_config.json; give a PEFT adapter folder (adapter_config.json + "
                 "adapter_model.safetensors)");
  return parse_peft_adapter_config(read_small_file(path), path);
}

PeftAdapterConfig parse_peft_adapter_config(const std::string& text, const std::string& path) {
  if (text.size() > kMaxConfigBytes)
    throw_config(path + " is larger than 1 MiB; an adapter_config.json is a few KB");
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw_config(path + " is not a JSON object");
  PeftAdapterConfig c;
  auto bad = [&](const std::string& key, const std::string& why) -> void {
    throw_config(path + ": \"" + key + "\" " + why);
  };
  auto has = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  // peft_type and task_type.
  if (!has("peft_type") || !j["peft_type"].is_string())
    bad("peft_type", "is missing; the engine loads LoRA adapters (\"peft_type\": \"LORA\")");
  c.peft_type = j["peft_type"].get<std::string>();
  if (c.peft_type != "LORA")
    bad("peft_type", "is \"" + c.peft_type + "\"; the engine loads LoRA adapters (\"LORA\") only");
  if (has("task_type")) {
    if (!j["task_type"].is_string()) bad("task_type", "is not a string");
    c.task_type = j["task_type"].get<std::string>();
    if (c.task_type != "CAUSAL_LM")
      bad("task_type",
          "is \"" + c.task_type + "\"; the engine trains causal language models (\"CAUSAL_LM\")");
  }
  // r and lora_alpha.
  if (!has("r") || !j["r"].is_number_integer()) bad("r", "is missing or not an integer");
  const int64_t r = j["r"].get<int64_t>();
  if (r < 1 || r > 65536) bad("r", "= " + std::to_string(r) + " is not a rank between 1 and 65536");
  c.r = static_cast<int>(r);
  if (!has("lora_alpha") || !j["lora_alpha"].is_number()) bad("lora_alpha", "is missing or not a number");
  c.lora_alpha = j["lora_alpha"].get<double>();
  if (!std::isfinite(c.lora_alpha) || c.lora_alpha <= 0) bad("lora_alpha", "must be a finite number > 0");
  if (has("lora_dropout")) {
    if (!j["lora_dropout"].is_number()) bad("lora_dropout", "is not a number");
    c.lora_dropout = j["lora_dropout"].get<double>();
    if (!std::isfinite(c.lora_dropout) || c.lora_dropout < 0 || c.lora_dropout >= 1)
      bad("lora_dropout", "must be in [0, 1)");
  }
  if (has("use_rslora")) {
    if (!j["use_rslora"].is_boolean()) bad("use_rslora", "is not true or false");
    c.use_rslora = j["use_rslora"].get<bool>();
  }
  // target_modules: a list of module names, or "all-linear" (a single name as a string is the
  // regular expression PEFT matches against full module paths: only a bare projection name is taken).
  if (!has("target_modules"))
    bad("target_modules", "is missing; list the adapted modules (e.g. q_proj, v_proj)");
  const json& tm = j["target_modules"];
  if (tm.is_string()) {
    const std::string s = tm.get<std::string>();
    if (s == "all-linear") {
      c.targets = parse_lora_targets("all-linear");
    } else if (find_lora_target(s) >= 0) {
      c.targets = 1u << find_lora_target(s);
    } else {
      bad("target_modules",
          "is the pattern \"" + s.substr(0, 80) +
              "\"; the engine reads a list of module names (q_proj, k_proj, v_proj, o_proj, "
              "gate_proj, up_proj, down_proj) or \"all-linear\"");
    }
  } else if (tm.is_array()) {
    if (tm.empty()) bad("target_modules", "is empty");
    for (const json& m : tm) {
      if (!m.is_string()) bad("target_modules", "holds a value that is not a string");
      const std::string name = m.get<std::string>();
      const int t = find_lora_target(name);
      if (t < 0)
        bad("target_modules", "names \"" + name.substr(0, 80) +
                                  "\", which is not a projection the engine adapts (q_proj, k_proj, v_proj, "
                                  "o_proj, gate_proj, up_proj, down_proj)");
      c.targets |= 1u << t;
    }
  } else {
    bad("target_modules", "is neither a list of module names nor a string");
  }
  // What would change the computation, refused rather than ignored.
  if (has("use_dora") && (!j["use_dora"].is_boolean() || j["use_dora"].get<bool>()))
    bad("use_dora", "is set; DoRA adapters are not plain LoRA and the engine cannot train or load them");
  if (has("bias") && (!j["bias"].is_string() || j["bias"].get<std::string>() != "none"))
    bad("bias", "is not \"none\"; the engine's LoRA trains no biases");
  if (has("fan_in_fan_out") && (!j["fan_in_fan_out"].is_boolean() || j["fan_in_fan_out"].get<bool>()))
    bad("fan_in_fan_out", "is true (a GPT-2 Conv1D layout); Llama-family adapters have it false");
  if (has("lora_bias") && (!j["lora_bias"].is_boolean() || j["lora_bias"].get<bool>()))
    bad("lora_bias", "is true; the engine's LoRA has no bias on lora_B");
  if (has("use_qalora") && (!j["use_qalora"].is_boolean() || j["use_qalora"].get<bool>()))
    bad("use_qalora", "is true; QA-LoRA adapters are not supported");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (j.contains(key) && !is_null_or_empty(j[key]))
      bad(key, "gives some modules their own rank or alpha; the engine uses one r and one lora_alpha");
  for (const char* key : {"layers_to_transform", "layers_pattern", "modules_to_save", "layer_replication",
                          "target_parameters", "trainable_token_indices", "exclude_modules"})
    if (j.contains(key) && !is_null_or_empty(j[key]))
      bad(key, "is set; the engine adapts every layer's listed projections and nothing else");
  if (has("base_model_name_or_path") && j["base_model_name_or_path"].is_string())
    c.base_model_name_or_path = j["base_model_name_or_path"].get<std::string>();
  if (has("revision") && j["revision"].is_string()) c.revision = j["revision"].get<std::string>();
  return c;
}

bool apply_lora_init_from(RunConfig& cfg) {
  if (!cfg.lora.enabled || cfg.lora.init_from.empty()) return false;
  // A Hub name: resolved once here (adapter files only) and pinned to its commit, as model.init_from.
  std::string pinned;
  const std::string folder =
      resolve_and_pin(cfg.lora.init_from, "lora.init_from", hub::FileSet::kAdapter, &pinned);
  PeftAdapterConfig a;
  try {
    a = read_peft_adapter_config(folder);
  } catch (const Error& e) {
    throw Error(e.code(), std::string("lora.init_from: ") + e.what());
  }
  cfg.lora.init_from = pinned;
  const LoraSection def;
  const std::string file = (fs::path(folder) / "adapter_config.json").string();
  auto refuse = [&](const std::string& key, const std::string& mine, const std::string& theirs) {
    throw_config(key + " = " + mine + " disagrees with " + theirs + " in " + file + "; remove " + key +
                 " (lora.init_from sets it) or set it to the adapter's value");
  };
  if (cfg.lora.rank != def.rank && cfg.lora.rank != a.r)
    refuse("lora.rank", std::to_string(cfg.lora.rank), "\"r\": " + std::to_string(a.r));
  if (cfg.lora.alpha != def.alpha && cfg.lora.alpha != a.lora_alpha)
    refuse("lora.alpha", num_text(cfg.lora.alpha), "\"lora_alpha\": " + num_text(a.lora_alpha));
  if (cfg.lora.use_rslora != def.use_rslora && cfg.lora.use_rslora != a.use_rslora)
    refuse("lora.use_rslora", cfg.lora.use_rslora ? "true" : "false",
           std::string("\"use_rslora\": ") + (a.use_rslora ? "true" : "false"));
  if (cfg.lora.targets != def.targets) {
    uint32_t mine = 0;
    try {
      mine = parse_lora_targets(cfg.lora.targets);
    } catch (const Error&) {
      mine = 0;  // validate() names the bad word
    }
    if (mine != 0 && mine != a.targets)
      refuse("lora.targets", "\"" + cfg.lora.targets + "\"",
             "\"target_modules\": " + lora_targets_text(a.targets));
  }
  cfg.lora.rank = a.r;
  cfg.lora.alpha = a.lora_alpha;
  cfg.lora.use_rslora = a.use_rslora;
  cfg.lora.targets = lora_targets_text(a.targets);
  return true;
}

std::vector<float> import_peft_adapter(const std::string& dir_or_name, const ModelDims& d,
                                       const LoraSpec& spec) {
  const std::string dir = local_model_folder(dir_or_name, "lora.init_from", hub::FileSet::kAdapter);
  const std::string path = (fs::path(dir) / "adapter_model.safetensors").string();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    if (fs::is_regular_file(fs::path(dir) / "adapter_model.bin", ec))
      throw_data(dir +
                 " holds adapter_model.bin (a pickled PyTorch file, which can run code when loaded); "
                 "save the adapter with safe_serialization=True (adapter_model.safetensors)");
    throw_data(dir + " has no adapter_model.safetensors");
  }
  const SafetensorsFile file(path);
  const ParamLayout table(d, spec);
  const std::vector<size_t> offsets = table_offsets(table);
  std::vector<float> full(table.full_params(), 0.0f);
  std::vector<bool> used(file.entries().size(), false);
  auto index_of = [&](const SafetensorsEntry* e) { return static_cast<size_t>(e - file.entries().data()); };
  for (int l = 0; l < d.n_layer; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (!spec.has(t)) continue;
      for (int which = 0; which < 2; ++which) {
        const int i = which == 0 ? spec.a_index(t) : spec.b_index(t);
        const TensorSpec& ts = table[i];
        const std::string name = peft_module(l, t) + (which == 0 ? ".lora_A.weight" : ".lora_B.weight");
        const SafetensorsEntry* e = file.find(name);
        if (e == nullptr) {
          // PEFT files saved with the adapter's name inside the key ("...lora_A.default.weight").
          const std::string named =
              peft_module(l, t) + (which == 0 ? ".lora_A.default.weight" : ".lora_B.default.weight");
          e = file.find(named);
        }
        if (e == nullptr)
          throw_data(path + " has no " + name + "; the adapter does not match model.init_from's " +
                     std::to_string(d.n_layer) + " layers and lora.targets (" +
                     lora_targets_text(spec.targets) + ")");
        const std::vector<int64_t> want = {static_cast<int64_t>(ts.rows), static_cast<int64_t>(ts.cols)};
        if (e->shape != want)
          throw_data(path + ": " + e->name + " has shape " + shape_string(e->shape) + ", expected " +
                     shape_string(want) + " (r " + std::to_string(spec.rank) + " on a " + describe_dims(d) +
                     " model)");
        file.read_f32_into(
            *e, full.data() + offsets[static_cast<size_t>(i)] + static_cast<size_t>(l) * ts.rows * ts.cols);
        used[index_of(e)] = true;
      }
    }
  }
  for (size_t k = 0; k < used.size(); ++k)
    if (!used[k])
      throw_data(path + " holds " + file.entries()[k].name +
                 ", which this LoRA does not have (lora.targets " + lora_targets_text(spec.targets) + ", " +
                 std::to_string(d.n_layer) + " layers); check the adapter against model.init_from");
  return full;
}

std::vector<std::string> export_peft_adapter(const std::string& dir, const ModelDims& d, const LoraSpec& spec,
                                             const float* adapters, const PeftExportOptions& options) {
  if (!spec.enabled()) throw_usage("export --format peft needs a LoRA checkpoint (lora.enabled = true)");
  const ParamLayout table(d, spec);
  const std::vector<size_t> offsets = table_offsets(table);
  std::vector<HfOutTensor> tensors;
  for (int l = 0; l < d.n_layer; ++l)
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (!spec.has(t)) continue;
      for (int which = 0; which < 2; ++which) {
        const int i = which == 0 ? spec.a_index(t) : spec.b_index(t);
        const TensorSpec& ts = table[i];
        const size_t count = ts.rows * ts.cols;
        const float* src = adapters + offsets[static_cast<size_t>(i)] + static_cast<size_t>(l) * count;
        tensors.push_back({peft_module(l, t) + (which == 0 ? ".lora_A.weight" : ".lora_B.weight"),
                           {static_cast<int64_t>(ts.rows), static_cast<int64_t>(ts.cols)},
                           [src, count](float* dst) { std::memcpy(dst, src, count * sizeof(float)); }});
      }
    }
  // PEFT's own key set (peft 0.21 save_pretrained), a plain LoRA's values.
  json c = json::object();
  for (const char* k :
       {"alora_invocation_tokens", "arrow_config", "auto_mapping", "corda_config", "eva_config",
        "exclude_modules", "kasa_config", "layer_replication", "layers_pattern", "layers_to_transform",
        "lora_ga_config", "megatron_config", "modules_to_save", "monteclora_config", "revision",
        "target_parameters", "trainable_token_indices", "use_bdlora", "velora_config"})
    c[k] = nullptr;
  c["alpha_pattern"] = json::object();
  c["rank_pattern"] = json::object();
  c["loftq_config"] = json::object();
  // A Hub name as the base: PEFT's own fields, the repo id and its revision (the pinned commit), so
  // PeftModel.from_pretrained finds the same base on the Hub or in the cache.
  if (const hub::ModelRef ref = hub_ref_of(options.base_model_name_or_path); !ref.repo_id.empty()) {
    c["base_model_name_or_path"] = ref.repo_id;
    if (!ref.revision.empty()) c["revision"] = ref.revision;
  } else {
    c["base_model_name_or_path"] = options.base_model_name_or_path;
  }
  c["bias"] = "none";
  c["ensure_weight_tying"] = false;
  c["fan_in_fan_out"] = false;
  c["inference_mode"] = true;
  c["init_lora_weights"] = true;
  if (spec.alpha == std::floor(spec.alpha) && std::fabs(spec.alpha) < 1e15)
    c["lora_alpha"] = static_cast<int64_t>(spec.alpha);
  else
    c["lora_alpha"] = spec.alpha;
  c["lora_bias"] = false;
  c["lora_dropout"] = static_cast<double>(spec.dropout);
  c["megatron_core"] = "megatron.core";
  c["peft_type"] = "LORA";
  c["qalora_group_size"] = 16;
  c["r"] = spec.rank;
  std::vector<std::string> modules;
  for (int t = 0; t < kNumLoraTargets; ++t)
    if (spec.has(t)) modules.emplace_back(lora_target_name(t));
  std::sort(modules.begin(), modules.end());
  c["target_modules"] = modules;
  c["task_type"] = "CAUSAL_LM";
  c["use_dora"] = false;
  c["use_qalora"] = false;
  c["use_rslora"] = spec.rslora;
  HfWriteOptions w;
  w.dtype = options.dtype;
  w.weights_stem = "adapter_model";
  w.max_shard_bytes = ~uint64_t{0};  // PEFT reads one adapter_model.safetensors
  w.text_files["adapter_config.json"] = c.dump(2);
  return write_hf_checkpoint(dir, tensors, w).files;
}

void merge_lora(const ModelDims& d, const LoraSpec& spec, const float* adapters, float* base) {
  if (!spec.enabled()) return;
  const ParamLayout table(d, spec), arch(d);
  const std::vector<size_t> offsets = table_offsets(table), base_offsets = table_offsets(arch);
  const float s = spec.scale();
  for (int t = 0; t < kNumLoraTargets; ++t) {
    if (!spec.has(t)) continue;
    const auto [in, out] = lora_target_shape(d, t);
    const BaseRows where = base_rows(d, t);
    const TensorSpec& w = arch[where.tensor];
    const int ia = spec.a_index(t), ib = spec.b_index(t);
    for (int l = 0; l < d.n_layer; ++l) {
      const float* A = adapters + offsets[static_cast<size_t>(ia)] +
                       static_cast<size_t>(l) * static_cast<size_t>(spec.rank) * static_cast<size_t>(in);
      const float* B = adapters + offsets[static_cast<size_t>(ib)] +
                       static_cast<size_t>(l) * static_cast<size_t>(out) * static_cast<size_t>(spec.rank);
      float* W = base + base_offsets[static_cast<size_t>(where.tensor)] +
                 static_cast<size_t>(l) * w.rows * w.cols + where.row0 * w.cols;
      // W (out x in, rows w.cols apart) += s * B (out x r) A (r x in), as PEFT's merge computes it.
      cpu::gemm(false, false, out, in, spec.rank, s, B, spec.rank, A, in, 1.0f, W, static_cast<int>(w.cols));
    }
  }
}

namespace {

// The checkpoint's base folder or file is there and has the weights the run recorded.
void check_lora_base(const ModelCheckpoint& c) {
  if (c.init_from.empty())
    throw_checkpoint(c.dir + " holds LoRA adapters but its run names no model.init_from (the frozen base)");
  std::error_code ec;
  const std::string base = local_model_folder(c.init_from, "model.init_from");  // a Hub name: its snapshot
  if (!fs::exists(base, ec))
    throw_checkpoint(
        c.dir + " holds LoRA adapters for the base " + c.init_from +
        ", which is gone; restore that folder (the adapters alone are exported by --format peft)");
  if (!c.base_weights.empty()) {
    const std::string changed = fingerprint_difference(c.base_weights, base_weights_fingerprint(base));
    if (!changed.empty())
      throw_checkpoint(c.dir + " holds LoRA adapters trained on other base weights: " + changed + " in " +
                       c.init_from + "; restore the base the run used");
  }
}

}  // namespace

std::vector<float> load_lora_base(const ModelCheckpoint& c) {
  check_lora_base(c);
  return is_hf_folder(c.init_from) ? import_hf_weights(c.init_from, c.dims)
                                   : import_weights(c.init_from, c.dims);
}

BaseWeights load_lora_base_weights(const ModelCheckpoint& c) {
  check_lora_base(c);
  const bool nf4 = c.lora.nf4;
  if (is_hf_folder(c.init_from)) return load_hf_base(c.init_from, c.dims, nf4, c.lora.double_quant);
  const std::vector<float> full = import_weights(c.init_from, c.dims);
  return base_weights_from_full(c.dims, full.data(), nf4, c.lora.double_quant);
}

std::vector<float> merged_model_params(const ModelCheckpoint& c) {
  if (!c.lora.enabled()) return c.params;
  std::vector<float> base;
  if (c.lora.nf4) {
    // QLoRA: the adapters were fitted to the 4-bit base, so they merge onto its dequantised weights:
    // the base loaded as the run loaded it (quantised module by module as it is read), then every
    // module dequantised to fp32 (bitsandbytes' dequantize_4bit) into the full vector.
    const BaseWeights q = load_lora_base_weights(c);
    base.assign(ParamLayout(c.dims).full_params(), 0.0f);
    base_weights_to_full(q, base.data());
  } else {
    base = load_lora_base(c);
  }
  merge_lora(c.dims, c.lora, c.params.data(), base.data());
  return base;
}

std::string merged_export_note(const LoraSpec& spec) {
  if (!spec.nf4) return "the LoRA adapter merged into its base";
  return std::string("QLoRA: the adapter merged into its base as dequantised from 4-bit NF4 (") +
         (spec.double_quant ? "double-quantised absmax" : "fp32 absmax") +
         "), the weights the adapter was trained over; every projection differs from the original "
         "weights by the quantisation error, so this is not the original base with the adapter merged";
}

std::string base_weights_fingerprint(const std::string& init_from_or_name) {
  // A Hub name: its snapshot's files (links to the blobs, read through), so the same bytes give the
  // same fingerprint whether they sit in a folder or in the cache.
  const std::string init_from = local_model_folder(init_from_or_name, "model.init_from");
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(init_from, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(init_from, ec)) {
      const std::string name = e.path().filename().string();
      if (e.is_regular_file(ec) && name.size() > 12 &&
          name.compare(name.size() - 12, 12, ".safetensors") == 0)
        files.push_back(name);
    }
    if (ec) throw_io("cannot list " + init_from + ": " + ec.message());
  } else {
    files.push_back(fs::path(init_from).filename().string());
  }
  std::sort(files.begin(), files.end());
  std::string out;
  for (const std::string& name : files) {
    const std::string path =
        fs::is_directory(init_from, ec) ? (fs::path(init_from) / name).string() : init_from;
    uint64_t size = 0;
    const uint32_t crc = file_crc32c(path, &size);
    out += name + " " + std::to_string(size) + " " + crc32c_hex(crc) + "\n";
  }
  return out;
}

std::string fingerprint_difference(const std::string& saved, const std::string& now) {
  const auto a = fingerprint_lines(saved), b = fingerprint_lines(now);
  for (const auto& [name, was] : a) {
    const auto it = b.find(name);
    if (it == b.end()) return name + " is missing";
    if (it->second != was) {
      const size_t sp1 = was.find(' '), sp2 = it->second.find(' ');
      if (was.substr(0, sp1) != it->second.substr(0, sp2))
        return name + " changed size (" + was.substr(0, sp1) + " bytes when trained, " +
               it->second.substr(0, sp2) + " now)";
      return name + " changed content (crc32c " + was.substr(sp1 + 1) + " when trained, " +
             it->second.substr(sp2 + 1) + " now)";
    }
  }
  for (const auto& [name, now_line] : b)
    if (a.find(name) == a.end()) return name + " is new";
  return "";
}

}  // namespace flotilla::interop
