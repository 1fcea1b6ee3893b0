// Advice on a run's communication (issue 36): rules that turn the efficiency figures
// (comm_efficiency.h), the layout and the measured links into plain advice with the numbers that
// triggered it, and the config change to try. Shown by Live, `flotilla runs show` / `flotilla run`,
// and used by nothing that acts on its own: advice is for the user to follow.
//
// Each rule has a test that shows it firing on a crafted measurement and staying silent on a healthy
// one (tests/runs/test_comm_advice.cpp). Rules (docs/communication.md lists them with thresholds):
//   bucket_bdp        gradient buckets small against the link's bandwidth-delay product
//   bucket_overlap    buckets so large that little overlaps the backward pass
//   tp_across_nodes   a tensor-parallel group crosses nodes
//   pipeline_bubble   pipeline bubble share high for the micro-batches per step
//   straggler         one rank's step (or one link) much slower than the others
//   exposed_comm      blocked (non-overlapped) communication above a share of the step
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "db/database.h"
#include "runs/comm_efficiency.h"

namespace flotilla::runs {

struct Advice {
  std::string rule;      // "bucket_bdp", "tp_across_nodes", ...
  std::string severity;  // "warning" (costs much step time) | "info"
  // One or two sentences with the numbers, e.g. "dp's all-reduce reaches 31% of the 1.25 GB/s link
  // node-a -> node-b: its 25 MiB buckets are small for this link's bandwidth-delay product (3.1 MB);
  // try parallel.bucket_mb = 100."
  std::string text;
  std::vector<std::pair<std::string, double>> figures;  // the numbers that triggered it, by name
  std::string change;  // the config change to try, as `flotilla run --set` takes it ("parallel.bucket_mb=100"); "" none
};

// What the rules look at: the efficiency report, the layout and the per-rank step times.
struct AdviceInput {
  CommReport report;
  int dp = 1, tp = 1, pp = 1, zero = 0, micro_batches = 1;
  double bucket_mb = 0;  // parallel.bucket_mb as configured (0 = one bucket per layer)
  double bucket_bytes = 0;  // the mean gradient bucket's bytes as the run used it (0 unknown)
  bool overlap = true;   // parallel.overlap
  double step_ms = 0;    // mean step time
  double bubble_ms = 0;  // mean pipeline bubble per step (time_ms.bubble)
  // Per global rank, the mean of its own work per step: ranks.<r>.step_ms less ranks.<r>.comm_ms (a
  // synchronous step ends together on every rank); empty if one rank.
  std::vector<double> rank_step_ms;
  std::vector<std::string> rank_nodes;  // node name per global rank (launch order), empty if unknown
};

std::vector<Advice> advise(const AdviceInput& input);
// The input for a stored run (its comm report, config and step figures), then advise().
std::vector<Advice> run_advice(const db::Database& db, int64_t run_id);
// "advice:\n  - <text> (try: <change>)\n" lines; "" when there is none.
std::string advice_text(const std::vector<Advice>& advice);

}  // namespace flotilla::runs
