// Labeled shards and packing: hand-made documents whose every input, target and position of every
// row is checked by hand (packed and --no-pack, a document longer than a row cut into overlapping
// pieces, padding), the header round trip, rank slicing (W ranks x B rows == one process with W x B
// rows, shuffled or not), shuffling by rows, the cursor across shard and epoch boundaries, llm.c
// shards through the three-array next_batch, and the errors for damaged labeled shards.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>

#include "check.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/data/loader.h"
#include "engine/data/packing.h"
#include "test_data_util.h"

using namespace flotilla;

namespace {

constexpr int32_t X = kIgnoreTarget;

struct Doc {
  std::vector<uint32_t> ids;
  std::vector<int> target;  // per token
};

void write_docs(const std::string& path, const std::vector<Doc>& docs, bool pack, uint32_t pad) {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> flags;
  for (const Doc& d : docs)
    for (size_t k = 0; k < d.ids.size(); ++k) {
      tokens.push_back(d.ids[k]);
      flags.push_back(static_cast<uint8_t>((k == 0 ? kFlagDocStart : 0) | (d.target[k] ? kFlagTarget : 0)));
    }
  write_labeled_shard(path, tokens, flags, pack, pad);
}

struct Batch {
  std::vector<int32_t> x, y, p;
  bool operator==(const Batch& o) const { return x == o.x && y == o.y && p == o.p; }
};

Batch next(DataLoader& l, int B, int T) {
  Batch b{std::vector<int32_t>(static_cast<size_t>(B * T)), std::vector<int32_t>(static_cast<size_t>(B * T)),
          std::vector<int32_t>(static_cast<size_t>(B * T))};
  l.next_batch(b.x.data(), b.y.data(), b.p.data());
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
  o.seed = 9;
  return o;
}

// D0: a prompt (10 11) and a completion (12 13); D1: 20 | 21 22; D2: 30 31 32 | 33 34; D3: 40..59,
// all targets, longer than a row of T + 1 = 9; D4: 60 | 61.
std::vector<Doc> hand_docs() {
  Doc d3;
  for (uint32_t t = 40; t < 60; ++t) {
    d3.ids.push_back(t);
    d3.target.push_back(1);
  }
  return {{{10, 11, 12, 13}, {0, 0, 1, 1}},
          {{20, 21, 22}, {0, 1, 1}},
          {{30, 31, 32, 33, 34}, {0, 0, 0, 1, 1}},
          d3,
          {{60, 61}, {0, 1}}};
}

void expect_row(const Batch& b, const std::vector<int32_t>& x, const std::vector<int32_t>& y,
                const std::vector<int32_t>& p, const char* what) {
  CHECK_MSG(b.x == x, "%s inputs", what);
  CHECK_MSG(b.y == y, "%s targets", what);
  CHECK_MSG(b.p == p, "%s positions", what);
}

void test_hand_packed(const std::string& dir) {
  const std::string path = dir + "/hand_packed.bin";
  write_docs(path, hand_docs(), true, 7);
  const ShardInfo info = inspect_shard(path);
  CHECK(info.labeled && info.pack && info.pad_id == 7 && info.num_tokens == 34 && info.documents == 5);
  CHECK(info.targets == 2 + 2 + 2 + 19 + 1);  // D3's first token is a document start, never a target
  CHECK(std::filesystem::file_size(path) == 1024 + 34 * 2 + 34);
  DataLoader l(options(path, 1, 8));
  CHECK(l.has_labels() && l.labeled_rows() == 5 && l.batches_per_epoch() == 5);
  // Row 0: D0 + D1, 2 pad slots. The last token of D0 does not predict D1's first (a boundary).
  expect_row(next(l, 1, 8), {10, 11, 12, 13, 20, 21, 22, 7}, {X, 12, 13, X, 21, 22, X, X},
             {0, 1, 2, 3, 0, 1, 2, 0}, "row 0");
  // Row 1: D2 alone: D3's first piece (9 tokens) does not fit after it.
  expect_row(next(l, 1, 8), {30, 31, 32, 33, 34, 7, 7, 7}, {X, X, 33, 34, X, X, X, X},
             {0, 1, 2, 3, 4, 0, 1, 2}, "row 1");
  // Rows 2-4: D3 in pieces [40, 49), [48, 57), [56, 60) overlapping by one token, positions
  // restarting; every token 41..59 is a target exactly once. Row 4 then packs D4.
  expect_row(next(l, 1, 8), {40, 41, 42, 43, 44, 45, 46, 47}, {41, 42, 43, 44, 45, 46, 47, 48},
             {0, 1, 2, 3, 4, 5, 6, 7}, "row 2");
  expect_row(next(l, 1, 8), {48, 49, 50, 51, 52, 53, 54, 55}, {49, 50, 51, 52, 53, 54, 55, 56},
             {0, 1, 2, 3, 4, 5, 6, 7}, "row 3");
  expect_row(next(l, 1, 8), {56, 57, 58, 59, 60, 61, 7, 7}, {57, 58, 59, X, 61, X, X, X},
             {0, 1, 2, 3, 0, 1, 0, 1}, "row 4");
  CHECK(l.epoch() == 1);
  expect_row(next(l, 1, 8), {10, 11, 12, 13, 20, 21, 22, 7}, {X, 12, 13, X, 21, 22, X, X},
             {0, 1, 2, 3, 0, 1, 2, 0}, "epoch 2, row 0");
  // The plan itself.
  const PackPlan plan = plan_rows({0, 4, 7, 12, 32}, 34, 8, true);
  CHECK(plan.rows() == 5 && plan.split_documents == 1 && plan.padding == 2 + 4 + 0 + 0 + 3);
  // The two-array next_batch refuses labeled data rather than dropping the masks.
  std::vector<int32_t> a(8), b(8);
  CHECK_THROWS(l.next_batch(a.data(), b.data()), "must be read with next_batch(inputs, targets, positions)");
}

void test_hand_unpacked(const std::string& dir) {
  const std::string path = dir + "/hand_rows.bin";
  write_docs(path, hand_docs(), false, 5);
  DataLoader l(options(path, 2, 8));
  CHECK(l.labeled_rows() == 7 && l.batches_per_epoch() == 3);  // D0 D1 D2 3xD3 D4: 7 rows, 3 batches of 2
  const Batch b0 = next(l, 2, 8);
  expect_row({std::vector<int32_t>(b0.x.begin(), b0.x.begin() + 8),
              std::vector<int32_t>(b0.y.begin(), b0.y.begin() + 8),
              std::vector<int32_t>(b0.p.begin(), b0.p.begin() + 8)},
             {10, 11, 12, 13, 5, 5, 5, 5}, {X, 12, 13, X, X, X, X, X}, {0, 1, 2, 3, 0, 1, 2, 3},
             "no-pack row 0");
  expect_row(
      {std::vector<int32_t>(b0.x.begin() + 8, b0.x.end()), std::vector<int32_t>(b0.y.begin() + 8, b0.y.end()),
       std::vector<int32_t>(b0.p.begin() + 8, b0.p.end())},
      {20, 21, 22, 5, 5, 5, 5, 5}, {21, 22, X, X, X, X, X, X}, {0, 1, 2, 0, 1, 2, 3, 4}, "no-pack row 1");
  next(l, 2, 8);
  const Batch b2 = next(l, 2, 8);  // rows 4 and 5: D3's second and third pieces
  CHECK(b2.x[0] == 48 && b2.y[7] == 56 && b2.x[8] == 56 && b2.y[8] == 57 && b2.y[10] == 59 && b2.y[11] == X);
  CHECK(l.epoch() == 1);  // row 6 (D4) is the tail that does not fill a batch of 2
}

// A larger random dataset: documents of 1..40 tokens, random targets; tokens encode their place.
void make_random(const std::string& dir, int shards, uint64_t seed) {
  Rng rng(seed);
  for (int s = 0; s < shards; ++s) {
    std::vector<Doc> docs;
    for (int d = 0; d < 60 + 17 * s; ++d) {
      Doc doc;
      const int len = 1 + static_cast<int>(rng.below(40));
      for (int k = 0; k < len; ++k) {
        doc.ids.push_back(static_cast<uint32_t>(s * 100000 + d * 100 + k));
        doc.target.push_back(rng.below(3) != 0);
      }
      docs.push_back(doc);
    }
    char name[32];
    std::snprintf(name, sizeof name, "/train_%03d.bin", s);
    write_docs(dir + name, docs, s != 1, 99999);  // shard 1 unpacked: mixed modes in one dataset
  }
}

void test_ranks_and_shuffle(const std::string& dir) {
  const std::string d = dir + "/random";
  std::filesystem::create_directories(d);
  make_random(d, 3, 5);
  const std::string glob = d + "/train_*.bin";
  for (bool shuffle : {false, true}) {
    DataLoader one(options(glob, 6, 16, shuffle));
    std::vector<std::unique_ptr<DataLoader>> ranks;
    for (int r = 0; r < 3; ++r)
      ranks.push_back(std::make_unique<DataLoader>(options(glob, 2, 16, shuffle, r, 3)));
    bool same = true;
    const int64_t steps = 2 * one.batches_per_epoch() + 3;
    for (int64_t i = 0; i < steps; ++i) {
      const Batch all = next(one, 6, 16);
      for (int r = 0; r < 3; ++r) {
        const Batch part = next(*ranks[static_cast<size_t>(r)], 2, 16);
        const size_t at = static_cast<size_t>(r) * 2 * 16;
        same = same && std::equal(part.x.begin(), part.x.end(), all.x.begin() + static_cast<long>(at)) &&
               std::equal(part.y.begin(), part.y.end(), all.y.begin() + static_cast<long>(at)) &&
               std::equal(part.p.begin(), part.p.end(), all.p.begin() + static_cast<long>(at));
      }
    }
    CHECK_MSG(same, "3 ranks x 2 rows == 1 process x 6 rows (shuffle=%d)", shuffle);
    CHECK(ranks[0]->batches_per_epoch() == one.batches_per_epoch());
  }
  // Shuffling permutes rows: an epoch sees the same rows (up to the dropped tail) in another order.
  auto first_tokens = [&](bool shuffle, int epochs) {
    DataLoader l(options(glob, 1, 16, shuffle));
    std::vector<std::vector<int32_t>> rows;
    for (int64_t i = 0; i < epochs * l.batches_per_epoch(); ++i) rows.push_back(next(l, 1, 16).x);
    return rows;
  };
  const auto plain = first_tokens(false, 1), mixed = first_tokens(true, 2);
  const std::vector<std::vector<int32_t>> e1(mixed.begin(), mixed.begin() + static_cast<long>(plain.size())),
      e2(mixed.begin() + static_cast<long>(plain.size()), mixed.end());
  CHECK(e1 != plain && e1 != e2);
  auto sorted = [](std::vector<std::vector<int32_t>> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  CHECK(sorted(e1) == sorted(plain) && sorted(e2) == sorted(plain));  // B = 1: no tail is dropped
  // Every target of every row is the next input token of the same document piece.
  DataLoader l(options(glob, 4, 16));
  bool consistent = true;
  for (int64_t i = 0; i < l.batches_per_epoch(); ++i) {
    const Batch b = next(l, 4, 16);
    for (size_t t = 0; t < b.x.size(); ++t) {
      if (b.y[t] == X) continue;
      consistent = consistent && b.y[t] == b.x[t] + 1 && (t % 16 == 15 || b.p[t + 1] == b.p[t] + 1);
    }
  }
  CHECK(consistent);
}

void test_cursor(const std::string& dir) {
  const std::string glob = dir + "/random/train_*.bin";
  for (bool shuffle : {false, true}) {
    const LoaderOptions o = options(glob, 3, 12, shuffle);
    DataLoader a(o);
    const int64_t per_epoch = a.batches_per_epoch();
    for (int64_t save_at : {int64_t{3}, per_epoch - 1, per_epoch, per_epoch + 7}) {
      a.reset();
      for (int64_t i = 0; i < save_at; ++i) next(a, 3, 12);
      const std::vector<int64_t> cur = a.cursor();
      std::vector<Batch> expect;
      for (int i = 0; i < 30; ++i) expect.push_back(next(a, 3, 12));
      DataLoader b(o);
      b.set_cursor(cur);
      bool same = true;
      for (int i = 0; i < 30; ++i) same = same && next(b, 3, 12) == expect[static_cast<size_t>(i)];
      CHECK_MSG(same, "labeled cursor at %lld (shuffle=%d)", static_cast<long long>(save_at), shuffle);
    }
    // Another T re-packs the documents: the cursor is refused.
    DataLoader other(options(glob, 3, 10, shuffle));
    CHECK_THROWS(other.set_cursor(a.cursor()), "global micro-batch");
  }
}

void test_llmc_positions(const std::string& dir) {
  std::vector<uint32_t> t(400);
  for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<uint32_t>(i * 7 % 1000);
  write_shard(dir + "/plain.bin", t);
  DataLoader two(options(dir + "/plain.bin", 2, 10, true)), three(options(dir + "/plain.bin", 2, 10, true));
  CHECK(!three.has_labels() && three.labeled_rows() == 0);
  bool same = true;
  for (int i = 0; i < 30; ++i) {
    std::vector<int32_t> x(20), y(20);
    two.next_batch(x.data(), y.data());
    const Batch b = next(three, 2, 10);
    same = same && b.x == x && b.y == y;
    for (int k = 0; k < 20; ++k)
      same = same && b.p[static_cast<size_t>(k)] == k % 10 && b.y[static_cast<size_t>(k)] != X;
  }
  CHECK(same);
}

void test_damage(const std::string& dir) {
  const std::string path = dir + "/hand_packed.bin";
  std::string bytes = data_test::read_bytes(path);
  // A flag byte with an unknown bit, a flag count off the header, a width that is not 2 or 4, a
  // truncated file: each is a data error naming the file.
  std::string bad = bytes;
  bad[1024 + 34 * 2 + 5] = 0x10;
  data_test::write_bytes(dir + "/bits.bin", bad);
  CHECK_THROWS(DataLoader(options(dir + "/bits.bin", 1, 8)), "unknown flag bits");
  bad = bytes;
  bad[1024 + 34 * 2 + 6] = 0;  // D1's start flag cleared: 4 documents marked, 5 in the header
  data_test::write_bytes(dir + "/count.bin", bad);
  CHECK_THROWS(DataLoader(options(dir + "/count.bin", 1, 8)), "the header counts 5 documents");
  bad = bytes;
  bad[12] = 3;
  data_test::write_bytes(dir + "/width.bin", bad);
  CHECK_THROWS(inspect_shard(dir + "/width.bin"), "token width 3 (header[3]) must be 2 or 4");
  data_test::write_bytes(dir + "/short.bin", bytes.substr(0, bytes.size() - 1));
  CHECK_THROWS(inspect_shard(dir + "/short.bin"), "size 1,125 != 1,024 + 3 x 34 tokens = 1,126 bytes");
  // Too few rows for one batch.
  CHECK_THROWS(DataLoader(options(path, 4, 8, false, 0, 2)),
               "fill 5 rows of T + 1 = 9 tokens, fewer than one batch");
  // The writer: flags must match the tokens, and the first token must start a document.
  CHECK_THROWS(write_labeled_shard(dir + "/w.bin", {1, 2}, {kFlagDocStart}, true, 0), "1 flags for 2 tokens");
  CHECK_THROWS(write_labeled_shard(dir + "/w.bin", {1, 2}, {0, kFlagDocStart}, true, 0),
               "first token must start");
}

}  // namespace

int main() {
  const std::string dir = data_test::scratch("data_labeled");
  test_hand_packed(dir);
  test_hand_unpacked(dir);
  test_ranks_and_shuffle(dir);
  test_cursor(dir);
  test_llmc_positions(dir);
  test_damage(dir);
  std::filesystem::remove_all(dir);
  return flotilla_test::summary("data_labeled");
}
