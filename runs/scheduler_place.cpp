// The scheduler's default placement: runs/queue_place.h's inventory and choice, turned into what
// the scheduler starts (a Placement and a Layout) and what it stores (the words and the decision
// JSON). Split from scheduler.cpp so the scheduler's steps do not depend on how places are weighed.
#include <algorithm>

#include "runs/queue_place.h"
#include "runs/scheduler.h"

namespace flotilla::runs {

PlaceChoice choose_by_cost(db::Database& db, const db::QueueEntry& entry, const RunConfig& config,
                           int64_t steps_to_go, double now, const std::optional<LocalFacts>& local,
                           const std::map<std::string, std::string>& avoid) {
  InventoryOptions inv;
  inv.now = now;
  inv.local = local;
  std::vector<PlaceOffer> offers = list_places(db, inv);
  std::string left_out;  // "; node b: left out for now (could not start there: ...)"
  offers.erase(std::remove_if(offers.begin(), offers.end(),
                              [&](const PlaceOffer& o) {
                                const auto it = avoid.find(o.key.key());
                                if (it == avoid.end()) return false;
                                left_out += "; " + o.label + ": left out for now (" + it->second + ")";
                                return true;
                              }),
               offers.end());
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
  c.words = d.words + left_out;
  c.decision_json = decision_json(d);
  c.wake_nodes = d.wake_nodes;
  c.refused = !d.start && !d.waits;
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

}  // namespace flotilla::runs
