// Metrics protocol v1 reader (docs/metrics-protocol.md): the typed counterpart of metrics.h's
// MetricsWriter, and the only parser of the stream. The run store's ingest (db/ingest.cpp), the
// runs layer (runs/) and the app's Live page all read records through it.
//
// Decision: a line becomes one typed record (the writer's own StepRecord, EvalRecord and
// CheckpointRecord, plus reader-side run_start, sample, event and summary records), and, when
// the caller asks, the step record's numbers flattened as (name, value) pairs: every numeric
// member of the line, top level and one level down ("time_ms.forward"), known to this build or
// not. The protocol says readers ignore what they do not know; flattening keeps it anyway, so a
// store written by an older Flotilla still holds what a newer worker added. A line counts only
// with its '\n' (LineSplitter holds a torn last line until its end arrives).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

// metrics.h declares MetricsWriter::emit, which Qt's `emit` keyword (an empty macro) would erase
// in the app's files that include this header after a Qt one.
#pragma push_macro("emit")
#undef emit
#include "engine/train/metrics.h"
#pragma pop_macro("emit")

namespace flotilla {

enum class MetricsRecordType { kRunStart, kStep, kEval, kCheckpoint, kSample, kEvent, kSummary, kTask, kComm };
const char* to_string(MetricsRecordType type);

struct RunStartRecord {
  std::string run;
  std::string config_json;  // the resolved config as JSON text ("" when absent)
  int world_size = 1;
  uint64_t parameters = 0;
  double flops_per_token = 0;
  int64_t start_step = 0;
  std::string resumed_from;  // "" when null
  int64_t pid = 0;
  uint64_t baseline_rss_bytes = 0;
  int64_t planned_steps = 0;  // config.train.steps (0 when the config does not say)
};

struct SampleRecord {
  int64_t step = 0;
  std::vector<int32_t> tokens;
  std::string text;
};

struct EventRecord {
  std::string level = "info";  // info | warning | error
  std::string message;
  std::string fields_json = "{}";  // every other member (code, file, failed_rank, ...) as a JSON object
};

struct SummaryRecord {
  int64_t steps = 0, tokens = 0;
  double final_loss = 0;
  std::optional<double> best_val_loss;
  double wall_s = 0, mean_tokens_per_s = 0, mean_mfu = 0;
  // completed | preempted (a SIGTERM nobody here asked for) | stopped (asked: a Stop, a budget; or
  // exit 0 before train.steps) | error. Before issue 34 a Stop and a budget stop also said preempted.
  std::string exit;
  std::string stop_reason;  // why it stopped early, in words ("stopped on request (flotilla app)", "")
};

struct MetricsRecord {
  MetricsRecordType type = MetricsRecordType::kEvent;
  double time = 0;  // Unix seconds; 0 when the line has none
  int rank = 0;
  std::variant<RunStartRecord, StepRecord, EvalRecord, CheckpointRecord, SampleRecord, EventRecord,
               SummaryRecord, TaskRecord, CommRecord>
      body;
  int slowest_rank = -1;  // step records of multi-rank runs
  // Filled only with ParseOptions::flatten: a step record's numbers (booleans as 0/1) by name,
  // except the protocol's own v, time, rank and step; an eval record's val_loss; a task record's
  // scores as their metric names ("task/<task>/<score>", null scores left out); a comm record's
  // figures as comm/step_ms, comm/steps, comm/<group>/size and comm/<group>/<op>/count|bytes|ms|wait_ms
  // (the names runs/comm_efficiency.cpp reads; it needs no comm/steps: the figures are per step).
  std::vector<std::pair<std::string, double>> numbers;

  const StepRecord& step() const { return std::get<StepRecord>(body); }
  const EvalRecord& eval() const { return std::get<EvalRecord>(body); }
  const CheckpointRecord& checkpoint() const { return std::get<CheckpointRecord>(body); }
  const RunStartRecord& run_start() const { return std::get<RunStartRecord>(body); }
  const SampleRecord& sample() const { return std::get<SampleRecord>(body); }
  const EventRecord& event() const { return std::get<EventRecord>(body); }
  const SummaryRecord& summary() const { return std::get<SummaryRecord>(body); }
  const TaskRecord& task() const { return std::get<TaskRecord>(body); }
  const CommRecord& comm() const { return std::get<CommRecord>(body); }
  // The record's step (step, eval, task, checkpoint, sample, comm records; summary: steps), else 0.
  int64_t step_number() const;
};

enum class ParseStatus {
  kRecord,        // `out` holds the record
  kBlank,         // an empty line (or only '\r' / spaces): not counted as anything
  kBad,           // not JSON, not an object, no v/type, or a required field missing
  kOtherVersion,  // "v" is not 1: skipped, as the protocol asks
  kUnknownType,   // a record type added after this build: skipped
};

struct ParseOptions {
  bool flatten = false;  // fill MetricsRecord::numbers
};

// Parses one line (without its '\n'; a trailing '\r' is tolerated). `error` (optional) gets why
// a bad line was refused.
ParseStatus parse_metrics_line(std::string_view line, MetricsRecord& out, const ParseOptions& options = {},
                               std::string* error = nullptr);

// Splits a byte stream into complete lines, in any chunking: a line is complete with its '\n';
// the bytes after the last '\n' are held until the rest arrives.
class LineSplitter {
 public:
  // Appends `bytes` and returns the lines they complete (without their '\n').
  std::vector<std::string> feed(std::string_view bytes);
  // The torn tail held back (bytes after the last '\n').
  size_t pending_bytes() const { return partial_.size(); }
  // Drops the torn tail (end of stream); returns how many bytes it held.
  size_t drop_pending();

 private:
  std::string partial_;
};

}  // namespace flotilla
