// GPT-2 <-> Hugging Face safetensors: name table, transposes, checks (see gpt2_safetensors.h).
#include "engine/interop/gpt2_safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/core/error.h"
#include "engine/interop/safetensors.h"

namespace flotilla::interop {
namespace {

// One HF tensor and where it lives in our flat parameter buffer.
struct HfTensor {
  std::string name;
  std::vector<int64_t> hf_shape;
  size_t offset = 0;          // first float in our buffer
  size_t rows = 0, cols = 0;  // our layout (out, in) for transposed weights; rows x cols otherwise
  bool transpose = false;
};

std::vector<HfTensor> hf_layout(const ModelDims& d) {
  const auto sizes = param_sizes(d);
  std::array<size_t, kNumParamTensors> base{};
  for (int p = 1; p < kNumParamTensors; ++p) base[p] = base[p - 1] + sizes[p - 1];
  const size_t C = static_cast<size_t>(d.n_embd), L = static_cast<size_t>(d.n_layer);
  const auto i64 = [](size_t v) { return static_cast<int64_t>(v); };
  std::vector<HfTensor> out;
  out.push_back(
      {"wte.weight", {d.vocab_size, d.n_embd}, base[kWte], static_cast<size_t>(d.vocab_size), C, false});
  out.push_back(
      {"wpe.weight", {d.max_seq_len, d.n_embd}, base[kWpe], static_cast<size_t>(d.max_seq_len), C, false});
  for (size_t l = 0; l < L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto vec = [&](const std::string& name, int p, size_t n) {
      out.push_back({h + name, {i64(n)}, base[p] + l * n, 1, n, false});
    };
    // Linear (out, in) in our buffer -> Conv1D (in, out) in the file.
    auto mat = [&](const std::string& name, int p, size_t o, size_t in) {
      out.push_back({h + name, {i64(in), i64(o)}, base[p] + l * o * in, o, in, true});
    };
    vec("ln_1.weight", kLn1w, C);
    vec("ln_1.bias", kLn1b, C);
    mat("attn.c_attn.weight", kQkvw, 3 * C, C);
    vec("attn.c_attn.bias", kQkvb, 3 * C);
    mat("attn.c_proj.weight", kAttprojw, C, C);
    vec("attn.c_proj.bias", kAttprojb, C);
    vec("ln_2.weight", kLn2w, C);
    vec("ln_2.bias", kLn2b, C);
    mat("mlp.c_fc.weight", kFcw, 4 * C, C);
    vec("mlp.c_fc.bias", kFcb, 4 * C);
    mat("mlp.c_proj.weight", kFcprojw, C, 4 * C);
    vec("mlp.c_proj.bias", kFcprojb, C);
  }
  out.push_back({"ln_f.weight", {d.n_embd}, base[kLnfw], 1, C, false});
  out.push_back({"ln_f.bias", {d.n_embd}, base[kLnfb], 1, C, false});
  return out;
}

// dst (cols x rows) = transpose of src (rows x cols), in 32x32 tiles for cache locality.
void transpose(const float* src, size_t rows, size_t cols, float* dst) {
  constexpr size_t kTile = 32;
  for (size_t r0 = 0; r0 < rows; r0 += kTile)
    for (size_t c0 = 0; c0 < cols; c0 += kTile) {
      const size_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (size_t r = r0; r < r1; ++r)
        for (size_t c = c0; c < c1; ++c) dst[c * rows + r] = src[r * cols + c];
    }
}

bool ignorable(const std::string& name) {
  auto ends = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends(".attn.bias") || ends(".attn.masked_bias") || name == "lm_head.weight";
}

std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

}  // namespace

std::vector<std::string> hf_gpt2_tensor_names(const ModelDims& d) {
  std::vector<std::string> names;
  for (const HfTensor& t : hf_layout(d)) names.push_back(t.name);
  return names;
}

void export_gpt2_safetensors(const std::string& path, const ModelDims& d, const float* params,
                             const std::map<std::string, std::string>& extra_metadata) {
  std::vector<SafetensorsOutTensor> out;
  for (const HfTensor& t : hf_layout(d)) {
    SafetensorsOutTensor o;
    o.name = t.name;
    o.shape = t.hf_shape;
    if (t.transpose) {
      const float* src = params + t.offset;
      const size_t rows = t.rows, cols = t.cols;
      o.fill = [src, rows, cols](void* dst) { transpose(src, rows, cols, static_cast<float*>(dst)); };
    } else {
      o.data = params + t.offset;  // wte: the first V rows of (Vp, C) are contiguous
    }
    out.push_back(std::move(o));
  }
  std::map<std::string, std::string> meta = extra_metadata;
  meta["format"] = "pt";
  write_safetensors(path, out, meta);
}

ModelDims infer_dims_from_safetensors(const std::string& path, int n_head) {
  SafetensorsFile f(path);
  auto get = [&](const std::string& name) {
    const SafetensorsEntry* e = f.find(name);
    return e != nullptr ? e : f.find("transformer." + name);
  };
  const SafetensorsEntry* wte = get("wte.weight");
  const SafetensorsEntry* wpe = get("wpe.weight");
  if (wte == nullptr || wpe == nullptr || wte->shape.size() != 2 || wpe->shape.size() != 2)
    throw_data(path + ": no 2-D wte.weight / wpe.weight tensors; is this a GPT-2 model.safetensors?");
  ModelDims d;
  d.vocab_size = static_cast<int>(wte->shape[0]);
  d.n_embd = static_cast<int>(wte->shape[1]);
  d.max_seq_len = static_cast<int>(wpe->shape[0]);
  d.padded_vocab = pad_vocab(d.vocab_size);
  d.n_layer = 0;
  while (get("h." + std::to_string(d.n_layer) + ".ln_1.weight") != nullptr) ++d.n_layer;
  if (d.n_layer == 0) throw_data(path + ": no h.0.* tensors; is this a GPT-2 model.safetensors?");
  if (n_head <= 0) {
    std::ifstream cfg(dir_of(path) + "/config.json");
    if (cfg) {
      std::stringstream ss;
      ss << cfg.rdbuf();
      const auto j = nlohmann::json::parse(ss.str(), nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.contains("n_head") && j["n_head"].is_number_integer())
        n_head = j["n_head"].get<int>();
    }
  }
  if (n_head <= 0) n_head = d.n_embd % 64 == 0 ? d.n_embd / 64 : 0;
  if (n_head <= 0 || d.n_embd % n_head != 0)
    throw_data(path + ": cannot tell the number of heads for n_embd " + std::to_string(d.n_embd) +
               "; set model.n_head");
  d.n_head = n_head;
  return d;
}

std::vector<float> import_gpt2_safetensors(const std::string& path, const ModelDims& d, bool crop_positions) {
  SafetensorsFile f(path);
  std::vector<float> params(num_parameters(d), 0.0f);  // padded vocab rows stay zero
  std::set<std::string> used;
  for (const HfTensor& t : hf_layout(d)) {
    const SafetensorsEntry* e = f.find(t.name);
    if (e == nullptr) e = f.find("transformer." + t.name);
    if (e == nullptr)
      throw_data(path + ": tensor " + t.name + " is missing (expected shape " + shape_string(t.hf_shape) +
                 "); the file does not hold a GPT-2 model with n_layer " + std::to_string(d.n_layer));
    used.insert(e->name);
    const bool crop = crop_positions && t.name == "wpe.weight" && e->shape.size() == 2 &&
                      e->shape[1] == t.hf_shape[1] && e->shape[0] > t.hf_shape[0];
    if (e->shape != t.hf_shape && !crop)
      throw_data(path + ": tensor " + e->name + " has shape " + shape_string(e->shape) + ", expected " +
                 shape_string(t.hf_shape) + " for n_layer " + std::to_string(d.n_layer) + ", n_embd " +
                 std::to_string(d.n_embd) + ", vocab_size " + std::to_string(d.vocab_size) +
                 ", max_seq_len " + std::to_string(d.max_seq_len));
    const std::vector<float> v = f.read_f32(*e);
    if (t.transpose)
      transpose(v.data(), t.cols, t.rows, params.data() + t.offset);  // file (in, out) -> ours (out, in)
    else
      std::memcpy(params.data() + t.offset, v.data(), t.rows * t.cols * sizeof(float));  // crop: first rows
  }
  std::vector<std::string> unexpected;
  for (const SafetensorsEntry& e : f.entries())
    if (used.count(e.name) == 0 && !ignorable(e.name)) unexpected.push_back(e.name);
  if (!unexpected.empty()) {
    std::string list;
    for (size_t i = 0; i < unexpected.size() && i < 5; ++i) list += (i ? ", " : "") + unexpected[i];
    throw_data(path + ": " + std::to_string(unexpected.size()) +
               " unexpected tensor(s) for a GPT-2 model with n_layer " + std::to_string(d.n_layer) + " (" +
               list + (unexpected.size() > 5 ? ", ..." : "") + ")");
  }
  return params;
}

std::string hf_gpt2_config_json(const ModelDims& d) {
  nlohmann::ordered_json j;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["vocab_size"] = d.vocab_size;
  j["n_positions"] = d.max_seq_len;
  j["n_ctx"] = d.max_seq_len;
  j["n_embd"] = d.n_embd;
  j["n_layer"] = d.n_layer;
  j["n_head"] = d.n_head;
  j["activation_function"] = "gelu_new";
  j["layer_norm_epsilon"] = 1e-5;
  j["resid_pdrop"] = 0.0;
  j["embd_pdrop"] = 0.0;
  j["attn_pdrop"] = 0.0;
  j["initializer_range"] = 0.02;
  j["tie_word_embeddings"] = true;
  if (d.vocab_size == 50257) {  // the GPT-2 tokenizer's <|endoftext|>
    j["bos_token_id"] = 50256;
    j["eos_token_id"] = 50256;
  }
  j["torch_dtype"] = "float32";
  return j.dump(2) + "\n";
}

}  // namespace flotilla::interop
