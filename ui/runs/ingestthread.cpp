// The app's metrics ingestor (see ingestthread.h).
#include "ui/runs/ingestthread.h"

#include <chrono>
#include <vector>

#include "db/errors.h"

namespace flotilla::ui {

IngestThread::IngestThread(db::Writer& writer, int poll_ms) : writer_(writer), poll_ms_(poll_ms) {
  thread_ = std::thread([this] { loop(); });
}

IngestThread::~IngestThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void IngestThread::track(int64_t run_id, const std::string& metrics_path) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Tracked& t = runs_[run_id];
    if (t.path.empty()) t.path = metrics_path;
    t.removed = false;
    ++requests_;
  }
  wake_.notify_all();
}

void IngestThread::untrack(int64_t run_id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = runs_.find(run_id);
    if (it != runs_.end()) {
      if (it->second.busy)
        it->second.removed = true;
      else
        runs_.erase(it);
    }
    ++requests_;
  }
  wake_.notify_all();
}

void IngestThread::finish(int64_t run_id, const std::string& metrics_path, RunEnd end) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Tracked& t = runs_[run_id];
    if (t.path.empty()) t.path = metrics_path;
    t.removed = false;
    t.end = std::move(end);
    ++requests_;
  }
  wake_.notify_all();
}

void IngestThread::sync() {
  std::unique_lock<std::mutex> lock(mutex_);
  const uint64_t target = ++requests_;
  wake_.notify_all();
  idle_.wait(lock, [&] { return handled_ >= target || stop_; });
}

void IngestThread::pollOne(int64_t run_id, Tracked& t) {
  try {
    if (!t.file) t.file = std::make_unique<db::FileIngestor>(writer_, run_id, t.path, kMetricsSource);
    const int64_t consumed = t.file->poll();
    if (consumed > 0 && on_ingested) on_ingested(run_id, t.file->offset());
  } catch (const db::DbError& e) {
    if (on_error) on_error(run_id, e.what());
  }
}

void IngestThread::apply(int64_t run_id, const RunEnd& end) {
  db::RunStatus written = end.status;
  try {
    writer_.run([&](db::Database& db) {
      const db::Run now = db::get_run(db, run_id);
      written = now.status;
      if (end.only_if_running && now.status != db::RunStatus::kRunning) {
        db::add_event(db, run_id, 0, "event", "warning", end.reason);
        return;
      }
      if (now.status != end.status && db::transition_allowed(now.status, end.status)) {
        db::set_status(db, run_id, end.status, 0, end.reason, end.exit_code);
        written = end.status;
      }
    });
  } catch (const db::DbError& e) {
    if (on_error) on_error(run_id, e.what());
  }
  if (on_finished) on_finished(run_id, written);
}

void IngestThread::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    const uint64_t seen = requests_;
    std::vector<int64_t> ids;
    for (const auto& [id, t] : runs_) ids.push_back(id);
    for (int64_t id : ids) {
      auto it = runs_.find(id);
      if (it == runs_.end()) continue;
      // std::map nodes are stable: other threads only flag the entry while it is busy.
      Tracked& t = it->second;
      t.busy = true;
      lock.unlock();
      pollOne(id, t);
      lock.lock();
      t.busy = false;
      if (t.removed) {
        runs_.erase(id);
      } else if (t.end) {
        const RunEnd end = *t.end;
        t.busy = true;
        lock.unlock();
        pollOne(id, t);  // whatever arrived while finish() was queued
        apply(id, end);
        lock.lock();
        runs_.erase(id);
      }
    }
    handled_ = seen;
    idle_.notify_all();
    if (stop_) break;
    wake_.wait_for(lock, std::chrono::milliseconds(poll_ms_), [&] { return stop_ || requests_ != seen; });
  }
}

}  // namespace flotilla::ui
