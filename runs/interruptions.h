// A place's mean time between interruptions (MTBI), for checkpoint.every = "auto"
// (engine/train/checkpoint_interval.h, docs/scheduling.md "Checkpoint interval"): the scheduler
// computes it when it starts a run (--set checkpoint.mtbi_s=<seconds>) and rewrites
// <run dir>/checkpoint.mtbi when it records a preemption on the run's place.
//
// Decision: a Bayesian-style estimate with one pseudo-interruption. A place's interruptions are
// taken as a Poisson process; its observed record (run-hours H there, n preemptions) is joined by
// a prior worth one interruption in P hours, so MTBI = (H + P) / (n + 1). A place never seen
// preempted gets P (not infinity: an unobserved place is not a safe one), the first preemption
// halves the estimate at once, and a long calm record outweighs the prior. P is stated, not
// learned:
// - a spot node: P = kSpotPriorHours = 24 h. GCP's preemptible VMs stop after at most 24 h, and
//   spot interruption rates of the large clouds reach several per day at busy times; a day is the
//   figure a user can check against their provider and it errs toward saving more often.
// - this machine, an on-demand node, a Slurm cluster: P = kOnDemandPriorHours = 720 h (30 days):
//   reboots for updates, power and hardware faults on a machine nobody reclaims (large fleets
//   report a failure per node every few months; a month is the cautious side of that).
// A place of several nodes ("nodes:A,B") is interrupted when any one is: its rate is the sum of
// its nodes' rates, so its MTBI is 1 / sum(1 / MTBI_i).
//
// Preemptions and hours come from the store (db/interruptions_reads.h): a preemption counts on the
// nodes or cluster where its run was running when it was preempted.
#pragma once

#include <cstdint>
#include <string>

#include "db/database.h"

namespace flotilla::runs {

inline constexpr double kSpotPriorHours = 24;
inline constexpr double kOnDemandPriorHours = 720;

struct Mtbi {
  double seconds = 0;         // the estimate; 0 when the place key is not understood
  int64_t preemptions = 0;    // recorded on the place (each node's, summed)
  double observed_hours = 0;  // run-hours on the place (each node's, summed)
  std::string basis;          // words: "node b: 2 preemptions in 40 h (spot prior: 1 per 24 h)"
};

// The MTBI of a place key: "local", "node:NAME", "nodes:A,B", "cluster:NAME" or
// "cluster:NAME/PARTITION" (docs/scheduling.md). A node or cluster not in the store gets its
// prior alone (a node without a stored price counts as on-demand).
Mtbi place_mtbi(const db::Database& db, const std::string& place_key, double now);

// Rewrites <run_dir>/checkpoint.mtbi with `mtbi` (seconds and basis); the running worker picks it
// up within seconds. False when it cannot be written (no run folder, a remote run: see
// docs/scheduling.md) or the estimate is 0.
bool write_mtbi_file(const std::string& run_dir, const Mtbi& mtbi);

// "--set" value for the worker: "checkpoint.mtbi_s=21600" (whole seconds, at least 1).
std::string mtbi_override(const Mtbi& mtbi);

}  // namespace flotilla::runs
