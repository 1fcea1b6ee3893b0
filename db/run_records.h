// What a run left behind besides metrics: its checkpoints and its events (status changes, worker
// events, samples), newest first, and system samples of the nodes it ran on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/database.h"

namespace flotilla::db {

struct CheckpointInfo {
  int64_t step = 0;
  std::string dir, reason;
  int64_t bytes = 0;
  double seconds = 0, time = 0;
};
// Step order.
std::vector<CheckpointInfo> list_checkpoints(const Database& db, int64_t run_id);

struct EventInfo {
  double time = 0;
  std::string kind, level, message, fields_json;
  int rank = 0;
};
// The `limit` most recent events (0: all), oldest first.
std::vector<EventInfo> list_events(const Database& db, int64_t run_id, int limit = 0);

struct SystemSample {
  int64_t node_id = 0;
  int device = 0;
  double time = 0;
  std::optional<double> utilization, power_w, temperature_c;
  std::optional<int64_t> memory_used, memory_total;
};
// Inserts samples (replacing one at the same node, device and time). Call through the Writer.
void add_system_samples(Database& db, const std::vector<SystemSample>& samples);
// Samples of a node in [from, to], time order.
std::vector<SystemSample> system_samples(const Database& db, int64_t node_id, double from, double to);

}  // namespace flotilla::db
