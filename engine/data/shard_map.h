// Read-only access to one validated token shard (a memory map for tools, explicit reads for
// training), plus the shard format's constants.
//
// One non-obvious decision: a shard is re-validated (header + file size) every time it is mapped,
// not only at preflight, because a long run maps shards hours after checking them and a file
// replaced in between must fail with a clear message rather than read garbage past its end.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

// One validated token shard read with pread(), for training: every read checks that the bytes are
// really in the file. A memory map of a shard truncated under a running worker hands out zeros
// (the rest of the last page) and then kills the process with SIGBUS; here a short read is a data
// error (Error(kData)) naming the shard, the size its header promises and the size it has now.
// Reads of a shard replaced by rename continue from the file that was opened.
class ShardFile {
 public:
  ShardFile() = default;
  explicit ShardFile(const std::string& path);  // validates the header against the size; throws Error(kData)
  ~ShardFile();
  ShardFile(ShardFile&& other) noexcept;
  ShardFile& operator=(ShardFile&& other) noexcept;
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;

  const ShardInfo& info() const { return info_; }
  int64_t size() const { return info_.num_tokens; }
  // Tokens [start, start + count) widened to int32.
  void read(int64_t start, int64_t count, int32_t* out) const;
  // Flag bytes [start, start + count) of a labeled shard.
  void read_flags(int64_t start, int64_t count, uint8_t* out) const;

 private:
  void read_bytes(int64_t offset, size_t bytes, void* out, const char* what) const;
  void release();

  ShardInfo info_;
  int fd_ = -1;
  mutable std::vector<uint8_t> buffer_;
};

// "shard P: token V at token offset I >= vocab size N ..." (shared by preflight and checked reads).
[[noreturn]] void throw_token_out_of_range(const ShardInfo& info, int64_t offset, uint32_t value,
                                           int vocab_size);

}  // namespace flotilla
