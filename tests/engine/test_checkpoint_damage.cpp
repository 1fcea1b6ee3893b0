// docs/reliability.md C8 and F2: damage at rest. Each fault is applied to the newest of two checkpoints; the
// loader must fall back to the older one with a warning naming the directory and the fault, and
// with nothing verifying it must return nullopt (load_dir: a clear error). Hostile headers and
// mutated files must be rejected without oversized allocations or crashes.
#include <functional>
#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/rank_file.h"
#include "engine/core/checksum.h"
#include "engine/core/error.h"
#include "test_checkpoint_util.h"

using namespace flotilla;
using namespace ckpt_test;

namespace {

const State kOld(20, 1500), kNew(40, 1500);

// Two checkpoints (20, 40) in a fresh root, then `damage` applied to step-00000040.
std::string setup(const std::string& name, const std::function<void(const std::string& dir)>& damage) {
  const std::string root = fresh_dir("ckpt-damage-" + name);
  CheckpointStore store(root);
  store.save(kOld.request(), 5);
  store.save(kNew.request(), 5);
  damage(root + "/step-00000040");
  return root;
}

// Rewrites MANIFEST through JSON (keeps the file checksums valid).
void edit_manifest(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  auto j = nlohmann::json::parse(read_file(dir + "/MANIFEST"));
  edit(j);
  write_file(dir + "/MANIFEST", j.dump(1));
}

void expect_fallback(const std::string& name, const std::function<void(const std::string&)>& damage,
                     const std::string& fault) {
  const std::string root = setup(name, damage);
  CheckpointStore store(root);
  std::vector<std::string> warnings;
  auto loaded = store.load_latest(0, &warnings);
  CHECK_MSG(loaded && kOld.matches(*loaded), "%s: did not fall back to step 20", name.c_str());
  const std::string want = "step-00000040: ";
  bool named = false;
  for (const auto& w : warnings)
    named |= contains(w, want) && contains(w, fault) && contains(w, "falling back to step-00000020");
  CHECK_MSG(named, "%s: no warning with '%s' (got: %s)", name.c_str(), fault.c_str(),
            warnings.empty() ? "none" : warnings[0].c_str());
  // An explicit resume from the damaged directory is a clear error naming the fault.
  CHECK_THROWS(store.load_dir(root + "/step-00000040", 0), fault.c_str());
}

}  // namespace

static void test_c8_faults() {
  const uint64_t size = ckpt::rank_file_size(kNew.request().tensors);
  expect_fallback(
      "trunc1", [size](const std::string& d) { fs::resize_file(d + "/rank-0.bin", size - 1); },
      "rank-0.bin is " + std::to_string(size - 1) + " bytes, MANIFEST says " + std::to_string(size) +
          " (truncated)");
  expect_fallback(
      "trunc0", [](const std::string& d) { fs::resize_file(d + "/rank-0.bin", 0); },
      "rank-0.bin is 0 bytes, MANIFEST says");
  for (size_t offset : {size_t{3}, size_t{20}, size_t{70}, size_t{4000}, size_t{12000}}) {
    expect_fallback(
        "flip" + std::to_string(offset),
        [offset](const std::string& d) { flip_byte(d + "/rank-0.bin", offset); },
        "rank-0.bin crc32c mismatch (expected ");
  }
  expect_fallback(
      "flip-trainer", [](const std::string& d) { flip_byte(d + "/trainer.json", 2); },
      "trainer.json crc32c mismatch");
  expect_fallback(
      "no-manifest", [](const std::string& d) { fs::remove(d + "/MANIFEST"); }, "MANIFEST missing");
  expect_fallback(
      "no-rankfile", [](const std::string& d) { fs::remove(d + "/rank-0.bin"); },
      "rank-0.bin listed in MANIFEST is missing");
  expect_fallback(
      "manifest-garbage", [](const std::string& d) { write_file(d + "/MANIFEST", "{\"format\": \"flot"); },
      "MANIFEST: not valid JSON");
  expect_fallback(
      "manifest-version",
      [](const std::string& d) { edit_manifest(d, [](nlohmann::json& j) { j["format_version"] = 2; }); },
      "format_version 2 is not supported");
  expect_fallback(
      "manifest-world",
      [](const std::string& d) { edit_manifest(d, [](nlohmann::json& j) { j["world_size"] = 2; }); },
      "world_size is 2 but rank-1.bin is not listed");
  expect_fallback(
      "manifest-hash",
      [](const std::string& d) {
        edit_manifest(d, [](nlohmann::json& j) { j["config_hash"] = "00000000000000ff"; });
      },
      "rank-0.bin header says config hash 000000c0ffee1234, MANIFEST says 00000000000000ff");
  expect_fallback(
      "manifest-step",
      [](const std::string& d) { edit_manifest(d, [](nlohmann::json& j) { j["step"] = 30; }); },
      "MANIFEST step 30 does not match the directory name");
  expect_fallback(
      "manifest-size",
      [](const std::string& d) { edit_manifest(d, [](nlohmann::json& j) { j["files"][0]["size"] = 99; }); },
      "MANIFEST says 99");
  expect_fallback(
      "manifest-path",
      [](const std::string& d) {
        edit_manifest(d, [](nlohmann::json& j) { j["files"][1]["name"] = "../x"; });
      },
      "is not a plain file name");
  // A rank file copied in from another checkpoint (valid CRC in a rewritten MANIFEST, wrong step).
  expect_fallback(
      "swapped-rankfile",
      [](const std::string& d) {
        const std::string other = d + "/../step-00000020/rank-0.bin";
        const std::string bytes = read_file(other);
        write_file(d + "/rank-0.bin", bytes);
        edit_manifest(d, [&](nlohmann::json& j) {
          j["files"][0]["size"] = bytes.size();
          j["files"][0]["crc32c"] = crc32c_hex(crc32c(bytes.data(), bytes.size()));
        });
      },
      "rank-0.bin header says step 20, MANIFEST says 40");
}

static void test_config_hash_exposed_and_tmp_leftover() {
  const std::string root = setup("tmp-left", [](const std::string&) {});
  // A leftover tmp dir of a newer step (a killed save) is never loaded.
  fs::create_directories(root + "/step-00000060.tmp-0123456789abcdef");
  write_file(root + "/step-00000060.tmp-0123456789abcdef/rank-0.bin", "partial");
  CheckpointStore store(root);
  std::vector<std::string> warnings;
  auto loaded = store.load_latest(0, &warnings);
  CHECK(loaded && kNew.matches(*loaded));
  CHECK(loaded && loaded->config_hash == 0xC0FFEE1234ull);
  CHECK(any_contains(warnings, "step-00000060.tmp-0123456789abcdef: incomplete save"));
  store.cleanup_tmp();
  CHECK(tmp_dirs_in(root).empty());
  warnings.clear();
  CHECK(store.load_latest(0, &warnings).has_value() && warnings.empty());
}

static void test_none_verify() {
  const std::string root = setup("none", [](const std::string& d) { flip_byte(d + "/rank-0.bin", 100); });
  flip_byte(root + "/step-00000020/rank-0.bin", 100);
  CheckpointStore store(root);
  std::vector<std::string> warnings;
  CHECK(!store.load_latest(0, &warnings).has_value());
  CHECK(warnings.size() == 2 && any_contains(warnings, "step-00000040: rank-0.bin crc32c mismatch") &&
        any_contains(warnings, "step-00000020: rank-0.bin crc32c mismatch") &&
        any_contains(warnings, "no older checkpoint verifies"));
  CHECK_THROWS(store.load_dir(root + "/step-00000020", 0), "does not verify: rank-0.bin crc32c mismatch");
  CHECK_THROWS(store.load_dir(root + "/step-00000099", 0), "does not exist");
  // Nothing was overwritten or deleted by the failed loads.
  CHECK(fs::exists(root + "/step-00000040/MANIFEST") && fs::exists(root + "/step-00000020/MANIFEST"));
  // An empty or missing root has no checkpoint and no warnings.
  CheckpointStore empty(fresh_dir("ckpt-damage-empty") + "/missing");
  warnings.clear();
  CHECK(!empty.load_latest(0, &warnings).has_value() && warnings.empty());
}

// F2: a header claiming a 2^62-byte section, with a MANIFEST whose size and CRC match the file, is
// rejected by the bounds check (the message proves no allocation was attempted: an attempt would
// have thrown std::length_error / bad_alloc instead).
static void test_f2_huge_section() {
  const std::string root = setup("huge", [](const std::string&) {});
  const std::string dir = root + "/step-00000040";
  std::string bytes = read_file(dir + "/rank-0.bin");
  // First section: 8-byte descriptor at 64, name "params" (6), dims 1 x i64, then the u64 length.
  const size_t len_at = 64 + 8 + 6 + 8;
  const uint64_t huge = uint64_t{1} << 62;
  std::memcpy(&bytes[len_at], &huge, 8);
  write_file(dir + "/rank-0.bin", bytes);
  edit_manifest(dir, [&](nlohmann::json& j) {
    j["files"][0]["crc32c"] = crc32c_hex(crc32c(bytes.data(), bytes.size()));
  });
  CheckpointStore store(root);
  CHECK_THROWS(store.load_dir(dir, 0), "section 'params' claims 4611686018427387904 bytes but only");

  // The same through the in-memory parser, with a 2^62 dimension and a huge section count.
  ckpt::MemorySource src(bytes.data(), bytes.size());
  CHECK_THROWS(ckpt::read_rank_file(src, bytes.size(), "rank-0.bin", {}), "claims 4611686018427387904 bytes");
  std::string many = read_file(root + "/step-00000020/rank-0.bin");
  const uint32_t n = 0xFFFFFFFFu;
  std::memcpy(&many[40], &n, 4);
  ckpt::MemorySource src2(many.data(), many.size());
  CHECK_THROWS(ckpt::read_rank_file(src2, many.size(), "rank-0.bin", {}), "sections is more than the limit");
}

// Cheap mutation fuzzing of both parsers (the libFuzzer harness of F2 reuses them): every mutated
// input is either accepted or rejected with flotilla::Error; nothing else may escape.
static void test_mutations() {
  const std::string root = setup("mut", [](const std::string&) {});
  const std::string rank = read_file(root + "/step-00000040/rank-0.bin");
  const std::string manifest = read_file(root + "/step-00000040/MANIFEST");
  uint64_t x = 0x2545F4914F6CDD1Dull;
  auto rnd = [&x](uint64_t n) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x % n;
  };
  int other_exceptions = 0, rejected = 0;
  for (int it = 0; it < 3000; ++it) {
    std::string r = rank.substr(0, it % 3 == 0 ? rnd(rank.size()) : rank.size());
    if (!r.empty())
      for (int k = 0; k < 1 + static_cast<int>(rnd(4)); ++k)
        r[rnd(r.size() < 200 ? r.size() : 200)] = static_cast<char>(rnd(256));
    try {
      ckpt::MemorySource src(r.data(), r.size());
      ckpt::read_rank_file(src, r.size(), "rank-0.bin", [](const std::string&) { return true; });
    } catch (const Error&) {
      ++rejected;
    } catch (...) {
      ++other_exceptions;
    }
    std::string m = manifest.substr(0, it % 2 == 0 ? rnd(manifest.size()) : manifest.size());
    if (!m.empty()) m[rnd(m.size())] = "0123456789{}[]\":,-ez "[rnd(21)];
    try {
      ckpt::parse_manifest(m);
    } catch (const Error&) {
      ++rejected;
    } catch (...) {
      ++other_exceptions;
    }
  }
  CHECK_MSG(other_exceptions == 0, "%d mutated inputs escaped as non-Error exceptions", other_exceptions);
  CHECK(rejected > 1000);
}

int main() {
  test_c8_faults();
  test_config_hash_exposed_and_tmp_leftover();
  test_none_verify();
  test_f2_huge_section();
  test_mutations();
  return flotilla_test::summary("test_checkpoint_damage");
}
