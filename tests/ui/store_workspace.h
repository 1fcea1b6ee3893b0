// A realistic run store for the Compare, Costs, Settings and screenshot tests, built only through
// the db API: priced nodes, runs with loss curves (train and validation), learning rate, tokens,
// throughput and MFU, status changes that open and close cost accruals.
//
// Loss of run i at step s: 2 + 8·exp(-s / tau_i), one step every 2 s, on a node at $8/h (8 GPUs).
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "db/costs.h"
#include "db/database.h"
#include "db/metric_sink.h"
#include "db/run_store.h"
#include "db/sql.h"

namespace store_workspace {

using namespace flotilla::db;

struct RunSpec {
  std::string name;
  double tau;       // loss decay constant in steps
  int steps;        // steps written
  int planned;      // train.steps in the config
  double lr;
  double startAgo;  // seconds before `now` the run started
  bool running;     // still running at `now` (else completed after its last step)
};

inline double lossAt(const RunSpec& r, int step) { return 2.0 + 8.0 * std::exp(-step / r.tau); }
inline constexpr double kStepSeconds = 2.0;
inline constexpr double kUsdPerHour = 8.0;

inline std::string configJson(const RunSpec& r) {
  // Trained on the node's GPUs: its device-hours are GPU-hours.
  return "{\"run\":{\"device\":\"cuda\"},\"model\":{\"d_model\":256,\"n_layers\":4},\"train\":{\"steps\":" + std::to_string(r.planned) +
         ",\"micro_batch\":8},\"optimizer\":{\"lr\":" + std::to_string(r.lr) + "}}";
}

inline std::vector<RunSpec> defaultRuns() {
  return {{"baseline", 100, 400, 400, 3e-4, 3 * 86400.0, false},
          {"wide-lr", 60, 400, 400, 6e-4, 2 * 86400.0, false},
          {"long-warmup", 150, 300, 300, 3e-4, 86400.0, false},
          {"live-tuning", 80, 150, 600, 4e-4, 150 * kStepSeconds, true}};
}

// Fills `path` (created) and returns the run ids in spec order.
inline std::vector<int64_t> build(const std::string& path, double now, const std::vector<RunSpec>& specs = defaultRuns()) {
  Database db(path);
  ensure_pricing_seeded(db);
  const int64_t node = ensure_node(db, "gpu-box", "ssh", "H100", 8);
  set_node_pricing(db, node, NodePricing{{}, false, kUsdPerHour, {}, {}});
  std::vector<int64_t> ids;
  for (const RunSpec& r : specs) {
    NewRun nr;
    nr.name = r.name;
    nr.config_json = configJson(r);
    nr.created_at = now - r.startAgo - 60;
    const int64_t id = create_run(db, nr);
    ids.push_back(id);
    attach_node(db, id, node, 8);
    const double t0 = now - r.startAgo;
    set_status(db, id, RunStatus::kRunning, t0);
    std::vector<MetricRow> rows;
    for (int s = 1; s <= r.steps; ++s) {
      const double t = t0 + s * kStepSeconds;
      const double wiggle = 0.02 * std::sin(s * 0.7);
      rows.push_back({id, "loss", s, lossAt(r, s) + wiggle, t});
      rows.push_back({id, "tokens", s, s * 65536.0, t});
      rows.push_back({id, "tokens_per_s", s, 32768.0 + 500 * std::sin(s * 0.1), t});
      rows.push_back({id, "mfu", s, 0.42 + 0.01 * std::sin(s * 0.05), t});
      rows.push_back({id, "lr", s, r.lr * std::min(1.0, s / 20.0), t});
      if (s % 50 == 0) rows.push_back({id, "val_loss", s, lossAt(r, s) + 0.1, t});
    }
    write_tx(db, [&] { MetricSink(db).insert(rows); });
    if (!r.running) set_status(db, id, RunStatus::kCompleted, t0 + r.steps * kStepSeconds);
  }
  return ids;
}

}  // namespace store_workspace
