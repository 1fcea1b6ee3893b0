// Token shards (llm.c format) and the data loader (DESIGN.md §3 Data).
//
// A shard is a 1024-byte header of 256 int32 (magic, version, token count, ...) followed by the
// tokens: magic 20240520 version 1 -> uint16 tokens, magic 20240801 version 7 -> uint32 tokens.
// Shards are memory-mapped and validated before any training starts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flotilla {

struct ShardInfo {
  std::string path;
  int32_t magic = 0;
  int32_t version = 0;
  int token_bytes = 2;  // 2 (uint16) or 4 (uint32)
  int64_t num_tokens = 0;
};

// Reads and checks one shard's header against its file size; throws Error(kData) naming the file
// and the fault ("shard 3: size 1,000,002 != 1,024 + 2*ntok"). When vocab_size > 0 and check_tokens
// is set, also verifies every token < vocab_size.
ShardInfo inspect_shard(const std::string& path, int vocab_size = 0, bool check_tokens = false);

// Expands a path or glob pattern (sorted); throws Error(kData) when nothing matches.
std::vector<std::string> expand_shards(const std::string& pattern);

// Writes a shard (uint16 when every token < 65536 and !force_uint32, else uint32), durably.
void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, bool force_uint32 = false);

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

// Sequential mode, one rank: micro-batch k reads B*T+1 consecutive tokens starting at token k*B*T
// (llm.c layout); inputs = tokens[0..BT), targets = tokens[1..BT]. With world > 1 the ranks take
// disjoint interleaved micro-batch slots. Wraps to the next shard / epoch at the end.
class DataLoader {
 public:
  explicit DataLoader(const LoaderOptions& options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  void next_batch(int32_t* inputs, int32_t* targets);  // each B*T
  void reset();                                        // back to the first batch

  // Opaque resumable position (shard, offset, epoch, shuffle state). Restoring it makes the
  // next batch identical to the one that would have come next.
  std::vector<int64_t> cursor() const;
  void set_cursor(const std::vector<int64_t>& cursor);

  int64_t total_tokens() const;  // over all shards
  const std::vector<ShardInfo>& shards() const;

  // Added by the data implementation (docs/data.md "Loader order"):
  // Micro-batches per rank in one pass over every shard (an epoch), the same on every rank.
  int64_t batches_per_epoch() const;
  // Completed passes over the data so far (0 during the first).
  int64_t epoch() const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace flotilla
