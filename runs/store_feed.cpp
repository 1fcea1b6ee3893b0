// A stored run's records read back from the store as it grows (see store_feed.h).
#include "runs/store_feed.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "db/queries.h"
#include "db/run_records.h"

namespace flotilla::runs {
namespace {

// GCC 12 at -O3 reports a record's other variant alternatives as maybe-uninitialized when one is
// built field by field (a false positive; ui/runs/servicerun.cpp met it first).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The order of records that share a time: a step before its evaluation, its checkpoint, its sample.
int rank_of(MetricsRecordType t) {
  switch (t) {
    case MetricsRecordType::kRunStart:
      return 0;
    case MetricsRecordType::kStep:
      return 1;
    case MetricsRecordType::kEval:
      return 2;
    case MetricsRecordType::kTask:
      return 2;
    case MetricsRecordType::kComm:
      return 2;
    case MetricsRecordType::kCheckpoint:
      return 3;
    case MetricsRecordType::kSample:
      return 4;
    case MetricsRecordType::kEvent:
      return 5;
    case MetricsRecordType::kSummary:
      return 6;
  }
  return 7;
}

int64_t planned_steps_of(const db::Run& run) {
  for (const auto& [key, value] : db::flatten_config(run.config_json))
    if (key == "train.steps") return std::atoll(value.c_str());
  return 0;
}

// A run_start record from the store: the event's fields (what the worker said), else the row.
MetricsRecord run_start_of(const db::Run& run, double time, const std::string& fields_json) {
  MetricsRecord r;
  r.type = MetricsRecordType::kRunStart;
  r.time = time;
  RunStartRecord s;
  s.run = run.name;
  s.world_size = static_cast<int>(run.world_size.value_or(1));
  s.parameters = static_cast<uint64_t>(run.parameters.value_or(0));
  s.flops_per_token = run.flops_per_token.value_or(0);
  s.planned_steps = planned_steps_of(run);
  const nlohmann::json f = nlohmann::json::parse(fields_json, nullptr, false);
  if (f.is_object()) {
    const auto num = [&](const char* key, double fallback) {
      const auto it = f.find(key);
      return it != f.end() && it->is_number() ? it->get<double>() : fallback;
    };
    s.start_step = static_cast<int64_t>(num("start_step", 0));
    if (const double p = num("planned_steps", 0); p > 0) s.planned_steps = static_cast<int64_t>(p);
    s.world_size = static_cast<int>(num("world_size", s.world_size));
    s.parameters = static_cast<uint64_t>(num("parameters", static_cast<double>(s.parameters)));
    s.baseline_rss_bytes = static_cast<uint64_t>(num("baseline_rss_bytes", 0));
  }
  r.body = s;
  return r;
}

// The step record's scalar fields by their stored names (the flattened protocol, metrics.h).
using SetField = void (*)(MetricsRecord&, StepRecord&, double);
const std::pair<const char*, SetField> kStepFields[] = {
    {"loss", [](MetricsRecord&, StepRecord& s, double v) { s.loss = static_cast<float>(v); }},
    {"tokens", [](MetricsRecord&, StepRecord& s, double v) { s.tokens = static_cast<int64_t>(v); }},
    {"lr", [](MetricsRecord&, StepRecord& s, double v) { s.lr = v; }},
    {"grad_norm", [](MetricsRecord&, StepRecord& s, double v) { s.grad_norm = static_cast<float>(v); }},
    {"tokens_per_s", [](MetricsRecord&, StepRecord& s, double v) { s.tokens_per_s = v; }},
    {"mfu", [](MetricsRecord&, StepRecord& s, double v) { s.mfu = v; }},
    {"step_ms", [](MetricsRecord&, StepRecord& s, double v) { s.step_ms = v; }},
    {"time_ms.data", [](MetricsRecord&, StepRecord& s, double v) { s.data_ms = v; }},
    {"time_ms.forward", [](MetricsRecord&, StepRecord& s, double v) { s.forward_ms = v; }},
    {"time_ms.backward", [](MetricsRecord&, StepRecord& s, double v) { s.backward_ms = v; }},
    {"time_ms.optimizer", [](MetricsRecord&, StepRecord& s, double v) { s.optimizer_ms = v; }},
    {"time_ms.comm", [](MetricsRecord&, StepRecord& s, double v) { s.comm_ms = v; }},
    {"time_ms.bubble", [](MetricsRecord&, StepRecord& s, double v) { s.bubble_ms = v; }},
    {"peak_rss_bytes", [](MetricsRecord&, StepRecord& s,
                          double v) { s.peak_rss_bytes = v > 0 ? static_cast<uint64_t>(v) : 0; }},
    {"skipped", [](MetricsRecord&, StepRecord& s, double v) { s.skipped = v != 0; }},
    {"slowest_rank", [](MetricsRecord& r, StepRecord&, double v) { r.slowest_rank = static_cast<int>(v); }},
};

// ranks.<q>.<part>: one rank's split of the step, in the protocol's order (metrics.h).
void set_rank_part(StepRecord& s, const std::string& name, double v) {
  static const char* const kParts[] = {"data_ms", "forward_ms", "backward_ms", "optimizer_ms",
                                       "comm_ms", "step_ms",    "bubble_ms"};
  const size_t dot = name.find('.', 6);
  const size_t q = std::strtoul(name.c_str() + 6, nullptr, 10);
  if (dot == std::string::npos || q >= 4096) return;  // a hostile rank number allocates nothing
  const std::string part = name.substr(dot + 1);
  for (size_t k = 0; k < 7; ++k) {
    if (part != kParts[k]) continue;
    if (s.ranks.size() <= q) s.ranks.resize(q + 1, std::vector<float>(7, 0.0f));
    s.ranks[q][k] = static_cast<float>(v);
  }
}

// gpus.<device>.<field>: one GPU's memory at the step.
void set_gpu_field(StepRecord& s, const std::string& name, double v) {
  const size_t dot = name.find('.', 5);
  if (dot == std::string::npos) return;
  const int device = std::atoi(name.c_str() + 5);
  auto it =
      std::find_if(s.gpus.begin(), s.gpus.end(), [&](const GpuRecord& g) { return g.device == device; });
  if (it == s.gpus.end()) {
    GpuRecord g;
    g.device = device;
    s.gpus.push_back(g);
    it = s.gpus.end() - 1;
  }
  const std::string field = name.substr(dot + 1);
  if (field == "mem_bytes") it->mem_bytes = static_cast<uint64_t>(v);
  if (field == "mem_total_bytes") it->mem_total_bytes = static_cast<uint64_t>(v);
}

MetricsRecord step_of(const db::StepValues& row) {
  MetricsRecord r;
  r.type = MetricsRecordType::kStep;
  r.time = row.time;
  StepRecord s;
  s.step = row.step;
  s.loss = static_cast<float>(kNaN);  // a step stored without a loss (null in its line)
  for (const auto& [name, v] : row.values) {
    if (name.rfind("ranks.", 0) == 0) {
      set_rank_part(s, name, v);
      continue;
    }
    if (name.rfind("gpus.", 0) == 0) {
      set_gpu_field(s, name, v);
      continue;
    }
    for (const auto& [field, set] : kStepFields)
      if (name == field) set(r, s, v);
    r.numbers.emplace_back(name, v);
  }
  std::sort(s.gpus.begin(), s.gpus.end(),
            [](const GpuRecord& a, const GpuRecord& b) { return a.device < b.device; });
  r.body = std::move(s);
  return r;
}

// A comm record from its stored names (comm/step_ms, comm/<g>/size, comm/<g>/<op>/<field>).
CommRecord comm_of(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  CommRecord c;
  c.step = step;
  std::map<std::string, CommGroupRecord> groups;
  std::map<std::string, std::map<std::string, CommOpRecord>> ops;
  for (const auto& [name, v] : values) {
    if (name == "comm/step_ms") {
      c.step_ms = v;
      continue;
    }
    if (name == "comm/steps") {
      c.steps = static_cast<int64_t>(v);
      continue;
    }
    const size_t a = name.find('/', 5);
    if (a == std::string::npos) continue;
    const std::string group = name.substr(5, a - 5);
    const size_t b = name.find('/', a + 1);
    if (b == std::string::npos) {
      if (name.compare(a + 1, std::string::npos, "size") == 0) {
        groups[group].group = group;
        groups[group].size = static_cast<int>(v);
      }
      continue;
    }
    const std::string op = name.substr(a + 1, b - a - 1), field = name.substr(b + 1);
    CommOpRecord& o = ops[group][op];
    o.op = op;
    if (field == "count") o.count = v;
    if (field == "bytes") o.bytes = v;
    if (field == "ms") o.ms = v;
    if (field == "wait_ms") o.wait_ms = v;
  }
  for (auto& [name, g] : groups) {
    for (auto& [op, o] : ops[name]) g.ops.push_back(o);
    c.groups.push_back(std::move(g));
  }
  return c;
}

}  // namespace

StoreRead StoreFeedReader::read(const db::Database& db) {
  StoreRead out;
  // The row first: a run that ended before the reads below has all its rows stored already (its
  // end is recorded after its last line), so `ended` never hides a record.
  out.run = db::get_run(db, run_id_);
  const db::RunStatus st = out.run.status;
  out.ended = st != db::RunStatus::kCreated && st != db::RunStatus::kQueued &&
              st != db::RunStatus::kRunning && st != db::RunStatus::kPaused;
  std::vector<MetricsRecord> records;

  for (const db::EventInfo& e : db::events_after(db, run_id_, last_event_)) {
    last_event_ = std::max(last_event_, e.id);
    if (e.kind == "run_start") {
      records.push_back(run_start_of(out.run, e.time, e.fields_json));
      started_ = true;
    } else if (e.kind == "worker") {
      MetricsRecord r;
      r.type = MetricsRecordType::kEvent;
      r.time = e.time;
      r.rank = e.rank;
      EventRecord ev;
      ev.level = e.level;
      ev.message = e.message;
      ev.fields_json = e.fields_json;
      r.body = ev;
      records.push_back(std::move(r));
    } else if (e.kind == "sample") {
      MetricsRecord r;
      r.type = MetricsRecordType::kSample;
      r.time = e.time;
      r.rank = e.rank;
      SampleRecord s;
      s.text = e.message;
      const nlohmann::json f = nlohmann::json::parse(e.fields_json, nullptr, false);
      if (f.is_object()) {
        if (const auto it = f.find("step"); it != f.end() && it->is_number()) s.step = it->get<int64_t>();
        if (const auto it = f.find("tokens"); it != f.end() && it->is_array())
          for (const auto& t : *it)
            if (t.is_number_integer()) s.tokens.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
      r.body = std::move(s);
      records.push_back(std::move(r));
    }
  }

  const std::vector<db::StepValues> steps = db::step_values_after(db, run_id_, last_step_);
  // A run stored without a run_start event (one from before, or a worker that never wrote one)
  // starts from its row, once it has a step.
  if (!started_ && !steps.empty()) {
    records.push_back(run_start_of(out.run, out.run.started_at.value_or(steps.front().time), "{}"));
    started_ = true;
  }
  for (const db::StepValues& row : steps) {
    records.push_back(step_of(row));
    last_step_ = std::max(last_step_, row.step);
  }
  for (const db::Point& p : db::metric_points_after(db, run_id_, "val_loss", last_eval_)) {
    MetricsRecord r;
    r.type = MetricsRecordType::kEval;
    r.time = p.time;
    EvalRecord e;
    e.step = p.step;
    e.tokens = -1;
    e.val_loss = static_cast<float>(p.value);
    r.body = e;
    r.numbers.emplace_back("val_loss", p.value);
    records.push_back(std::move(r));
    last_eval_ = std::max(last_eval_, p.step);
  }
  // Evaluation tasks: each task's scores at a step (stored together, db/ingest.cpp) become one
  // task record again. The kind is not stored; it is named from the headline score it has.
  {
    std::map<std::pair<std::string, int64_t>, MetricsRecord> tasks;
    for (const std::string& name : db::metric_names(db, run_id_)) {
      if (name.rfind("task/", 0) != 0) continue;
      const size_t slash = name.rfind('/');
      if (slash <= 5 || slash + 1 >= name.size()) continue;
      const std::string task = name.substr(5, slash - 5), score = name.substr(slash + 1);
      int64_t& cursor = last_task_[task];
      for (const db::Point& p : db::metric_points_after(db, run_id_, name, cursor)) {
        MetricsRecord& r = tasks[{task, p.step}];
        if (r.type != MetricsRecordType::kTask) {
          r.type = MetricsRecordType::kTask;
          r.time = p.time;
          TaskRecord t;
          t.step = p.step;
          t.tokens = -1;
          t.task = task;
          r.body = t;
        }
        std::get<TaskRecord>(r.body).scores.emplace_back(score, p.value);
        r.numbers.emplace_back(name, p.value);
        r.time = std::max(r.time, p.time);
      }
    }
    for (auto& [key, r] : tasks) {
      TaskRecord& t = std::get<TaskRecord>(r.body);
      std::vector<std::string> names;
      for (const auto& sc : t.scores) names.push_back(sc.first);
      t.kind = db::task_kind_of_headline(db::task_headline(names));
      last_task_[key.first] = std::max(last_task_[key.first], key.second);
      records.push_back(std::move(r));
    }
  }
  // Comm records: up to the highest step whose comm/step_ms is committed (every record writes it, in
  // the same transaction as its other comm/ rows), so none comes back in part.
  {
    int64_t hi = last_comm_;
    for (const db::Point& p : db::metric_points_after(db, run_id_, "comm/step_ms", last_comm_))
      hi = std::max(hi, p.step);
    if (hi > last_comm_) {
      std::map<int64_t, MetricsRecord> comms;
      for (const std::string& name : db::metric_names(db, run_id_)) {
        if (name.rfind("comm/", 0) != 0) continue;
        for (const db::Point& p : db::metric_points_after(db, run_id_, name, last_comm_)) {
          if (p.step > hi) break;
          MetricsRecord& r = comms[p.step];
          r.type = MetricsRecordType::kComm;
          r.time = std::max(r.time, p.time);
          r.numbers.emplace_back(name, p.value);
        }
      }
      for (auto& [step, r] : comms) {
        r.body = comm_of(step, r.numbers);
        records.push_back(std::move(r));
      }
      last_comm_ = hi;
    }
  }
  for (const db::CheckpointInfo& c : db::list_checkpoints(db, run_id_)) {
    if (c.step <= last_checkpoint_) continue;
    MetricsRecord r;
    r.type = MetricsRecordType::kCheckpoint;
    r.time = c.time;
    CheckpointRecord cr;
    cr.step = c.step;
    cr.dir = c.dir;
    cr.bytes = static_cast<uint64_t>(std::max<int64_t>(0, c.bytes));
    cr.seconds = c.seconds;
    cr.reason = c.reason;
    r.body = cr;
    records.push_back(std::move(r));
    last_checkpoint_ = c.step;
  }
  std::stable_sort(records.begin(), records.end(), [](const MetricsRecord& a, const MetricsRecord& b) {
    if (a.time != b.time) return a.time < b.time;
    if (rank_of(a.type) != rank_of(b.type)) return rank_of(a.type) < rank_of(b.type);
    return a.step_number() < b.step_number();
  });
  if (!out.run.summary_json.empty() && out.run.summary_json != summary_) {
    MetricsRecord s;
    if (parse_metrics_line(out.run.summary_json, s) == ParseStatus::kRecord &&
        s.type == MetricsRecordType::kSummary) {
      records.push_back(std::move(s));
      summary_ = out.run.summary_json;
    }
  }
  count_ += records.size();
  out.records = std::move(records);
  return out;
}

#pragma GCC diagnostic pop

}  // namespace flotilla::runs
