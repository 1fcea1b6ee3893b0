// The scheduler's default placement: runs/queue_place.h's inventory and choice, turned into what
// the scheduler starts (a Placement and a Layout) and what it stores (the words and the decision
// JSON). Split from scheduler.cpp so the scheduler's steps do not depend on how places are weighed.
#include <algorithm>

#include "db/queries.h"
#include "db/run_store.h"
#include "runs/scheduler.h"

#if __has_include("runs/queue_place.h")
#include "runs/queue_place.h"
#define FLOTILLA_SCHED_HAS_PLACE 1
#endif

namespace flotilla::runs {

#ifdef FLOTILLA_SCHED_HAS_PLACE

PlaceChoice choose_by_cost(db::Database& db, const db::QueueEntry& entry, const RunConfig& config,
                           int64_t steps_to_go, double now) {
  InventoryOptions inv;
  inv.now = now;
  const std::vector<PlaceOffer> offers = list_places(db, inv);
  EntryNeeds needs;
  needs.steps_to_go = steps_to_go;
  needs.deadline = entry.deadline;
  needs.max_usd = entry.max_usd;
  needs.allowed = entry.places;
  needs.now = now;
  const Decision d = choose_place(config, needs, offers, speed_history(db));
  PlaceChoice c;
  c.start = d.start;
  c.key = d.chosen;
  c.layout = d.layout;
  c.words = d.words;
  c.decision_json = decision_json(d);
  if (c.start) {
    PlaceShape shape;
    if (const PlaceEstimate* est = d.chosen_estimate()) {
      shape.ranks = std::max(1, est->devices);
      shape.gpus = est->gpus;
      shape.predicted_s = est->seconds;
    }
    c.where = placement_for(parse_place_key(d.chosen), db, shape);
  }
  return c;
}

#else

// Until runs/queue_place.h is merged: this machine only, one queued run at a time.
PlaceChoice choose_by_cost(db::Database& db, const db::QueueEntry& entry, const RunConfig&, int64_t, double) {
  PlaceChoice c;
  if (!entry.places.empty() &&
      std::find(entry.places.begin(), entry.places.end(), "local") == entry.places.end()) {
    c.words = "placement is not built yet: only this machine (local) is served";
    return c;
  }
  db::RunFilter f;
  f.statuses = {db::RunStatus::kRunning, db::RunStatus::kCreated};
  for (const db::RunListItem& item : db::list_runs(db, f))
    if (item.run.target == "local") {
      c.words = "waits: this machine is busy with run " + item.run.name;
      return c;
    }
  c.start = true;
  c.key = "local";
  c.where = Placement::here();
  c.words = "on this machine: free now";
  c.decision_json = "{\"chosen\": \"local\", \"words\": \"on this machine: free now\", \"places\": []}";
  return c;
}

#endif

}  // namespace flotilla::runs
