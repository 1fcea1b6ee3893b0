// DataLoader::set_cursor(cursor, regroup = true): a cursor saved with one global micro-batch
// (parallel.dp x train.micro_batch rows) continues, in a loader with another, at the same sequence,
// so a resume on another layout neither repeats nor skips a row. Checked row by row against one
// process reading one row at a time, across shard boundaries and an epoch wrap:
//   - llm.c shards whose sizes leave no remainder for any grouping used (each 8k + 1 tokens):
//     dp 4 -> 2, 2 -> 1, 1 -> 4, 4 x B1 -> 1 x B4 (every rank's rows, in rank order);
//   - labeled shards (one document per row) with shuffling: the row order depends only on seed,
//     epoch and shard, so dp 4 -> 2 continues the shuffled order too;
//   - refused, saying what to keep: a position that is not a whole micro-batch of the new grouping,
//     shuffled llm.c shards (their permutation is of whole micro-batches), and any other grouping
//     without regroup (the loader's old contract).
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "engine/core/error.h"
#include "engine/data/loader.h"
#include "test_data_util.h"

using namespace flotilla;

namespace {

constexpr int kT = 8;

LoaderOptions options(const std::string& pattern, int world, int rank, int B, bool shuffle) {
  LoaderOptions o;
  o.pattern = pattern;
  o.B = B;
  o.T = kT;
  o.world = world;
  o.rank = rank;
  o.shuffle = shuffle;
  o.seed = 9;
  return o;
}

using Row = std::vector<int32_t>;

// One grouping: `world` loaders in lock step; a global micro-batch is every rank's rows in rank order.
struct Group {
  std::vector<std::unique_ptr<DataLoader>> ranks;
  int B = 1;
  Group(const std::string& pattern, int world, int B_, bool shuffle) : B(B_) {
    for (int r = 0; r < world; ++r)
      ranks.push_back(std::make_unique<DataLoader>(options(pattern, world, r, B, shuffle)));
  }
  void next(std::vector<Row>& out) {
    std::vector<int32_t> x(static_cast<size_t>(B * kT)), y(x.size()), p(x.size());
    for (auto& l : ranks) {
      l->next_batch(x.data(), y.data(), p.data());
      for (int j = 0; j < B; ++j) out.emplace_back(x.begin() + j * kT, x.begin() + (j + 1) * kT);
    }
  }
  int rows() const { return static_cast<int>(ranks.size()) * B; }
};

std::vector<Row> reference(const std::string& pattern, bool shuffle, size_t count) {
  Group one(pattern, 1, 1, shuffle);
  std::vector<Row> rows;
  while (rows.size() < count) one.next(rows);
  return rows;
}

// Saves grouping `a` after `samples` of its micro-batches, regroups into `b`, and checks b's next
// rows against the reference from that row on.
void check(const std::string& pattern, bool shuffle, int wa, int ba, int wb, int bb, int samples,
           const std::vector<Row>& ref) {
  Group a(pattern, wa, ba, shuffle);
  std::vector<Row> seen;
  for (int i = 0; i < samples; ++i) a.next(seen);
  const std::vector<int64_t> cursor = a.ranks[0]->cursor();
  Group b(pattern, wb, bb, shuffle);
  for (auto& l : b.ranks) l->set_cursor(cursor, true);
  for (int i = 0; i < 40; ++i) b.next(seen);
  bool same = seen.size() <= ref.size();
  for (size_t i = 0; same && i < seen.size(); ++i) same = seen[i] == ref[i];
  CHECK_MSG(same, "%d x B%d -> %d x B%d after %d micro-batches (shuffle %d): rows differ from one process",
            wa, ba, wb, bb, samples, shuffle);
}

}  // namespace

int main() {
  const std::string dir = data_test::scratch("data_regroup");
  const std::vector<int> even = {321, 225, 257};
  for (size_t s = 0; s < even.size(); ++s) {
    std::vector<uint32_t> t(static_cast<size_t>(even[s]));
    for (int i = 0; i < even[s]; ++i) t[static_cast<size_t>(i)] = static_cast<uint32_t>(3000 + 1000 * s + i);
    write_shard(dir + "/even_" + std::to_string(s) + ".bin", t);
  }
  const std::string pattern = dir + "/even_*.bin";
  const std::vector<Row> ref = reference(pattern, false, 800);
  // 100 rows an epoch (40 + 28 + 32): boundaries at rows 40, 68, 100.
  for (int samples : {3, 10, 17, 25, 27}) check(pattern, false, 4, 1, 2, 1, samples, ref);
  for (int samples : {5, 20, 34, 50, 57}) check(pattern, false, 2, 1, 1, 1, samples, ref);
  for (int samples : {4, 40, 68, 100, 104}) check(pattern, false, 1, 1, 4, 1, samples, ref);
  // Past the shard's length in the new micro-batches, not in the saved ones (a 1-rank run stopped in
  // the second half of a shard, resumed on 4 ranks: once refused as "past the end of shard").
  for (int samples : {20, 60, 92}) check(pattern, false, 1, 1, 4, 1, samples, ref);
  for (int samples : {7, 10, 25}) check(pattern, false, 4, 1, 1, 4, samples, ref);
  for (int samples : {6, 14}) check(pattern, false, 2, 2, 4, 1, samples, ref);

  // Not a whole micro-batch of the new grouping: 3 rows into 2-row micro-batches.
  {
    Group a(pattern, 1, 1, false);
    std::vector<Row> rows;
    for (int i = 0; i < 3; ++i) a.next(rows);
    DataLoader b(options(pattern, 2, 0, 1, false));
    CHECK_THROWS(b.set_cursor(a.ranks[0]->cursor(), true),
                 "not on a boundary of this run's global micro-batch");
    CHECK_THROWS(b.set_cursor(a.ranks[0]->cursor(), true), "keep parallel.dp x train.micro_batch = 1");
    CHECK(b.cursor() == DataLoader(options(pattern, 2, 0, 1, false)).cursor());  // left where it was
    // Without regroup: the loader's old contract, another grouping is refused.
    CHECK_THROWS(b.set_cursor(a.ranks[0]->cursor()), "global micro-batch");
  }
  // Shuffled llm.c shards: the permutation is of whole micro-batches.
  {
    Group a(pattern, 2, 1, true);
    std::vector<Row> rows;
    for (int i = 0; i < 4; ++i) a.next(rows);
    DataLoader b(options(pattern, 1, 0, 1, true));
    CHECK_THROWS(b.set_cursor(a.ranks[0]->cursor(), true), "with data.shuffle = true");
    DataLoader same(options(pattern, 1, 0, 2, true));  // the same global micro-batch: accepted
    same.set_cursor(a.ranks[0]->cursor(), true);
    CHECK(same.cursor() == a.ranks[0]->cursor());
  }
  // Labeled shards, one document per row, shuffled: 16 and 12 rows.
  {
    for (int s = 0; s < 2; ++s) {
      std::vector<uint32_t> tokens;
      std::vector<uint8_t> flags;
      for (int d = 0; d < (s == 0 ? 16 : 12); ++d)
        for (int k = 0; k < 5; ++k) {
          tokens.push_back(static_cast<uint32_t>(100 * s + 5 * d + k));
          flags.push_back(static_cast<uint8_t>(k == 0 ? kFlagDocStart : kFlagTarget));
        }
      write_labeled_shard(dir + "/sft_" + std::to_string(s) + ".bin", tokens, flags, false, 0);
    }
    const std::string sft = dir + "/sft_*.bin";
    const std::vector<Row> sref = reference(sft, true, 300);
    for (int samples : {2, 4, 7, 9}) check(sft, true, 4, 1, 2, 1, samples, sref);
    for (int samples : {3, 8, 14}) check(sft, true, 2, 1, 4, 1, samples * 2, sref);
  }
  return flotilla_test::summary("data_regroup");
}
