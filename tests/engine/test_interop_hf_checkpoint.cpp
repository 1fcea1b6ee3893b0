// Hugging Face model folders read by HfCheckpoint, from safetensors files built byte by byte here:
// every BF16 and F16 code converts to its exact value (subnormals, infinities, NaN, negative zero),
// F32 bit patterns survive, F64 narrows as a cast does, also from unaligned data and across the
// reader's conversion chunks; shape and name faults name the tensor, file and both shapes; sharded
// folders load, and a missing shard, a tensor the index lists but its shard lacks, one a shard holds
// but the index does not list, a tensor in two shards and a key listed twice are each refused by name;
// malformed index JSON gives an Error, never a crash; unread() reports what a loader left (but not
// rotary_emb.inv_freq); the mapped reader never pages in tensors nobody asked for, and keeps none of
// the file resident after converting a 64 MiB tensor.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/core/error.h"
#include "engine/interop/hf_checkpoint.h"
#include "test_checkpoint_util.h"

using namespace flotilla;
using namespace flotilla::interop;
using ckpt_test::fresh_dir;
using ckpt_test::write_file;

namespace {

// A safetensors file assembled by hand: header JSON text + raw little-endian bytes. `pad` extra
// header spaces move the data section (an odd pad makes it unaligned).
struct HandFile {
  std::string header = "{";
  std::string data;
  void add(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
           const std::string& bytes) {
    if (header.size() > 1) header += ",";
    header += "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + nlohmann::json(shape).dump() +
              ",\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + bytes.size()) + "]}";
    data += bytes;
  }
  template <typename T>
  void add_vec(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
               const std::vector<T>& v) {
    add(name, dtype, shape, std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)));
  }
  std::string bytes(size_t pad = 0) const {
    const std::string h = header + (header.size() > 1 ? "," : "") + "\"__metadata__\":{\"format\":\"pt\"}}" +
                          std::string(pad, ' ');
    const uint64_t n = h.size();
    return std::string(reinterpret_cast<const char*>(&n), 8) + h + data;
  }
};

std::vector<float> f32s(std::initializer_list<float> v) { return v; }

// Independent decodings (double arithmetic from the bit fields).
double bf16_value(uint32_t c) {
  const int e = (c >> 7) & 0xFF, m = c & 0x7F;
  const double sign = (c & 0x8000) ? -1.0 : 1.0;
  return e == 0 ? sign * std::ldexp(m, -133) : sign * std::ldexp(128 + m, e - 134);
}
double f16_value(uint32_t c) {
  const int e = (c >> 10) & 31, m = c & 1023;
  const double sign = (c & 0x8000) ? -1.0 : 1.0;
  return e == 0 ? sign * std::ldexp(m, -24) : sign * std::ldexp(1024 + m, e - 25);
}

// "RssFile:" of /proc/self/status in KiB: file pages this process has mapped and resident.
long rss_file_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
  return -1;
}

// Pages of [offset, offset + len) of `path` in the page cache (through a separate map and mincore).
size_t resident_pages(const std::string& path, uint64_t offset, uint64_t len) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  const off_t size = ::lseek(fd, 0, SEEK_END);
  void* m = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, fd, 0);
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> vec((static_cast<size_t>(size) + page - 1) / page);
  ::mincore(m, static_cast<size_t>(size), vec.data());
  size_t n = 0;
  for (uint64_t p = offset / page; p < (offset + len + page - 1) / page && p < vec.size(); ++p)
    n += vec[p] & 1;
  ::munmap(m, static_cast<size_t>(size));
  ::close(fd);
  return n;
}

}  // namespace

static void test_dtype_exactness() {
  std::vector<uint16_t> codes(65536);
  for (uint32_t c = 0; c < 65536; ++c) codes[c] = static_cast<uint16_t>(c);
  // More than one conversion chunk (8 MiB of BF16 = 4,194,304 elements), with a checkable pattern.
  const size_t kLong = 4194304 + 4097;
  std::vector<uint16_t> long_codes(kLong);
  for (size_t i = 0; i < kLong; ++i) long_codes[i] = static_cast<uint16_t>((i * 40503u) & 0x7F7Fu);
  const std::vector<uint32_t> f32_bits = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x7F800000u,
                                          0xFF800000u, 0x7FC00000u, 0x7FA00001u, 0x3F800000u, 0xC2F6E979u};
  const std::vector<double> f64 = {1.5, -0.0, 1e-40, -1e300, 3.141592653589793, 1e-50};

  for (size_t pad : {size_t{0}, size_t{3}}) {  // aligned, then unaligned data
    HandFile h;
    h.add_vec("bf16", "BF16", {256, 256}, codes);
    h.add_vec("f16", "F16", {65536}, codes);
    h.add_vec("f32", "F32", {2, 5}, f32_bits);
    h.add_vec("f64", "F64", {6}, f64);
    h.add_vec("long", "BF16", {static_cast<int64_t>(kLong)}, long_codes);
    const std::string dir = fresh_dir("hf-dtypes");
    write_file(dir + "/model.safetensors", h.bytes(pad));
    const HfCheckpoint ck(dir);
    CHECK(!ck.sharded() && ck.files() == std::vector<std::string>{"model.safetensors"} &&
          ck.tensors().size() == 5);

    std::vector<float> v(65536);
    ck.read_f32("bf16", v.data(), {256, 256});
    int wrong = 0;
    for (uint32_t c = 0; c < 65536; ++c) {
      uint32_t bits;
      std::memcpy(&bits, &v[c], 4);
      const int e = (c >> 7) & 0xFF, m = c & 0x7F;
      if (bits != c << 16) ++wrong;  // exact, NaN payloads included
      if (e == 255)
        wrong +=
            m == 0 ? !(std::isinf(v[c]) && std::signbit(v[c]) == ((c & 0x8000) != 0)) : !std::isnan(v[c]);
      else
        wrong += static_cast<double>(v[c]) != bf16_value(c) || std::signbit(v[c]) != ((c & 0x8000) != 0);
    }
    CHECK_MSG(wrong == 0, "pad %zu: %d BF16 codes wrong", pad, wrong);
    CHECK(v[0x0001] == std::ldexp(1.0f, -133) && v[0x8000] == 0.0f &&
          std::signbit(v[0x8000]));  // subnormal, -0

    ck.read_f32("f16", v.data(), {65536});
    wrong = 0;
    for (uint32_t c = 0; c < 65536; ++c) {
      const int e = (c >> 10) & 31, m = c & 1023;
      if (e == 31)
        wrong +=
            m == 0 ? !(std::isinf(v[c]) && std::signbit(v[c]) == ((c & 0x8000) != 0)) : !std::isnan(v[c]);
      else
        wrong += static_cast<double>(v[c]) != f16_value(c) || std::signbit(v[c]) != ((c & 0x8000) != 0);
    }
    CHECK_MSG(wrong == 0, "pad %zu: %d F16 codes wrong", pad, wrong);
    CHECK(v[0x0001] == std::ldexp(1.0f, -24) && v[0x7C00] == INFINITY && std::signbit(v[0x8000]));

    std::vector<float> w(10);
    ck.read_f32("f32", w.data(), {2, 5});
    CHECK(std::memcmp(w.data(), f32_bits.data(), 40) == 0);
    ck.read_f32("f64", w.data(), {6});
    bool same = true;
    for (size_t i = 0; i < f64.size(); ++i) {
      const float want = static_cast<float>(f64[i]);
      same &= std::memcmp(&w[i], &want, 4) == 0;
    }
    CHECK(same && std::isinf(w[3]) && w[3] < 0 && w[5] == 0.0f);

    std::vector<float> lv(kLong);
    ck.read_f32("long", lv.data(), {static_cast<int64_t>(kLong)});
    wrong = 0;
    for (size_t i = 0; i < kLong; ++i) wrong += lv[i] != static_cast<float>(bf16_value(long_codes[i]));
    CHECK_MSG(wrong == 0, "pad %zu: %d of the long tensor's elements wrong", pad, wrong);
    CHECK(ck.unread().empty());
    std::filesystem::remove_all(dir);  // 17 MB
  }
}

static void test_lookup_and_errors() {
  HandFile h;
  h.add_vec("model.embed_tokens.weight", "F32", {2, 3}, f32s({1, 2, 3, 4, 5, 6}));
  h.add_vec("model.norm.weight", "BF16", {3}, std::vector<uint16_t>{0x3F80, 0x4000, 0x4040});
  h.add_vec("model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {1}, f32s({1}));
  h.add_vec("lm_head.weight", "F32", {2, 3}, f32s({0, 0, 0, 0, 0, 0}));
  h.add_vec("ids", "I64", {1}, std::vector<int64_t>{7});
  const std::string dir = fresh_dir("hf-lookup");
  write_file(dir + "/model.safetensors", h.bytes());
  const HfCheckpoint ck(dir + "/");  // a trailing slash is fine
  CHECK(ck.folder() == dir);
  const HfTensorInfo* t = ck.find("model.norm.weight");
  CHECK(t != nullptr && t->dtype == "BF16" && t->shape == std::vector<int64_t>{3} && t->bytes == 6);
  CHECK(t->file == "model.safetensors" && ck.find("nope") == nullptr);
  CHECK(ck.tensors().front().name == "ids");  // sorted by name
  CHECK(ck.unread() == (std::vector<std::string>{"ids", "lm_head.weight", "model.embed_tokens.weight",
                                                 "model.norm.weight"}));  // inv_freq is ignorable
  std::vector<float> v(6);
  ck.read_f32("model.norm.weight", v.data(), {3});
  CHECK(v[0] == 1.0f && v[1] == 2.0f && v[2] == 3.0f);
  CHECK_THROWS(ck.read_f32("model.embed_tokens.weight", v.data(), {3, 2}),
               "/model.safetensors: tensor model.embed_tokens.weight has shape [2, 3], expected [3, 2]");
  CHECK_THROWS(ck.read_f32("model.layers.0.mlp.up_proj.weight", v.data(), {4, 3}),
               "tensor model.layers.0.mlp.up_proj.weight is missing (expected shape [4, 3])");
  CHECK_THROWS(ck.read_f32("ids", v.data(), {1}), "tensor ids has dtype I64; only F32, F16, BF16 and F64");
  ck.read_f32("model.embed_tokens.weight", v.data(), {2, 3});
  CHECK(v[5] == 6.0f);
  ck.mark_read("lm_head.weight");
  CHECK(ck.unread() == std::vector<std::string>{"ids"});
  CHECK(is_ignorable_hf_tensor("model.layers.3.self_attn.rotary_emb.inv_freq") &&
        !is_ignorable_hf_tensor("inv_freq"));
  const std::string d = ck.describe();
  CHECK(d.find("one file (model.safetensors)") != std::string::npos &&
        d.find("5 tensors") != std::string::npos);
  CHECK(d.find("BF16 1, F32 3, I64 1") != std::string::npos &&
        d.find("66 bytes of tensor data") != std::string::npos);

  // The folder, the file itself, and what is not a model folder.
  CHECK(HfCheckpoint(dir + "/model.safetensors").tensors().size() == 5);
  CHECK_THROWS(HfCheckpoint(dir + "/nothing"), "no such folder or file");
  const std::string empty = fresh_dir("hf-empty");
  write_file(empty + "/pytorch_model.bin", "x");
  CHECK_THROWS(HfCheckpoint{empty}, "only safetensors weights are read");
  write_file(empty + "/model.safetensors", "garbage!");
  CHECK_THROWS(HfCheckpoint{empty}, "model.safetensors: header length");
}

// Writes a two-shard folder: a, b in shard 1; c, d and an inv_freq buffer in shard 2.
std::string make_sharded(const std::string& name, const std::string& index_text = "") {
  const std::string dir = fresh_dir(name);
  HandFile s1, s2;
  s1.add_vec("a", "F32", {2}, f32s({1, 2}));
  s1.add_vec("b", "BF16", {1}, std::vector<uint16_t>{0xC000});
  s2.add_vec("c", "F16", {1}, std::vector<uint16_t>{0x3C00});
  s2.add_vec("d", "F32", {1, 1}, f32s({4}));
  s2.add_vec("x.rotary_emb.inv_freq", "F32", {1}, f32s({0}));
  write_file(dir + "/model-00001-of-00002.safetensors", s1.bytes());
  write_file(dir + "/model-00002-of-00002.safetensors", s2.bytes());
  write_file(dir + "/model.safetensors.index.json",
             !index_text.empty() ? index_text : R"({"metadata": {"total_size": 18}, "weight_map": {
      "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors", "d": "model-00002-of-00002.safetensors",
      "x.rotary_emb.inv_freq": "model-00002-of-00002.safetensors"}})");
  return dir;
}

static void test_sharded() {
  const std::string dir = make_sharded("hf-sharded");
  {
    const HfCheckpoint ck(dir);
    CHECK(ck.sharded() && ck.files().size() == 2 && ck.files()[1] == "model-00002-of-00002.safetensors");
    CHECK(ck.find("c")->file == "model-00002-of-00002.safetensors" && ck.find("a")->file == ck.files()[0]);
    float v[2];
    ck.read_f32("a", v, {2});
    CHECK(v[0] == 1.0f && v[1] == 2.0f);
    ck.read_f32("b", v, {1});
    CHECK(v[0] == -2.0f);
    ck.read_f32("c", v, {1});
    CHECK(v[0] == 1.0f);
    CHECK(ck.unread() == std::vector<std::string>{"d"});
    CHECK(ck.describe().find("2 shards listed by model.safetensors.index.json") != std::string::npos);
    CHECK(HfCheckpoint(dir + "/model.safetensors.index.json").tensors().size() == 5);
  }
  // A shard missing.
  std::remove((dir + "/model-00002-of-00002.safetensors").c_str());
  CHECK_THROWS(HfCheckpoint{dir}, "1 shard file(s) missing");
  CHECK_THROWS(HfCheckpoint{dir}, "model-00002-of-00002.safetensors (listed for c)");

  const std::string head = R"({"weight_map": {"a": "model-00001-of-00002.safetensors", )";
  // The index lists a tensor its shard lacks.
  CHECK_THROWS(HfCheckpoint(make_sharded("hf-absent", head + R"("b": "model-00001-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors", "d": "model-00002-of-00002.safetensors",
      "e": "model-00002-of-00002.safetensors", "x.rotary_emb.inv_freq": "model-00002-of-00002.safetensors"}})")),
               "the index lists tensor e in model-00002-of-00002.safetensors, which does not hold it");
  // A shard holds a tensor the index does not list.
  CHECK_THROWS(HfCheckpoint(make_sharded("hf-unlisted", head + R"("b": "model-00001-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors", "x.rotary_emb.inv_freq": "model-00002-of-00002.safetensors"}})")),
               "model-00002-of-00002.safetensors holds tensor d, which the index does not list");
  // The index names the wrong shard for a tensor.
  CHECK_THROWS(
      HfCheckpoint(make_sharded("hf-wrong", head + R"("b": "model-00002-of-00002.safetensors",
      "c": "model-00002-of-00002.safetensors", "d": "model-00002-of-00002.safetensors",
      "x.rotary_emb.inv_freq": "model-00002-of-00002.safetensors"}})")),
      "the index lists tensor b in model-00002-of-00002.safetensors, which does not hold it (it is in "
      "model-00001-of-00002.safetensors)");
  // A tensor in two shards.
  const std::string dup = make_sharded("hf-dup");
  HandFile s2;
  s2.add_vec("c", "F16", {1}, std::vector<uint16_t>{0x3C00});
  s2.add_vec("d", "F32", {1, 1}, f32s({4}));
  s2.add_vec("x.rotary_emb.inv_freq", "F32", {1}, f32s({0}));
  s2.add_vec("a", "F32", {2}, f32s({9, 9}));
  write_file(dup + "/model-00002-of-00002.safetensors", s2.bytes());
  CHECK_THROWS(HfCheckpoint{dup},
               "tensor a is in both model-00001-of-00002.safetensors and model-00002-of-00002.safetensors (a "
               "duplicate");
  // A key listed twice in the index text (JSON parsers would keep only the last).
  CHECK_THROWS(HfCheckpoint(make_sharded("hf-dupkey", head + R"("a": "model-00002-of-00002.safetensors"}})")),
               "key weight_map.a appears twice");
  // Both layouts present: model.safetensors wins, as in transformers.
  const std::string both = make_sharded("hf-both");
  HandFile single;
  single.add_vec("only", "F32", {1}, f32s({5}));
  write_file(both + "/model.safetensors", single.bytes());
  CHECK(!HfCheckpoint(both).sharded() && HfCheckpoint(both).tensors().size() == 1);
}

static void test_malformed_index() {
  const std::string dir = make_sharded("hf-badindex");
  const std::string index = dir + "/model.safetensors.index.json";
  auto refused = [&](const std::string& text, const char* want) {
    write_file(index, text);
    CHECK_THROWS(HfCheckpoint{dir}, want);
  };
  refused("", "not a JSON object");
  refused("[1]", "not a JSON object");
  refused(R"({"metadata": {}})", "weight_map is missing, empty or not an object");
  refused(R"({"weight_map": []})", "weight_map is missing");
  refused(R"({"weight_map": {}})", "weight_map is missing");
  refused(R"({"weight_map": {"a": 3}})", "weight_map[\"a\"] is not a file name string");
  refused(R"({"weight_map": {"a": "../model-00001-of-00002.safetensors"}})",
          "is not a file name in this folder");
  refused(R"({"weight_map": {"a": "/etc/passwd"}})", "is not a file name in this folder");
  refused(R"({"metadata": 5, "weight_map": {"a": "x"}})", "metadata is not an object");
  refused(R"({"weight_map": {"a": "x"}, "weight_map": {"a": "x"}})", "key weight_map appears twice");
  // Every truncation of a valid index: an Error (or a load), never a crash or another exception.
  const std::string good =
      ckpt_test::read_file(make_sharded("hf-goodindex") + "/model.safetensors.index.json");
  int other = 0;
  for (size_t n = 0; n < good.size(); ++n) {
    write_file(index, good.substr(0, n));
    try {
      HfCheckpoint ck(dir);
    } catch (const Error&) {
    } catch (...) {
      ++other;
    }
  }
  CHECK_MSG(other == 0, "%d truncated indexes threw something other than flotilla::Error", other);
}

// The reader maps files and converts from the map: tensors nobody reads are never paged in (a sparse
// file's hole stays a hole), and a converted tensor's pages do not stay mapped in this process.
static void test_mapped_reads() {
  const std::string dir = fresh_dir("hf-sparse");
  const std::string path = dir + "/model.safetensors";
  const uint64_t kBig = uint64_t{32} << 20;  // BF16 elements: 64 MiB of data
  HandFile h;
  h.add("small", "F32", {1024}, std::string(4096, '\0'));
  const std::string head = [&] {
    HandFile t = h;
    t.header += ",\"big\":{\"dtype\":\"BF16\",\"shape\":[" + std::to_string(kBig) +
                "],\"data_offsets\":[4096," + std::to_string(4096 + 2 * kBig) + "]}";
    t.header += ",\"tail\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[" +
                std::to_string(4096 + 2 * kBig) + "," + std::to_string(4100 + 2 * kBig) + "]}";
    t.data.clear();
    return t.bytes();
  }();
  {
    std::vector<float> small(1024);
    for (int i = 0; i < 1024; ++i) small[i] = static_cast<float>(i);
    const float tail = 42.0f;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(::write(fd, head.data(), head.size()) == static_cast<ssize_t>(head.size()));
    CHECK(::write(fd, small.data(), 4096) == 4096);
    // The 64 MiB of "big" stay a hole: only the tail is written after it.
    CHECK(::pwrite(fd, &tail, 4, static_cast<off_t>(head.size() + 4096 + 2 * kBig)) == 4);
    ::close(fd);
  }
  const uint64_t big_at = head.size() + 4096;
  const HfCheckpoint ck(dir);
  std::vector<float> small(1024);
  float tail = 0;
  ck.read_f32("small", small.data(), {1024});
  ck.read_f32("tail", &tail, {1});
  CHECK(small[1023] == 1023.0f && tail == 42.0f);
  const size_t page_kib = static_cast<size_t>(::sysconf(_SC_PAGESIZE)) / 1024;
  const size_t big_resident_kib = resident_pages(path, big_at, 2 * kBig) * page_kib;
  CHECK_MSG(big_resident_kib < 4096, "%zu KiB of the unread 64 MiB tensor were paged in", big_resident_kib);

  std::vector<float> big(kBig, 1.0f);  // touched now, so the read below adds only file pages
  const long before = rss_file_kib();
  ck.read_f32("big", big.data(), {static_cast<int64_t>(kBig)});
  const long grown = rss_file_kib() - before;
  CHECK(before >= 0 && big[0] == 0.0f && big[kBig - 1] == 0.0f);
  CHECK_MSG(grown < 16 * 1024, "RssFile grew by %ld KiB while converting a 64 MiB tensor", grown);
  std::printf("unread tensor resident: %zu KiB of 65536; RssFile growth over a 64 MiB read: %ld KiB\n",
              big_resident_kib, grown);
  std::filesystem::remove_all(dir);
}

int main() {
  test_dtype_exactness();
  test_lookup_and_errors();
  test_sharded();
  test_malformed_index();
  test_mapped_reads();
  return flotilla_test::summary("test_interop_hf_checkpoint");
}
