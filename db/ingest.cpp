// Metrics protocol ingestion (see ingest.h for the stream/file decision).
#include "db/ingest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <nlohmann/json.hpp>

#include "db/errors.h"
#include "db/run_store.h"
#include "db/sql.h"

namespace flotilla::db {
namespace {

using nlohmann::json;

constexpr size_t kMaxChunk = 8u << 20;  // bytes read per file transaction

double num(const json& j, const char* key, double fallback = 0) {
  const auto it = j.find(key);
  return (it != j.end() && it->is_number()) ? it->get<double>() : fallback;
}

int64_t inum(const json& j, const char* key, int64_t fallback = 0) {
  const auto it = j.find(key);
  return (it != j.end() && it->is_number()) ? it->get<int64_t>() : fallback;
}

std::string str(const json& j, const char* key) {
  const auto it = j.find(key);
  return (it != j.end() && it->is_string()) ? it->get<std::string>() : std::string();
}

// Metric rows of a step record: every number at the top level (and one level down, as
// "parent.child"), except the protocol's own fields.
void step_rows(const json& j, int64_t run_id, int64_t step, double time, std::vector<MetricRow>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (key == "v" || key == "type" || key == "time" || key == "rank" || key == "step") continue;
    if (it->is_number()) {
      out.push_back({run_id, key, step, it->get<double>(), time});
    } else if (it->is_boolean()) {
      out.push_back({run_id, key, step, it->get<bool>() ? 1.0 : 0.0, time});
    } else if (it->is_object()) {
      for (auto sub = it->begin(); sub != it->end(); ++sub)
        if (sub->is_number()) out.push_back({run_id, key + "." + sub.key(), step, sub->get<double>(), time});
    }
  }
}

RunStatus status_for_exit(const std::string& exit) {
  if (exit == "completed") return RunStatus::kCompleted;
  if (exit == "preempted") return RunStatus::kPreempted;
  if (exit == "stopped") return RunStatus::kStopped;
  return RunStatus::kFailed;
}

// Applies a status change only when the state machine allows it (a record never fails a batch).
void maybe_status(Database& db, int64_t run_id, RunStatus to, double at, const std::string& reason) {
  const Run r = get_run(db, run_id);
  if (r.status != to && transition_allowed(r.status, to)) set_status(db, run_id, to, at, reason);
}

}  // namespace

Ingestor::Ingestor(Writer& writer, int64_t run_id) : writer_(writer), run_id_(run_id) {}

void Ingestor::feed(std::string_view bytes) {
  size_t start = 0;
  while (start < bytes.size()) {
    const size_t nl = bytes.find('\n', start);
    if (nl == std::string_view::npos) {
      partial_.append(bytes.substr(start));
      break;
    }
    if (partial_.empty()) {
      parse_line(bytes.substr(start, nl - start));
    } else {
      partial_.append(bytes.substr(start, nl - start));
      parse_line(partial_);
      partial_.clear();
    }
    start = nl + 1;
  }
  if (rows_.size() >= batch_rows) submit_pending();
}

Ticket Ingestor::submit_pending() {
  if (rows_.empty() && ops_.empty()) return 0;
  return submit_with({});
}

Ticket Ingestor::finish() {
  if (!partial_.empty()) {
    stats_.torn_bytes += partial_.size();
    partial_.clear();
  }
  const Ticket t = submit_pending();
  return t ? t : last_ticket_;
}

void Ingestor::parse_lines(std::string_view text) {
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    parse_line(text.substr(start, nl - start));
    start = nl + 1;
  }
}

Ticket Ingestor::submit_with(WriteJob also) {
  std::vector<WriteJob> ops;
  ops.swap(ops_);
  WriteJob job;
  if (!ops.empty() || also) {
    job = [ops = std::move(ops), also = std::move(also)](Database& db) {
      for (const WriteJob& op : ops) op(db);
      if (also) also(db);
    };
  }
  std::vector<MetricRow> rows;
  rows.swap(rows_);
  last_ticket_ = writer_.append(std::move(rows), std::move(job));
  return last_ticket_;
}

void Ingestor::parse_line(std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
  if (line.empty()) return;
  ++stats_.lines;
  json j = json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("v") || !j.contains("type") ||
      !j["type"].is_string()) {
    ++stats_.bad_lines;
    stats_.last_bad = std::string(line.substr(0, 120));
    return;
  }
  if (!j["v"].is_number_integer() || j["v"].get<int64_t>() != 1) {
    ++stats_.skipped;
    return;
  }
  const std::string type = j["type"].get<std::string>();
  const double time = num(j, "time", now_seconds());
  const int rank = static_cast<int>(inum(j, "rank", 0));
  const int64_t run_id = run_id_;
  IngestEvent ev;
  ev.type = type;
  ev.step = inum(j, "step", 0);

  if (type == "step") {
    if (rank != 0) {  // run-level metrics come from rank 0; other ranks' steps would overwrite them
      ++stats_.skipped;
      return;
    }
    const size_t before = rows_.size();
    step_rows(j, run_id, ev.step, time, rows_);
    stats_.rows += rows_.size() - before;
    ev.loss = num(j, "loss");
    ev.tokens = num(j, "tokens");
    ev.tokens_per_s = num(j, "tokens_per_s");
    ev.mfu = num(j, "mfu");
  } else if (type == "eval") {
    if (!j.contains("val_loss") || !j["val_loss"].is_number()) {
      ++stats_.bad_lines;
      stats_.last_bad = std::string(line.substr(0, 120));
      return;
    }
    ev.val_loss = num(j, "val_loss");
    rows_.push_back({run_id, "val_loss", ev.step, ev.val_loss, time});
    ++stats_.rows;
  } else if (type == "run_start") {
    const int64_t world = inum(j, "world_size", 1), params = inum(j, "parameters", 0);
    const double fpt = num(j, "flops_per_token", 0);
    const std::string config = j.contains("config") && j["config"].is_object() ? j["config"].dump() : "";
    ev.message = "started at step " + std::to_string(inum(j, "start_step", 0));
    ops_.push_back([=](Database& db) {
      Stmt st(db,
              "UPDATE runs SET world_size = ?2, parameters = ?3, flops_per_token = ?4, "
              "config_json = CASE WHEN ?5 <> '' AND config_json IN ('', '{}') THEN ?5 ELSE config_json END "
              "WHERE id = ?1");
      st.bind(1, run_id).bind(2, world).bind(3, params).bind(4, fpt).bind(5, config).run();
      maybe_status(db, run_id, RunStatus::kRunning, time, "worker " + ev.message);
      add_event(db, run_id, time, "run_start", "info", "worker " + ev.message, "{}", rank);
    });
  } else if (type == "checkpoint") {
    const std::string dir = str(j, "dir"), reason = str(j, "reason");
    const int64_t bytes = inum(j, "bytes", 0);
    const double seconds = num(j, "seconds", 0);
    ev.message = dir;
    ops_.push_back([=](Database& db) {
      Stmt st(db,
              "INSERT OR REPLACE INTO checkpoints(run_id, step, dir, bytes, seconds, reason, time) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
      st.bind(1, run_id).bind(2, ev.step).bind(3, dir).bind(4, bytes).bind(5, seconds).bind(6, reason);
      st.bind(7, time).run();
    });
  } else if (type == "event" || type == "sample") {
    ev.level = type == "event" ? str(j, "level") : "info";
    ev.message = type == "event" ? str(j, "message") : str(j, "text");
    json fields = json::object();
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() != "v" && it.key() != "type" && it.key() != "time" && it.key() != "rank" &&
          it.key() != "message" && it.key() != "level" && it.key() != "text")
        fields[it.key()] = *it;
    const std::string fields_text = fields.dump();
    ops_.push_back([=](Database& db) {
      add_event(db, run_id, time, type == "event" ? "worker" : "sample", ev.level, ev.message, fields_text,
                rank);
    });
  } else if (type == "summary") {
    ev.message = str(j, "exit");
    ev.loss = num(j, "final_loss");
    const std::string summary = j.dump();
    ops_.push_back([=](Database& db) {
      Stmt st(db, "UPDATE runs SET summary_json = ?2 WHERE id = ?1");
      st.bind(1, run_id).bind(2, summary).run();
      maybe_status(db, run_id, status_for_exit(ev.message), time, "worker summary: " + ev.message);
    });
  } else {
    ++stats_.skipped;  // a record type added after this build: ignored, as the protocol asks
    return;
  }
  ++stats_.records;
  if (on_record) on_record(ev);
}

int64_t committed_offset(const Database& db, int64_t run_id, const std::string& source) {
  Stmt st(db, "SELECT byte_offset FROM ingest_offsets WHERE run_id = ?1 AND source = ?2");
  st.bind(1, run_id).bind(2, source);
  return st.step() ? st.i64(0) : 0;
}

FileIngestor::FileIngestor(Writer& writer, int64_t run_id, std::string path, std::string source)
    : writer_(writer),
      run_id_(run_id),
      path_(std::move(path)),
      source_(source.empty() ? path_ : std::move(source)),
      ingestor_(writer, run_id) {
  ingestor_.batch_rows = static_cast<size_t>(-1);  // one transaction per poll chunk
  writer_.run([&](Database& db) { offset_ = committed_offset(db, run_id_, source_); });
}

int64_t FileIngestor::poll() {
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::unique_ptr<int, void (*)(int*)> guard(new int(fd), [](int* p) {
    ::close(*p);
    delete p;
  });
  struct stat st {};
  if (::fstat(fd, &st) != 0) return 0;
  if (st.st_size < offset_) offset_ = 0;  // the file was replaced by a shorter one: read it again
  int64_t consumed = 0;
  std::string buf;
  while (offset_ < st.st_size) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(st.st_size - offset_, kMaxChunk));
    buf.resize(want);
    const ssize_t got = ::pread(fd, buf.data(), want, offset_);
    if (got <= 0) break;
    buf.resize(static_cast<size_t>(got));
    const size_t last_nl = buf.rfind('\n');
    if (last_nl == std::string::npos) break;  // a torn line: wait for its end
    const std::string_view complete(buf.data(), last_nl + 1);
    ingestor_.parse_lines(complete);
    const int64_t new_offset = offset_ + static_cast<int64_t>(complete.size());
    const int64_t run_id = run_id_;
    const std::string source = source_;
    const Ticket t = ingestor_.submit_with([=](Database& db) {
      Stmt up(db,
              "INSERT INTO ingest_offsets(run_id, source, byte_offset, updated_at) VALUES (?1, ?2, ?3, ?4) "
              "ON CONFLICT(run_id, source) DO UPDATE SET byte_offset = excluded.byte_offset, "
              "updated_at = excluded.updated_at");
      up.bind(1, run_id).bind(2, source).bind(3, new_offset).bind(4, now_seconds()).run();
    });
    if (!writer_.wait(t))
      throw DbError(DbErrorKind::kFull, "ingesting " + path_ + " at byte " + std::to_string(offset_) +
                                            " failed: " + writer_.stats().last_error);
    consumed += new_offset - offset_;
    offset_ = new_offset;
  }
  return consumed;
}

}  // namespace flotilla::db
