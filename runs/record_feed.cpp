// The in-memory feed of a run's stored records (see record_feed.h).
#include "runs/record_feed.h"

#include <algorithm>

namespace flotilla::runs {

void RecordFeed::append(const std::vector<MetricsRecord>& records) {
  std::lock_guard<std::mutex> lock(mutex_);
  records_.insert(records_.end(), records.begin(), records.end());
}

size_t RecordFeed::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return records_.size();
}

std::vector<MetricsRecord> RecordFeed::copy(size_t from, size_t to) const {
  std::lock_guard<std::mutex> lock(mutex_);
  to = std::min(to, records_.size());
  if (from >= to) return {};
  return std::vector<MetricsRecord>(records_.begin() + static_cast<std::ptrdiff_t>(from),
                                    records_.begin() + static_cast<std::ptrdiff_t>(to));
}

void RecordFeed::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  records_.clear();
}

}  // namespace flotilla::runs
