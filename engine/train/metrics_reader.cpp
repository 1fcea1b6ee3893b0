// Metrics protocol v1 reader (see metrics_reader.h for the flattening decision).
#include "engine/train/metrics_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <nlohmann/json.hpp>

namespace flotilla {
namespace {

using json = nlohmann::json;

double num(const json& j, const char* key, double fallback = 0) {
  const auto it = j.find(key);
  return (it != j.end() && it->is_number()) ? it->get<double>() : fallback;
}

int64_t inum(const json& j, const char* key, int64_t fallback = 0) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return fallback;
  if (it->is_number_float()) {
    // A float outside int64's range (1e126, found by fuzz_metrics) cannot be converted: the fallback.
    const double v = it->get<double>();
    return std::isfinite(v) && std::fabs(v) < 9.2e18 ? static_cast<int64_t>(v) : fallback;
  }
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) return fallback;
  return it->get<int64_t>();
}

uint64_t unum(const json& j, const char* key) {
  const double v = num(j, key, 0);
  return v > 0 && v < 1.8e19 ? static_cast<uint64_t>(v) : 0;
}

std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  return (it != j.end() && it->is_string()) ? it->get<std::string>() : std::string();
}

bool is_protocol_key(const std::string& key) {
  return key == "v" || key == "type" || key == "time" || key == "rank" || key == "step";
}

void flatten_step(const json& j, std::vector<std::pair<std::string, double>>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (is_protocol_key(key)) continue;
    if (it->is_number()) {
      out.emplace_back(key, it->get<double>());
    } else if (it->is_boolean()) {
      out.emplace_back(key, it->get<bool>() ? 1.0 : 0.0);
    } else if (it->is_object()) {
      for (auto sub = it->begin(); sub != it->end(); ++sub)
        if (sub->is_number()) out.emplace_back(key + "." + sub.key(), sub->get<double>());
    }
  }
}

StepRecord read_step(const json& j, int& slowest) {
  StepRecord r;
  r.step = inum(j, "step");
  r.tokens = inum(j, "tokens");
  r.loss = static_cast<float>(num(j, "loss", std::numeric_limits<double>::quiet_NaN()));
  r.lr = num(j, "lr");
  r.grad_norm = static_cast<float>(num(j, "grad_norm"));
  r.tokens_per_s = num(j, "tokens_per_s");
  r.mfu = num(j, "mfu");
  r.step_ms = num(j, "step_ms");
  if (const auto t = j.find("time_ms"); t != j.end() && t->is_object()) {
    r.data_ms = num(*t, "data");
    r.forward_ms = num(*t, "forward");
    r.backward_ms = num(*t, "backward");
    r.optimizer_ms = num(*t, "optimizer");
    r.comm_ms = num(*t, "comm");
    r.bubble_ms = num(*t, "bubble");
  }
  r.peak_rss_bytes = unum(j, "peak_rss_bytes");
  if (const auto s = j.find("skipped"); s != j.end() && s->is_boolean()) r.skipped = s->get<bool>();
  if (const auto ranks = j.find("ranks"); ranks != j.end() && ranks->is_array()) {
    for (const json& q : *ranks) {
      if (!q.is_object()) continue;
      const size_t at = static_cast<size_t>(std::max<int64_t>(0, inum(q, "rank", 0)));
      if (at >= 1u << 20) continue;  // a hostile rank number must not allocate gigabytes
      if (r.ranks.size() <= at) r.ranks.resize(at + 1, std::vector<float>(7, 0.0f));
      std::vector<float>& f = r.ranks[at];
      const char* names[] = {"data", "forward", "backward", "optimizer", "comm", "step", "bubble"};
      for (size_t k = 0; k < 7; ++k) f[k] = static_cast<float>(num(q, names[k]));
    }
  }
  slowest = static_cast<int>(inum(j, "slowest_rank", -1));
  if (const auto gpus = j.find("gpus"); gpus != j.end() && gpus->is_array()) {
    for (const json& g : *gpus) {
      if (!g.is_object()) continue;
      GpuRecord out;
      out.device = static_cast<int>(inum(g, "device"));
      out.mem_bytes = unum(g, "mem_bytes");
      out.mem_total_bytes = unum(g, "mem_total_bytes");
      r.gpus.push_back(out);
    }
  }
  return r;
}

// A group or op name that can be part of a metric name: not empty, no '/', printable, short.
bool plain_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (c == '/' || static_cast<unsigned char>(c) <= ' ' || c == 0x7f) return false;
  return true;
}

// A comm record (metrics.h CommRecord). Groups and ops the name rules refuse are left out, as are
// more than 64 groups or ops (a hostile line allocates nothing large).
CommRecord read_comm(const json& j) {
  CommRecord r;
  r.step = inum(j, "step");
  r.steps = inum(j, "steps");
  r.step_ms = num(j, "step_ms");
  const auto groups = j.find("groups");
  if (groups == j.end() || !groups->is_object()) return r;
  for (auto g = groups->begin(); g != groups->end() && r.groups.size() < 64; ++g) {
    if (!g->is_object() || !plain_name(g.key())) continue;
    CommGroupRecord out;
    out.group = g.key();
    out.size = static_cast<int>(std::clamp<int64_t>(inum(*g, "size", 1), 0, 1 << 24));
    if (const auto ops = g->find("ops"); ops != g->end() && ops->is_object())
      for (auto o = ops->begin(); o != ops->end() && out.ops.size() < 64; ++o) {
        if (!o->is_object() || !plain_name(o.key())) continue;
        CommOpRecord op;
        op.op = o.key();
        op.count = num(*o, "count");
        op.bytes = num(*o, "bytes");
        op.ms = num(*o, "ms");
        op.wait_ms = num(*o, "wait_ms");
        out.ops.push_back(std::move(op));
      }
    r.groups.push_back(std::move(out));
  }
  return r;
}

void flatten_comm(const CommRecord& c, std::vector<std::pair<std::string, double>>& out) {
  out.emplace_back("comm/step_ms", c.step_ms);
  out.emplace_back("comm/steps", static_cast<double>(c.steps));
  for (const CommGroupRecord& g : c.groups) {
    const std::string at = "comm/" + g.group + "/";
    out.emplace_back(at + "size", g.size);
    for (const CommOpRecord& o : g.ops) {
      const std::string op = at + o.op + "/";
      out.emplace_back(op + "count", o.count);
      out.emplace_back(op + "bytes", o.bytes);
      out.emplace_back(op + "ms", o.ms);
      out.emplace_back(op + "wait_ms", o.wait_ms);
    }
  }
}

}  // namespace

const char* to_string(MetricsRecordType type) {
  switch (type) {
    case MetricsRecordType::kRunStart:
      return "run_start";
    case MetricsRecordType::kStep:
      return "step";
    case MetricsRecordType::kEval:
      return "eval";
    case MetricsRecordType::kCheckpoint:
      return "checkpoint";
    case MetricsRecordType::kSample:
      return "sample";
    case MetricsRecordType::kEvent:
      return "event";
    case MetricsRecordType::kSummary:
      return "summary";
    case MetricsRecordType::kTask:
      return "task";
    case MetricsRecordType::kComm:
      return "comm";
  }
  return "?";
}

int64_t MetricsRecord::step_number() const {
  switch (type) {
    case MetricsRecordType::kStep:
      return step().step;
    case MetricsRecordType::kEval:
      return eval().step;
    case MetricsRecordType::kCheckpoint:
      return checkpoint().step;
    case MetricsRecordType::kSample:
      return sample().step;
    case MetricsRecordType::kSummary:
      return summary().steps;
    case MetricsRecordType::kTask:
      return task().step;
    case MetricsRecordType::kComm:
      return comm().step;
    default:
      return 0;
  }
}

ParseStatus parse_metrics_line(std::string_view line, MetricsRecord& out, const ParseOptions& options,
                               std::string* error) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  if (line.empty()) return ParseStatus::kBlank;
  const auto bad = [&](const char* why) {
    if (error) *error = why;
    return ParseStatus::kBad;
  };
  const json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("not JSON");
  if (!j.is_object()) return bad("not a JSON object");
  const auto v = j.find("v");
  const auto t = j.find("type");
  if (v == j.end() || t == j.end() || !t->is_string()) return bad("no \"v\" or \"type\"");
  if (!v->is_number_integer() || v->get<int64_t>() != 1) return ParseStatus::kOtherVersion;

  const std::string type = t->get<std::string>();
  MetricsRecord r;
  r.time = num(j, "time", 0);
  r.rank = static_cast<int>(inum(j, "rank", 0));
  if (type == "step") {
    r.type = MetricsRecordType::kStep;
    r.body = read_step(j, r.slowest_rank);
    if (options.flatten) flatten_step(j, r.numbers);
  } else if (type == "eval") {
    if (!j.contains("val_loss") || !j["val_loss"].is_number()) return bad("an eval record without val_loss");
    r.type = MetricsRecordType::kEval;
    EvalRecord e;
    e.step = inum(j, "step");
    e.tokens = inum(j, "tokens");
    e.val_loss = static_cast<float>(num(j, "val_loss"));
    e.batches = static_cast<int>(inum(j, "batches"));
    r.body = e;
    if (options.flatten) r.numbers.emplace_back("val_loss", num(j, "val_loss"));
  } else if (type == "task") {
    const auto sc = j.find("scores");
    const std::string name = str(j, "task");
    if (sc == j.end() || !sc->is_object() || name.empty()) return bad("a task record without task or scores");
    r.type = MetricsRecordType::kTask;
    TaskRecord tr;
    tr.step = inum(j, "step");
    tr.tokens = inum(j, "tokens");
    tr.task = name;
    tr.kind = str(j, "kind");
    tr.seconds = num(j, "seconds");
    for (auto it = sc->begin(); it != sc->end(); ++it)
      if (it.value().is_number()) tr.scores.emplace_back(it.key(), it.value().get<double>());
    std::sort(tr.scores.begin(), tr.scores.end());
    if (options.flatten)
      for (const auto& [score, value] : tr.scores)
        r.numbers.emplace_back("task/" + name + "/" + score, value);
    r.body = std::move(tr);
  } else if (type == "comm") {
    r.type = MetricsRecordType::kComm;
    CommRecord c = read_comm(j);
    if (options.flatten) flatten_comm(c, r.numbers);
    r.body = std::move(c);
  } else if (type == "checkpoint") {
    r.type = MetricsRecordType::kCheckpoint;
    CheckpointRecord c;
    c.step = inum(j, "step");
    c.dir = str(j, "dir");
    c.bytes = unum(j, "bytes");
    c.seconds = num(j, "seconds");
    c.reason = str(j, "reason");
    r.body = c;
  } else if (type == "sample") {
    r.type = MetricsRecordType::kSample;
    SampleRecord s;
    s.step = inum(j, "step");
    s.text = str(j, "text");
    if (const auto tok = j.find("tokens"); tok != j.end() && tok->is_array())
      for (const json& x : *tok)
        if (x.is_number_integer()) s.tokens.push_back(static_cast<int32_t>(x.get<int64_t>()));
    r.body = std::move(s);
  } else if (type == "event") {
    r.type = MetricsRecordType::kEvent;
    EventRecord e;
    e.level = str(j, "level");
    if (e.level.empty()) e.level = "info";
    e.message = str(j, "message");
    json fields = json::object();
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() != "v" && it.key() != "type" && it.key() != "time" && it.key() != "rank" &&
          it.key() != "message" && it.key() != "level")
        fields[it.key()] = *it;
    e.fields_json = fields.dump(-1, ' ', false, json::error_handler_t::replace);
    r.body = std::move(e);
  } else if (type == "run_start") {
    r.type = MetricsRecordType::kRunStart;
    RunStartRecord s;
    s.run = str(j, "run");
    if (const auto c = j.find("config"); c != j.end() && c->is_object()) {
      s.config_json = c->dump(-1, ' ', false, json::error_handler_t::replace);
      if (const auto train = c->find("train"); train != c->end() && train->is_object())
        s.planned_steps = inum(*train, "steps");
    }
    s.world_size = static_cast<int>(std::max<int64_t>(1, inum(j, "world_size", 1)));
    s.parameters = unum(j, "parameters");
    s.flops_per_token = num(j, "flops_per_token");
    s.start_step = inum(j, "start_step");
    s.resumed_from = str(j, "resumed_from");
    s.pid = inum(j, "pid");
    s.baseline_rss_bytes = unum(j, "baseline_rss_bytes");
    r.body = std::move(s);
  } else if (type == "summary") {
    r.type = MetricsRecordType::kSummary;
    SummaryRecord s;
    s.steps = inum(j, "steps");
    s.tokens = inum(j, "tokens");
    s.final_loss = num(j, "final_loss");
    if (const auto b = j.find("best_val_loss"); b != j.end() && b->is_number())
      s.best_val_loss = b->get<double>();
    s.wall_s = num(j, "wall_s");
    s.mean_tokens_per_s = num(j, "mean_tokens_per_s");
    s.mean_mfu = num(j, "mean_mfu");
    s.exit = str(j, "exit");
    s.stop_reason = str(j, "stop_reason");
    r.body = std::move(s);
  } else {
    return ParseStatus::kUnknownType;
  }
  out = std::move(r);
  return ParseStatus::kRecord;
}

std::vector<std::string> LineSplitter::feed(std::string_view bytes) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < bytes.size()) {
    const size_t nl = bytes.find('\n', start);
    if (nl == std::string_view::npos) {
      partial_.append(bytes.substr(start));
      break;
    }
    if (partial_.empty()) {
      lines.emplace_back(bytes.substr(start, nl - start));
    } else {
      partial_.append(bytes.substr(start, nl - start));
      lines.push_back(std::move(partial_));
      partial_.clear();
    }
    start = nl + 1;
  }
  return lines;
}

size_t LineSplitter::drop_pending() {
  const size_t n = partial_.size();
  partial_.clear();
  return n;
}

}  // namespace flotilla
