// A metrics file read as it grows, without a store: by a byte offset of its own, complete lines
// only, through the engine's reader. For a run that is shown but not stored (the app without a
// run database), and for launch's own records in worker.log.
//
// Decision: the offset only ever moves past a line's '\n', so a torn last line (the worker is
// mid-write) is read again, whole, next time; a file shorter than the offset was replaced and is
// read from the start; one poll reads at most `max_bytes`, so a backlog drains over several
// polls instead of stalling the caller. A stored run is read by db::FileIngestor instead, whose
// offset is committed with the rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/train/metrics_reader.h"

namespace flotilla::runs {

class FileTail {
 public:
  explicit FileTail(std::string path, uint64_t offset = 0) : path_(std::move(path)), offset_(offset) {}
  // The records completed since the last poll (at most max_bytes read). A missing file reads as
  // empty.
  std::vector<MetricsRecord> poll(size_t max_bytes = 8u << 20);
  uint64_t offset() const { return offset_; }
  int skipped_lines() const { return skipped_; }  // complete lines that were not records
  int record_count() const { return records_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  uint64_t offset_ = 0;
  int skipped_ = 0, records_ = 0;
};

}  // namespace flotilla::runs
