// Tokenizer internals shared by encoding (bpe.cpp), training (bpe_train.cpp) and file I/O
// (bpe_io.cpp). Not part of the public API.
//
// One non-obvious decision: merges are looked up by the pair of token *ids* (packed into one
// uint64 key), never by strings, so GPT-2 files and trained tokenizers run the same code; the
// merge result's bytes are checked to equal left + right when the tokenizer is built, which is
// what makes id-level merging equivalent to GPT-2's string-level merging.
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/hf_pipeline.h"

namespace flotilla {

inline uint64_t pair_key(uint32_t left, uint32_t right) {
  return (static_cast<uint64_t>(left) << 32) | right;
}

struct Tokenizer::Impl {
  std::string origin = "trained";
  std::vector<std::string> tokens;      // id -> bytes (a special token: its text)
  std::vector<uint8_t> special;         // id -> 1 when special
  std::vector<uint8_t> defined;         // id -> 1 when the id has a token (tokenizer.json may leave gaps)
  std::array<uint32_t, 256> byte_id{};  // byte -> id of its single-byte token
  std::vector<Merge> merges;            // rank order
  std::unordered_map<uint64_t, uint32_t> rank;  // pair_key(left, right) -> rank
  std::vector<Special> specials;
  uint32_t eot = 0;                // UINT32_MAX: none (tokenizer.json without <|endoftext|> or EOS)
  std::unique_ptr<HfPipeline> hf;  // tokenizer.json only

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<uint32_t>> cache;  // short pieces -> ids

  // Derives byte_id, rank, special and eot from tokens/merges/specials and checks them all;
  // throws Error(kData) naming `source` on any inconsistency.
  void build_index(const std::string& source);
  // The same for a tokenizer.json: ids may have gaps, no <|endoftext|> is required, and merges are
  // indexed as the library does (a repeated pair keeps its last rank).
  void build_hf_index(const std::string& source);

  void encode_piece(std::string_view piece, std::vector<uint32_t>& out) const;
  void merge_simple(std::vector<uint32_t>& syms) const;
  void merge_heap(std::vector<uint32_t>& syms) const;
  // tokenizers' Word::merge_all: lowest (rank, position) first; an entry is stale unless the pair
  // now at its position merges to the same id.
  void merge_hf(std::vector<uint32_t>& syms) const;
  // The tokenizer.json pipeline (hf_encode.cpp).
  void encode_hf(std::string_view text, bool allow_special, std::vector<uint32_t>& ids,
                 std::vector<uint32_t>* starts) const;
};

}  // namespace flotilla
