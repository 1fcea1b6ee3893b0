// The scheduler's standard policies (see scheduler_policies.h).
#include "runs/scheduler_policies.h"

#include <utility>

#include "db/queue.h"
#include "runs/halving.h"
#include "runs/queue_place.h"

namespace flotilla::runs {
namespace {

// The stored node names a place key stands for (none for this machine or a cluster, or a key
// that no longer parses).
void add_nodes(const std::string& key, std::set<std::string>& out) {
  if (key.empty()) return;
  try {
    const PlaceKey k = parse_place_key(key);
    out.insert(k.nodes.begin(), k.nodes.end());
  } catch (const std::exception&) {
  }
}

}  // namespace

WorkView queue_work_view(const db::Database& db) {
  WorkView view;
  for (const db::QueueEntry& e : db::list_queue(db)) {
    if (e.state == db::EntryState::kStarting || e.state == db::EntryState::kRunning) {
      add_nodes(e.place, view.busy);
    } else if (e.state == db::EntryState::kQueued) {
      for (const std::string& key : e.places) add_nodes(key, view.wanted);
      if (e.places.empty()) {
        try {
          add_nodes(parse_decision_json(e.decision_json).chosen, view.wanted);
        } catch (const std::exception&) {
        }
      }
    }
  }
  return view;
}

std::shared_ptr<IdleAutostop> add_standard_policies(SchedulerOptions& options,
                                                    const std::string& autostop_log_dir,
                                                    std::function<void(const AutostopNotice&)> notify) {
  options.tick_hooks.push_back([](Scheduler& s, db::Database& db, double now) {
    halving_tick([&s](int64_t id, const std::string& why) { s.stop_run(id, why); }, db, now);
  });
  AutostopOptions ao;
  ao.log_dir = autostop_log_dir;
  auto autostop = std::make_shared<IdleAutostop>(ao, options.service.ssh);
  options.tick_hooks.push_back(
      [autostop, notify = std::move(notify)](Scheduler&, db::Database& db, double now) {
        std::vector<AutostopNotice> notices;
        autostop_tick(*autostop, db, now, queue_work_view(db), &notices);
        if (notify)
          for (const AutostopNotice& n : notices) notify(n);
      });
  const std::string path = options.service.ssh.database_path;
  options.wake_node = [autostop, path](const std::string& node, std::string* why) {
    db::OpenOptions o;  // the scheduler's store, opened and checked when it took the lease
    o.create = false;
    o.quick_check = false;
    db::Database db(path, o);
    return autostop->wake(db, node, why);
  };
  return autostop;
}

}  // namespace flotilla::runs
