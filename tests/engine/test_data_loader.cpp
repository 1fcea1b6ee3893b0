// DataLoader: llm.c's batch layout, the move to the next shard, rank slicing (disjoint, and the
// union of W ranks' batches == one process with W x B rows), seeded shuffling, and the cursor
// round trip (next batches bitwise identical, across a shard boundary and an epoch wrap).
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>

#include "check.h"
#include "engine/core/checksum.h"
#include "engine/core/error.h"
#include "engine/data/loader.h"
#include "test_data_util.h"

using namespace flotilla;

namespace {

// Token value = 100000 * shard + position, so every token says where it came from.
uint32_t tag(int shard, int64_t pos) { return static_cast<uint32_t>(100000 * shard + pos); }

void make_shards(const std::string& dir, const std::vector<int>& sizes) {
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<uint32_t> t(static_cast<size_t>(sizes[s]));
    for (int i = 0; i < sizes[s]; ++i) t[static_cast<size_t>(i)] = tag(static_cast<int>(s), i);
    char name[32];
    std::snprintf(name, sizeof name, "/train_%03zu.bin", s);
    write_shard(dir + name, t);
  }
}

struct Batch {
  std::vector<int32_t> x, y;
  bool operator==(const Batch& o) const { return x == o.x && y == o.y; }
};

Batch next(DataLoader& l, const LoaderOptions& o) {
  Batch b{std::vector<int32_t>(static_cast<size_t>(o.B * o.T)),
          std::vector<int32_t>(static_cast<size_t>(o.B * o.T))};
  l.next_batch(b.x.data(), b.y.data());
  return b;
}

LoaderOptions options(const std::string& pattern, int B, int T, bool shuffle = false, int rank = 0,
                      int world = 1) {
  LoaderOptions o;
  o.pattern = pattern;
  o.B = B;
  o.T = T;
  o.shuffle = shuffle;
  o.rank = rank;
  o.world = world;
  o.seed = 42;
  return o;
}

void test_llmc_layout(const std::string& dir) {
  // One shard of 1,000 tokens, B x T = 16: 62 batches ((1000 - 1) / 16), then the epoch wraps.
  const std::string d = dir + "/layout";
  std::filesystem::create_directories(d);
  make_shards(d, {1000});
  const LoaderOptions o = options(d + "/train_*.bin", 2, 8);
  DataLoader l(o);
  CHECK(l.total_tokens() == 1000);
  CHECK(l.batches_per_epoch() == 62);
  bool layout = true;
  for (int k = 0; k < 62; ++k) {
    const Batch b = next(l, o);
    for (int j = 0; j < 16; ++j) {
      layout = layout && b.x[static_cast<size_t>(j)] == static_cast<int32_t>(tag(0, k * 16 + j));
      layout = layout && b.y[static_cast<size_t>(j)] == static_cast<int32_t>(tag(0, k * 16 + j + 1));
    }
  }
  CHECK_MSG(layout, "micro-batch k must read tokens [k*B*T, k*B*T + B*T] with targets shifted by one");
  CHECK(l.epoch() == 1);
  const Batch wrapped = next(l, o);
  CHECK(wrapped.x[0] == static_cast<int32_t>(tag(0, 0)) && wrapped.y[15] == static_cast<int32_t>(tag(0, 16)));
  l.reset();
  CHECK(l.epoch() == 0 && next(l, o).x[1] == static_cast<int32_t>(tag(0, 1)));
}

void test_shard_crossing(const std::string& dir) {
  // Shard 0 has 100 tokens: 6 batches of 16 (+1) fit ((100 - 1) / 16 = 6), the 7th starts shard 1
  // at its first token (llm.c: the tail that cannot hold B*T+1 tokens is skipped).
  const std::string d = dir + "/cross";
  std::filesystem::create_directories(d);
  make_shards(d, {100, 50});
  const LoaderOptions o = options(d + "/train_*.bin", 2, 8);
  DataLoader l(o);
  CHECK(l.batches_per_epoch() == 6 + 3);
  for (int k = 0; k < 6; ++k) CHECK(next(l, o).x[0] == static_cast<int32_t>(tag(0, k * 16)));
  const Batch b = next(l, o);
  CHECK(b.x[0] == static_cast<int32_t>(tag(1, 0)) && b.y[15] == static_cast<int32_t>(tag(1, 16)));
}

// W ranks with B rows each vs one process with W x B rows: rank r's batch == rows r*B..(r+1)*B-1.
void test_ranks(const std::string& dir, bool shuffle) {
  const std::string d = dir + (shuffle ? "/ranks_shuffled" : "/ranks");
  std::filesystem::create_directories(d);
  make_shards(d, {700, 301, 500});
  const int W = 3, B = 2, T = 8;
  const LoaderOptions single_opt = options(d + "/train_*.bin", W * B, T, shuffle);
  DataLoader single(single_opt);
  std::vector<LoaderOptions> rank_opt;
  std::vector<std::unique_ptr<DataLoader>> ranks;
  for (int r = 0; r < W; ++r) {
    rank_opt.push_back(options(d + "/train_*.bin", B, T, shuffle, r, W));
    ranks.push_back(std::make_unique<DataLoader>(rank_opt.back()));
  }
  CHECK(single.batches_per_epoch() == ranks[0]->batches_per_epoch());
  CHECK(single.batches_per_epoch() == (699 / 48) + (300 / 48) + (499 / 48));
  const int steps = static_cast<int>(single.batches_per_epoch()) * 2 + 3;  // two epoch wraps
  bool union_ok = true, disjoint_ok = true;
  std::set<int32_t> epoch_inputs;
  for (int s = 0; s < steps; ++s) {
    if (s % single.batches_per_epoch() == 0) epoch_inputs.clear();
    const Batch all = next(single, single_opt);
    for (int r = 0; r < W; ++r) {
      const Batch mine = next(*ranks[static_cast<size_t>(r)], rank_opt[static_cast<size_t>(r)]);
      const size_t off = static_cast<size_t>(r * B * T);
      union_ok = union_ok && std::equal(mine.x.begin(), mine.x.end(), all.x.begin() + static_cast<long>(off));
      union_ok = union_ok && std::equal(mine.y.begin(), mine.y.end(), all.y.begin() + static_cast<long>(off));
      for (int32_t t : mine.x) disjoint_ok = disjoint_ok && epoch_inputs.insert(t).second;
    }
  }
  CHECK_MSG(union_ok, "rank batches must be the rows of a single process with W x B rows (shuffle=%d)",
            shuffle);
  CHECK_MSG(disjoint_ok, "ranks must read disjoint input tokens within an epoch (shuffle=%d)", shuffle);
  CHECK(single.epoch() == 2 && ranks[2]->epoch() == 2);
}

void test_shuffle(const std::string& dir) {
  const std::string d = dir + "/shuffle";
  std::filesystem::create_directories(d);
  make_shards(d, {2000, 1500, 900, 1200});
  auto order = [&](uint64_t seed, bool shuffle, int n) {
    LoaderOptions o = options(d + "/train_*.bin", 1, 16, shuffle);
    o.seed = seed;
    DataLoader l(o);
    std::vector<int32_t> starts;
    for (int i = 0; i < n; ++i) starts.push_back(next(l, o).x[0]);
    return starts;
  };
  const int per_epoch = 1999 / 16 + 1499 / 16 + 899 / 16 + 1199 / 16;
  const auto a = order(7, true, 2 * per_epoch), b = order(7, true, 2 * per_epoch),
             c = order(8, true, 2 * per_epoch);
  const auto seq = order(7, false, 2 * per_epoch);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a != seq);
  // Each epoch is a permutation of the sequential epoch, and the two epochs differ.
  std::vector<int32_t> e1(a.begin(), a.begin() + per_epoch), e2(a.begin() + per_epoch, a.end());
  std::vector<int32_t> s1(seq.begin(), seq.begin() + per_epoch);
  CHECK(e1 != e2);
  std::sort(e1.begin(), e1.end());
  std::sort(e2.begin(), e2.end());
  std::sort(s1.begin(), s1.end());
  CHECK(e1 == s1 && e2 == s1);
  // Shard order is shuffled too: the first batch does not always come from shard 0.
  int not_first_shard = 0;
  for (uint64_t seed = 1; seed <= 8; ++seed) not_first_shard += order(seed, true, 1)[0] >= 100000;
  CHECK(not_first_shard > 0);
}

void test_cursor(const std::string& dir, bool shuffle) {
  const std::string d = dir + (shuffle ? "/cursor_shuffled" : "/cursor");
  std::filesystem::create_directories(d);
  make_shards(d, {300, 200, 250});
  const LoaderOptions o = options(d + "/train_*.bin", 2, 8, shuffle);
  DataLoader a(o);
  const int64_t per_epoch = a.batches_per_epoch();  // 18 + 12 + 15
  // Save at several points, including exactly at a shard boundary and exactly at an epoch end;
  // the following batches (crossing shards and the epoch wrap) must be bitwise identical.
  for (int64_t save_at : {int64_t{5}, int64_t{18}, per_epoch - 2, per_epoch, per_epoch + 19}) {
    a.reset();
    for (int64_t i = 0; i < save_at; ++i) next(a, o);
    const std::vector<int64_t> cur = a.cursor();
    std::vector<Batch> expect;
    for (int i = 0; i < 40; ++i) expect.push_back(next(a, o));
    DataLoader b(o);
    b.set_cursor(cur);
    bool same = b.cursor() == cur;
    for (int i = 0; i < 40; ++i) {
      const Batch got = next(b, o);
      same = same &&
             std::memcmp(got.x.data(), expect[static_cast<size_t>(i)].x.data(), got.x.size() * 4) == 0 &&
             std::memcmp(got.y.data(), expect[static_cast<size_t>(i)].y.data(), got.y.size() * 4) == 0;
    }
    CHECK_MSG(same, "cursor restore at batch %lld (shuffle=%d) must give identical next batches",
              static_cast<long long>(save_at), shuffle);
    // Negative control: a fresh loader without the cursor does not give those batches.
    DataLoader fresh(o);
    CHECK(save_at == 0 || !(next(fresh, o) == expect[0]) || save_at % per_epoch == 0);
  }
  // Mismatched restores fail with the right error class.
  const std::vector<int64_t> cur = a.cursor();
  LoaderOptions other = o;
  other.B = 1;
  DataLoader wrong_batch(other);
  try {
    wrong_batch.set_cursor(cur);
    CHECK(false);
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kConfig && data_test::contains(e.what(), "global micro-batch"));
  }
  // Same global batch with a different split over ranks (2 ranks x B=1) accepts the cursor.
  LoaderOptions split = o;
  split.B = 1;
  split.world = 2;
  split.rank = 1;
  DataLoader rank1(split);
  rank1.set_cursor(cur);
  CHECK(rank1.cursor()[4] == cur[4]);
  DataLoader fewer_shards(options(d + "/train_00[01].bin", 2, 8, shuffle));
  CHECK_THROWS(fewer_shards.set_cursor(cur), "the data changed since the checkpoint");
  CHECK_THROWS(a.set_cursor(std::vector<int64_t>{1, 2, 3}), "not a cursor of this data loader");
  std::vector<int64_t> damaged = cur;
  damaged[4] = 1000;
  CHECK_THROWS(a.set_cursor(damaged), "past the end of shard");
  CHECK(a.cursor() == cur);  // a failed restore leaves the loader where it was
}

void test_widths_agree(const std::string& dir) {
  // The same tokens in a uint16 and a uint32 shard give the same batches.
  const std::string d = dir + "/widths";
  std::filesystem::create_directories(d);
  std::vector<uint32_t> t(500);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<uint32_t>((i * 37) % 50000);
  write_shard(d + "/a.bin", t);
  write_shard(d + "/b.bin", t, true);
  const LoaderOptions oa = options(d + "/a.bin", 3, 10), ob = options(d + "/b.bin", 3, 10);
  DataLoader la(oa), lb(ob);
  CHECK(la.shards()[0].token_bytes == 2 && lb.shards()[0].token_bytes == 4);
  bool same = true;
  for (int i = 0; i < 20; ++i) same = same && next(la, oa) == next(lb, ob);
  CHECK(same);
}

// CRC-32C of 60 consecutive batches (inputs and targets) of a fixed dataset.
uint32_t batches_crc(const LoaderOptions& o) {
  DataLoader l(o);
  uint32_t crc = 0;
  for (int i = 0; i < 60; ++i) {
    const Batch b = next(l, o);
    crc = crc32c(b.x.data(), b.x.size() * 4, crc);
    crc = crc32c(b.y.data(), b.y.size() * 4, crc);
  }
  return crc;
}

void test_frozen_batches(const std::string& dir) {
  // Regression for the labeled-shard work (issue 15): llm.c shards must give bit for bit the batches
  // they gave before it. The CRCs were printed by this test built on the loader before that change.
  const std::string d = dir + "/frozen";
  std::filesystem::create_directories(d);
  make_shards(d, {700, 333, 512});
  const std::string glob = d + "/train_*.bin";
  const uint32_t got[] = {batches_crc(options(glob, 3, 16)), batches_crc(options(glob, 2, 8, true)),
                          batches_crc(options(glob, 2, 8, true, 1, 2)),
                          batches_crc(options(glob, 1, 50, false, 2, 3))};
  const uint32_t want[] = {0xe4f00229u, 0x4436fa13u, 0x2a8aaf33u, 0x8d672ca7u};
  for (int i = 0; i < 4; ++i)
    CHECK_MSG(got[i] == want[i], "frozen batches %d: crc %s, expected %s", i, crc32c_hex(got[i]).c_str(),
              crc32c_hex(want[i]).c_str());
}

}  // namespace

int main() {
  const std::string dir = data_test::scratch("data_loader");
  test_llmc_layout(dir);
  test_shard_crossing(dir);
  test_ranks(dir, false);
  test_ranks(dir, true);
  test_shuffle(dir);
  test_cursor(dir, false);
  test_cursor(dir, true);
  test_widths_agree(dir);
  test_frozen_batches(dir);
  CHECK_THROWS(DataLoader(options(dir + "/layout/train_000.bin", 2, 8, false, 2, 2)),
               "outside the data-parallel world");
  std::filesystem::remove_all(dir);
  return flotilla_test::summary("data_loader");
}
