// Read-only memory map of one validated token shard, plus the shard format's constants.
//
// One non-obvious decision: a shard is re-validated (header + file size) every time it is mapped,
// not only at preflight, because a long run maps shards hours after checking them and a file
// replaced in between must fail with a clear message rather than read garbage past its end.
#pragma once

#include <cstdint>
#include <string>

#include "engine/data/loader.h"

namespace flotilla {

constexpr int64_t kShardHeaderBytes = 1024;  // 256 x int32
constexpr int kShardHeaderInts = 256;
constexpr int32_t kShardMagicU16 = 20240520;  // llm.c GPT-2 shards: version 1, uint16 tokens
constexpr int32_t kShardVersionU16 = 1;
constexpr int32_t kShardMagicU32 = 20240801;  // llm.c Llama-3 shards: version 7, uint32 tokens
constexpr int32_t kShardVersionU32 = 7;
constexpr int32_t kShardMagicLabeled = 20251201;  // Flotilla labeled shards: tokens + per-token flags
constexpr int32_t kShardVersionLabeled = 1;

// 1000002 -> "1,000,002" (error messages and `data inspect`).
std::string group_digits(int64_t value);

class MappedShard {
 public:
  MappedShard() = default;
  explicit MappedShard(const std::string& path);  // validates, then maps; throws Error(kData)
  ~MappedShard();
  MappedShard(MappedShard&& other) noexcept;
  MappedShard& operator=(MappedShard&& other) noexcept;
  MappedShard(const MappedShard&) = delete;
  MappedShard& operator=(const MappedShard&) = delete;

  const ShardInfo& info() const { return info_; }
  int64_t size() const { return info_.num_tokens; }
  uint32_t token(int64_t i) const {
    return info_.token_bytes == 2 ? static_cast<const uint16_t*>(tokens_)[i]
                                  : static_cast<const uint32_t*>(tokens_)[i];
  }
  // Labeled shards: the flag byte of token i (kFlagTarget | kFlagDocStart); 0 for llm.c shards.
  uint8_t flag(int64_t i) const { return flags_ ? flags_[i] : 0; }
  const uint8_t* flags() const { return flags_; }
  // Copies tokens [start, start + count) widened to int32 into out.
  void read(int64_t start, int64_t count, int32_t* out) const;
  // Index of the first token >= vocab_size in [start, start + count), or -1.
  int64_t find_out_of_range(int64_t start, int64_t count, int vocab_size) const;

 private:
  void release();

  ShardInfo info_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  const void* tokens_ = nullptr;    // map_ + 1024
  const uint8_t* flags_ = nullptr;  // labeled: after the tokens
};

// "shard P: token V at token offset I >= vocab size N ..." (shared by preflight and checked reads).
[[noreturn]] void throw_token_out_of_range(const ShardInfo& info, int64_t offset, uint32_t value,
                                           int vocab_size);

}  // namespace flotilla
