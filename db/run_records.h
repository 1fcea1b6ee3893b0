// What a run left behind besides metrics: its checkpoints and its events (status changes, worker
// events, samples), newest first. System samples of the nodes are in db/nodes.h.
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
// Records a committed checkpoint (a step written again after a resume replaces its row).
void upsert_checkpoint(Database& db, int64_t run_id, int64_t step, const std::string& dir, int64_t bytes,
                       double seconds, const std::string& reason, double time);

struct EventInfo {
  double time = 0;
  int64_t id = 0;  // the row's id: events_after() continues after it
  std::string kind, level, message, fields_json;
  int rank = 0;
};
// The `limit` most recent events (0: all), oldest first.
std::vector<EventInfo> list_events(const Database& db, int64_t run_id, int limit = 0);
// The run's events stored after event `after_id` (0: all), in the order they were stored: what a
// reader following a run as it grows reads on each poll.
std::vector<EventInfo> events_after(const Database& db, int64_t run_id, int64_t after_id);

// A stop, budget stop or kill asked of a running run, stored (an event of kind "request") before its
// worker is signalled: whoever then sees the run end (the watcher that asked, another process's
// watcher, the settling of a run nobody watched) records the end as asked, not as a loss.
struct EndRequest {
  std::string what;  // "stop", "budget" or "kill"
  std::string note;  // the words for the status ("on request", "budget reached: $0.16 of $0.15")
  double time = 0;
};
void add_end_request(Database& db, int64_t run_id, const EndRequest& request);
// The strongest request ("kill" over "budget" over "stop") made since the run last went running.
std::optional<EndRequest> end_request(const Database& db, int64_t run_id);

}  // namespace flotilla::db
