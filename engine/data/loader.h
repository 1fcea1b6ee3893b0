// Token shards (llm.c format, and Flotilla's labeled variant) and the data loader (DESIGN.md §3 Data).
//
// A shard is a 1024-byte header of 256 int32 (magic, version, token count, ...) followed by the
// tokens: magic 20240520 version 1 -> uint16 tokens, magic 20240801 version 7 -> uint32 tokens.
// A labeled shard (magic 20251201, version 1) adds one flag byte per token after the tokens: loss
// target, document start (docs/data.md "Labeled shards"); the loader packs its documents into rows.
// Shards are validated before any training starts, and read with explicit, length-checked reads
// (shard_map.h ShardFile), so a shard truncated under a running worker is a data error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/targets.h"

namespace flotilla {

struct ShardInfo {
  std::string path;
  int32_t magic = 0;
  int32_t version = 0;
  int token_bytes = 2;  // 2 (uint16) or 4 (uint32)
  int64_t num_tokens = 0;
  // Labeled shards only:
  bool labeled = false;
  bool pack = true;       // several documents per row (false: one document per row)
  uint32_t pad_id = 0;    // input token at padded slots
  int64_t documents = 0;  // document starts
  int64_t targets = 0;    // tokens marked as loss targets
};

// Per-token flag bits of a labeled shard.
constexpr uint8_t kFlagTarget = 1;    // the loss counts on predicting this token
constexpr uint8_t kFlagDocStart = 2;  // the first token of a document

// `data prepare` writes this file into its output folder before its first shard and removes it
// after its last: while it is there the folder holds only part of a data set (the prepare was
// interrupted, or is still running). Folders of shards made otherwise (llm.c's) never have it.
inline constexpr char kPrepareIncompleteFile[] = ".prepare-incomplete";

// Throws Error(kData) when the folder holding `shard_path` has kPrepareIncompleteFile, saying
// whether its prepare is still running or was interrupted and what to do.
void check_prepare_finished(const std::string& shard_path);

// Reads and checks one shard's header against its file size (after check_prepare_finished); throws
// Error(kData) naming the file and the fault ("shard 3: size 1,000,002 != 1,024 + 2*ntok"). When vocab_size >
// 0 and check_tokens is set, also verifies every token < vocab_size.
ShardInfo inspect_shard(const std::string& path, int vocab_size = 0, bool check_tokens = false);

// Expands a path or glob pattern (sorted); throws Error(kData) when nothing matches.
std::vector<std::string> expand_shards(const std::string& pattern);

// Writes a shard (uint16 when every token < 65536 and !force_uint32, else uint32), durably.
void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, bool force_uint32 = false);
// Writes a labeled shard: flags[i] holds kFlagTarget / kFlagDocStart for tokens[i] (flags[0] must
// start a document; the target bit of a document start is cleared). Throws Error(kData) for
// mismatched sizes or a first token that starts no document.
void write_labeled_shard(const std::string& path, const std::vector<uint32_t>& tokens,
                         const std::vector<uint8_t>& flags, bool pack, uint32_t pad_id,
                         bool force_uint32 = false);

struct LoaderOptions {
  std::string pattern;   // path or glob
  int B = 8;             // sequences per micro-batch
  int T = 256;           // tokens per sequence
  int rank = 0;          // data-parallel rank
  int world = 1;         // data-parallel world size
  bool shuffle = false;  // deterministic seeded shuffle of sequence order (per epoch)
  uint64_t seed = 1337;
  bool checked = false;  // verify every token < vocab_size when reading
  int vocab_size = 0;
};

// llm.c shards, sequential mode, one rank: micro-batch k reads B*T+1 consecutive tokens starting at
// token k*B*T (llm.c layout); inputs = tokens[0..BT), targets = tokens[1..BT]. With world > 1 the
// ranks take disjoint interleaved micro-batch slots. Wraps to the next shard / epoch at the end.
// Labeled shards: each row is its own window of T + 1 tokens from the shard's packing plan
// (engine/data/packing.h); a micro-batch is B rows, ranks take disjoint rows of the same global
// batch of world x B rows (docs/data.md "Loader order").
class DataLoader {
 public:
  explicit DataLoader(const LoaderOptions& options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // llm.c shards only (a labeled shard throws Error(kData): its targets and positions must be
  // read together): inputs and targets, each B*T.
  void next_batch(int32_t* inputs, int32_t* targets);
  // Any shards; each array B*T, row-major. targets[i] == kIgnoreTarget: no loss at i. positions[i]:
  // the position of token i within its document (0 at a document's first token); the model lets
  // token i attend to tokens i - positions[i] .. i of its row only. llm.c shards: positions 0..T-1
  // in every row, no target ignored, inputs and targets bit for bit those of next_batch above.
  void next_batch(int32_t* inputs, int32_t* targets, int32_t* positions);
  void reset();  // back to the first batch
  // True when any shard is labeled (the two-argument next_batch cannot read it).
  bool has_labels() const;

  // Opaque resumable position (shard, offset, epoch, shuffle state). Restoring it makes the
  // next batch identical to the one that would have come next.
  std::vector<int64_t> cursor() const;
  // regroup: accept a cursor saved with another global micro-batch (parallel.dp x train.micro_batch,
  // same T) and continue at the same sequence, where that position is a whole number of this
  // loader's micro-batches (a resume on another layout); otherwise Error(kConfig) says what to keep.
  void set_cursor(const std::vector<int64_t>& cursor, bool regroup = false);

  int64_t total_tokens() const;  // over all shards
  const std::vector<ShardInfo>& shards() const;

  // Added by the data implementation (docs/data.md "Loader order"):
  // Micro-batches per rank in one pass over every shard (an epoch), the same on every rank.
  int64_t batches_per_epoch() const;
  // Rows (sequences of T + 1 tokens) the labeled shards give, over all shards; 0 without labels.
  int64_t labeled_rows() const;
  // Completed passes over the data so far (0 during the first).
  int64_t epoch() const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace flotilla
