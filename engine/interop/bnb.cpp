// bitsandbytes 4-bit folders (engine/interop/bnb.h). JSON is parsed without exceptions and every key
// is type-checked before use, so a malformed config.json or quant state is refused with its name.
#include "engine/interop/bnb.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/interop/model_source.h"

namespace flotilla::interop {

namespace {

using json = nlohmann::json;

const char* kUnquantisedHint =
    "use the unquantised model instead: Flotilla quantises it at load to the same NF4 bytes "
    "(lora.base_quant = \"nf4\")";

std::string config_path_of(const std::string& folder_or_name) {
  namespace fs = std::filesystem;
  const std::string folder = local_model_folder(folder_or_name, "model.init_from", hub::FileSet::kConfigOnly);
  return fs::is_directory(folder) ? (fs::path(folder) / "config.json").string() : folder;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_data(path + ": cannot read it (is the folder a Hugging Face model folder?)");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

json parse_json(const std::string& text, const std::string& path) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw_data(path + ": not a JSON object; the file is damaged");
  return j;
}

std::string show(const json& v) { return v.dump(); }

// quantization_config's key k as a bool (absent: `dflt`).
bool get_bool(const json& q, const char* k, bool dflt, const std::string& path) {
  const auto it = q.find(k);
  if (it == q.end() || it->is_null()) return dflt;
  if (!it->is_boolean())
    throw_data(path + ": quantization_config." + k + " = " + show(*it) + " must be true or false");
  return it->get<bool>();
}

std::string get_string(const json& q, const char* k, const std::string& dflt, const std::string& path) {
  const auto it = q.find(k);
  if (it == q.end() || it->is_null()) return dflt;
  if (!it->is_string())
    throw_data(path + ": quantization_config." + k + " = " + show(*it) + " must be a string");
  return it->get<std::string>();
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

}  // namespace

BnbQuantConfig parse_bnb_config(const std::string& json_text, const std::string& path) {
  const json j = parse_json(json_text, path);
  const auto qit = j.find("quantization_config");
  if (qit == j.end()) throw_data(path + ": has no quantization_config: not a bitsandbytes 4-bit folder");
  const json& q = *qit;
  if (!q.is_object()) throw_data(path + ": quantization_config = " + show(q) + " must be an object");
  BnbQuantConfig c;
  c.config_path = path;
  const std::string method = get_string(q, "quant_method", "", path);
  if (method != "bitsandbytes")
    throw_data(path + ": quantization_config.quant_method = \"" + method +
               "\" is not supported: only bitsandbytes 4-bit NF4 folders can be loaded; " + kUnquantisedHint);
  // transformers writes both load_in_4bit and _load_in_4bit (the same value)
  const bool in8 = get_bool(q, "load_in_8bit", get_bool(q, "_load_in_8bit", false, path), path);
  const bool in4 = get_bool(q, "load_in_4bit", get_bool(q, "_load_in_4bit", false, path), path);
  if (in8)
    throw_data(path +
               ": quantization_config.load_in_8bit = true: 8-bit (LLM.int8) folders are not supported, "
               "only 4-bit NF4; " +
               kUnquantisedHint);
  if (!in4)
    throw_data(path +
               ": quantization_config.load_in_4bit is not true: only bitsandbytes 4-bit NF4 folders can "
               "be loaded; " +
               kUnquantisedHint);
  c.quant_type = get_string(q, "bnb_4bit_quant_type", "fp4", path);  // bitsandbytes' own default is fp4
  if (c.quant_type != "nf4")
    throw_data(path + ": quantization_config.bnb_4bit_quant_type = \"" + c.quant_type +
               "\" is not supported: QLoRA's base is NF4 (bnb_4bit_quant_type = \"nf4\"); " +
               kUnquantisedHint);
  c.double_quant = get_bool(q, "bnb_4bit_use_double_quant", false, path);
  c.compute_dtype = get_string(q, "bnb_4bit_compute_dtype", "float32", path);
  if (c.compute_dtype != "float32" && c.compute_dtype != "bfloat16" && c.compute_dtype != "float16")
    throw_data(path + ": quantization_config.bnb_4bit_compute_dtype = \"" + c.compute_dtype +
               "\" is not one of float32, bfloat16, float16");
  c.quant_storage = get_string(q, "bnb_4bit_quant_storage", "uint8", path);
  if (c.quant_storage != "uint8")
    throw_data(path + ": quantization_config.bnb_4bit_quant_storage = \"" + c.quant_storage +
               "\" is not supported: only uint8 storage; re-save the folder with the default storage, or " +
               kUnquantisedHint);
  for (const char* k : {"bnb_4bit_blocksize", "blocksize"}) {
    const auto it = q.find(k);
    if (it == q.end() || it->is_null()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() != nf4::kBlock)
      throw_data(path + ": quantization_config." + k + " = " + show(*it) +
                 " is not supported: NF4 blocks must be 64 elements (bitsandbytes' default); " +
                 kUnquantisedHint);
  }
  return c;
}

BnbQuantConfig read_bnb_config(const std::string& folder) {
  const std::string path = config_path_of(folder);
  return parse_bnb_config(read_text(path), path);
}

bool has_quantization_config(const std::string& folder) {
  const std::string path = config_path_of(folder);
  if (!std::filesystem::exists(path)) return false;
  return parse_json(read_text(path), path).contains("quantization_config");
}

bool is_bnb_4bit_folder(const std::string& folder) {
  const std::string path = config_path_of(folder);
  if (!std::filesystem::exists(path)) return false;
  const json j = parse_json(read_text(path), path);
  const auto q = j.find("quantization_config");
  if (q == j.end() || !q->is_object()) return false;
  const auto m = q->find("quant_method");
  if (m == q->end() || !m->is_string() || m->get<std::string>() != "bitsandbytes") return false;
  for (const char* k : {"load_in_4bit", "_load_in_4bit"}) {
    const auto it = q->find(k);
    if (it != q->end() && it->is_boolean() && it->get<bool>()) return true;
  }
  return false;
}

BnbFolder::BnbFolder(const std::string& folder)
    : folder_(folder), config_(read_bnb_config(folder)), owned_(std::make_unique<HfCheckpoint>(folder)) {
  ckpt_ = owned_.get();
}

BnbFolder::BnbFolder(const std::string& folder, const HfCheckpoint& ckpt)
    : folder_(folder), config_(read_bnb_config(folder)), ckpt_(&ckpt) {}

BnbFolder::~BnbFolder() = default;

bool BnbFolder::quantized(const std::string& weight) const {
  return ckpt_->find(weight + ".quant_state.bitsandbytes__nf4") != nullptr ||
         ckpt_->find(weight + ".quant_state.bitsandbytes__fp4") != nullptr;
}

std::vector<std::string> BnbFolder::quantized_weights() const {
  std::vector<std::string> out;
  for (const std::string suffix : {".quant_state.bitsandbytes__nf4", ".quant_state.bitsandbytes__fp4"})
    for (const HfTensorInfo& t : ckpt_->tensors())
      if (t.name.size() > suffix.size() &&
          t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) == 0)
        out.push_back(t.name.substr(0, t.name.size() - suffix.size()));
  std::sort(out.begin(), out.end());
  return out;
}

namespace {
std::string missing_state(const std::string& folder, const std::string& tensor, const std::string& weight) {
  return folder + ": quant-state tensor " + tensor + " is missing (the 4-bit weight " + weight +
         " cannot be read without it); re-save the folder with transformers' save_pretrained, or " +
         kUnquantisedHint;
}
}  // namespace

void BnbFolder::refuse_without_state(const std::string& weight) const {
  const HfTensorInfo* t = ckpt_->find(weight);
  if ((t != nullptr && t->dtype == "U8") || ckpt_->find(weight + ".absmax") != nullptr)
    throw_data(missing_state(ckpt_->folder(), weight + ".quant_state.bitsandbytes__nf4", weight));
}

nf4::Quantized BnbFolder::read(const std::string& weight, const std::vector<int64_t>& expected_shape) const {
  const std::string what =
      "re-save the folder with transformers' save_pretrained, or " + std::string(kUnquantisedHint);
  // where a tensor lives, for messages
  auto where = [&](const std::string& name) {
    const HfTensorInfo* t = ckpt_->find(name);
    return t != nullptr ? ckpt_->folder() + "/" + t->file : ckpt_->folder();
  };
  auto need = [&](const std::string& name, const char* dtype, const std::vector<int64_t>& shape) {
    const HfTensorInfo* t = ckpt_->find(name);
    if (t == nullptr) throw_data(missing_state(ckpt_->folder(), name, weight));
    if (t->dtype != dtype || (!shape.empty() && t->shape != shape)) {
      std::string expected = dtype;
      if (!shape.empty()) expected.append(" ").append(shape_string(shape));
      throw_data(where(name) + ": tensor " + name + " is " + t->dtype + " " + shape_string(t->shape) +
                 ", expected " + expected + "; " + what);
    }
    return t;
  };

  if (ckpt_->find(weight + ".quant_state.bitsandbytes__fp4") != nullptr)
    throw_data(where(weight + ".quant_state.bitsandbytes__fp4") + ": " + weight +
               " is quantised as fp4: only NF4 is supported; " + kUnquantisedHint);
  const std::string qs_name = weight + ".quant_state.bitsandbytes__nf4";
  if (ckpt_->find(weight) == nullptr) throw_data(ckpt_->folder() + ": tensor " + weight + " is missing");
  need(qs_name, "U8", {});
  const std::vector<uint8_t> qs_bytes = ckpt_->read_raw(qs_name);
  const std::string qs_text(qs_bytes.begin(), qs_bytes.end());
  const json qs = json::parse(qs_text, nullptr, false);
  const std::string qs_where = where(qs_name) + ": quant state " + qs_name;
  if (qs.is_discarded() || !qs.is_object()) throw_data(qs_where + " is not a JSON object; " + what);
  auto field = [&](const char* k) -> const json& {
    const auto it = qs.find(k);
    if (it == qs.end()) throw_data(qs_where + " has no \"" + k + "\"; " + what);
    return *it;
  };
  const json& qt = field("quant_type");
  if (!qt.is_string() || qt.get<std::string>() != "nf4")
    throw_data(qs_where + ": quant_type = " + show(qt) + " is not supported, only \"nf4\"; " +
               kUnquantisedHint);
  const json& bs = field("blocksize");
  if (!bs.is_number_integer() || bs.get<int64_t>() != nf4::kBlock)
    throw_data(qs_where + ": blocksize = " + show(bs) +
               " is not supported: NF4 blocks must be 64 elements; " + kUnquantisedHint);
  const json& sh = field("shape");
  std::vector<int64_t> shape;
  if (sh.is_array() && !sh.empty())
    for (const json& d : sh)
      if (d.is_number_integer() && d.get<int64_t>() > 0) shape.push_back(d.get<int64_t>());
  if (shape.empty() || shape.size() != sh.size())
    throw_data(qs_where + ": shape = " + show(sh) + " must be a list of positive sizes; " + what);
  if (!expected_shape.empty() && shape != expected_shape)
    throw_data(qs_where + ": shape " + shape_string(shape) + ", expected " + shape_string(expected_shape) +
               " from config.json");
  const json& dt = field("dtype");
  if (!dt.is_string()) throw_data(qs_where + ": dtype = " + show(dt) + " must be a string; " + what);

  nf4::Quantized q;
  q.shape = shape;
  q.numel = numel_of(shape);
  const int64_t blocks = q.blocks(), groups = (blocks + nf4::kGroup - 1) / nf4::kGroup;
  const bool nested = qs.contains("nested_offset") || qs.contains("nested_blocksize");
  if (nested != config_.double_quant)
    throw_data(qs_where + (nested ? " is double-quantised" : " is not double-quantised") + " but " +
               config_.config_path + " says bnb_4bit_use_double_quant = " +
               (config_.double_quant ? "true" : "false") + "; the folder is inconsistent: " + what);
  q.double_quant = nested;

  need(weight, "U8", {(q.numel + 1) / 2, 1});
  q.packed = ckpt_->read_raw(weight);
  need(weight + ".quant_map", "F32", {16});
  {
    const std::vector<uint8_t> m = ckpt_->read_raw(weight + ".quant_map");
    if (std::memcmp(m.data(), nf4::kCode, sizeof(nf4::kCode)) != 0)
      throw_data(where(weight + ".quant_map") + ": tensor " + weight +
                 ".quant_map is not bitsandbytes' NF4 code table; " + what);
  }
  auto floats = [&](const std::string& name) {
    const std::vector<uint8_t> raw = ckpt_->read_raw(name);
    std::vector<float> f(raw.size() / sizeof(float));
    std::memcpy(f.data(), raw.data(), f.size() * sizeof(float));
    return f;
  };
  if (!nested) {
    need(weight + ".absmax", "F32", {blocks});
    q.absmax = floats(weight + ".absmax");
    return q;
  }
  const json& nb = field("nested_blocksize");
  if (!nb.is_number_integer() || nb.get<int64_t>() != nf4::kGroup)
    throw_data(qs_where + ": nested_blocksize = " + show(nb) + " is not supported, only 256; " +
               kUnquantisedHint);
  const json& nd = field("nested_dtype");
  if (!nd.is_string() || nd.get<std::string>() != "float32")
    throw_data(qs_where + ": nested_dtype = " + show(nd) + " is not supported, only \"float32\"; " + what);
  const json& off = field("nested_offset");
  if (!off.is_number())
    throw_data(qs_where + ": nested_offset = " + show(off) + " must be a number; " + what);
  // bitsandbytes writes the fp32 offset as a Python float: it must be exactly an fp32 value
  const double od = off.get<double>();
  q.offset = static_cast<float>(od);
  if (!std::isfinite(od) || static_cast<double>(q.offset) != od)
    throw_data(qs_where + ": nested_offset = " + show(off) + " is not an fp32 value; " + what);
  need(weight + ".absmax", "U8", {blocks});
  q.absmax_q = ckpt_->read_raw(weight + ".absmax");
  need(weight + ".nested_absmax", "F32", {groups});
  q.absmax2 = floats(weight + ".nested_absmax");
  need(weight + ".nested_quant_map", "F32", {256});
  {
    const std::vector<uint8_t> m = ckpt_->read_raw(weight + ".nested_quant_map");
    if (std::memcmp(m.data(), nf4::dynamic_map(), 256 * sizeof(float)) != 0)
      throw_data(where(weight + ".nested_quant_map") + ": tensor " + weight +
                 ".nested_quant_map is not bitsandbytes' dynamic map (create_dynamic_map(signed=True) on an "
                 "AVX2/AVX-512 machine); " +
                 what);
  }
  return q;
}

nf4::Quantized read_bnb_weight(const std::string& folder, const std::string& weight) {
  return BnbFolder(folder).read(weight);
}

}  // namespace flotilla::interop
