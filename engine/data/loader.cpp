// DataLoader: llm.c's batch layout over token shards (read with pread: ShardFile), packed rows of labeled
// shards, rank slicing, seeded shuffling and a resumable cursor.
//
// One non-obvious decision: the shuffle permutations are pure functions of (seed, epoch, shard),
// not draws from one running RNG as in llm.c. The cursor is then just (epoch, shard position,
// sample position) — no RNG state to save — and set_cursor() rebuilds the permutations exactly.
// A "sample" is one *global* micro-batch of world x B x T tokens (+1 for the shifted target), so
// every rank agrees on sample boundaries, shard changes and epochs, and W ranks with B rows each
// read exactly what one process with W x B rows reads (docs/data.md "Loader order"). For a labeled
// shard the packing plan is rebuilt from its flags at start-up (a pure function of the document
// lengths and T), a sample is W x B consecutive rows of it, and shuffling permutes rows.
#include <algorithm>
#include <numeric>

#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/data/loader.h"
#include "engine/data/packing.h"
#include "engine/data/shard_map.h"

namespace flotilla {

namespace {

constexpr int64_t kCursorTag = 0x464C4454;  // "FLDT"
constexpr int64_t kCursorVersion = 1;
constexpr size_t kCursorSize = 10;

uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t x = seed ^ (a * 0x9E3779B97F4A7C15ull) ^ (b * 0xD1B54A32D192ED03ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return x;
}

template <typename T>
void fisher_yates(std::vector<T>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.below(i));
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace

struct DataLoader::Impl {
  LoaderOptions opt;
  std::vector<ShardInfo> shards;
  std::vector<int64_t> samples;  // per shard (file order): global micro-batches it holds
  std::vector<PackPlan> plans;   // per shard: the rows of a labeled shard (empty for llm.c shards)
  bool any_labeled = false;
  int64_t labeled_rows = 0;
  int64_t local_tokens = 0;   // B*T
  int64_t global_tokens = 0;  // world*B*T
  int64_t total = 0;
  int64_t per_epoch = 0;  // sum of samples

  // Position: the next batch reads sample `sample_pos` of the shard at `shard_pos` in this epoch's order.
  int64_t epoch = 0;
  int64_t shard_pos = 0;
  int64_t sample_pos = 0;
  std::vector<int> shard_order;  // epoch's shard order (file indices)
  std::vector<int64_t>
      sample_order;  // current shard's sample order (llm.c) or row order (labeled); shuffle only
  ShardFile mapped;  // read with pread, never mapped: see ShardFile
  int mapped_index = -1;
  std::vector<int32_t> window;  // one batch's B*T + 1 tokens
  std::vector<uint8_t> seg_flags;

  void build_orders() {
    shard_order.resize(shards.size());
    std::iota(shard_order.begin(), shard_order.end(), 0);
    if (opt.shuffle) {
      Rng rng(mix_seed(opt.seed, static_cast<uint64_t>(epoch), 0));
      fisher_yates(shard_order, rng);
    }
    build_sample_order();
  }

  void build_sample_order() {
    sample_order.clear();
    if (!opt.shuffle) return;
    const int shard = shard_order[static_cast<size_t>(shard_pos)];
    const auto s = static_cast<size_t>(shard);
    sample_order.resize(static_cast<size_t>(shards[s].labeled ? plans[s].rows() : samples[s]));
    std::iota(sample_order.begin(), sample_order.end(), int64_t{0});
    Rng rng(mix_seed(opt.seed, static_cast<uint64_t>(epoch), static_cast<uint64_t>(shard) + 1));
    fisher_yates(sample_order, rng);
  }

  // Moves past the sample just read; crosses to the next shard / epoch eagerly so the cursor is canonical.
  void advance() {
    ++sample_pos;
    if (sample_pos < samples[static_cast<size_t>(shard_order[static_cast<size_t>(shard_pos)])]) return;
    sample_pos = 0;
    ++shard_pos;
    if (shard_pos == static_cast<int64_t>(shards.size())) {
      shard_pos = 0;
      ++epoch;
      build_orders();
    } else {
      build_sample_order();
    }
  }

  void map_current() {
    const int shard = shard_order[static_cast<size_t>(shard_pos)];
    if (mapped_index == shard) return;
    mapped = ShardFile();  // close the old shard before opening the next
    mapped = ShardFile(shards[static_cast<size_t>(shard)].path);
    if (mapped.size() != shards[static_cast<size_t>(shard)].num_tokens)
      throw_data("shard " + mapped.info().path + ": changed since it was validated (" +
                 group_digits(shards[static_cast<size_t>(shard)].num_tokens) + " tokens then, " +
                 group_digits(mapped.size()) + " now); restart the run");
    mapped_index = shard;
  }

  // Checked mode: tokens[0, count) were read from token offset `start`; each must be < vocab_size.
  void check_range(int64_t start, const int32_t* tokens, int64_t count) const {
    if (!opt.checked || opt.vocab_size <= 0) return;
    for (int64_t i = 0; i < count; ++i)
      if (static_cast<uint32_t>(tokens[i]) >= static_cast<uint32_t>(opt.vocab_size))
        throw_token_out_of_range(mapped.info(), start + i, static_cast<uint32_t>(tokens[i]), opt.vocab_size);
  }

  // llm.c shards: the B*T + 1 tokens of this rank's slot of the current sample; inputs are the
  // first B*T, targets the B*T after the first.
  void read_window(int32_t* inputs, int32_t* targets) {
    const int64_t sample = opt.shuffle ? sample_order[static_cast<size_t>(sample_pos)] : sample_pos;
    const int64_t start = sample * global_tokens + opt.rank * local_tokens;
    window.resize(static_cast<size_t>(local_tokens) + 1);
    mapped.read(start, local_tokens + 1, window.data());
    check_range(start, window.data(), local_tokens + 1);
    std::copy(window.begin(), window.end() - 1, inputs);
    std::copy(window.begin() + 1, window.end(), targets);
  }

  // One row of a labeled shard: its segments, then padding (a run of pad tokens positioned 0, 1, ...).
  void fill_row(const PackPlan& plan, int64_t row, int32_t* inputs, int32_t* targets, int32_t* positions) {
    const int T = opt.T;
    row_tokens.resize(static_cast<size_t>(T) + 1);
    row_target.resize(static_cast<size_t>(T) + 1);
    row_pos.resize(static_cast<size_t>(T) + 1);
    size_t slot = 0;
    for (int64_t s = plan.row_begin[static_cast<size_t>(row)];
         s < plan.row_begin[static_cast<size_t>(row) + 1]; ++s) {
      const PackedSegment& seg = plan.segments[static_cast<size_t>(s)];
      mapped.read(seg.begin, seg.length, row_tokens.data() + slot);
      check_range(seg.begin, row_tokens.data() + slot, seg.length);
      seg_flags.resize(static_cast<size_t>(seg.length));
      mapped.read_flags(seg.begin, seg.length, seg_flags.data());
      for (int32_t k = 0; k < seg.length; ++k, ++slot) {
        row_pos[slot] = k;
        row_target[slot] = k > 0 && (seg_flags[static_cast<size_t>(k)] & kFlagTarget);
      }
    }
    const ShardInfo& info = mapped.info();
    if (slot <= static_cast<size_t>(T) && opt.checked && opt.vocab_size > 0 &&
        info.pad_id >= static_cast<uint32_t>(opt.vocab_size))
      throw_data("shard " + info.path + ": pad id " + group_digits(info.pad_id) + " >= vocab size " +
                 group_digits(opt.vocab_size) + ": the shard was made with a different tokenizer");
    for (int32_t k = 0; slot <= static_cast<size_t>(T); ++k, ++slot) {
      row_tokens[slot] = static_cast<int32_t>(info.pad_id);
      row_pos[slot] = k;
      row_target[slot] = 0;
    }
    // inputs = slots [0, T), targets = slots [1, T] where they are loss targets (each 1 x T).
    for (int t = 0; t < T; ++t) {
      inputs[t] = row_tokens[static_cast<size_t>(t)];
      positions[t] = row_pos[static_cast<size_t>(t)];
      targets[t] =
          row_target[static_cast<size_t>(t) + 1] ? row_tokens[static_cast<size_t>(t) + 1] : kIgnoreTarget;
    }
  }

  std::vector<int32_t> row_tokens, row_pos;
  std::vector<uint8_t> row_target;

  // The position was saved with a global micro-batch of `saved_tokens` (another parallel.dp or
  // train.micro_batch): re-expresses it in this loader's micro-batches. Sequences are read in the
  // same order whatever the grouping (llm.c shards: consecutive windows of the shard; labeled
  // shards: the shard's row order, whose shuffle depends only on seed, epoch and shard), so the
  // position converts exactly when it falls on a boundary of this loader's micro-batches. A
  // shuffled llm.c shard permutes whole micro-batches, so there the grouping must stay the same.
  void regroup(int64_t saved_tokens) {
    const auto shard = static_cast<size_t>(shard_order[static_cast<size_t>(shard_pos)]);
    const bool rows = shards[shard].labeled;
    const int64_t saved_rows = saved_tokens / opt.T, rows_now = global_tokens / opt.T;
    const std::string keep = "keep parallel.dp x train.micro_batch = " + std::to_string(saved_rows) +
                             " (the checkpoint's global micro-batch of " + group_digits(saved_tokens) +
                             " tokens; this run's is " + std::to_string(opt.world) + " x " +
                             std::to_string(opt.B) + " = " + std::to_string(rows_now) + " sequences)";
    if (!rows && opt.shuffle)
      throw_config("data cursor: with data.shuffle = true the order of " + shards[shard].path +
                   " is a permutation of whole global micro-batches, so it continues only with the same "
                   "global micro-batch: " +
                   keep);
    const int64_t unit_saved = rows ? saved_rows : saved_tokens;  // rows or tokens of the shard
    const int64_t unit_now = rows ? rows_now : global_tokens;
    const int64_t at = sample_pos * unit_saved;
    if (at % unit_now != 0)
      throw_config("data cursor: the checkpoint stopped after " + group_digits(at) +
                   (rows ? " rows" : " tokens") + " of " + shards[shard].path +
                   ", not on a boundary of this run's global micro-batch of " + group_digits(unit_now) +
                   (rows ? " rows" : " tokens") + ": " + keep);
    sample_pos = at / unit_now;
    if (sample_pos >= samples[shard]) {  // what is left of the shard is less than one micro-batch now
      sample_pos = samples[shard] - 1;
      advance();
    }
  }
};

namespace {

// Document starts of a labeled shard from its flags, checked against the header's counts.
std::vector<int64_t> document_starts(const ShardInfo& info) {
  const ShardFile shard(info.path);
  std::vector<int64_t> starts;
  int64_t targets = 0;
  constexpr int64_t kChunk = 1 << 20;
  std::vector<uint8_t> flags;
  for (int64_t at = 0; at < shard.size(); at += kChunk) {
    const int64_t n = std::min(kChunk, shard.size() - at);
    flags.resize(static_cast<size_t>(n));
    shard.read_flags(at, n, flags.data());
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t f = flags[static_cast<size_t>(j)];
      const int64_t i = at + j;
      if (f & ~(kFlagTarget | kFlagDocStart))
        throw_data("shard " + info.path + ": token " + group_digits(i) + " has unknown flag bits " +
                   std::to_string(f) + ": damaged or from a newer flotilla-worker; re-run data prepare");
      if (f & kFlagDocStart) starts.push_back(i);
      targets += (f & kFlagTarget) != 0;
    }
  }
  if (shard.size() > 0 && (starts.empty() || starts[0] != 0))
    throw_data("shard " + info.path + ": its first token starts no document: damaged; re-run data prepare");
  if (static_cast<int64_t>(starts.size()) != info.documents || targets != info.targets)
    throw_data("shard " + info.path + ": the header counts " + group_digits(info.documents) +
               " documents and " + group_digits(info.targets) + " targets but the flags mark " +
               group_digits(static_cast<int64_t>(starts.size())) + " and " + group_digits(targets) +
               ": damaged; re-run data prepare");
  return starts;
}

}  // namespace

DataLoader::DataLoader(const LoaderOptions& options) : impl_(new Impl) {
  Impl& d = *impl_;
  d.opt = options;
  try {
    if (options.B <= 0 || options.T <= 0)
      throw_config("data loader: micro-batch " + std::to_string(options.B) + " x sequence length " +
                   std::to_string(options.T) + " must both be positive");
    if (options.world <= 0 || options.rank < 0 || options.rank >= options.world)
      throw_config("data loader: rank " + std::to_string(options.rank) +
                   " is outside the data-parallel world of " + std::to_string(options.world));
    d.local_tokens = static_cast<int64_t>(options.B) * options.T;
    d.global_tokens = d.local_tokens * options.world;
    const bool scan = options.checked && options.vocab_size > 0;
    const int64_t global_rows = static_cast<int64_t>(options.world) * options.B;
    for (const std::string& path : expand_shards(options.pattern)) {
      ShardInfo info = inspect_shard(path, options.vocab_size, scan);
      PackPlan plan;
      int64_t n = 0;
      if (info.labeled) {
        plan = plan_rows(document_starts(info), info.num_tokens, options.T, info.pack);
        n = plan.rows() / global_rows;
        if (n == 0)
          throw_data("shard " + path + ": its " + group_digits(info.documents) + " documents fill " +
                     group_digits(plan.rows()) + " rows of T + 1 = " + group_digits(options.T + 1) +
                     " tokens, fewer than one batch of world x B = " + std::to_string(options.world) + " x " +
                     std::to_string(options.B) + " = " + group_digits(global_rows) +
                     " rows; lower train.micro_batch, or prepare more data into fewer shards");
        d.any_labeled = true;
        d.labeled_rows += plan.rows();
      } else {
        n = (info.num_tokens - 1) / d.global_tokens;
        if (info.num_tokens < d.global_tokens + 1)
          throw_data("shard " + path + ": " + group_digits(info.num_tokens) +
                     " tokens are too few for one batch, which reads world x B x T + 1 = " +
                     std::to_string(options.world) + " x " + std::to_string(options.B) + " x " +
                     std::to_string(options.T) + " + 1 = " + group_digits(d.global_tokens + 1) +
                     " tokens; lower train.micro_batch or train.seq_len, or use larger shards");
      }
      d.total += info.num_tokens;
      d.per_epoch += n;
      d.samples.push_back(n);
      d.plans.push_back(std::move(plan));
      d.shards.push_back(std::move(info));
    }
    d.build_orders();
  } catch (...) {
    delete impl_;
    throw;
  }
}

DataLoader::~DataLoader() { delete impl_; }

void DataLoader::next_batch(int32_t* inputs, int32_t* targets) {
  Impl& d = *impl_;
  if (d.any_labeled)
    throw_data("the data has labeled shards (loss masks and document boundaries, e.g. " + d.shards[0].path +
               "); they must be read with next_batch(inputs, targets, positions)");
  d.map_current();
  // inputs = tokens[start, start+BT), targets = tokens[start+1, start+BT+1)  (each B x T, row-major)
  d.read_window(inputs, targets);
  d.advance();
}

void DataLoader::next_batch(int32_t* inputs, int32_t* targets, int32_t* positions) {
  Impl& d = *impl_;
  d.map_current();
  const auto shard = static_cast<size_t>(d.shard_order[static_cast<size_t>(d.shard_pos)]);
  if (!d.shards[shard].labeled) {
    d.read_window(inputs, targets);
    for (int64_t i = 0; i < d.local_tokens; ++i) positions[i] = static_cast<int32_t>(i % d.opt.T);
    d.advance();
    return;
  }
  // Rows [sample x W x B + rank x B, + B) of this shard's (shuffled) row order, each B x T.
  const int64_t first = d.sample_pos * d.opt.world * d.opt.B + static_cast<int64_t>(d.opt.rank) * d.opt.B;
  for (int j = 0; j < d.opt.B; ++j) {
    const int64_t slot = first + j;
    const int64_t row = d.opt.shuffle ? d.sample_order[static_cast<size_t>(slot)] : slot;
    const size_t at = static_cast<size_t>(j) * static_cast<size_t>(d.opt.T);
    d.fill_row(d.plans[shard], row, inputs + at, targets + at, positions + at);
  }
  d.advance();
}

void DataLoader::reset() {
  Impl& d = *impl_;
  d.epoch = 0;
  d.shard_pos = 0;
  d.sample_pos = 0;
  d.build_orders();
}

std::vector<int64_t> DataLoader::cursor() const {
  const Impl& d = *impl_;
  return {kCursorTag,
          kCursorVersion,
          d.epoch,
          d.shard_pos,
          d.sample_pos,
          d.global_tokens,
          static_cast<int64_t>(d.shards.size()),
          d.total,
          d.opt.shuffle ? 1 : 0,
          static_cast<int64_t>(d.opt.seed)};
}

void DataLoader::set_cursor(const std::vector<int64_t>& c, bool regroup) {
  Impl& d = *impl_;
  if (c.size() != kCursorSize || c[0] != kCursorTag || c[1] != kCursorVersion)
    throw_checkpoint("data cursor: not a cursor of this data loader (" + std::to_string(c.size()) +
                     " values); the checkpoint's trainer state is damaged or from another engine version");
  if (c[5] != d.global_tokens && (!regroup || c[5] <= 0 || c[5] % d.opt.T != 0))
    throw_config("data cursor: saved with a global micro-batch of " + group_digits(c[5]) +
                 " tokens (data-parallel size x B x T) but this run reads " + group_digits(d.global_tokens) +
                 "; resume with the same train.micro_batch x train.seq_len x parallel.dp");
  if (c[6] != static_cast<int64_t>(d.shards.size()) || c[7] != d.total)
    throw_data("data cursor: the data changed since the checkpoint (" + std::to_string(c[6]) +
               " shards with " + group_digits(c[7]) + " tokens then, " + std::to_string(d.shards.size()) +
               " with " + group_digits(d.total) + " now); restore the original shards or start a new run");
  if ((c[8] != 0) != d.opt.shuffle || (c[8] != 0 && static_cast<uint64_t>(c[9]) != d.opt.seed))
    throw_config("data cursor: saved with data.shuffle = " + std::string(c[8] ? "true" : "false") +
                 " and seed " + std::to_string(static_cast<uint64_t>(c[9])) +
                 "; resume with the same data.shuffle and run seed");
  const int64_t epoch = c[2], shard_pos = c[3], sample_pos = c[4];
  if (epoch < 0 || shard_pos < 0 || shard_pos >= static_cast<int64_t>(d.shards.size()) || sample_pos < 0)
    throw_checkpoint("data cursor: position (epoch " + std::to_string(epoch) + ", shard " +
                     std::to_string(shard_pos) + ", batch " + std::to_string(sample_pos) +
                     ") is out of range; the trainer state is damaged");
  const int64_t old_epoch = d.epoch, old_shard_pos = d.shard_pos;
  d.epoch = epoch;
  d.shard_pos = shard_pos;
  d.build_orders();
  const int shard = d.shard_order[static_cast<size_t>(shard_pos)];
  // The position counts the checkpoint's global micro-batches: a cursor about to be regrouped (saved
  // by another dp x B) is checked against the shard's length in those, not in this run's.
  int64_t saved_samples = d.samples[static_cast<size_t>(shard)];
  if (c[5] != d.global_tokens) {
    const ShardInfo& info = d.shards[static_cast<size_t>(shard)];
    saved_samples = info.labeled
                        ? d.plans[static_cast<size_t>(shard)].rows() / std::max<int64_t>(c[5] / d.opt.T, 1)
                        : (info.num_tokens - 1) / c[5];
  }
  if (sample_pos >= saved_samples) {
    d.epoch = old_epoch;  // leave the loader where it was
    d.shard_pos = old_shard_pos;
    d.build_orders();
    throw_checkpoint("data cursor: batch " + std::to_string(sample_pos) + " is past the end of shard " +
                     d.shards[static_cast<size_t>(shard)].path + "; the trainer state is damaged");
  }
  const int64_t old_sample_pos = d.sample_pos;
  d.sample_pos = sample_pos;
  if (c[5] == d.global_tokens) return;
  try {
    d.regroup(c[5]);
  } catch (...) {
    d.epoch = old_epoch;  // leave the loader where it was
    d.shard_pos = old_shard_pos;
    d.build_orders();
    d.sample_pos = old_sample_pos;
    throw;
  }
}

int64_t DataLoader::total_tokens() const { return impl_->total; }
const std::vector<ShardInfo>& DataLoader::shards() const { return impl_->shards; }
int64_t DataLoader::batches_per_epoch() const { return impl_->per_epoch; }
int64_t DataLoader::labeled_rows() const { return impl_->labeled_rows; }
bool DataLoader::has_labels() const { return impl_->any_labeled; }
int64_t DataLoader::epoch() const { return impl_->epoch; }

}  // namespace flotilla
