// `data prepare`: text / JSONL documents -> tokenized train and val shards.
//
// Every document is preceded by <|endoftext|> (llm.c's convention: the EOT token delimits
// documents, so the stream starts with one). The validation split is the first
// round(val_fraction x total) tokens of the stream, like llm.c's tinyshakespeare (val first, then
// train). Each split is written as balanced shards of at most shard_tokens tokens, so no split
// ends in a tiny shard that could not hold one batch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/tokenizer/bpe.h"

namespace flotilla {

struct PrepareOptions {
  std::vector<std::string> inputs;  // .jsonl: one document per line (field text_field); else one per file
  std::string text_field = "text";
  std::string out_dir;
  double val_fraction = 0.01;          // 0 writes no val shard
  int64_t shard_tokens = 100'000'000;  // most tokens per shard
  bool force = false;                  // replace existing train_*.bin / val_*.bin in out_dir
  size_t block_bytes = 4 << 20;        // text files are read and encoded in blocks of about this size
};

struct PrepareResult {
  int64_t documents = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int token_bytes = 2;
  std::vector<std::string> train_files;
  std::vector<std::string> val_files;
};

// Runs the whole preparation; `progress` (optional) receives one-line status messages.
PrepareResult prepare_shards(const Tokenizer& tokenizer, const PrepareOptions& options,
                             const std::function<void(const std::string&)>& progress = {});

}  // namespace flotilla
