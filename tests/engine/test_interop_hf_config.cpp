// config.json of the Llama family: the configs of Llama 3.2, SmolLM2, Qwen 2.5, Qwen 3 and Mistral as
// their folders write them read to the right fields; transformers' per-model_type defaults; the
// transformers 5 rope_parameters layout (and its disagreement with the classic keys); every refusal
// names its key; several problems are reported at once; malformed JSON (every prefix of a real file,
// every key replaced by every JSON type) gives an Error, never a crash; hf_config_json /
// hf_generation_config_json write classic keys that read back to the same config.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/core/error.h"
#include "engine/interop/hf_config.h"
#include "test_checkpoint_util.h"

using namespace flotilla;
using namespace flotilla::interop;
using nlohmann::json;

namespace {

// Llama-3.2-1B's config.json (values as published; key order as in the file).
json llama32_1b() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
    "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");
}

json qwen25_05b() {
  return json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
    "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
    "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
}

json qwen3_06b() {
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.51.0", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
}

json smollm2_135m() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 576,
    "initializer_range": 0.041666666666666664, "intermediate_size": 1536, "is_llama_config": true,
    "max_position_embeddings": 8192, "model_type": "llama", "num_attention_heads": 9,
    "num_hidden_layers": 30, "num_key_value_heads": 3, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_interleaved": false, "rope_scaling": null, "rope_theta": 100000, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.1", "use_cache": true, "vocab_size": 49152})");
}

json mistral_v03() {
  return json::parse(R"({
    "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "transformers_version": "4.42.0.dev0", "use_cache": true, "vocab_size": 32768})");
}

HfConfig parse(const json& j) { return parse_hf_config(j.dump(), "config.json"); }

// Expects parse(j) to fail with a message containing every one of `texts`.
void expect_refused(const json& j, std::initializer_list<const char*> texts, int line) {
  try {
    parse(j);
    ++flotilla_test::checks();
    ++flotilla_test::failures();
    std::fprintf(stderr, "line %d: accepted %s\n", line, j.dump().c_str());
  } catch (const Error& e) {
    for (const char* t : texts) {
      ++flotilla_test::checks();
      if (std::string(e.what()).find(t) == std::string::npos) {
        ++flotilla_test::failures();
        std::fprintf(stderr, "line %d: error '%s' lacks '%s'\n", line, e.what(), t);
      }
    }
    CHECK(e.code() == ExitCode::kData);
  }
}
#define REFUSED(j, ...) expect_refused(j, {__VA_ARGS__}, __LINE__)

json with(json j, const std::string& key, const json& value) {
  j[key] = value;
  return j;
}
json without(json j, const std::string& key) {
  j.erase(key);
  return j;
}

}  // namespace

static void test_real_configs() {
  const HfConfig l = parse(llama32_1b());
  CHECK(l.architecture == "LlamaForCausalLM" && l.model_type == "llama");
  CHECK(l.vocab_size == 128256 && l.hidden_size == 2048 && l.intermediate_size == 8192);
  CHECK(l.num_hidden_layers == 16 && l.num_attention_heads == 32 && l.num_key_value_heads == 8 &&
        l.head_dim == 64);
  CHECK(l.hidden_act == "silu" && l.rms_norm_eps == 1e-5 && l.max_position_embeddings == 131072);
  CHECK(l.rope.type == "llama3" && l.rope.theta == 500000.0 && l.rope.factor == 32.0);
  CHECK(l.rope.low_freq_factor == 1.0 && l.rope.high_freq_factor == 4.0);
  CHECK(l.rope.original_max_position_embeddings == 8192);
  CHECK(l.tie_word_embeddings && !l.qkv_bias && !l.o_bias && !l.qk_norm);
  CHECK(l.bos_token_id.ids == std::vector<int64_t>{128000} && !l.bos_token_id.list);
  CHECK(l.eos_token_id.ids == std::vector<int64_t>{128001} && !l.pad_token_id);
  CHECK(l.dtype == "bfloat16" && l.initializer_range == 0.02 &&
        l.raw_json.find("pretraining_tp") != std::string::npos);

  const HfConfig s = parse(smollm2_135m());
  CHECK(s.head_dim == 64 && s.num_key_value_heads == 3 && s.rope.type == "default" &&
        s.rope.theta == 100000.0);
  CHECK(s.bos_token_id.ids == std::vector<int64_t>{0} && s.initializer_range == 0.041666666666666664);

  const HfConfig q2 = parse(qwen25_05b());
  CHECK(q2.model_type == "qwen2" && q2.head_dim == 64 && q2.num_key_value_heads == 2);
  CHECK(q2.qkv_bias && !q2.o_bias && !q2.qk_norm);  // Qwen2: q/k/v biases with no attention_bias key
  CHECK(q2.rope.type == "default" && q2.rope.theta == 1e6 && q2.rms_norm_eps == 1e-6);
  // attention_bias does not switch Qwen2's biases (transformers hard-codes them).
  const HfConfig q2b = parse(with(qwen25_05b(), "attention_bias", false));
  CHECK(q2b.qkv_bias && !q2b.o_bias);

  const HfConfig q3 = parse(qwen3_06b());
  CHECK(q3.model_type == "qwen3" && q3.head_dim == 128 && q3.hidden_size / q3.num_attention_heads == 64);
  CHECK(q3.qk_norm && !q3.qkv_bias && !q3.o_bias && q3.rope.theta == 1e6 &&
        q3.max_position_embeddings == 40960);
  const HfConfig q3b = parse(with(qwen3_06b(), "attention_bias", true));
  CHECK(q3b.qkv_bias && q3b.o_bias);  // Qwen3's attention_bias covers q, k, v and o

  const HfConfig m = parse(mistral_v03());
  CHECK(m.model_type == "mistral" && m.head_dim == 128 && !m.qkv_bias && !m.o_bias && m.vocab_size == 32768);
  CHECK(!parse(with(mistral_v03(), "attention_bias", true)).qkv_bias);  // MistralAttention ignores it
  CHECK(parse(with(mistral_v03(), "sliding_window", 32768)).model_type == "mistral");  // window >= context

  // Llama's attention_bias covers q/k/v and o alike; eos as a list (Llama 3.1) and a pad id.
  json lb = with(llama32_1b(), "attention_bias", true);
  lb["eos_token_id"] = {128001, 128008, 128009};
  lb["pad_token_id"] = 128004;
  const HfConfig b = parse(lb);
  CHECK(b.qkv_bias && b.o_bias && b.eos_token_id.list && b.eos_token_id.ids.size() == 3 &&
        b.pad_token_id == 128004);
  CHECK(parse(with(llama32_1b(), "dtype", "float32")).dtype == "float32");        // transformers 5's key wins
  CHECK(parse(with(llama32_1b(), "hidden_act", "swish")).hidden_act == "swish");  // the same function
  // The classic rope_scaling with the legacy "type" key.
  json lin = llama32_1b();
  lin["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  CHECK(parse(lin).rope.type == "linear" && parse(lin).rope.factor == 2.0);
  // Qwen2 with use_sliding_window true but no layer inside the window range: no sliding layer.
  json q2w = with(qwen25_05b(), "use_sliding_window", true);
  q2w["sliding_window"] = 4096;
  q2w["max_window_layers"] = 24;
  CHECK(parse(q2w).model_type == "qwen2");
}

static void test_defaults() {
  const json minimal = {{"model_type", "llama"},    {"vocab_size", 100},      {"hidden_size", 64},
                        {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
  const HfConfig l = parse(minimal);
  CHECK(l.architecture == "LlamaForCausalLM" && l.num_key_value_heads == 4 && l.head_dim == 16);
  CHECK(l.rms_norm_eps == 1e-6 && l.rope.type == "default" && l.rope.theta == 10000.0);
  CHECK(l.max_position_embeddings == 2048 && !l.tie_word_embeddings && l.initializer_range == 0.02);
  CHECK(l.bos_token_id.ids == std::vector<int64_t>{1} && l.eos_token_id.ids == std::vector<int64_t>{2});
  CHECK(l.dtype.empty() && l.hidden_act == "silu");
  // null means unset, as in transformers.
  json nulls = minimal;
  nulls["num_key_value_heads"] = nullptr;
  nulls["head_dim"] = nullptr;
  nulls["bos_token_id"] = nullptr;
  const HfConfig n = parse(nulls);
  CHECK(n.num_key_value_heads == 4 && n.head_dim == 16 && n.bos_token_id.ids.empty());

  json q2 = with(minimal, "model_type", "qwen2");
  q2["num_attention_heads"] = 32;
  q2["hidden_size"] = 2048;
  const HfConfig c2 = parse(q2);  // Qwen2Config: num_key_value_heads 32, 32768 positions, no bos/eos
  CHECK(c2.architecture == "Qwen2ForCausalLM" && c2.num_key_value_heads == 32 && c2.head_dim == 64);
  CHECK(c2.max_position_embeddings == 32768 && c2.bos_token_id.ids.empty() && c2.eos_token_id.ids.empty());
  CHECK(c2.qkv_bias && !c2.o_bias);
  const HfConfig c3 = parse(with(q2, "model_type", "qwen3"));  // Qwen3Config: head_dim 128
  CHECK(c3.head_dim == 128 && c3.qk_norm && c3.num_key_value_heads == 32);
  // MistralConfig's default sliding_window is 4096: a Mistral config without the key is refused...
  json m = with(q2, "model_type", "mistral");
  REFUSED(m, "sliding_window (absent: transformers' default 4096)", "max_position_embeddings 131072",
          "no sliding-window attention");
  m["sliding_window"] = nullptr;  // ... and with null it is full attention, 8 KV heads, 4096*32 positions
  const HfConfig cm = parse(m);
  CHECK(cm.num_key_value_heads == 8 && cm.max_position_embeddings == 131072 && cm.eos_token_id.ids[0] == 2);
}

static void test_rope_parameters() {
  // transformers 5: rope_theta inside rope_parameters, no top-level keys.
  json v5 = without(without(llama32_1b(), "rope_scaling"), "rope_theta");
  v5["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                           {"factor", 32.0},          {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  const HfConfig a = parse(v5), b = parse(llama32_1b());
  CHECK(a.rope.type == b.rope.type && a.rope.theta == b.rope.theta && a.rope.factor == b.rope.factor);
  CHECK(a.rope.low_freq_factor == b.rope.low_freq_factor &&
        a.rope.high_freq_factor == b.rope.high_freq_factor);
  CHECK(a.rope.original_max_position_embeddings == 8192);
  json plain = without(without(qwen3_06b(), "rope_scaling"), "rope_theta");
  plain["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  CHECK(parse(plain).rope.type == "default" && parse(plain).rope.theta == 1e6);
  // rope_theta outside, the rest inside: transformers fills rope_parameters.rope_theta from it.
  json mixed = without(v5, "rope_parameters");
  mixed["rope_theta"] = 250000.0;
  mixed["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  CHECK(parse(mixed).rope.theta == 250000.0 && parse(mixed).rope.type == "linear");
  // Both layouts, agreeing: fine.
  json both = llama32_1b();
  both["rope_parameters"] = v5["rope_parameters"];
  CHECK(parse(both).rope.type == "llama3");
  // Disagreeing: refused with both keys named.
  json theta_off = both;
  theta_off["rope_theta"] = 10000.0;
  REFUSED(theta_off, "rope_theta 10000 and rope_parameters.rope_theta 500000 disagree");
  json type_off = both;
  type_off["rope_scaling"] = nullptr;
  REFUSED(type_off, "rope_scaling (default) and rope_parameters (llama3 factor 32", "disagree");
  json factor_off = both;
  factor_off["rope_parameters"]["factor"] = 8.0;
  REFUSED(factor_off, "rope_scaling (llama3 factor 32", "rope_parameters (llama3 factor 8");
  // Unsupported types in either layout, and per-layer-type parameters.
  json yarn = v5;
  yarn["rope_parameters"]["rope_type"] = "yarn";
  REFUSED(yarn, "rope_parameters.rope_type = \"yarn\" is not supported", "default, linear and llama3");
  json per_layer = v5;
  per_layer["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  REFUSED(per_layer, "rope_parameters is given per layer type");
  json partial = v5;
  partial["rope_parameters"]["partial_rotary_factor"] = 0.5;
  REFUSED(partial, "rope_parameters.partial_rotary_factor = 0.5 is not supported");
  REFUSED(with(v5, "rope_parameters", 3), "rope_parameters = 3 must be an object");
}

static void test_refusals() {
  const json l = llama32_1b();
  REFUSED(with(l, "model_type", "gemma"), "model_type \"gemma\" is not supported",
          "llama, qwen2, qwen3, mistral");
  REFUSED(without(l, "model_type"), "model_type is missing");
  REFUSED(with(l, "architectures", {"LlamaForSequenceClassification"}),
          "architectures[0] = \"LlamaForSequenceClassification\" is not supported", "LlamaForCausalLM");
  REFUSED(with(l, "architectures", "LlamaForCausalLM"),
          "architectures = \"LlamaForCausalLM\" must be a list");
  for (const char* type : {"yarn", "dynamic", "longrope", "su"}) {
    json j = l;
    j["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
    REFUSED(j, ("rope_scaling.rope_type = \"" + std::string(type) + "\" is not supported").c_str());
  }
  json legacy = l;
  legacy["rope_scaling"] = {{"type", "dynamic"}, {"factor", 2.0}};
  REFUSED(legacy, "rope_scaling.type = \"dynamic\" is not supported");
  json conflict = l;
  conflict["rope_scaling"]["type"] = "linear";
  REFUSED(conflict, "rope_scaling.rope_type \"llama3\" and rope_scaling.type \"linear\" disagree");
  json no_low = l;
  no_low["rope_scaling"].erase("low_freq_factor");
  REFUSED(no_low, "rope_scaling.low_freq_factor is missing");
  json bands = l;
  bands["rope_scaling"]["high_freq_factor"] = 0.5;
  REFUSED(bands, "rope_scaling.high_freq_factor 0.5 must exceed rope_scaling.low_freq_factor 1");
  json no_factor = l;
  no_factor["rope_scaling"] = {{"rope_type", "linear"}};
  REFUSED(no_factor, "rope_scaling.factor is missing");
  REFUSED(with(l, "rope_scaling", "llama3"), "rope_scaling = \"llama3\" must be an object or null");
  REFUSED(with(l, "rope_theta", -1), "rope_theta = -1 must be a positive number");
  REFUSED(with(l, "partial_rotary_factor", 0.5), "partial_rotary_factor = 0.5 is not supported");
  CHECK(parse(with(l, "partial_rotary_factor", 1.0)).head_dim == 64);

  json q2 = with(qwen25_05b(), "use_sliding_window", true);
  q2["sliding_window"] = 4096;
  q2["max_window_layers"] = 21;
  REFUSED(q2, "use_sliding_window: true with sliding_window 4096 < max_position_embeddings 32768",
          "no sliding-window attention");
  json q3 = with(qwen3_06b(), "use_sliding_window", true);
  q3["sliding_window"] = 4096;
  q3["layer_types"] = json::array();
  for (int i = 0; i < 28; ++i) q3["layer_types"].push_back(i % 2 ? "sliding_attention" : "full_attention");
  REFUSED(q3, "use_sliding_window: true");
  q3["use_sliding_window"] = false;  // transformers then drops the window: full attention everywhere
  CHECK(parse(q3).qk_norm);
  q3["layer_types"][0] = "chunked_attention";
  REFUSED(q3, "layer_types holds \"chunked_attention\"");
  REFUSED(with(mistral_v03(), "sliding_window", 4096),
          "sliding_window 4096 is smaller than max_position_embeddings 32768");
  json mistral_rope = mistral_v03();
  mistral_rope["rope_scaling"] = {{"rope_type", "linear"},
                                  {"factor", 2.0}};  // 4.46 ignores it (checked by hand)
  REFUSED(mistral_rope, "RoPE scaling (linear) on model_type mistral is not supported");

  REFUSED(with(l, "mlp_bias", true), "mlp_bias: true is not supported");
  REFUSED(with(l, "hidden_act", "gelu"), "hidden_act \"gelu\" is not supported");
  REFUSED(with(l, "hidden_size", 2048.5), "hidden_size = 2048.5 is not an integer");
  REFUSED(with(l, "hidden_size", "2048"), "hidden_size = \"2048\" is not an integer");
  REFUSED(with(l, "hidden_size", 0), "hidden_size = 0 must be a positive integer");
  REFUSED(with(l, "vocab_size", -5), "vocab_size = -5 must be a positive integer");
  REFUSED(with(l, "intermediate_size", 1000000000000),
          "intermediate_size = 1000000000000 must be a positive integer below 2^31");
  REFUSED(without(l, "num_hidden_layers"), "num_hidden_layers is missing");
  REFUSED(with(l, "num_key_value_heads", 5), "num_key_value_heads 5 does not divide num_attention_heads 32");
  REFUSED(with(l, "num_key_value_heads", 64),
          "num_key_value_heads 64 does not divide num_attention_heads 32");
  json odd = without(l, "head_dim");
  odd["num_attention_heads"] = 30;
  odd["num_key_value_heads"] = 10;
  REFUSED(odd, "head_dim is not given and hidden_size 2048 is not a multiple of num_attention_heads 30");
  REFUSED(with(l, "head_dim", 63), "head_dim 63 is odd");
  REFUSED(with(l, "quantization_config", {{"quant_method", "bitsandbytes"}}), "quantization_config is set");
  REFUSED(with(l, "tie_word_embeddings", "yes"), "tie_word_embeddings = \"yes\" must be true or false");
  REFUSED(with(l, "pad_token_id", {1, 2}), "pad_token_id = [1,2] must be an integer token id");
  REFUSED(with(l, "eos_token_id", {1, "x"}), "eos_token_id = [1,\"x\"] must hold integer token ids");
  REFUSED(with(l, "rms_norm_eps", 0), "rms_norm_eps = 0 must be a positive number");

  // Every problem at once, each named.
  json many = with(with(l, "mlp_bias", true), "hidden_act", "relu");
  many["rope_scaling"]["rope_type"] = "yarn";
  REFUSED(many, "config.json: 3 problems: ", "mlp_bias", "hidden_act \"relu\"",
          "rope_scaling.rope_type = \"yarn\"");
}

// Malformed input of every shape gives a flotilla::Error (or parses), never a crash or another exception.
static void test_malformed() {
  int other = 0, accepted = 0;
  auto feed = [&](const std::string& text) {
    try {
      parse_hf_config(text, "config.json");
      ++accepted;
    } catch (const Error&) {
    } catch (...) {
      ++other;
    }
  };
  for (const char* t :
       {"", "{", "[]", "null", "42", "\"x\"", "{\"model_type\": 5}", "{\"model_type\": \"llama\"}",
        "{\"a\":", "\xff\xfe{}", "{\"model_type\":\"llama\",\"rope_scaling\":[1]}"})
    feed(t);
  const std::string full = llama32_1b().dump(2);
  for (size_t n = 0; n < full.size(); ++n) feed(full.substr(0, n));  // every truncation
  const json values[] = {nullptr, true, false, "x", -1, 0, 1.5, 1e300, json::array(), json::object(), {1, 2}};
  size_t variants = 0;
  for (const json& base : {llama32_1b(), qwen25_05b(), qwen3_06b(), mistral_v03()})
    for (auto it = base.begin(); it != base.end(); ++it)
      for (const json& v : values) {
        feed(with(base, it.key(), v).dump());
        ++variants;
      }
  CHECK_MSG(other == 0, "%d inputs threw something other than flotilla::Error", other);
  CHECK(accepted > 0 && accepted < static_cast<int>(variants));
  CHECK_THROWS(parse_hf_config("[1,2]", "x/config.json"), "x/config.json: not a JSON object");
}

static void test_read_file() {
  const std::string dir = ckpt_test::fresh_dir("hf-config");
  CHECK_THROWS(read_hf_config(dir), "config.json: cannot open; a Hugging Face model folder has config.json");
  ckpt_test::write_file(dir + "/config.json", qwen3_06b().dump(2));
  CHECK(read_hf_config(dir).head_dim == 128);
  CHECK(read_hf_config(dir + "/config.json").model_type == "qwen3");
  ckpt_test::write_file(dir + "/config.json", with(qwen3_06b(), "hidden_act", "gelu").dump());
  CHECK_THROWS(read_hf_config(dir), (dir + "/config.json: hidden_act").c_str());
}

static void test_write() {
  // Each variant written and read back describes the same model.
  json v5q = without(without(qwen3_06b(), "rope_scaling"), "rope_theta");
  v5q["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  v5q["layer_types"] = json::array();
  for (int i = 0; i < 28; ++i) v5q["layer_types"].push_back("full_attention");
  json lb = with(llama32_1b(), "attention_bias", true);
  lb["eos_token_id"] = {128001, 128008, 128009};
  lb["auto_map"] = {{"AutoModelForCausalLM", "x.Model"}};
  for (const json& src : {llama32_1b(), lb, qwen25_05b(), qwen3_06b(), v5q, mistral_v03(), smollm2_135m()}) {
    const HfConfig a = parse(src);
    const std::string text = hf_config_json(a, "fp32");
    const json out = json::parse(text);
    const HfConfig b = parse_hf_config(text, "written");
    CHECK(b.architecture == a.architecture && b.model_type == a.model_type && b.vocab_size == a.vocab_size);
    CHECK(b.hidden_size == a.hidden_size && b.intermediate_size == a.intermediate_size);
    CHECK(b.num_hidden_layers == a.num_hidden_layers && b.num_attention_heads == a.num_attention_heads);
    CHECK(b.num_key_value_heads == a.num_key_value_heads && b.head_dim == a.head_dim);
    CHECK(b.rms_norm_eps == a.rms_norm_eps && b.max_position_embeddings == a.max_position_embeddings);
    CHECK(b.rope.type == a.rope.type && b.rope.theta == a.rope.theta && b.rope.factor == a.rope.factor);
    CHECK(b.rope.original_max_position_embeddings == a.rope.original_max_position_embeddings);
    CHECK(b.tie_word_embeddings == a.tie_word_embeddings && b.qkv_bias == a.qkv_bias && b.o_bias == a.o_bias);
    CHECK(b.qk_norm == a.qk_norm && b.bos_token_id.ids == a.bos_token_id.ids);
    CHECK(b.eos_token_id.ids == a.eos_token_id.ids && b.eos_token_id.list == a.eos_token_id.list);
    CHECK(b.initializer_range == a.initializer_range && b.dtype == "float32");
    // The classic layout only, both dtype keys, pass-through of keys not modelled, none of the dropped ones.
    CHECK(out.contains("rope_theta") && out.contains("rope_scaling") && !out.contains("rope_parameters"));
    CHECK(out["torch_dtype"] == "float32" && out["dtype"] == "float32" && out["use_cache"] == true);
    CHECK(!out.contains("layer_types") && !out.contains("auto_map") && out["hidden_act"] == "silu");
    CHECK(out.contains("attention_bias") == (a.model_type == "llama" || a.model_type == "qwen3"));
  }
  const json l = json::parse(hf_config_json(parse(llama32_1b()), "bf16"));
  CHECK(l["rope_scaling"]["rope_type"] == "llama3" &&
        l["rope_scaling"]["original_max_position_embeddings"] == 8192);
  CHECK(l["torch_dtype"] == "bfloat16" && l["transformers_version"] == "4.45.0.dev0" &&
        l["pretraining_tp"] == 1);
  CHECK(l["mlp_bias"] == false && l["pad_token_id"].is_null());
  CHECK(json::parse(hf_config_json(parse(qwen3_06b()), "bf16"))["rope_scaling"].is_null());

  // A config built in code (no raw JSON): mistral gets an explicit null sliding_window (else 4096).
  HfConfig m;
  m.model_type = "mistral";
  m.vocab_size = 100;
  m.hidden_size = 64;
  m.intermediate_size = 96;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 4;
  m.num_key_value_heads = 2;
  m.head_dim = 16;
  m.max_position_embeddings = 256;
  const std::string mt = hf_config_json(m, "bf16");
  CHECK(json::parse(mt)["sliding_window"].is_null() &&
        json::parse(mt)["architectures"][0] == "MistralForCausalLM");
  CHECK(parse_hf_config(mt, "m").num_key_value_heads == 2);

  // What transformers' class for the model_type cannot hold is refused.
  HfConfig bad = parse(qwen25_05b());
  bad.o_bias = true;
  CHECK_THROWS(hf_config_json(bad, "bf16"), "Qwen2 always has q/k/v biases and no o_proj bias");
  bad = parse(llama32_1b());
  bad.qk_norm = true;
  CHECK_THROWS(hf_config_json(bad, "bf16"), "no q/k norms");
  bad = parse(llama32_1b());
  bad.rope.type = "yarn";
  CHECK_THROWS(hf_config_json(bad, "bf16"), "RoPE type yarn");
  bad = parse(mistral_v03());
  bad.rope.type = "linear";
  CHECK_THROWS(hf_config_json(bad, "bf16"), "ignores RoPE scaling for Mistral");
  CHECK_THROWS(hf_config_json(parse(llama32_1b()), "int8"), "dtype \"int8\"");

  // generation_config.json: the ids as in config.json, a list kept a list.
  const json g = json::parse(hf_generation_config_json(parse(lb)));
  CHECK(g["bos_token_id"] == 128000 && g["eos_token_id"] == json({128001, 128008, 128009}) &&
        !g.contains("pad_token_id"));
  const json g2 = json::parse(hf_generation_config_json(parse(with(qwen25_05b(), "pad_token_id", 151643))));
  CHECK(g2["eos_token_id"] == 151643 && g2["pad_token_id"] == 151643);
}

int main() {
  test_real_configs();
  test_defaults();
  test_rope_parameters();
  test_refusals();
  test_malformed();
  test_read_file();
  test_write();
  return flotilla_test::summary("test_interop_hf_config");
}
