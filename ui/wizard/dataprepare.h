// The Data page's preparation job: text and JSONL files tokenized into shards by the engine's
// prepare_shards, with the tokenizer from the model's Hugging Face folder, from a tokenizer folder
// or file, or trained here on the input text (and saved beside the shards), and a summary of what
// the shards hold for the page.
//
// Decision: a plain request struct in, a plain summary out, run on a worker thread by the page;
// a trained tokenizer is saved as OUT/tokenizer.flotilla.json, the name Tokenizer::load(OUT) looks
// for, so `sample --tokenizer OUT` and `tokenizer encode --tokenizer OUT` use the run's own
// tokenizer with the shards' folder as the only path to remember.
#pragma once

#include <QString>
#include <QStringList>

#include "engine/data/prepare.h"

namespace flotilla::ui {

enum class TokenizerSource { Model, File, Train };

struct PrepareRequest {
  QStringList inputs;  // .txt: one document each; .jsonl / .ndjson: one record per line
  TokenizerSource source = TokenizerSource::File;
  QString tokenizer;      // Model: the model's Hugging Face folder; File: a folder or file
  int trainVocab = 8192;  // Train: the vocabulary size to train to
  QString chatFormat;     // "" = the engine's default for the tokenizer; llama3 | chatml | qwen3 | plain
  bool pack = true;       // labeled shards: several documents per row
  int seqLen = 0;         // the run's train.seq_len: rows are counted for it
  QString outDir;
  // The validation split: valRows > 0 rows at seqLen (one batch: ranks x micro-batch), else
  // valFraction of the tokens (0: none).
  qint64 valRows = 0;
  double valFraction = 0;
};

struct PrepareSummary {
  bool ok = false;
  QString error;  // the engine's message
  QString outDir;
  flotilla::PrepareResult result;
  int tokenizerVocab = 0;
  QString tokenizerOrigin;  // "trained", "gpt2" or "tokenizer.json"
  QString savedTokenizer;   // Train: where the trained tokenizer was written
  int seqLen = 0;           // the T rows were counted for
  bool pack = true;
  qint64 valRows = 0;      // the request's
  double valFraction = 0;  // the request's
};

// The name a trained tokenizer is saved under in the output folder.
inline constexpr const char* kTrainedTokenizerName = "tokenizer.flotilla.json";

// Never throws.
PrepareSummary runPrepare(const PrepareRequest& request);

// The page's lines: documents and records by kind, tokens, loss targets, rows, split documents.
QStringList describePrepared(const PrepareSummary& summary);

}  // namespace flotilla::ui
