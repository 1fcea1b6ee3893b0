// The Compare page's reads, as plain functions over a reader connection of their own, so the page
// runs them in QtConcurrent tasks and applies the results on the UI thread.
//
// Decision: the cost to reach a target loss is read from the run's raw loss points (smoothed here
// with the same debiased EMA the plots use), not from the downsampled series: a bucket's "last"
// can step over the first point that crossed the target. Dollars and GPU-hours at that step come
// from the cost accruals up to the step's wall time, in runs/quality.h (first_reaching), which the
// cost to reach a task score uses too (raw evaluations, never smoothed: they are few and each one
// is a measurement, not a noisy step).
#pragma once

#include <QString>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "db/queries.h"
#include "runs/comm_efficiency.h"

namespace flotilla::ui {

struct RunListRequest {
  QString databasePath;
  QString nameContains;
};
// list_runs over a fresh connection; throws DbError.
std::vector<db::RunListItem> loadRunList(const RunListRequest& request);

// Each sweep (runs/sweep.h) with the runs its points started, in point order: what the page's
// "Sweep" list checks at once (issue 37). Throws DbError.
struct SweepGroup {
  std::string name;
  std::vector<int64_t> runIds;
  int points = 0;
};
std::vector<SweepGroup> loadSweepGroups(const QString& databasePath);

struct CompareRequest {
  QString databasePath;
  std::vector<int64_t> runIds;
  std::string metric = "loss";
  db::XAxis x = db::XAxis::kStep;
  int buckets = 800;
  double targetLoss = 0;   // the cost-to-reach target
  double smoothing = 0.6;  // EMA weight for the target search; 0 = raw loss
  double now = 0;          // 0: the current time (open accruals run up to it)
  // Cost to reach a task score: the score ("task/<task>/<score>"; "" = the plotted metric when it is
  // one, else the runs' headline score) and its target, reached upward or downward as the score goes.
  std::string scoreMetric;
  double targetScore = 0;
};

struct TargetHit {
  int64_t runId = 0;
  bool reached = false;
  int64_t step = 0;
  double lossAtStep = 0;  // the (smoothed) value that crossed
  // Spent by that step: dollars (nullopt: the run is unpriced), device-hours (CPU-h for a CPU run)
  // and running time, the same measures as the run's summary (db/queries.h RunSummary).
  std::optional<double> usd;
  double gpuHours = 0, runningSeconds = 0;
  double trainingSeconds = 0;  // the first step to that one
  bool onGpus = false;
};

struct CompareResult {
  std::vector<db::Run> runs;  // in request order
  std::vector<db::AlignedSeries> series;
  std::vector<db::RunSummary> summaries;
  // Per run, in request order: the dp group's share of its link and the hidden share of its
  // communication (runs::comm_headline of the newest comm record; empty for one-rank runs).
  std::vector<runs::CommHeadline> comm;
  std::vector<db::ConfigDifference> differences;
  std::vector<db::ConfigDifference> allConfig;  // every key, values per run
  std::vector<TargetHit> hits;
  std::vector<std::string> metricNames;  // union over the runs, sorted
  // Task scores (runs/quality.h): those the runs have (no stderr, no counts), the one the target
  // was measured on ("" none), its direction, and each run's first evaluation that reached it
  // (lossAtStep holds the score there), in run order.
  std::vector<std::string> scoreMetrics;
  std::string scoreMetric;
  bool scoreHigherIsBetter = true;
  std::vector<TargetHit> scoreHits;
};
// Everything the page shows for these runs; throws DbError.
CompareResult loadComparison(const CompareRequest& request);

// The first step whose (smoothed) loss is ≤ target, and what the run had spent by then
// (runs::first_reaching: the one place both costs are computed).
TargetHit costToReach(const db::Database& db, const db::Run& run, double target, double smoothing);
// The first evaluation of task score `metric` that reaches `target` (≥ for acc, ≤ for bits per byte).
TargetHit costToReachScore(const db::Database& db, const db::Run& run, const std::string& metric,
                           double target);

}  // namespace flotilla::ui
