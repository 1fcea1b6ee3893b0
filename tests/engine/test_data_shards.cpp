// Token shards: uint16/uint32 round trips, durable writes, globbing, and every docs/reliability.md C9
// fault (truncated, bad magic, bad version, count != size, token >= vocab in checked mode, too few
// tokens for one batch) failing with a message that names the file and the fault.
#include <algorithm>
#include <filesystem>

#include "check.h"
#include "engine/core/error.h"
#include "engine/data/loader.h"
#include "engine/data/shard_map.h"
#include "test_data_util.h"

using namespace flotilla;
using data_test::contains;

static std::vector<uint32_t> ramp(size_t n, uint32_t mod, uint32_t mul = 7) {
  std::vector<uint32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint32_t>((i * mul + 3) % mod);
  return v;
}

// The error message of inspect_shard(...), or "" when it does not throw Error(kData).
static std::string fault(const std::string& path, int vocab = 0, bool check = false) {
  try {
    inspect_shard(path, vocab, check);
  } catch (const Error& e) {
    return e.code() == ExitCode::kData ? std::string(e.what()) : "wrong exit code: " + std::string(e.what());
  }
  return "";
}

static void test_round_trips(const std::string& dir) {
  // uint16: every token < 65536.
  const std::string p16 = dir + "/u16.bin";
  const auto t16 = ramp(10007, 65536, 6553);
  write_shard(p16, t16);
  ShardInfo info = inspect_shard(p16);
  CHECK(info.magic == 20240520 && info.version == 1 && info.token_bytes == 2);
  CHECK(info.num_tokens == 10007);
  CHECK(std::filesystem::file_size(p16) == 1024 + 2 * 10007);
  MappedShard m16(p16);
  bool same = m16.size() == 10007;
  for (int64_t i = 0; same && i < m16.size(); ++i) same = m16.token(i) == t16[static_cast<size_t>(i)];
  CHECK(same);

  // uint32: chosen automatically once a token needs it, or forced.
  const std::string p32 = dir + "/u32.bin";
  auto t32 = ramp(5003, 200000, 40009);
  write_shard(p32, t32);
  info = inspect_shard(p32);
  CHECK(info.magic == 20240801 && info.version == 7 && info.token_bytes == 4);
  CHECK(std::filesystem::file_size(p32) == 1024 + 4 * 5003);
  MappedShard m32(p32);
  std::vector<int32_t> widened(5003);
  m32.read(0, 5003, widened.data());
  same = true;
  for (size_t i = 0; i < t32.size(); ++i) same = same && widened[i] == static_cast<int32_t>(t32[i]);
  CHECK(same);
  CHECK(*std::max_element(t32.begin(), t32.end()) > 65535);

  const std::string pf = dir + "/forced.bin";
  write_shard(pf, ramp(100, 50), /*force_uint32=*/true);
  CHECK(inspect_shard(pf).token_bytes == 4);
  CHECK(MappedShard(pf).token(3) == ramp(100, 50)[3]);

  // Durable write leaves no temporary file behind; rewriting replaces the shard.
  write_shard(p16, ramp(3000, 100));
  CHECK(inspect_shard(p16).num_tokens == 3000);
  int others = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (contains(e.path().filename().string(), ".tmp")) ++others;
  CHECK(others == 0);
}

static void test_c9_faults(const std::string& dir) {
  const auto tokens = ramp(1000, 500);

  // Truncated body: size != 1,024 + 2 x count.
  const std::string trunc = dir + "/train_003.bin";
  write_shard(trunc, tokens);
  std::filesystem::resize_file(trunc, 1024 + 2 * 1000 - 7);
  std::string msg = fault(trunc);
  CHECK_MSG(
      contains(msg, "shard " + trunc + ": size 3,017 != 1,024 + 2 x 1,000 tokens = 3,024 bytes: truncated"),
      "%s", msg.c_str());
  CHECK(contains(msg, "re-run data prepare"));

  // Truncated inside the header.
  const std::string stub = dir + "/stub.bin";
  data_test::write_bytes(stub, std::string(100, '\0'));
  msg = fault(stub);
  CHECK_MSG(contains(msg, stub) && contains(msg, "smaller than the 1,024-byte header"), "%s", msg.c_str());

  // Bad magic.
  const std::string magic = dir + "/magic.bin";
  data_test::write_raw_shard(magic, 12345, 1, 1000, tokens, 2);
  msg = fault(magic);
  CHECK_MSG(contains(msg, "shard " + magic + ": bad magic 12345") && contains(msg, "not a token shard"), "%s",
            msg.c_str());

  // Unknown version for each magic.
  const std::string ver = dir + "/version.bin";
  data_test::write_raw_shard(ver, 20240520, 7, 1000, tokens, 2);
  msg = fault(ver);
  CHECK_MSG(contains(msg, "shard " + ver + ": unknown version 7 for magic 20240520"), "%s", msg.c_str());
  data_test::write_raw_shard(ver, 20240801, 1, 1000, tokens, 4);
  msg = fault(ver);
  CHECK_MSG(contains(msg, "unknown version 1 for magic 20240801"), "%s", msg.c_str());

  // Header count says more / fewer tokens than the file holds.
  const std::string count = dir + "/count.bin";
  data_test::write_raw_shard(count, 20240520, 1, 999, tokens, 2);
  msg = fault(count);
  CHECK_MSG(
      contains(msg, "shard " + count + ": size 3,024 != 1,024 + 2 x 999 tokens = 3,022 bytes: trailing data"),
      "%s", msg.c_str());
  data_test::write_raw_shard(count, 20240801, 7, 1001, tokens, 4);
  msg = fault(count);
  CHECK_MSG(contains(msg, "size 5,024 != 1,024 + 4 x 1,001 tokens = 5,028 bytes: truncated"), "%s",
            msg.c_str());
  data_test::write_raw_shard(count, 20240520, 1, -5, tokens, 2);
  CHECK(contains(fault(count), "negative"));

  // Token >= vocab: only in checked mode; names the offset and the value.
  const std::string big = dir + "/vocab.bin";
  auto bad_tokens = tokens;
  bad_tokens[777] = 50257;
  write_shard(big, bad_tokens);
  CHECK(fault(big, 50257, false).empty());
  CHECK(fault(big, 0, true).empty());  // no vocab given: nothing to check against
  msg = fault(big, 50257, true);
  CHECK_MSG(contains(msg, "shard " + big +
                              ": token 50,257 at token offset 777 (file byte 2,578) >= vocab size 50,257"),
            "%s", msg.c_str());
  CHECK(fault(big, 50258, true).empty());

  // Missing file.
  msg = fault(dir + "/absent.bin");
  CHECK_MSG(contains(msg, "absent.bin: cannot open"), "%s", msg.c_str());

  // Too few tokens for one batch (B*T*world + 1), named with the arithmetic.
  const std::string small = dir + "/small_000.bin";
  write_shard(small, ramp(64, 100));
  LoaderOptions opt;
  opt.pattern = small;
  opt.B = 4;
  opt.T = 16;
  CHECK_THROWS(DataLoader{opt}, "small_000.bin: 64 tokens are too few for one batch");
  opt.T = 15;  // 4 x 15 + 1 = 61 <= 64: fine
  DataLoader ok(opt);
  CHECK(ok.batches_per_epoch() == 1);
  opt.world = 2;
  opt.rank = 1;
  CHECK_THROWS(DataLoader{opt}, "2 x 4 x 15 + 1 = 121");

  // The loader's checked mode finds the bad token before training (preflight) ...
  LoaderOptions chk;
  chk.pattern = big;
  chk.B = 2;
  chk.T = 8;
  chk.checked = true;
  chk.vocab_size = 50257;
  CHECK_THROWS(DataLoader{chk}, "token 50,257 at token offset 777");
  // ... and preflight also rejects each damaged shard in a glob, naming it.
  LoaderOptions glob;
  glob.pattern = dir + "/*.bin";
  glob.B = 1;
  glob.T = 4;
  try {
    DataLoader l(glob);
    CHECK_MSG(false, "a glob with damaged shards was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kData);
    CHECK(contains(e.what(), dir));
  }
}

static void test_glob(const std::string& dir) {
  const std::string g = dir + "/glob";
  std::filesystem::create_directories(g);
  for (const char* name : {"train_002.bin", "train_000.bin", "train_010.bin", "train_001.bin", "val_000.bin"})
    write_shard(g + "/" + name, ramp(20, 10));
  const auto files = expand_shards(g + "/train_*.bin");
  CHECK(files.size() == 4);
  CHECK(files.size() == 4 && files[0] == g + "/train_000.bin" && files[1] == g + "/train_001.bin" &&
        files[2] == g + "/train_002.bin" && files[3] == g + "/train_010.bin");
  CHECK(expand_shards(g + "/val_000.bin").size() == 1);
  CHECK_THROWS(expand_shards(g + "/test_*.bin"), "no files match the shard pattern");
  CHECK_THROWS(expand_shards(g + "/missing.bin"), "missing.bin: no such file");
  // Issue 19: a glob in a folder that does not exist names the folder (it blamed "a directory is
  // unreadable").
  CHECK_THROWS(expand_shards(g + "/no-such-folder/train_*.bin"),
               ("the folder " + g + "/no-such-folder does not exist").c_str());
}

int main() {
  const std::string dir = data_test::scratch("data_shards");
  CHECK(group_digits(0) == "0");
  CHECK(group_digits(999) == "999");
  CHECK(group_digits(1000002) == "1,000,002");
  CHECK(group_digits(-1234567) == "-1,234,567");
  test_round_trips(dir);
  test_glob(dir);
  test_c9_faults(dir);
  std::filesystem::remove_all(dir);
  return flotilla_test::summary("data_shards");
}
