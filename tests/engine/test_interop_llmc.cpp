// llm.c model .bin interop: export -> import bitwise, the 256-int header fields, the parameter
// order (checked through hand-placed markers), bf16 version 5 and a differently padded vocab on
// import, and clear errors for truncation, bad magic, unsupported versions and mismatched dims.
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "engine/core/error.h"
#include "engine/interop/llmc.h"
#include "engine/interop/weights.h"
#include "engine/model/gpt.h"
#include "test_checkpoint_util.h"

using namespace flotilla;
using namespace flotilla::interop;
using ckpt_test::fresh_dir;
using ckpt_test::read_file;
using ckpt_test::write_file;

namespace {

ModelDims dims() {
  ModelDims d;
  d.n_layer = 2;
  d.n_head = 2;
  d.n_embd = 8;
  d.vocab_size = 200;
  d.padded_vocab = pad_vocab(200);  // 256
  d.max_seq_len = 6;
  return d;
}

std::vector<float> params_for(const ModelDims& d) {
  std::vector<float> p(num_parameters(d));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<float>((i * 2654435761u) % 100003) * 1e-3f - 50.0f;
  for (size_t i = static_cast<size_t>(d.vocab_size) * d.n_embd;
       i < static_cast<size_t>(d.padded_vocab) * d.n_embd; ++i)
    p[i] = 0.0f;
  return p;
}

}  // namespace

int main() {
  const ModelDims d = dims();
  const std::vector<float> p = params_for(d);
  const std::string dir = fresh_dir("interop-llmc");
  const std::string path = dir + "/model.bin";
  export_llmc(path, d, p.data());

  // Header: 256 int32, llm.c's fields, then the parameters exactly as our buffer.
  const std::string bytes = read_file(path);
  CHECK(bytes.size() == 1024 + p.size() * 4);
  int32_t h[256];
  std::memcpy(h, bytes.data(), sizeof h);
  CHECK(h[0] == 20240326 && h[1] == 3 && h[2] == 6 && h[3] == 200 && h[4] == 2 && h[5] == 2 && h[6] == 8 &&
        h[7] == 256);
  bool rest_zero = true;
  for (int i = 8; i < 256; ++i) rest_zero &= h[i] == 0;
  CHECK(rest_zero);
  CHECK(std::memcmp(bytes.data() + 1024, p.data(), p.size() * 4) == 0);

  const LlmcHeader hd = read_llmc_header(path);
  CHECK(hd.version == 3 && hd.dims.n_layer == 2 && hd.dims.padded_vocab == 256 && hd.dims.max_seq_len == 6);
  const std::vector<float> back = import_llmc(path, d);
  CHECK(back.size() == p.size() && std::memcmp(back.data(), p.data(), p.size() * 4) == 0);
  CHECK(detect_weight_format(path) == WeightFormat::kLlmc);
  const ModelDims inferred = infer_weight_dims(path);
  CHECK(inferred.n_head == 2 && inferred.vocab_size == 200 && inferred.padded_vocab == 256);
  CHECK(import_weights(path, inferred) == back);

  // Parameter order: a file written by hand with a marker at the start of each tensor, in llm.c's
  // order and with llm.c's own padding (Vp = 208 here, not our 256), loads each marker at the start
  // of our tensor; the file's padded rows are dropped and ours are zero.
  {
    ModelDims f = d;
    f.padded_vocab = 208;
    const auto sizes = param_sizes(f);
    std::vector<float> file_params(num_parameters(f), 0.25f);
    size_t off = 0;
    for (int t = 0; t < kNumParamTensors; ++t) {
      file_params[off] = 1000.0f + 8.0f * static_cast<float>(t);  // exact in bf16
      off += sizes[t];
    }
    for (size_t i = 200 * 8; i < 208 * 8; ++i) file_params[i] = 99.0f;  // llm.c's padded rows
    int32_t hh[256] = {20240326, 3, 6, 200, 2, 2, 8, 208};
    std::string raw(reinterpret_cast<const char*>(hh), sizeof hh);
    raw.append(reinterpret_cast<const char*>(file_params.data()), file_params.size() * 4);
    const std::string hand = dir + "/hand.bin";
    write_file(hand, raw);
    const std::vector<float> q = import_llmc(hand, d);
    const auto ours = param_sizes(d);
    size_t o = 0;
    bool markers = true;
    for (int t = 0; t < kNumParamTensors; ++t) {
      markers &= q[o] == 1000.0f + 8.0f * static_cast<float>(t);
      o += ours[t];
    }
    CHECK(markers);
    bool padded_zero = true;
    for (size_t i = 200 * 8; i < 256 * 8; ++i) padded_zero &= q[i] == 0.0f;
    CHECK(padded_zero);
    CHECK(q[199 * 8 + 7] == 0.25f);

    // Version 5 (bf16): the same values rounded to bf16 (0.25 and the markers are exact).
    hh[1] = 5;
    std::string raw16(reinterpret_cast<const char*>(hh), sizeof hh);
    for (float v : file_params) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      const uint16_t top = static_cast<uint16_t>(bits >> 16);
      raw16.append(reinterpret_cast<const char*>(&top), 2);
    }
    write_file(hand, raw16);
    CHECK(import_llmc(hand, d) == q);
  }

  // Errors name the file and the fault.
  const std::string bad = dir + "/bad.bin";
  write_file(bad, bytes.substr(0, bytes.size() - 4));
  CHECK_THROWS(read_llmc_header(bad), "the file is truncated or not an llm.c model");
  std::string wrong = bytes;
  wrong[0] = 7;
  write_file(bad, wrong);
  CHECK_THROWS(import_llmc(bad, d), "bad magic");
  wrong = bytes;
  wrong[4] = 4;
  write_file(bad, wrong);
  CHECK_THROWS(import_llmc(bad, d), "version 4 is not supported");
  write_file(bad, bytes.substr(0, 100));
  CHECK_THROWS(import_llmc(bad, d), "too small for an llm.c model file");
  ModelDims other = d;
  other.n_layer = 3;
  CHECK_THROWS(import_llmc(path, other), "differs from the configured model");
  return flotilla_test::summary("test_interop_llmc");
}
