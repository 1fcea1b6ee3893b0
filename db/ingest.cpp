// Metrics protocol ingestion (see ingest.h for the stream/file decision).
#include "db/ingest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "db/errors.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/sql.h"

namespace flotilla::db {
namespace {

constexpr size_t kMaxChunk = 8u << 20;  // bytes read per file transaction

}  // namespace

Ingestor::Ingestor(Writer& writer, int64_t run_id) : writer_(writer), run_id_(run_id) {}

void Ingestor::feed(std::string_view bytes) {
  for (const std::string& line : split_.feed(bytes)) parse_line(line);
  if (rows_.size() >= batch_rows) submit_pending();
}

Ticket Ingestor::submit_pending() {
  if (rows_.empty() && ops_.empty()) return 0;
  return submit_with({});
}

Ticket Ingestor::finish() {
  stats_.torn_bytes += split_.drop_pending();
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
  MetricsRecord rec;
  const ParseStatus status = parse_metrics_line(line, rec, ParseOptions{true});
  if (status == ParseStatus::kBlank) return;
  ++stats_.lines;
  if (status == ParseStatus::kBad) {
    ++stats_.bad_lines;
    std::string_view shown = line;
    while (!shown.empty() && (shown.back() == '\r' || shown.back() == ' ')) shown.remove_suffix(1);
    stats_.last_bad = std::string(shown.substr(0, 120));
    return;
  }
  if (status != ParseStatus::kRecord) {
    ++stats_.skipped;  // another protocol version, or a record type added after this build
    return;
  }
  const double time = rec.time > 0 ? rec.time : now_seconds();
  const int rank = rec.rank;
  const int64_t run_id = run_id_;
  const int64_t step = rec.step_number();

  switch (rec.type) {
    case MetricsRecordType::kStep: {
      if (rank != 0) {  // run-level metrics come from rank 0; other ranks' steps would overwrite them
        ++stats_.skipped;
        return;
      }
      for (const auto& [name, value] : rec.numbers) rows_.push_back({run_id, name, step, value, time});
      stats_.rows += rec.numbers.size();
      // The step's breakdown per rank and its GPUs' memory (arrays the flattening leaves out), so
      // that what the Live page draws of any run is in the store (metric_names() leaves them out).
      const StepRecord& s = rec.step();
      static const char* const kParts[] = {"data_ms", "forward_ms", "backward_ms", "optimizer_ms",
                                           "comm_ms", "step_ms",    "bubble_ms"};
      if (s.ranks.size() > 1) {
        for (size_t q = 0; q < s.ranks.size(); ++q)
          for (size_t k = 0; k < 7 && k < s.ranks[q].size(); ++k)
            rows_.push_back({run_id, "ranks." + std::to_string(q) + "." + kParts[k], step,
                             static_cast<double>(s.ranks[q][k]), time});
        stats_.rows += 7 * s.ranks.size();
      }
      for (const GpuRecord& g : s.gpus) {
        const std::string at = "gpus." + std::to_string(g.device) + ".";
        rows_.push_back({run_id, at + "mem_bytes", step, static_cast<double>(g.mem_bytes), time});
        rows_.push_back({run_id, at + "mem_total_bytes", step, static_cast<double>(g.mem_total_bytes), time});
        stats_.rows += 2;
      }
      break;
    }
    case MetricsRecordType::kEval:
      rows_.push_back({run_id, "val_loss", step, static_cast<double>(rec.numbers.front().second), time});
      ++stats_.rows;
      break;
    case MetricsRecordType::kTask:
      // Each score (n included) as metric task/<task>/<score> at the step, in this record's batch:
      // a reader sees a task's scores all together or not at all (runs/store_feed.h).
      for (const auto& [name, value] : rec.numbers) rows_.push_back({run_id, name, step, value, time});
      stats_.rows += rec.numbers.size();
      break;
    case MetricsRecordType::kComm:
      // Rank 0's groups, as comm/... metrics at the record's step, all in this record's batch (a
      // reader sees a comm record whole or not at all); other ranks' would overwrite them.
      if (rank != 0) {
        ++stats_.skipped;
        return;
      }
      for (const auto& [name, value] : rec.numbers) rows_.push_back({run_id, name, step, value, time});
      stats_.rows += rec.numbers.size();
      break;
    case MetricsRecordType::kRunStart: {
      const RunStartRecord& s = rec.run_start();
      const int64_t world = s.world_size, params = static_cast<int64_t>(s.parameters);
      const double fpt = s.flops_per_token;
      const std::string config = s.config_json;
      const std::string message = "worker started at step " + std::to_string(s.start_step);
      // What a reader of the store needs to show the start as the worker said it (runs/store_feed.h).
      const std::string fields = "{\"start_step\":" + std::to_string(s.start_step) +
                                 ",\"planned_steps\":" + std::to_string(s.planned_steps) +
                                 ",\"world_size\":" + std::to_string(s.world_size) +
                                 ",\"parameters\":" + std::to_string(s.parameters) +
                                 ",\"baseline_rss_bytes\":" + std::to_string(s.baseline_rss_bytes) + "}";
      ops_.push_back([=](Database& db) {
        record_run_facts(db, run_id, world, params, fpt, config);
        add_event(db, run_id, time, "run_start", "info", message, fields, rank);
      });
      break;
    }
    case MetricsRecordType::kCheckpoint: {
      const CheckpointRecord c = rec.checkpoint();
      ops_.push_back([=](Database& db) {
        upsert_checkpoint(db, run_id, c.step, c.dir, static_cast<int64_t>(c.bytes), c.seconds, c.reason,
                          time);
      });
      break;
    }
    case MetricsRecordType::kEvent: {
      const EventRecord e = rec.event();
      ops_.push_back([=](Database& db) {
        add_event(db, run_id, time, "worker", e.level, e.message, e.fields_json, rank);
      });
      break;
    }
    case MetricsRecordType::kSample: {
      const SampleRecord& s = rec.sample();
      std::string fields = "{\"step\":" + std::to_string(s.step) + ",\"tokens\":[";
      for (size_t i = 0; i < s.tokens.size(); ++i) fields += (i ? "," : "") + std::to_string(s.tokens[i]);
      fields += "]}";
      const std::string text = s.text;
      ops_.push_back(
          [=](Database& db) { add_event(db, run_id, time, "sample", "info", text, fields, rank); });
      break;
    }
    case MetricsRecordType::kSummary: {
      const std::string summary(line.substr(0, line.find_last_not_of("\r ") + 1));
      ops_.push_back([=](Database& db) { set_run_summary(db, run_id, summary); });
      break;
    }
  }
  ++stats_.records;
  if (on_record) on_record(rec);
}

int64_t committed_offset(const Database& db, int64_t run_id, const std::string& source) {
  Stmt st(db, "SELECT byte_offset FROM ingest_offsets WHERE run_id = ?1 AND source = ?2");
  st.bind(1, run_id).bind(2, source);
  return st.step() ? st.i64(0) : 0;
}

void set_committed_offset(Database& db, int64_t run_id, const std::string& source, int64_t offset) {
  Stmt up(db,
          "INSERT INTO ingest_offsets(run_id, source, byte_offset, updated_at) VALUES (?1, ?2, ?3, ?4) "
          "ON CONFLICT(run_id, source) DO UPDATE SET byte_offset = excluded.byte_offset, "
          "updated_at = excluded.updated_at");
  up.bind(1, run_id).bind(2, source).bind(3, offset).bind(4, now_seconds()).run();
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
    const Ticket t =
        ingestor_.submit_with([=](Database& db) { set_committed_offset(db, run_id, source, new_offset); });
    if (!writer_.wait(t)) {
      // The writer's kind says why: a lock held by another program (kBusy) or a run row that is
      // gone (kConstraint) is not a full disk. Anything else reads as the storage refusing writes.
      const WriterStats ws = writer_.stats();
      const DbErrorKind kind =
          ws.last_error_kind == DbErrorKind::kBusy || ws.last_error_kind == DbErrorKind::kConstraint
              ? ws.last_error_kind
              : DbErrorKind::kFull;
      throw DbError(
          kind, "ingesting " + path_ + " at byte " + std::to_string(offset_) + " failed: " + ws.last_error);
    }
    consumed += new_offset - offset_;
    offset_ = new_offset;
  }
  return consumed;
}

}  // namespace flotilla::db
