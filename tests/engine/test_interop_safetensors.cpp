// safetensors interop: export -> import is bitwise identical; a file written byte by byte here (not by
// our writer) imports with the right values and the Conv1D transposes; "transformer." prefixes, F16
// and BF16 data and the attn.bias buffers are handled; mismatches name the tensor and both shapes;
// malformed headers are rejected; the header is padded to 8 bytes and carries format=pt.
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/core/error.h"
#include "engine/interop/gpt2_safetensors.h"
#include "engine/interop/safetensors.h"
#include "engine/interop/weights.h"
#include "engine/model/gpt.h"
#include "test_checkpoint_util.h"

using namespace flotilla;
using namespace flotilla::interop;
using ckpt_test::fresh_dir;
using ckpt_test::read_file;
using ckpt_test::write_file;

namespace {

ModelDims tiny_dims() {
  ModelDims d;
  d.n_layer = 2;
  d.n_head = 2;
  d.n_embd = 8;
  d.vocab_size = 13;
  d.padded_vocab = pad_vocab(13);  // 128
  d.max_seq_len = 5;
  return d;
}

// Random non-zero params; padded vocab rows zero (as the model keeps them).
std::vector<float> random_params(const ModelDims& d, uint64_t seed) {
  std::vector<float> p(num_parameters(d));
  uint64_t x = seed;
  for (float& v : p) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(x >> 40) - (1 << 23)) / static_cast<float>(1 << 23);
  }
  for (size_t i = static_cast<size_t>(d.vocab_size) * d.n_embd;
       i < static_cast<size_t>(d.padded_vocab) * d.n_embd; ++i)
    p[i] = 0.0f;
  return p;
}

size_t offset_of(const ModelDims& d, int index) {
  const auto sizes = param_sizes(d);
  size_t off = 0;
  for (int i = 0; i < index; ++i) off += sizes[i];
  return off;
}

// A safetensors file assembled by hand: header JSON text + raw little-endian bytes.
struct HandFile {
  std::string header = "{";
  std::string data;
  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           const std::string& bytes) {
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[";
    for (size_t i = 0; i < shape.size(); ++i) {
      if (i > 0) header += ",";
      header += std::to_string(shape[i]);
    }
    header += "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + bytes.size()) + "]}";
    data += bytes;
  }
  void add_f32(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& v) {
    add(name, "F32", shape, std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
  }
  std::string bytes() const {
    std::string h = header + ",\"__metadata__\":{\"format\":\"pt\"}}";
    const uint64_t n = h.size();
    return std::string(reinterpret_cast<const char*>(&n), 8) + h + data;
  }
};

// Our value at (out o, in i) of a stacked Linear weight of layer l.
float linear_at(const std::vector<float>& p, size_t base, int l, size_t out, size_t in, size_t o, size_t i) {
  return p[base + static_cast<size_t>(l) * out * in + o * in + i];
}

}  // namespace

static void test_round_trip() {
  const ModelDims d = tiny_dims();
  const std::vector<float> p = random_params(d, 7);
  const std::string dir = fresh_dir("interop-st");
  const std::string path = dir + "/model.safetensors";
  export_gpt2_safetensors(path, d, p.data(), {{"note", "test"}});
  const std::vector<float> back = import_gpt2_safetensors(path, d);
  CHECK(back.size() == p.size() && std::memcmp(back.data(), p.data(), p.size() * 4) == 0);
  CHECK(detect_weight_format(path) == WeightFormat::kSafetensors);
  const std::vector<float> back2 = import_weights(path, d);
  CHECK(back2 == back);

  // The file as another reader sees it: 8-byte aligned data, format=pt, HF names, Conv1D layout.
  const std::string bytes = read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK((8 + n) % 8 == 0);
  const auto j = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(j["__metadata__"]["format"] == "pt" && j["__metadata__"]["note"] == "test");
  CHECK(j.size() == 1 + 2 + 12 * 2 + 2);
  CHECK(j["wte.weight"]["shape"] == nlohmann::json({13, 8}) && j["wte.weight"]["dtype"] == "F32");
  CHECK(j["wpe.weight"]["shape"] == nlohmann::json({5, 8}));
  CHECK(j["h.1.attn.c_attn.weight"]["shape"] == nlohmann::json({8, 24}));
  CHECK(j["h.1.attn.c_proj.weight"]["shape"] == nlohmann::json({8, 8}));
  CHECK(j["h.0.mlp.c_fc.weight"]["shape"] == nlohmann::json({8, 32}));
  CHECK(j["h.0.mlp.c_proj.weight"]["shape"] == nlohmann::json({32, 8}));
  CHECK(j["h.0.mlp.c_fc.bias"]["shape"] == nlohmann::json({32}));
  CHECK(j["ln_f.bias"]["shape"] == nlohmann::json({8}));
  // c_attn.weight[i][o] of layer 1 == our qkvw[1][o][i] (the transpose).
  SafetensorsFile f(path);
  const std::vector<float> qkv = f.read_f32(*f.find("h.1.attn.c_attn.weight"));
  bool transposed = true;
  for (size_t i = 0; i < 8; ++i)
    for (size_t o = 0; o < 24; ++o)
      transposed &= qkv[i * 24 + o] == linear_at(p, offset_of(d, kQkvw), 1, 24, 8, o, i);
  CHECK(transposed);
  const std::vector<float> fcproj = f.read_f32(*f.find("h.0.mlp.c_proj.weight"));  // (4C, C)
  CHECK(fcproj[5 * 8 + 3] == linear_at(p, offset_of(d, kFcprojw), 0, 8, 32, 3, 5));

  // Dimensions inferred from the file (n_head from n_embd / 64 is impossible for C = 8: ask).
  CHECK_THROWS(infer_dims_from_safetensors(path), "set model.n_head");
  const ModelDims g = infer_dims_from_safetensors(path, 2);
  CHECK(g.n_layer == 2 && g.n_embd == 8 && g.vocab_size == 13 && g.padded_vocab == 128 &&
        g.max_seq_len == 5 && g.n_head == 2);
  write_file(dir + "/config.json", "{\"n_head\": 4}");
  CHECK(infer_dims_from_safetensors(path).n_head == 4);
}

// A file built byte by byte, as transformers' GPT2LMHeadModel.save_pretrained lays it out (with the
// "transformer." prefix, masks and a tied lm_head), with F16 and BF16 tensors mixed in.
static void test_hand_built_file() {
  ModelDims d = tiny_dims();
  d.n_layer = 1;
  const size_t C = 8;
  HandFile h;
  std::vector<float> wte(13 * C), wpe(5 * C);
  for (size_t i = 0; i < wte.size(); ++i) wte[i] = 0.5f * static_cast<float>(i) - 3.0f;
  for (size_t i = 0; i < wpe.size(); ++i) wpe[i] = -0.25f * static_cast<float>(i);
  h.add_f32("transformer.wte.weight", {13, 8}, wte);
  // wpe as BF16: value k/8 for k = index (exact in bf16).
  std::string wpe_bf16;
  for (size_t i = 0; i < wpe.size(); ++i) {
    const float v = static_cast<float>(i) / 8.0f;
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    const uint16_t hi = static_cast<uint16_t>(bits >> 16);
    wpe_bf16.append(reinterpret_cast<const char*>(&hi), 2);
  }
  h.add("transformer.wpe.weight", "BF16", {5, 8}, wpe_bf16);
  const std::string pre = "transformer.h.0.";
  auto ramp = [](size_t n, float scale) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i + 1);
    return v;
  };
  // ln_1.weight as F16: 1.0 (0x3C00), -2.0 (0xC000), 0.5 (0x3800), 65504 (0x7BFF), a subnormal 2^-24
  // (0x0001), ...
  const uint16_t halves[8] = {0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x8000, 0x3555, 0x4248};
  h.add(pre + "ln_1.weight", "F16", {8}, std::string(reinterpret_cast<const char*>(halves), 16));
  h.add_f32(pre + "ln_1.bias", {8}, ramp(8, 0.01f));
  h.add_f32(pre + "attn.bias", {1, 1, 5, 5}, std::vector<float>(25, 1.0f));  // causal mask buffer: ignored
  h.add_f32(pre + "attn.masked_bias", {}, {-1e4f});
  const std::vector<float> c_attn = ramp(8 * 24, 0.001f);  // (in 8, out 24)
  h.add_f32(pre + "attn.c_attn.weight", {8, 24}, c_attn);
  h.add_f32(pre + "attn.c_attn.bias", {24}, ramp(24, 0.1f));
  const std::vector<float> c_proj = ramp(64, -0.01f);
  h.add_f32(pre + "attn.c_proj.weight", {8, 8}, c_proj);
  h.add_f32(pre + "attn.c_proj.bias", {8}, ramp(8, 1.0f));
  h.add_f32(pre + "ln_2.weight", {8}, ramp(8, 2.0f));
  h.add_f32(pre + "ln_2.bias", {8}, ramp(8, 3.0f));
  const std::vector<float> c_fc = ramp(8 * 32, 0.5f);
  h.add_f32(pre + "mlp.c_fc.weight", {8, 32}, c_fc);
  h.add_f32(pre + "mlp.c_fc.bias", {32}, ramp(32, 4.0f));
  const std::vector<float> m_proj = ramp(32 * 8, 0.25f);
  h.add_f32(pre + "mlp.c_proj.weight", {32, 8}, m_proj);
  h.add_f32(pre + "mlp.c_proj.bias", {8}, ramp(8, 5.0f));
  h.add_f32("transformer.ln_f.weight", {8}, ramp(8, 6.0f));
  h.add_f32("transformer.ln_f.bias", {8}, ramp(8, 7.0f));
  h.add_f32("lm_head.weight", {13, 8}, wte);  // tied: ignored
  const std::string path = fresh_dir("interop-st-hand") + "/gpt2.safetensors";
  write_file(path, h.bytes());

  const ModelDims g = infer_dims_from_safetensors(path, 2);
  CHECK(g.n_layer == 1 && g.vocab_size == 13 && g.max_seq_len == 5 && g.n_embd == 8);
  const std::vector<float> p = import_gpt2_safetensors(path, d);
  CHECK(p.size() == num_parameters(d));
  CHECK(std::memcmp(p.data(), wte.data(), wte.size() * 4) == 0);
  bool pad_zero = true;
  for (size_t i = 13 * C; i < 128 * C; ++i) pad_zero &= p[i] == 0.0f;
  CHECK(pad_zero);
  CHECK(p[offset_of(d, kWpe) + 0] == 0.0f && p[offset_of(d, kWpe) + 17] == 17.0f / 8.0f);
  const float* ln1 = &p[offset_of(d, kLn1w)];
  CHECK(ln1[0] == 1.0f && ln1[1] == -2.0f && ln1[2] == 0.5f && ln1[3] == 65504.0f);
  CHECK(ln1[4] == std::ldexp(1.0f, -24) && ln1[5] == 0.0f && std::signbit(ln1[5]));
  CHECK_NEAR(ln1[6], 0.33325195, 1e-8);  // 0x3555
  CHECK(ln1[7] == 3.140625f);            // 0x4248
  // Transposes: ours (out, in) = file (in, out)^T.
  bool ok = true;
  for (size_t o = 0; o < 24; ++o)
    for (size_t i = 0; i < 8; ++i)
      ok &= linear_at(p, offset_of(d, kQkvw), 0, 24, 8, o, i) == c_attn[i * 24 + o];
  for (size_t o = 0; o < 8; ++o)
    for (size_t i = 0; i < 8; ++i)
      ok &= linear_at(p, offset_of(d, kAttprojw), 0, 8, 8, o, i) == c_proj[i * 8 + o];
  for (size_t o = 0; o < 32; ++o)
    for (size_t i = 0; i < 8; ++i) ok &= linear_at(p, offset_of(d, kFcw), 0, 32, 8, o, i) == c_fc[i * 32 + o];
  for (size_t o = 0; o < 8; ++o)
    for (size_t i = 0; i < 32; ++i)
      ok &= linear_at(p, offset_of(d, kFcprojw), 0, 8, 32, o, i) == m_proj[i * 8 + o];
  CHECK(ok);
  CHECK(p[offset_of(d, kQkvb) + 23] == 0.1f * 24.0f);
  CHECK(p[offset_of(d, kLnfb) + 7] == 7.0f * 8.0f);

  // Positions cropped on request (a 5-position file into a 3-position model), refused otherwise.
  ModelDims short_d = d;
  short_d.max_seq_len = 3;
  CHECK_THROWS(import_gpt2_safetensors(path, short_d), "wpe.weight has shape [5, 8], expected [3, 8]");
  const std::vector<float> cropped = import_gpt2_safetensors(path, short_d, true);
  CHECK(cropped[offset_of(short_d, kWpe) + 23] == 23.0f / 8.0f);
}

static void test_errors() {
  const ModelDims d = tiny_dims();
  const std::vector<float> p = random_params(d, 3);
  const std::string dir = fresh_dir("interop-st-err");
  const std::string path = dir + "/m.safetensors";
  export_gpt2_safetensors(path, d, p.data());
  // Shape mismatch names the tensor, the file's shape and the expected one.
  ModelDims wider = d;
  wider.n_embd = 16;
  wider.n_head = 2;
  CHECK_THROWS(import_gpt2_safetensors(path, wider),
               "tensor wte.weight has shape [13, 8], expected [13, 16]");
  ModelDims deeper = d;
  deeper.n_layer = 3;
  CHECK_THROWS(import_gpt2_safetensors(path, deeper),
               "tensor h.2.ln_1.weight is missing (expected shape [8])");
  ModelDims shallower = d;
  shallower.n_layer = 1;
  CHECK_THROWS(import_gpt2_safetensors(path, shallower), "unexpected tensor(s)");

  // A hand-made file with every tensor right except one weight stored (out, in) instead of (in, out).
  HandFile h;
  SafetensorsFile good(path);
  for (const SafetensorsEntry& e : good.entries()) {
    std::vector<int64_t> shape = e.shape;
    if (e.name == "h.1.attn.c_attn.weight") std::swap(shape[0], shape[1]);
    const std::vector<uint8_t> raw = good.read_raw(e);
    h.add(e.name, e.dtype, shape, std::string(raw.begin(), raw.end()));
  }
  const std::string bad = dir + "/bad.safetensors";
  write_file(bad, h.bytes());
  CHECK_THROWS(import_gpt2_safetensors(bad, d),
               "tensor h.1.attn.c_attn.weight has shape [24, 8], expected [8, 24]");

  // Malformed containers.
  auto with_header = [&](const std::string& header, const std::string& data) {
    const uint64_t n = header.size();
    write_file(bad, std::string(reinterpret_cast<const char*>(&n), 8) + header + data);
  };
  with_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", std::string(4, '\0'));
  CHECK_THROWS(SafetensorsFile{bad}, "do not fit shape [2] F32 in 4 data bytes");
  with_header(
      "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"F32\",\"shape\":[1]"
      ",\"data_offsets\":[2,6]}}",
      std::string(6, '\0'));
  CHECK_THROWS(SafetensorsFile{bad}, "overlapping or gapped");
  with_header("{\"a\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", std::string(1, '\0'));
  CHECK_THROWS(SafetensorsFile{bad}, "unknown dtype Q4");
  with_header("not json", "");
  CHECK_THROWS(SafetensorsFile{bad}, "header is not a JSON object");
  const uint64_t huge = uint64_t{1} << 60;
  write_file(bad, std::string(reinterpret_cast<const char*>(&huge), 8) + "{}");
  CHECK_THROWS(SafetensorsFile{bad}, "exceeds the file");
  write_file(bad, "abc");
  CHECK_THROWS(SafetensorsFile{bad}, "not a safetensors file");
  CHECK_THROWS(detect_weight_format(bad), "neither an llm.c model");

  // F16 conversion over all 65536 codes against a double-precision formula.
  int wrong = 0;
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint16_t hcode = static_cast<uint16_t>(c);
    const int e = (c >> 10) & 31, m = c & 1023;
    const double sign = (c & 0x8000) ? -1.0 : 1.0;
    const float got = f16_to_f32(hcode);
    if (e == 31) {
      wrong += m == 0 ? !(std::isinf(got) && std::signbit(got) == (sign < 0)) : !std::isnan(got);
      continue;
    }
    const double want = e == 0 ? sign * std::ldexp(m, -24) : sign * std::ldexp(1024 + m, e - 25);
    wrong += static_cast<double>(got) != want;
  }
  CHECK_MSG(wrong == 0, "%d half codes converted wrongly", wrong);
  CHECK(bf16_to_f32(0x3F80) == 1.0f && bf16_to_f32(0xC040) == -3.0f);
}

int main() {
  test_round_trip();
  test_hand_built_file();
  test_errors();
  return flotilla_test::summary("test_interop_safetensors");
}
