// The writer thread (see writer.h for batching, failure isolation and durability).
#include "db/writer.h"

#include <exception>

#include "db/errors.h"
#include "db/metric_sink.h"
#include "db/sql.h"

namespace flotilla::db {

struct Writer::Sink {
  explicit Sink(Database& db) : metrics(db) {}
  MetricSink metrics;
};

Writer::Writer(const std::string& path, const WriterOptions& options) : path_(path), options_(options) {
  db_ = std::make_unique<Database>(path, options.open);
  sink_ = std::make_unique<Sink>(*db_);
  thread_ = std::thread([this] { loop(); });
}

Writer::~Writer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  sink_.reset();  // finalize statements before the connection closes
  db_.reset();
}

Ticket Writer::append(std::vector<MetricRow> rows, WriteJob also) {
  std::unique_lock<std::mutex> lock(mutex_);
  const Ticket t = next_ticket_++;
  if (!rows.empty() && queued_rows_ + rows.size() > options_.max_queued_rows) {
    failed_.insert(t);
    failed_since_flush_ = true;
    ++stats_.failed_jobs;
    stats_.dropped_rows += rows.size();
    stats_.last_error = "the run database writer is " + std::to_string(queued_rows_) +
                        " rows behind; dropped " + std::to_string(rows.size()) + " metric rows";
    return t;
  }
  queued_rows_ += rows.size();
  Job job;
  job.ticket = t;
  job.rows = std::move(rows);
  job.work = std::move(also);
  queue_.push_back(std::move(job));
  lock.unlock();
  wake_.notify_one();
  return t;
}

Ticket Writer::submit(WriteJob job) { return append({}, std::move(job)); }

void Writer::run(const WriteJob& work) {
  std::exception_ptr error;
  Ticket t = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    t = next_ticket_++;
    Job job;
    job.ticket = t;
    job.work = work;
    job.error_out = &error;
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  const bool ok = wait(t);
  if (error) std::rethrow_exception(error);
  if (!ok) throw DbError(DbErrorKind::kQuery, "a run database write failed: " + stats().last_error);
}

bool Writer::wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return finished_ >= ticket || failed_.count(ticket) > 0; });
  return failed_.count(ticket) == 0;
}

bool Writer::flush() {
  Ticket t = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    t = next_ticket_++;
    Job job;
    job.ticket = t;
    job.flush_marker = true;
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  const bool marker_ok = wait(t);
  std::lock_guard<std::mutex> lock(mutex_);
  const bool ok = marker_ok && !failed_since_flush_;
  failed_since_flush_ = false;
  return ok;
}

WriterStats Writer::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  WriterStats s = stats_;
  s.queued_rows = queued_rows_;
  return s;
}

void Writer::loop() {
  for (;;) {
    std::vector<Job> batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and drained
      size_t rows = 0;
      while (!queue_.empty()) {
        Job& next = queue_.front();
        if (next.flush_marker && !batch.empty()) break;  // a marker runs alone, after its predecessors
        if (!batch.empty() && rows + next.rows.size() > options_.max_batch_rows) break;
        rows += next.rows.size();
        batch.push_back(std::move(next));
        queue_.pop_front();
        if (batch.back().flush_marker) break;
      }
    }
    execute(batch);
  }
}

void Writer::apply(Job& job) {
  if (!job.rows.empty()) sink_->metrics.insert(job.rows);
  if (job.work) job.work(*db_);
  if (job.flush_marker) {
    Stmt st(*db_, "INSERT OR REPLACE INTO meta(key, value) VALUES ('writer_flushed_at', ?1)");
    st.bind(1, std::to_string(now_seconds())).run();
  }
}

void Writer::execute(std::vector<Job>& batch) {
  const bool flush = batch.size() == 1 && batch[0].flush_marker;
  std::string error;
  std::exception_ptr eptr;
  DbErrorKind kind = DbErrorKind::kQuery;
  try {
    if (flush) db_->exec("PRAGMA synchronous=FULL");  // this COMMIT fsyncs the WAL
    db_->write_transaction([&] {
      for (Job& job : batch) apply(job);
    });
    if (flush) db_->exec("PRAGMA synchronous=NORMAL");
    finish(batch, true, "");
    return;
  } catch (const std::exception& e) {
    error = e.what();
    eptr = std::current_exception();
    if (const auto* d = dynamic_cast<const DbError*>(&e)) kind = d->kind();
    if (flush) {
      try {
        db_->exec("PRAGMA synchronous=NORMAL");
      } catch (const std::exception&) {
      }
    }
  }
  if (batch.size() == 1) {
    if (batch[0].error_out) *batch[0].error_out = eptr;
    finish(batch, false, error, kind);
    return;
  }
  // Isolate the failing job(s): each alone in its own transaction.
  for (Job& job : batch) {
    std::vector<Job> one;
    one.push_back(std::move(job));
    try {
      db_->write_transaction([&] { apply(one[0]); });
      finish(one, true, "");
    } catch (const std::exception& e) {
      if (one[0].error_out) *one[0].error_out = std::current_exception();
      const auto* d = dynamic_cast<const DbError*>(&e);
      finish(one, false, e.what(), d ? d->kind() : DbErrorKind::kQuery);
    }
  }
}

void Writer::finish(const std::vector<Job>& jobs, bool ok, const std::string& error, DbErrorKind kind) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Job& job : jobs) {
      queued_rows_ -= job.rows.size();
      if (ok) {
        stats_.committed_rows += job.rows.size();
      } else {
        failed_.insert(job.ticket);
        failed_since_flush_ = true;
        ++stats_.failed_jobs;
        stats_.dropped_rows += job.rows.size();
      }
      if (job.ticket > finished_) finished_ = job.ticket;
    }
    if (ok)
      ++stats_.transactions;
    else {
      stats_.last_error = error;
      stats_.last_error_kind = kind;
    }
  }
  done_.notify_all();
}

}  // namespace flotilla::db
