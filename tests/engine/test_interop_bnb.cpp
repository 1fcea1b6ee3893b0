// bitsandbytes 4-bit folders saved by transformers (tests/engine/golden/qlora/bnb and bnb_bf16, made
// by tests/reference/make_qlora_goldens.py from the bf16 folder qlora/base): the config is read, each
// of the 14 quantised projections reads back with the packed bytes and statistics of our own
// quantize() of the same bf16 weights, and dequantises to bitsandbytes' own fp32 values; and every
// bad folder (made here from a copy of the golden one) is refused naming the key or tensor and file:
// 8-bit, fp4, another block size, another quant method or storage, an inconsistent double-quant
// flag, missing / malformed / mis-shaped quant-state tensors, altered quant maps.
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/core/error.h"
#include "engine/core/nf4.h"
#include "engine/interop/bnb.h"
#include "engine/interop/hf_checkpoint.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/peft.h"
#include "engine/interop/safetensors.h"
#include "engine/model/model_dims.h"

using namespace flotilla;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::string kGolden = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/qlora/";
const char* kProj[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                       "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool same(const nf4::Quantized& a, const nf4::Quantized& b) {
  return a.shape == b.shape && a.numel == b.numel && a.double_quant == b.double_quant &&
         a.packed == b.packed && same_bits(a.absmax, b.absmax) && a.absmax_q == b.absmax_q &&
         same_bits(a.absmax2, b.absmax2) && std::memcmp(&a.offset, &b.offset, 4) == 0;
}

void golden_folder() {
  const std::string bnb = kGolden + "bnb", base = kGolden + "base";
  CHECK(interop::is_bnb_4bit_folder(bnb) && interop::has_quantization_config(bnb));
  CHECK(!interop::is_bnb_4bit_folder(base) && !interop::has_quantization_config(base));
  CHECK(!interop::is_bnb_4bit_folder(kGolden + "no-such-folder"));
  const interop::BnbQuantConfig c = interop::read_bnb_config(bnb);
  CHECK(c.quant_type == "nf4" && c.double_quant && c.compute_dtype == "float32" &&
        c.quant_storage == "uint8" && c.blocksize == 64);
  CHECK(interop::read_bnb_config(kGolden + "bnb_bf16").compute_dtype == "bfloat16");
  CHECK_THROWS(interop::read_bnb_config(base), "has no quantization_config");

  const interop::HfCheckpoint base_ckpt(base);
  const interop::HfCheckpoint ckpt(bnb);
  const interop::BnbFolder folder(bnb, ckpt);
  const interop::BnbFolder folder16(kGolden + "bnb_bf16");
  const interop::SafetensorsFile ref(kGolden + "reference.safetensors");
  std::vector<std::string> want;
  for (int l = 0; l < 2; ++l)
    for (const char* p : kProj) want.push_back("model.layers." + std::to_string(l) + "." + p + ".weight");
  std::vector<std::string> sorted = want;
  std::sort(sorted.begin(), sorted.end());
  CHECK(folder.quantized_weights() == sorted);
  CHECK(!folder.quantized("model.embed_tokens.weight") && !folder.quantized("lm_head.weight"));
  int equal = 0, dequant_equal = 0;
  for (const std::string& name : want) {
    const interop::HfTensorInfo* t = base_ckpt.find(name);
    CHECK(t != nullptr && t->dtype == "BF16");
    if (t == nullptr) continue;
    std::vector<float> w(static_cast<size_t>(t->shape[0] * t->shape[1]));
    base_ckpt.read_f32(name, w.data(), t->shape);
    const nf4::Quantized ours = nf4::quantize(w.data(), static_cast<int64_t>(w.size()), t->shape, true);
    const nf4::Quantized stored = folder.read(name, t->shape);
    CHECK_MSG(same(ours, stored),
              "%s: the stored 4-bit weight differs from our quantize() of the bf16 weight", name.c_str());
    equal += same(ours, stored);
    CHECK_MSG(same(folder16.read(name), stored), "%s: bnb_bf16/ differs from bnb/", name.c_str());
    // dequantised: bitsandbytes' own fp32 values
    std::vector<float> d(w.size());
    nf4::dequantize(stored, d.data());
    const interop::SafetensorsEntry* e = ref.find("dequant." + name);
    CHECK(e != nullptr);
    if (e != nullptr && same_bits(ref.read_f32(*e), d)) ++dequant_equal;
  }
  CHECK(equal == 14 && dequant_equal == 14);
  std::printf("bnb/: %d of 14 weights byte-identical to quantize(), %d dequantise to bitsandbytes' values\n",
              equal, dequant_equal);
  // every quant-state tensor is consumed: only the unquantised tensors are left for the loader
  const std::vector<std::string> left = ckpt.unread();
  CHECK(left.size() == 2 * 2 + 3);  // per layer 2 norms; embedding, final norm, lm_head
  for (const std::string& n : left) CHECK_MSG(n.find("proj") == std::string::npos, "unread: %s", n.c_str());
  CHECK_THROWS(folder.read(want[0], {64, 32}), "expected [64, 32]");
  CHECK_THROWS(folder.read("model.embed_tokens.weight"), "is missing");
  CHECK(interop::read_bnb_weight(bnb, want[3]).packed == folder.read(want[3]).packed);
  // the QLoRA golden adapter (PEFT's format over bnb/) is one the engine's LoRA import accepts
  const interop::PeftAdapterConfig a = interop::read_peft_adapter_config(kGolden + "peft");
  CHECK(a.r == 4 && a.lora_alpha == 8 && !a.use_rslora && a.targets == (1u << kNumLoraTargets) - 1 &&
        a.base_model_name_or_path == "tests/engine/golden/qlora/bnb");
  // ... and that the engine exports back as the same tensors: FLOTILLA_TEST_TMP/qlora-engine-peft is
  // kept for tests/reference/check_qlora_adapter.py (PeftModel.from_pretrained on the 4-bit base).
  RunConfig cfg;
  cfg.model.init_from = base;
  interop::apply_hf_init_from(cfg);
  const ModelDims dims = dims_from_config(cfg.model);
  LoraSpec spec;
  spec.rank = a.r;
  spec.alpha = a.lora_alpha;
  spec.targets = a.targets;
  const std::vector<float> adapters = interop::import_peft_adapter(kGolden + "peft", dims, spec);
  const std::string out = std::string(FLOTILLA_TEST_TMP) + "/qlora-engine-peft";
  fs::remove_all(out);
  interop::PeftExportOptions o;
  o.base_model_name_or_path = "tests/engine/golden/qlora/bnb";
  interop::export_peft_adapter(out, dims, spec, adapters.data(), o);
  const interop::SafetensorsFile mine(out + "/adapter_model.safetensors");
  const interop::SafetensorsFile theirs(kGolden + "peft/adapter_model.safetensors");
  int same_tensors = 0;
  for (const auto& e : theirs.entries())
    if (const interop::SafetensorsEntry* m = mine.find(e.name))
      same_tensors += m->shape == e.shape && mine.read_f32(*m) == theirs.read_f32(e);
  CHECK(same_tensors == 28 && mine.entries().size() == 28);
  std::printf("engine export of the QLoRA golden adapter: %s (%d of 28 tensors equal PEFT's)\n", out.c_str(),
              same_tensors);
}

// ---- bad folders, made from a copy of bnb/

struct Tensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};
using Tensors = std::map<std::string, Tensor>;

std::string fresh_copy(const std::string& tag) {
  const std::string dir = std::string(FLOTILLA_TEST_TMP) + "/bnb-bad-" + tag;
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& f : fs::directory_iterator(kGolden + "bnb"))
    fs::copy_file(f.path(), dir + "/" + f.path().filename().string());
  return dir;
}

void edit_config(const std::string& dir, const std::function<void(json&)>& edit) {
  std::ifstream in(dir + "/config.json");
  std::stringstream s;
  s << in.rdbuf();
  json j = json::parse(s.str());
  edit(j);
  std::ofstream(dir + "/config.json") << j.dump(2);
}

void edit_weights(const std::string& dir, const std::function<void(Tensors&)>& edit) {
  const std::string path = dir + "/model.safetensors";
  Tensors t;
  std::map<std::string, std::string> meta;
  {
    const interop::SafetensorsFile f(path);
    meta = f.metadata();
    for (const auto& e : f.entries()) t[e.name] = Tensor{e.dtype, e.shape, f.read_raw(e)};
  }
  edit(t);
  std::vector<interop::SafetensorsOutTensor> out;
  for (const auto& [name, x] : t) out.push_back({name, x.dtype, x.shape, x.bytes.data(), {}});
  interop::write_safetensors(path, out, meta);
}

const std::string kQ = "model.layers.1.self_attn.q_proj.weight";

// read() of q_proj in `dir` throws with all of `texts` in its message
void refused_read(const std::string& dir, std::initializer_list<const char*> texts) {
  bool thrown = false;
  try {
    interop::BnbFolder(dir).read(kQ);
  } catch (const Error& e) {
    thrown = true;
    for (const char* t : texts)
      CHECK_MSG(std::string(e.what()).find(t) != std::string::npos, "'%s' lacks '%s'", e.what(), t);
  }
  CHECK_MSG(thrown, "%s: read(%s) was not refused", dir.c_str(), kQ.c_str());
}

void refused_config(const std::function<void(json&)>& edit, std::initializer_list<const char*> texts) {
  const std::string dir = fresh_copy("config");
  edit_config(dir, edit);
  bool thrown = false;
  try {
    interop::read_bnb_config(dir);
  } catch (const Error& e) {
    thrown = true;
    CHECK(std::string(e.what()).find("config.json") != std::string::npos);
    for (const char* t : texts)
      CHECK_MSG(std::string(e.what()).find(t) != std::string::npos, "'%s' lacks '%s'", e.what(), t);
  }
  CHECK_MSG(thrown, "config edit not refused (expected '%s')", *texts.begin());
}

void bad_configs() {
  refused_config(
      [](json& j) {
        j["quantization_config"]["load_in_8bit"] = true;
        j["quantization_config"]["_load_in_8bit"] = true;
        j["quantization_config"]["load_in_4bit"] = false;
        j["quantization_config"]["_load_in_4bit"] = false;
      },
      {"load_in_8bit", "8-bit"});
  refused_config(
      [](json& j) {
        j["quantization_config"]["load_in_4bit"] = false;
        j["quantization_config"]["_load_in_4bit"] = false;
      },
      {"load_in_4bit"});
  refused_config([](json& j) { j["quantization_config"]["bnb_4bit_quant_type"] = "fp4"; },
                 {"bnb_4bit_quant_type", "fp4", "lora.base_quant"});
  refused_config([](json& j) { j["quantization_config"]["bnb_4bit_blocksize"] = 128; },
                 {"bnb_4bit_blocksize", "128", "64"});
  refused_config([](json& j) { j["quantization_config"]["quant_method"] = "gptq"; },
                 {"quant_method", "gptq"});
  refused_config([](json& j) { j["quantization_config"]["bnb_4bit_quant_storage"] = "bfloat16"; },
                 {"bnb_4bit_quant_storage", "bfloat16"});
  refused_config([](json& j) { j["quantization_config"]["bnb_4bit_use_double_quant"] = "yes"; },
                 {"bnb_4bit_use_double_quant", "true or false"});
  refused_config([](json& j) { j["quantization_config"] = 4; }, {"quantization_config = 4"});
  refused_config([](json& j) { j.erase("quantization_config"); }, {"has no quantization_config"});
  {  // not JSON
    const std::string dir = fresh_copy("json");
    std::ofstream(dir + "/config.json") << "{\"quantization_config\": ";
    CHECK_THROWS(interop::read_bnb_config(dir), "not a JSON object");
    CHECK_THROWS(interop::has_quantization_config(dir), "config.json");
  }
  {  // the config says no double quantisation, the tensors have it
    const std::string dir = fresh_copy("dq");
    edit_config(dir, [](json& j) { j["quantization_config"]["bnb_4bit_use_double_quant"] = false; });
    refused_read(dir, {kQ.c_str(), "double-quantised", "bnb_4bit_use_double_quant = false"});
  }
}

void bad_tensors() {
  // a quant-state tensor missing: named, with the file
  for (const char* suffix : {".nested_absmax", ".absmax", ".quant_map", ".nested_quant_map"}) {
    const std::string dir = fresh_copy("missing");
    edit_weights(dir, [&](Tensors& t) { t.erase(kQ + suffix); });
    refused_read(dir, {(kQ + suffix).c_str(), "is missing"});
  }
  {  // the quant-state JSON gone: the weight is no longer known as quantised, and reading it is refused
    const std::string dir = fresh_copy("nostate");
    edit_weights(dir, [&](Tensors& t) { t.erase(kQ + ".quant_state.bitsandbytes__nf4"); });
    CHECK(!interop::BnbFolder(dir).quantized(kQ));
    refused_read(dir, {(kQ + ".quant_state.bitsandbytes__nf4").c_str(), "is missing"});
  }
  auto with_state = [&](const std::string& tag, const std::function<void(json&)>& edit,
                        std::initializer_list<const char*> texts) {
    const std::string dir = fresh_copy(tag);
    edit_weights(dir, [&](Tensors& t) {
      Tensor& s = t.at(kQ + ".quant_state.bitsandbytes__nf4");
      json j = json::parse(std::string(s.bytes.begin(), s.bytes.end()));
      edit(j);
      const std::string text = j.dump();
      s.bytes.assign(text.begin(), text.end());
      s.shape = {static_cast<int64_t>(s.bytes.size())};
    });
    refused_read(dir, texts);
  };
  with_state("bs", [](json& j) { j["blocksize"] = 128; },
             {"blocksize = 128", kQ.c_str(), "model.safetensors"});
  with_state("qt", [](json& j) { j["quant_type"] = "fp4"; }, {"quant_type", "fp4"});
  with_state("shape", [](json& j) { j["shape"] = json::array({64, -1}); }, {"shape", "positive"});
  with_state("shape2",
             [](json& j) {
               j["shape"] = json::array({64, 32});
             },
             {kQ.c_str(), "expected U8 [1024, 1]"});
  with_state("noshape", [](json& j) { j.erase("shape"); }, {"no \"shape\""});
  with_state("nb", [](json& j) { j["nested_blocksize"] = 128; }, {"nested_blocksize"});
  with_state("off", [](json& j) { j["nested_offset"] = 0.1; }, {"nested_offset", "fp32"});
  with_state("offs", [](json& j) { j["nested_offset"] = "x"; }, {"nested_offset", "number"});
  {  // not JSON at all
    const std::string dir = fresh_copy("garbage");
    edit_weights(dir, [&](Tensors& t) {
      Tensor& s = t.at(kQ + ".quant_state.bitsandbytes__nf4");
      std::fill(s.bytes.begin(), s.bytes.end(), 0xFF);
    });
    refused_read(dir, {kQ.c_str(), "not a JSON object"});
  }
  {  // fp4 quant state
    const std::string dir = fresh_copy("fp4");
    edit_weights(dir, [&](Tensors& t) {
      auto node = t.extract(kQ + ".quant_state.bitsandbytes__nf4");
      node.key() = kQ + ".quant_state.bitsandbytes__fp4";
      t.insert(std::move(node));
    });
    refused_read(dir, {kQ.c_str(), "fp4"});
  }
  {  // altered maps
    const std::string dir = fresh_copy("maps");
    edit_weights(dir, [&](Tensors& t) { t.at(kQ + ".nested_quant_map").bytes[0] ^= 1; });
    refused_read(dir, {"nested_quant_map", "dynamic map"});
    const std::string dir2 = fresh_copy("maps2");
    edit_weights(dir2, [&](Tensors& t) { t.at(kQ + ".quant_map").bytes[40] ^= 1; });
    refused_read(dir2, {".quant_map", "NF4 code table"});
  }
  {  // mis-shaped or mis-typed tensors
    const std::string dir = fresh_copy("shapes");
    edit_weights(dir, [&](Tensors& t) {
      Tensor& a = t.at(kQ + ".absmax");
      a.bytes.resize(a.bytes.size() - 1);
      a.shape = {static_cast<int64_t>(a.bytes.size())};
    });
    refused_read(dir, {(kQ + ".absmax").c_str(), "U8 [63]", "expected U8 [64]"});
    const std::string dir2 = fresh_copy("dtype");
    edit_weights(dir2, [&](Tensors& t) { t.at(kQ + ".nested_absmax").dtype = "I32"; });
    refused_read(dir2, {".nested_absmax", "I32", "expected F32 [1]"});
  }
}

// The same folder saved in two shards + model.safetensors.index.json, a weight's quant-state tensors
// split across them: every weight reads back as from the single file.
void sharded_folder() {
  const std::string dir = fresh_copy("sharded");
  Tensors all;
  std::map<std::string, std::string> meta;
  {
    const interop::SafetensorsFile f(dir + "/model.safetensors");
    meta = f.metadata();
    for (const auto& e : f.entries()) all[e.name] = Tensor{e.dtype, e.shape, f.read_raw(e)};
  }
  fs::remove(dir + "/model.safetensors");
  std::vector<interop::SafetensorsOutTensor> shard[2];
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  int i = 0;
  for (const auto& [name, t] : all) {
    const int k = i++ % 2;  // alternate: a weight and its .absmax / .quant_state land in different shards
    shard[k].push_back({name, t.dtype, t.shape, t.bytes.data(), {}});
    index["weight_map"][name] = "model-0000" + std::to_string(k + 1) + "-of-00002.safetensors";
  }
  for (int k = 0; k < 2; ++k)
    interop::write_safetensors(dir + "/model-0000" + std::to_string(k + 1) + "-of-00002.safetensors",
                               shard[k], meta);
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2);
  const interop::BnbFolder sharded(dir), single(kGolden + "bnb");
  CHECK(sharded.checkpoint().sharded());
  CHECK(sharded.quantized_weights() == single.quantized_weights());
  int same_weights = 0;
  for (const std::string& w : single.quantized_weights())
    same_weights += same(sharded.read(w), single.read(w));
  CHECK(same_weights == 14);
}

}  // namespace

int main() {
  golden_folder();
  bad_configs();
  bad_tensors();
  sharded_folder();
  return flotilla_test::summary("test_interop_bnb");
}
