// Inserting metric rows and keeping their per-block summaries (metric_blocks) exact.
//
// Decision: blocks are 256 consecutive steps (block = step >> 8). A batch that only appends beyond
// a block's last step merges into the block's min/max/count/last without reading metrics; anything
// else (a step replaced after a resume, out-of-order lines, a step repeated in the batch) recomputes
// that block from its at most 256 stored rows. So the summaries never drift from the rows, and the
// common append path costs one block upsert per touched block rather than one per row.
#pragma once

#include <vector>

#include "db/database.h"
#include "db/sql.h"
#include "db/writer.h"

namespace flotilla::db {

inline constexpr int kBlockShift = 8;  // 256 steps per block
inline int64_t block_of(int64_t step) { return step >> kBlockShift; }

class MetricSink {
 public:
  explicit MetricSink(Database& db);
  // Upserts `rows` and refreshes the touched blocks. Call inside a write transaction.
  void insert(const std::vector<MetricRow>& rows);
  // Recomputes one block from the metrics table (deletes it when it has no rows left).
  void rebuild_block(int64_t run_id, const std::string& name, int64_t block);

 private:
  Database& db_;
  Stmt upsert_;
  Stmt read_block_;
  Stmt write_block_;
  Stmt agg_block_;
  Stmt last_in_block_;
  Stmt delete_block_;
};

}  // namespace flotilla::db
