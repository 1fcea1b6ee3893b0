// The records a watcher has stored for one run, kept in memory in order: what a page that starts
// following the run late replays, instead of reading the worker's file a second time.
//
// Decision: the watcher appends each committed chunk before it tells anyone about it, so a
// reader that takes the first N records, N being what it has already been told about, gets
// exactly the history it missed, no more and no less. Shared (std::shared_ptr) so a replay running
// on another thread outlives the run handle that owned it.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "engine/train/metrics_reader.h"

namespace flotilla::runs {

class RecordFeed {
 public:
  void append(const std::vector<MetricsRecord>& records);
  size_t size() const;
  // Records [from, to) (clamped to what is there).
  std::vector<MetricsRecord> copy(size_t from, size_t to) const;
  void clear();

 private:
  mutable std::mutex mutex_;
  std::vector<MetricsRecord> records_;
};

}  // namespace flotilla::runs
