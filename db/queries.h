// Read queries for the app and the CLI: run lists, downsampled series, aligned series of several
// runs, comparison summaries. All take a reader connection (a Database the caller owns) and only read.
//
// Decision: downsampling happens in the database layer, not in the plot: a series of any length
// comes back as at most N buckets carrying min, max and last (a spike in one step survives at any
// zoom). Wide spans are answered from metric_blocks (256 steps per row, see metric_sink.h) with
// buckets made of whole blocks; narrow spans scan the raw rows (at most N × 256 of them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "db/database.h"
#include "db/run_store.h"

namespace flotilla::db {

struct RunFilter {
  std::vector<RunStatus> statuses;  // empty: any
  std::string name_contains;        // "": any
  std::string tag;                  // "": any
  std::optional<double> created_after, created_before;
  enum class Sort { kCreated, kName, kStatus, kFinalLoss, kSteps } sort = Sort::kCreated;
  bool descending = true;
  int limit = 0;  // 0: no limit
};

struct RunListItem {
  Run run;
  int64_t last_step = 0;            // highest step with a loss
  std::optional<double> last_loss;  // loss at last_step
  int64_t checkpoints = 0;          // committed checkpoints recorded (on disk or not)
};
std::vector<RunListItem> list_runs(const Database& db, const RunFilter& filter = {});
// Whether any run has one of `statuses` (a cheap check before looking closer).
bool any_run_in(const Database& db, const std::vector<RunStatus>& statuses);

// Metric names stored for a run, sorted; without the per-rank and per-GPU breakdown of a step
// ("ranks.<rank>.<part>", "gpus.<device>.<field>", see ingest.h), which only the Live page reads.
std::vector<std::string> metric_names(const Database& db, int64_t run_id);
// The value of (run, name) at its highest step, nullopt when there is none (an indexed lookup).
std::optional<double> last_metric_value(const Database& db, int64_t run_id, const std::string& name);

// A run's stored steps as rows (step order), each with the values of `names` at that step (NaN
// where a metric has no value there) and the step's wall time (the latest of its values' times):
// what a page that starts following a run late replays instead of re-reading the worker's file.
struct StepRow {
  int64_t step = 0;
  double time = 0;
  std::vector<double> values;  // one per requested name
};
std::vector<StepRow> step_rows(const Database& db, int64_t run_id, const std::vector<std::string>& names,
                               int64_t up_to_step = INT64_MAX);

// Every value stored for each step after `after_step` (every name but val_loss and the task/ scores,
// which are evaluations', and the comm/ figures, which are comm records' and commit after their
// step's rows), step order, up to the highest step whose rows were committed when the call began
// (a step's rows commit together, so no step comes back with part of its values). The follower's
// read (runs/store_feed.h): a run's step records as the store has them.
struct StepValues {
  int64_t step = 0;
  double time = 0;
  std::vector<std::pair<std::string, double>> values;
};
std::vector<StepValues> step_values_after(const Database& db, int64_t run_id, int64_t after_step);
struct Bucket {
  int64_t first_step = 0, last_step = 0;  // steps present in the bucket
  int64_t count = 0;
  double min = 0, max = 0;
  double last = 0;       // value at last_step
  double last_time = 0;  // wall time of last_step
};
// The series (run, name) over steps [from, to] (defaults: all) as at most `buckets` buckets of
// consecutive steps, in step order; empty buckets are omitted.
std::vector<Bucket> metric_series(const Database& db, int64_t run_id, const std::string& name, int buckets,
                                  std::optional<int64_t> from = std::nullopt,
                                  std::optional<int64_t> to = std::nullopt);

// Every stored point of one metric, step order (exports, small series).
struct Point {
  int64_t step = 0;
  double value = 0, time = 0;
};
std::vector<Point> metric_points(const Database& db, int64_t run_id, const std::string& name);
// The points of (run, name) after `after_step`, step order (a follower's validation losses).
std::vector<Point> metric_points_after(const Database& db, int64_t run_id, const std::string& name,
                                       int64_t after_step);

enum class XAxis { kStep, kTokens, kWallTime, kGpuHours, kDollars };
const char* to_string(XAxis x);
struct AlignedPoint {
  double x = 0;
  int64_t step = 0;
  double min = 0, max = 0, last = 0;
};
struct AlignedSeries {
  int64_t run_id = 0;
  std::string run_name;
  std::vector<AlignedPoint> points;  // x increasing
};
// One metric of several runs on a common x axis: step, tokens (the run's "tokens" metric at that
// step), wall seconds since the run's first point, GPU-hours or dollars accrued up to the point's
// time (cost accruals; GPU-hours fall back to world_size × running time when a run has none).
std::vector<AlignedSeries> aligned_series(const Database& db, const std::vector<int64_t>& run_ids,
                                          const std::string& name, XAxis x, int buckets, double now = 0);

// A run's figures for every page and command (docs/store.md, "A run's time and money"). Two
// durations, each with one meaning and one name wherever it is shown:
//   running time (running_s): how long the run was in status running, its cost intervals' union
//     measured monotonically (else started → ended/now); what its price multiplies and what
//     budget.max_hours caps, so cost = $/h × running time for a run priced once;
//   training time (training_s): its first recorded step to its last (start-up and the final
//     checkpoint excluded), what tokens/s are measured over.
// Device-hours are running time × devices (GPU-h for a GPU run, else CPU-h).
// A task's headline score at its best (evaluation tasks during training, eval.tasks): the first of
// acc_norm, bits_per_byte, exact_match the task has, else its first score; bits_per_byte, perplexity
// and nll_per_token are better lower, the others higher (engine/eval/task.h's rule).
struct TaskBest {
  std::string task;   // "arc-mini"
  std::string score;  // "acc_norm"
  double value = 0;
  int64_t step = 0;  // the step it was reached at (the first, on ties)
  std::string metric() const { return "task/" + task + "/" + score; }
};
// Each task/<task>/<score> metric's task once, its headline score at its best; sorted by task.
std::vector<TaskBest> best_task_scores(const Database& db, int64_t run_id);
// Whether a score name is better higher (acc, acc_norm, exact_match, ...) or lower.
bool task_score_higher_is_better(const std::string& score);
// The headline among a task's score names: the first of acc_norm, bits_per_byte, exact_match
// present, else the first name ("" for none).
std::string task_headline(const std::vector<std::string>& score_names);
// The task kind a headline score names: multiple_choice, perplexity, generate ("" other).
std::string task_kind_of_headline(const std::string& headline);

struct RunSummary {
  int64_t run_id = 0;
  std::string name, status;
  int64_t steps = 0;
  std::optional<double> final_loss, best_loss, best_val_loss;
  std::vector<TaskBest> best_tasks;  // evaluation tasks: each one's headline score at its best
  double tokens = 0;
  std::optional<double> tokens_per_s, mfu;  // means over the run's step records
  double running_s = 0;                     // running time (see above)
  double training_s = 0;                    // training time (see above; else the running time)
  double gpu_hours = 0;  // device-hours: GPU-hours when on_gpus, else CPU-h (costs.h)
  bool on_gpus = false;
  // Dollars: nullopt when the run is unpriced (no price on the run nor on any of its intervals),
  // never a made-up $0.
  std::optional<double> cost_usd, usd_per_million_tokens;
};
RunSummary run_summary(const Database& db, int64_t run_id, double now = 0);
// The run's running time in seconds up to `now` (0: the present), as RunSummary::running_s.
double run_time_running(const Database& db, const Run& run, double now = 0);

// Flattens a config JSON object to dotted keys ("train.steps" -> "200"), in key order.
std::vector<std::pair<std::string, std::string>> flatten_config(const std::string& config_json);
struct ConfigDifference {
  std::string key;
  std::vector<std::string> values;  // one per run, "" where a run lacks the key
};
// Keys whose values are not all equal across the runs (in the order given).
std::vector<ConfigDifference> config_differences(const std::vector<Run>& runs);

}  // namespace flotilla::db
