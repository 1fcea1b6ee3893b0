// A store with crafted queue entries, decisions, costs and idle time for the scheduler-savings
// tests (runs/savings.h): the runs layer's figures against hand-computed ones, the CLI's
// `costs --savings` and the app's Costs page against the same figures. Built through the db API
// only, with fixed wall times (no monotonic readings), so every dollar is exact.
//
//  entry "cheap-run": ran on node b ($2/h) for 2700 s: measured $1.50. Predicted there $1.00, so
//    scale 1.5. Places in decision order: local (fits, 2 h wait), node:c ($2.00, wait unknown: busy
//    with a run whose end is not known, so not free), node:a ($3.00, free),
//    cluster:hpc ($4.00, 10 min wait), node:b (chosen, $1.00, free). Most expensive fitting:
//    cluster:hpc, 4.00 × 1.5 = $6.00, saved $4.50; first free: node:a, 3.00 × 1.5 = $4.50, saved $3.00.
//  entry "local-run": ran on this machine (no price, predicted $0, 1000 s) for 2000 s: measured $0,
//    time scale 2. node:b fits at $0.50 -> $1.00 (the most expensive fitting; node:a does not fit
//    at $9): saved $1.00; first free: local itself, $0: saved $0. Preempted once before: lost
//    $0.25 and 40 steps, 2 starts.
//  entry "still-running": started, running: not counted (1 unfinished).
//  entry "waiting": queued, no run.
//  idle: node a powered with no run for 1800 s at $6/h: $3.00.
// Totals: measured $1.50; saved $5.50 vs the most expensive (2 runs), $3.00 vs the first free
// (2 runs); preemptions $0.25 (1 restart, 40 steps); idle $3.00.
#pragma once

#include <string>

#include "db/costs.h"
#include "db/database.h"
#include "db/queue.h"
#include "db/run_store.h"
#include "db/sql.h"

namespace savings_fixture {

using namespace flotilla::db;

inline constexpr double kMeasured = 1.50, kSavedVsMostExpensive = 5.50, kSavedVsFirstFree = 3.00;
inline constexpr double kPreemption = 0.25, kIdle = 3.00;

// wait < 0: unknown (null, as placement writes a wait behind runs whose end is not known).
inline std::string place(const std::string& key, bool fits, const std::string& usd, double seconds,
                         double wait) {
  return "{\"key\":\"" + key + "\",\"label\":\"" + key + "\",\"fits\":" + (fits ? "true" : "false") +
         ",\"why_not\":\"" + (fits ? "" : "too little memory") +
         "\",\"layout\":\"dp=1\",\"tokens_per_s\":1000," +
         "\"basis\":\"planner (uncalibrated)\",\"wait_s\":" +
         (wait < 0 ? std::string("null") : std::to_string(wait)) + ",\"seconds\":" + std::to_string(seconds) +
         ",\"usd\":" + usd + ",\"usd_per_hour\":1,\"meets_deadline\":true,\"within_budget\":true}";
}

inline std::string decision(double t, const std::string& chosen, const std::string& words,
                            const std::vector<std::string>& places) {
  std::string out = "{\"time\":" + std::to_string(t) + ",\"chosen\":\"" + chosen + "\",\"words\":\"" + words +
                    "\",\"places\":[";
  for (size_t i = 0; i < places.size(); ++i) out += (i ? "," : "") + places[i];
  return out + "]}";
}

struct Ids {
  int64_t cheap = 0, local = 0, running = 0, waiting = 0;  // entry ids
};

// A run of `seconds` on node `node` from t0, completed.
inline int64_t ran(Database& db, const std::string& name, int64_t node, double t0, double seconds,
                   bool finish) {
  NewRun nr;
  nr.name = name;
  nr.config_json = "{}";
  nr.created_at = t0 - 10;
  const int64_t id = create_run(db, nr);
  attach_node(db, id, node, 1);
  set_status(db, id, RunStatus::kRunning, t0);
  if (finish) set_status(db, id, RunStatus::kCompleted, t0 + seconds);
  return id;
}

inline Ids build(const std::string& path, double now) {
  Database db(path);
  const int64_t a = ensure_node(db, "a", "ssh");
  const int64_t b = ensure_node(db, "b", "ssh");
  const int64_t local = ensure_node(db, "local", "local");
  set_node_pricing(db, a, NodePricing{{}, false, 6.0, {}, {}});
  set_node_pricing(db, b, NodePricing{{}, false, 2.0, {}, {}});
  const std::string tok = "token-1";
  const double t0 = now - 20000;
  Ids ids;
  auto add = [&](const std::string& name, double at) {
    NewQueueEntry e;
    e.name = name;
    e.config_toml = "[run]\nname = \"" + name + "\"\n";
    e.config_path = "/tmp/" + name + ".toml";
    return add_queue_entry(db, e, at);
  };

  ids.cheap = add("cheap-run", t0);
  const std::string d1 =
      decision(t0, "node:b", "on node b: $1.00 and 30 min to finish",
               {place("local", true, "0", 9000, 7200), place("node:c", true, "2.0", 1800, -1),
                place("node:a", true, "3.0", 1800, 0), place("cluster:hpc", true, "4.0", 2400, 600),
                place("node:b", true, "1.0", 1800, 0)});
  claim_queue_entry(db, ids.cheap, tok, "node:b", "on node b: $1.00 and 30 min to finish", d1, t0);
  const int64_t r1 = ran(db, "cheap-run", b, t0 + 1, 2700, true);
  set_queue_entry_run(db, ids.cheap, tok, r1, t0 + 1);
  mark_queue_entry_running(db, ids.cheap, tok, t0 + 2);
  finish_queue_entry(db, ids.cheap, EntryState::kDone, "completed", t0 + 2701);

  const double t1 = t0 + 3000;
  ids.local = add("local-run", t1);
  const std::string d2 = decision(t1, "local", "on this machine: $0 and 17 min to finish",
                                  {place("local", true, "0", 1000, 0), place("node:a", false, "9.0", 500, 0),
                                   place("node:b", true, "0.5", 900, 0)});
  claim_queue_entry(db, ids.local, tok, "local", "first start", d2, t1);
  const int64_t r2 = ran(db, "local-run", local, t1 + 1, 2000, true);
  set_queue_entry_run(db, ids.local, tok, r2, t1 + 1);
  mark_queue_entry_running(db, ids.local, tok, t1 + 2);
  requeue_queue_entry(db, ids.local, "node preempted", kPreemption, 40, t1 + 3);
  claim_queue_entry(db, ids.local, tok, "local", "on this machine: $0 and 17 min to finish", d2, t1 + 4);
  mark_queue_entry_running(db, ids.local, tok, t1 + 5);
  finish_queue_entry(db, ids.local, EntryState::kDone, "completed", t1 + 2001);

  const double t2 = t1 + 3000;
  ids.running = add("still-running", t2);
  claim_queue_entry(db, ids.running, tok, "node:b", "on node b", d1, t2);
  const int64_t r3 = ran(db, "still-running", b, t2 + 1, 0, false);
  set_queue_entry_run(db, ids.running, tok, r3, t2 + 1);
  mark_queue_entry_running(db, ids.running, tok, t2 + 2);

  ids.waiting = add("waiting", t2 + 10);
  set_queue_entry_why(db, ids.waiting, "waits: node b is busy", d1, t2 + 11);

  Stmt idle(db, "INSERT INTO idle_accruals(node_id, start, end, usd_per_hour, note) VALUES (?, ?, ?, ?, ?)");
  idle.bind(1, a).bind(2, t0).bind(3, t0 + 1800).bind(4, 6.0).bind(5, "idle").run();
  return ids;
}

}  // namespace savings_fixture
