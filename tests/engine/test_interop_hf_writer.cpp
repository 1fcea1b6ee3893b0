// Hugging Face folders written by write_hf_checkpoint: fp32 round trips bitwise and bf16 equals an
// independent round-to-nearest-even (ties, overflow to inf, subnormals, -0, NaN); the files are what
// transformers expects (format pt metadata, 8-byte aligned data, model-0000i-of-0000N names, an index
// with total_size and a sorted weight_map); shards fill greedily and an oversized tensor gets its own;
// a new export replaces an old one as a whole; crash safety: a failing producer, a full disk at the
// second shard, a failed swap and a process killed mid-write all leave the previous export byte for
// byte as it was; a folder holding foreign files, a symbolic link or an impossible path are refused
// without change; copy_tokenizer_files copies exactly the tokenizer files present.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/core/error.h"
#include "engine/interop/hf_checkpoint.h"
#include "engine/interop/hf_config.h"
#include "engine/interop/hf_writer.h"
#include "engine/interop/safetensors.h"
#include "test_checkpoint_util.h"

using namespace flotilla;
using namespace flotilla::interop;
using ckpt_test::fresh_dir;
using ckpt_test::read_file;
using ckpt_test::write_file;
namespace fs = std::filesystem;

namespace {

struct Src {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

std::vector<HfOutTensor> out_tensors(const std::vector<Src>& src) {
  std::vector<HfOutTensor> out;
  for (const Src& s : src)
    out.push_back(
        {s.name, s.shape, [&s](float* dst) { std::memcpy(dst, s.values.data(), s.values.size() * 4); }});
  return out;
}

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& f : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    f = static_cast<float>(static_cast<int64_t>(x % 2000001) - 1000000) * 1e-6f;
  }
  return v;
}

// Independent bf16 rounding: the two neighbours by truncation, compared in double; ties to even.
uint16_t bf16_reference(float f) {
  if (std::isnan(f)) return 0x7FC0;
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t lo = static_cast<uint16_t>(bits >> 16);  // toward zero
  if ((bits & 0xFFFF) == 0) return lo;
  const uint16_t hi = static_cast<uint16_t>(lo + 1);  // away from zero (may become inf)
  auto value = [](uint16_t h) {
    const uint32_t b = static_cast<uint32_t>(h) << 16;
    float r;
    std::memcpy(&r, &b, 4);
    return static_cast<double>(r);
  };
  const double x = f;
  double dlo = std::fabs(x - value(lo)), dhi;
  if ((hi & 0x7F80) == 0x7F80) {  // rounding up overflows: compare with the next step past the largest finite
    const double top = std::ldexp(1.0, 128) * (f < 0 ? -1 : 1);
    dhi = std::fabs(x - top);
  } else {
    dhi = std::fabs(x - value(hi));
  }
  if (dlo != dhi) return dlo < dhi ? lo : hi;
  return (lo & 1) == 0 ? lo : hi;
}

std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    files[e.path().filename().string()] = read_file(e.path().string());
  return files;
}

int siblings_named(const std::string& dir, const std::string& infix) {
  int n = 0;
  const std::string base = fs::path(dir).filename().string();
  for (const auto& e : fs::directory_iterator(fs::path(dir).parent_path()))
    if (e.path().filename().string().rfind(base + infix, 0) == 0) ++n;
  return n;
}

std::vector<Src> model_tensors() {
  return {{"model.embed_tokens.weight", {10, 8}, random_values(80, 1)},
          {"model.layers.0.self_attn.q_proj.weight", {8, 8}, random_values(64, 2)},
          {"model.layers.0.mlp.down_proj.weight", {8, 12}, random_values(96, 3)},
          {"model.norm.weight", {8}, random_values(8, 4)},
          {"lm_head.weight", {10, 8}, random_values(80, 5)}};
}

}  // namespace

static void test_bf16_rounding() {
  int wrong = 0;
  auto check = [&](uint32_t bits) {
    float f;
    std::memcpy(&f, &bits, 4);
    if (f32_to_bf16(f) != bf16_reference(f)) ++wrong;
  };
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65521) check(static_cast<uint32_t>(b));  // a spread
  for (uint32_t hi = 0; hi < 65536; hi += 7)  // ties and their neighbours for every 7th upper half
    for (uint32_t low : {0x7FFFu, 0x8000u, 0x8001u}) check((hi << 16) | low);
  CHECK_MSG(wrong == 0, "%d floats rounded differently from the reference", wrong);
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);               // tie -> even (down)
  CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);           // tie -> even (up)
  CHECK(f32_to_bf16(3.4028235e38f) == 0x7F80);                             // FLT_MAX rounds to inf
  CHECK(f32_to_bf16(-0.0f) == 0x8000 && f32_to_bf16(INFINITY) == 0x7F80);  // sign, inf kept
  CHECK(f32_to_bf16(std::ldexp(1.0f, -133)) == 0x0001 &&
        f32_to_bf16(std::ldexp(1.0f, -134)) == 0x0000);  // subnormal; tie
  CHECK(f32_to_bf16(std::ldexp(3.0f, -135)) == 0x0001 && f32_to_bf16(-NAN) == 0x7FC0);
}

static void test_round_trips() {
  std::vector<Src> src = model_tensors();
  src[3].values = {0.0f,      -0.0f,         std::ldexp(1.0f, -140),
                   -INFINITY, 3.4028235e38f, 1.0f + std::ldexp(1.0f, -8),
                   NAN,       -1e-45f};
  for (const char* dtype : {"fp32", "bf16"}) {
    const std::string dir = fresh_dir(std::string("hf-rt-") + dtype) + "/export";
    HfWriteOptions o;
    o.dtype = dtype;
    o.text_files = {{"config.json", "{}\n"}};
    const HfWriteResult r = write_hf_checkpoint(dir, out_tensors(src), o);
    CHECK(r.shards == 1 && r.files == (std::vector<std::string>{"config.json", "model.safetensors"}));
    const bool bf16 = std::string(dtype) == "bf16";
    CHECK(r.tensor_bytes == (80 + 64 + 96 + 8 + 80) * (bf16 ? 2u : 4u));
    CHECK(read_file(dir + "/config.json") == "{}\n" && siblings_named(dir, ".tmp-") == 0);

    const std::string bytes = read_file(dir + "/model.safetensors");
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    const auto header = nlohmann::json::parse(bytes.substr(8, n));
    CHECK((8 + n) % 8 == 0 && header["__metadata__"] == nlohmann::json({{"format", "pt"}}));
    CHECK(header["model.norm.weight"]["dtype"] == (bf16 ? "BF16" : "F32"));
    CHECK(header["model.layers.0.mlp.down_proj.weight"]["shape"] == nlohmann::json({8, 12}));
    CHECK(header["model.embed_tokens.weight"]["data_offsets"][0] == 0);  // written in the given order

    const HfCheckpoint ck(dir);
    int wrong = 0;
    for (const Src& s : src) {
      std::vector<float> back(s.values.size());
      ck.read_f32(s.name, back.data(), s.shape);
      for (size_t i = 0; i < back.size(); ++i) {
        float want = s.values[i];
        if (bf16) {
          const uint32_t b = static_cast<uint32_t>(bf16_reference(want)) << 16;
          std::memcpy(&want, &b, 4);
        }
        if (std::isnan(want) ? !std::isnan(back[i]) : std::memcmp(&want, &back[i], 4) != 0) ++wrong;
      }
    }
    CHECK_MSG(wrong == 0, "%s: %d values differ after the round trip", dtype, wrong);
    CHECK(ck.unread().empty());
  }
}

static void test_sharding() {
  // Sizes in fp32 bytes: 320, 256, 384, 32, 320. With 600 per shard: [320 256] [384 32] [320].
  const std::vector<Src> src = model_tensors();
  const std::string dir = fresh_dir("hf-shards") + "/out";
  HfWriteResult r = write_hf_checkpoint(dir, out_tensors(src), "fp32", 600);
  CHECK(r.shards == 3 && r.tensor_bytes == 1312);
  CHECK(r.files ==
        (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                  "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  const auto index = nlohmann::json::parse(read_file(dir + "/model.safetensors.index.json"));
  CHECK(index["metadata"]["total_size"] == 1312 && index["weight_map"].size() == 5);
  CHECK(index["weight_map"]["model.layers.0.self_attn.q_proj.weight"] == "model-00001-of-00003.safetensors");
  CHECK(index["weight_map"]["model.norm.weight"] == "model-00002-of-00003.safetensors");
  CHECK(index["weight_map"]["lm_head.weight"] == "model-00003-of-00003.safetensors");
  {
    const HfCheckpoint ck(dir);
    CHECK(ck.sharded() && ck.files().size() == 3);
    std::vector<float> v(96);
    ck.read_f32("model.layers.0.mlp.down_proj.weight", v.data(), {8, 12});
    CHECK(std::memcmp(v.data(), src[2].values.data(), 96 * 4) == 0);
  }
  // A tensor larger than the limit gets a shard of its own; exactly at the limit stays single.
  r = write_hf_checkpoint(dir, out_tensors(src), "fp32", 100);
  CHECK(r.shards == 5 && !fs::exists(dir + "/model-00001-of-00003.safetensors"));  // the old shards are gone
  r = write_hf_checkpoint(dir, out_tensors(src), "fp32", 1312);
  CHECK(r.shards == 1 && r.files == std::vector<std::string>{"model.safetensors"});
  CHECK(!fs::exists(dir + "/model.safetensors.index.json") && siblings_named(dir, ".old-") == 0);
  r = write_hf_checkpoint(dir, out_tensors(src), "bf16", 656);  // bf16 halves the sizes: single again
  CHECK(r.shards == 1 && r.tensor_bytes == 656);
}

static void test_crash_safety() {
  const std::vector<Src> src = model_tensors();
  const std::string root = fresh_dir("hf-crash");
  const std::string dir = root + "/export";
  HfWriteOptions o;
  o.dtype = "fp32";
  o.max_shard_bytes = 600;
  o.text_files = {{"config.json", "{\"old\": true}\n"}};
  write_hf_checkpoint(dir, out_tensors(src), o);
  const auto before = snapshot(dir);
  CHECK(before.size() == 5);
  auto untouched = [&](const char* what) {
    CHECK_MSG(snapshot(dir) == before, "%s changed the previous export", what);
    CHECK_MSG(siblings_named(dir, ".tmp-") == 0, "%s left a temporary folder", what);
    CHECK(HfCheckpoint(dir).tensors().size() == 5);
  };
  o.text_files = {{"config.json", "{\"new\": true}\n"}};

  // A producer failing half-way (the trainer's buffer gone, a device error...).
  std::vector<HfOutTensor> failing = out_tensors(src);
  failing[3].produce = [](float*) { throw Error(ExitCode::kInternal, "producer failed"); };
  CHECK_THROWS(write_hf_checkpoint(dir, failing, o), "producer failed");
  untouched("a failing producer");

  // The disk fills while writing the second shard.
  CheckpointFaultHook full = [](const std::string& op, int* err) {
    if (op != "write model-00002-of-00003.safetensors") return true;
    *err = ENOSPC;
    return false;
  };
  o.fault_hook = &full;
  CHECK_THROWS(write_hf_checkpoint(dir, out_tensors(src), o),
               "No space left on device while writing model-00002-of-00003.safetensors");
  untouched("a full disk");

  // The final swap fails.
  CheckpointFaultHook no_swap = [](const std::string& op, int* err) {
    *err = EIO;
    return op != "swap";
  };
  o.fault_hook = &no_swap;
  CHECK_THROWS(write_hf_checkpoint(dir, out_tensors(src), o), "moving the new export into place");
  untouched("a failed swap");

  // Killed while writing (a real process exit in the middle, no unwinding): the old export stays.
  const pid_t pid = ::fork();
  if (pid == 0) {
    CheckpointFaultHook kill = [](const std::string& op, int*) {
      if (op == "fsync model-00003-of-00003.safetensors") ::_exit(9);
      return true;
    };
    HfWriteOptions k = o;
    k.fault_hook = &kill;
    write_hf_checkpoint(dir, out_tensors(src), k);
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 9);
  CHECK(snapshot(dir) == before && siblings_named(dir, ".tmp-") == 1);  // the stale half-export beside it

  // Success replaces it, in one piece.
  o.fault_hook = nullptr;
  write_hf_checkpoint(dir, out_tensors(src), o);
  CHECK(read_file(dir + "/config.json") == "{\"new\": true}\n" && siblings_named(dir, ".old-") == 0);

  // Refused without change: foreign files, a sub-folder, a symbolic link, a file in the way, bad requests.
  const auto now = snapshot(dir);
  write_file(dir + "/README.md", "mine");
  CHECK_THROWS(write_hf_checkpoint(dir, out_tensors(src), o),
               "holds README.md, which is not part of a Hugging Face");
  CHECK(fs::exists(dir + "/README.md"));
  fs::remove(dir + "/README.md");
  fs::create_directory(dir + "/sub");
  CHECK_THROWS(write_hf_checkpoint(dir, out_tensors(src), o), "holds sub,");
  fs::remove(dir + "/sub");
  CHECK(snapshot(dir) == now);
  fs::create_directory_symlink(dir, root + "/link");
  CHECK_THROWS(write_hf_checkpoint(root + "/link", out_tensors(src), o), "is a symbolic link");
  write_file(root + "/plain", "x");
  CHECK_THROWS(write_hf_checkpoint(root + "/plain", out_tensors(src), o), "exists and is not a folder");
  try {
    write_hf_checkpoint(root + "/plain/inside", out_tensors(src), o);
    CHECK(false);
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kIo);
  }
  CHECK(read_file(root + "/plain") == "x");
  std::vector<HfOutTensor> twice = out_tensors(src);
  twice[1].name = twice[0].name;
  CHECK_THROWS(write_hf_checkpoint(dir, twice, o), "listed twice");
  CHECK_THROWS(write_hf_checkpoint(dir, out_tensors(src), "fp16"), "dtype \"fp16\" is not supported");
  CHECK(snapshot(dir) == now);
}

static void test_tokenizer_files() {
  const std::string src = fresh_dir("hf-tok-src"), dst = fresh_dir("hf-tok-dst");
  write_file(src + "/tokenizer.json", "{\"version\": \"1.0\"}");
  write_file(src + "/merges.txt", "#version: 0.2\na b\n");
  write_file(src + "/chat_template.jinja", std::string(3 << 20, 'x'));  // more than one read chunk
  write_file(src + "/README.md", "not a tokenizer file");
  const std::vector<std::string> copied = copy_tokenizer_files(src, dst);
  CHECK(copied == (std::vector<std::string>{"tokenizer.json", "merges.txt", "chat_template.jinja"}));
  CHECK(read_file(dst + "/merges.txt") == read_file(src + "/merges.txt"));
  CHECK(read_file(dst + "/chat_template.jinja") == read_file(src + "/chat_template.jinja"));
  CHECK(!fs::exists(dst + "/README.md") &&
        copy_tokenizer_files(dst, dst).size() == 3);  // onto itself: intact
  CHECK(read_file(dst + "/tokenizer.json") == "{\"version\": \"1.0\"}");

  // Through the writer, into a folder that is also the tokenizer source (export over the import).
  const std::string model = fresh_dir("hf-tok-model") + "/m";
  HfWriteOptions o;
  o.tokenizer_dir = src;
  write_hf_checkpoint(model, out_tensors(model_tensors()), o);
  o.tokenizer_dir = model;
  const HfWriteResult r = write_hf_checkpoint(model, out_tensors(model_tensors()), o);
  CHECK(r.files == (std::vector<std::string>{"chat_template.jinja", "merges.txt", "model.safetensors",
                                             "tokenizer.json"}));
  CHECK(read_file(model + "/merges.txt") == read_file(src + "/merges.txt"));
}

// A whole folder: config from hf_config_json, weights, generation config; read back as a model folder.
static void test_folder() {
  HfConfig c;
  c.model_type = "llama";
  c.vocab_size = 10;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 4;
  c.max_position_embeddings = 64;
  c.bos_token_id.ids = {1};
  c.eos_token_id = {{2, 3}, true};
  const std::string dir = fresh_dir("hf-folder") + "/model";
  HfWriteOptions o;
  o.text_files = {{"config.json", hf_config_json(c, o.dtype)},
                  {"generation_config.json", hf_generation_config_json(c)}};
  write_hf_checkpoint(dir, out_tensors(model_tensors()), o);
  const HfConfig back = read_hf_config(dir);
  CHECK(back.architecture == "LlamaForCausalLM" && back.num_key_value_heads == 1 && back.dtype == "bfloat16");
  CHECK(back.eos_token_id.list && back.eos_token_id.ids == (std::vector<int64_t>{2, 3}));
  const HfCheckpoint ck(dir);
  CHECK(ck.find("model.embed_tokens.weight")->dtype == "BF16" &&
        ck.find("model.embed_tokens.weight")->shape ==
            (std::vector<int64_t>{back.vocab_size, back.hidden_size}));
}

int main() {
  test_bf16_rounding();
  test_round_trips();
  test_sharding();
  test_crash_safety();
  test_tokenizer_files();
  test_folder();
  return flotilla_test::summary("test_interop_hf_writer");
}
