// `data prepare`: text / JSONL documents -> tokenized train and val shards.
//
// Raw text becomes llm.c shards: with our tokenizers every document is preceded by <|endoftext|>
// (llm.c's convention), with a tokenizer.json it is tokenizer(text) followed by EOS. The
// validation split is the first round(val_fraction x total) tokens of the stream, like llm.c's
// tinyshakespeare (val first, then train), or the fewest that fill val_rows rows at seq_len (one
// batch, so a small data set's split is never too small to measure). JSONL chat and prompt/completion records
// (or --documents) make labeled shards instead: per-token loss targets and document starts, split and sharded
// at document boundaries, packed into rows by the loader (docs/data.md "Fine-tuning data"). Each split is
// written as balanced shards of at most shard_tokens tokens, so no split ends in a tiny shard that could not
// hold one batch.
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
  double val_fraction = 0.01;  // 0 writes no val shard
  // > 0 (with seq_len): the val split is the fewest leading documents (llm.c: tokens) that fill this
  // many rows of seq_len + 1 tokens, e.g. one batch of world x micro-batch rows; val_fraction is unused.
  int64_t val_rows = 0;
  int64_t shard_tokens = 100'000'000;  // most tokens per shard
  bool force = false;                  // replace existing train_*.bin / val_*.bin in out_dir
  size_t block_bytes = 4 << 20;        // text files are read and encoded in blocks of about this size
  std::string
      chat_format;         // llama3 | chatml | qwen3 | plain; "" = the tokenizer's (chat), plain (completion)
  bool documents = false;  // labeled shards even for plain text (documents kept apart when packing)
  bool pack = true;        // labeled shards: several documents per row (false: one per row)
  int seq_len = 0;         // > 0: count the rows (sequences) the data gives for T = seq_len
};

struct PrepareResult {
  int64_t documents = 0;
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int token_bytes = 2;
  std::vector<std::string> train_files;
  std::vector<std::string> val_files;
  // Records by kind, and what labeled shards hold.
  int64_t text_records = 0, completion_records = 0, chat_records = 0;
  std::string chat_format;  // the format chat records were rendered with ("" when there were none)
  bool labeled = false;
  int64_t train_documents = 0, val_documents = 0;
  int64_t train_targets = 0,
          val_targets = 0;  // loss targets (labeled; llm.c shards: every token but the first)
  // For seq_len > 0: rows of T (+1) tokens (labeled: the loader's packing plan; llm.c: (n - 1) / T
  // windows per shard), and documents longer than a row (cut into pieces).
  int64_t train_rows = 0, val_rows = 0, split_documents = 0;
};

// Runs the whole preparation; `progress` (optional) receives one-line status messages.
PrepareResult prepare_shards(const Tokenizer& tokenizer, const PrepareOptions& options,
                             const std::function<void(const std::string&)>& progress = {});

}  // namespace flotilla
