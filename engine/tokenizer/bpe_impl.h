// Tokenizer internals shared by encoding (bpe.cpp), training (bpe_train.cpp) and file I/O
// (bpe_io.cpp). Not part of the public API.
//
// One non-obvious decision: merges are looked up by the pair of token *ids* (packed into one
// uint64 key), never by strings, so GPT-2 files and trained tokenizers run the same code; the
// merge result's bytes are checked to equal left + right when the tokenizer is built, which is
// what makes id-level merging equivalent to GPT-2's string-level merging.
#pragma once

#include <array>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/bpe.h"

namespace flotilla {

inline uint64_t pair_key(uint32_t left, uint32_t right) {
  return (static_cast<uint64_t>(left) << 32) | right;
}

struct Tokenizer::Impl {
  std::string origin = "trained";
  std::vector<std::string> tokens;              // id -> bytes (a special token: its text)
  std::vector<uint8_t> special;                 // id -> 1 when special
  std::array<uint32_t, 256> byte_id{};          // byte -> id of its single-byte token
  std::vector<Merge> merges;                    // rank order
  std::unordered_map<uint64_t, uint32_t> rank;  // pair_key(left, right) -> rank
  std::vector<Special> specials;
  uint32_t eot = 0;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<uint32_t>> cache;  // short pieces -> ids

  // Derives byte_id, rank, special and eot from tokens/merges/specials and checks them all;
  // throws Error(kData) naming `source` on any inconsistency.
  void build_index(const std::string& source);

  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;
  void merge_simple(std::vector<uint32_t>& syms) const;
  void merge_heap(std::vector<uint32_t>& syms) const;
};

}  // namespace flotilla
