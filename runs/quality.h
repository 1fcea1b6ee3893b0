// A run's quality beside its cost: the cost to reach a loss or a task score (Compare's tables, the
// same numbers in the app and `flotilla`), and an evaluation's scores as `flotilla-worker eval
// --json` prints them, parsed and stored as the run's metrics (the app's "Evaluate…" and `flotilla
// runs eval` both go through here).
//
// Decision: one place computes "what had the run spent when it first got there": the wall time of
// the first point that reaches the target is looked up in the run's cost accruals (db/costs.h), so a
// loss target and a score target are measured alike, with the run summary's meanings (running time
// charged, device-hours, dollars; nullopt dollars for an unpriced run, never $0).
//
// Decision: an evaluation done after the fact is stored at its checkpoint's step with that step's
// TRAINING wall time (the time of the run's loss at that step), not the time the evaluation ran: the
// Dollars and Device-hours axes and the cost to reach a score read a point's time, and a score
// computed a week later must not look a week's spend more expensive. Each score is the metric
// "task/<task>/<score>" (the count n included), as training's own evaluations store them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "db/database.h"
#include "db/queries.h"
#include "db/run_store.h"

namespace flotilla::runs {

// The first point of a series that reaches a target, and what the run had spent by then.
struct ReachHit {
  int64_t run_id = 0;
  bool reached = false;
  int64_t step = 0;
  double value = 0;             // the value that reached the target (smoothed, for a smoothed loss)
  std::optional<double> usd;    // nullopt: the run is unpriced
  double device_hours = 0;      // GPU-h when on_gpus, else CPU-h
  double running_seconds = 0;   // charged running time up to that point
  double training_seconds = 0;  // the run's first step to that one
  bool on_gpus = false;
};

// The first i with values[i] <= target (higher_is_better false) or >= target (true), `values`
// matching `points` one for one (a smoothed copy of their values, or their values), and the run's
// spend at points[i].time. `first_time`: the wall time of the run's first training step (nullopt:
// points.front().time).
ReachHit first_reaching(const db::Database& db, const db::Run& run, const std::vector<db::Point>& points,
                        const std::vector<double>& values, double target, bool higher_is_better,
                        std::optional<double> first_time = std::nullopt);

// Whether a higher value of score `name` ("acc_norm", or a metric "task/arc/acc_norm") is better:
// engine/eval/task.h's higher_is_better on its score part (lower for bits_per_byte, perplexity,
// nll_per_token and every *_stderr; higher for acc, acc_norm, exact_match).
bool score_higher_is_better(const std::string& name);
// Whether a metric name is a task score worth a target: "task/<task>/<score>" but not a standard
// error, nor the example count n, nor the token and byte counts.
bool is_task_score_metric(const std::string& metric);
// The headline score of task scores a run has (eval::headline_score of multiple choice, generation,
// perplexity, in that order: acc_norm, exact_match, bits_per_byte), else the first task score; ""
// when `metrics` has none.
std::string headline_task_metric(const std::vector<std::string>& metrics);

// The first evaluation of `metric` that reaches `target` (in the score's direction), and the spend
// by then; training seconds count from the run's first loss point.
ReachHit cost_to_reach_score(const db::Database& db, const db::Run& run, const std::string& metric,
                             double target);

// Evaluating a checkpoint ---------------------------------------------------------------------

// What to ask `flotilla-worker eval` for (the app's Evaluate dialog and `flotilla runs eval`).
struct EvalRequest {
  std::string checkpoint;  // a step-N, checkpoints or run folder
  std::string task;        // the task file
  std::string kind;        // multiple_choice | perplexity | generate; "" = from the file
  std::string name;        // the task's name in metric names; "" = the file's stem
  std::string dev;         // few-shot examples ("" none)
  int fewshot = 0;
  int limit = 0;  // 0: every example
  int stride = 0;
  std::string regex;
  int max_tokens = 0;     // 0: the worker's default
  int batch = 0;          // 0: the worker's default
  std::string tokenizer;  // the run's (run_tokenizer_path); "" = the one the worker finds for the checkpoint
};
// `eval --checkpoint C --task F [--kind K] [--name N] [--dev D --fewshot N] [--limit N] [--stride N]
// [--regex R] [--max-tokens N] [--batch N] [--tokenizer T] --json`.
std::vector<std::string> eval_worker_args(const EvalRequest& request);

// One evaluation as the worker reports it: its --json line.
struct EvalOutcome {
  std::string task, kind, source;
  int64_t step = -1;  // the checkpoint's step (-1: a Hugging Face folder)
  double seconds = 0, examples_per_s = 0;
  std::vector<std::pair<std::string, double>> scores;  // in the line's order (acc, acc_norm, ..., n)
};
// The last line of `stdout_text` that is a JSON object. Throws flotilla::Error (kData) saying what
// is wrong (no such line, no task name or a bad one, no numeric score).
EvalOutcome parse_eval_json(const std::string& stdout_text);

// Stores every score of `outcome` as metric "task/<task>/<score>" of run `run_id` at `step` (the
// time: that step's training time, see above), in one write transaction; returns the metric names.
// Throws db::DbError.
std::vector<std::string> store_eval(db::Database& db, int64_t run_id, int64_t step,
                                    const EvalOutcome& outcome);

}  // namespace flotilla::runs
