// Sequence packing: placing the documents of a labeled shard into rows of T + 1 tokens (T inputs
// and the shifted target), several per row, the rest padded (docs/data.md "Packing").
//
// One non-obvious decision: a document longer than a row is cut into pieces of T + 1 tokens that
// overlap by one token (piece k starts at k x T), each placed like a document of its own with its
// positions restarting at 0. Every token of the document is then a target exactly once (the last
// token of piece k is the first input of piece k + 1), nothing is dropped, and positions stay
// below T, so a model with a learned position table of T entries never indexes past it and the
// attention rule "token i sees i - positions[i] .. i of its row" never reaches before the row.
// Truncating instead would silently drop the ends of long answers.
#pragma once

#include <cstdint>
#include <vector>

namespace flotilla {

// A run of consecutive shard tokens placed at the start of a row or right after another segment.
struct PackedSegment {
  int64_t begin;   // shard token offset
  int32_t length;  // tokens (1 .. T + 1)
};

struct PackPlan {
  std::vector<PackedSegment> segments;  // in row order
  std::vector<int64_t> row_begin;  // rows + 1 entries: row r holds segments [row_begin[r], row_begin[r+1])
  int64_t documents = 0;
  int64_t split_documents = 0;  // documents longer than T + 1 tokens, cut into pieces
  int64_t padding = 0;          // pad slots over all rows
  int64_t rows() const { return static_cast<int64_t>(row_begin.size()) - 1; }
};

// doc_starts: sorted first-token offsets of the documents (the first is 0); the last document ends
// at `total`. pack = false puts one document (or piece) per row.
PackPlan plan_rows(const std::vector<int64_t>& doc_starts, int64_t total, int T, bool pack);

}  // namespace flotilla
