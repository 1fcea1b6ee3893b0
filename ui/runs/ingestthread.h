// The app's metrics ingestor: one thread that moves every tracked run's metrics.jsonl into the
// run store through the db Writer, by byte offset.
//
// Decision: the app ingests the run's file, never the worker's pipe, and always by the offset
// committed in ingest_offsets (source "metrics.jsonl") together with the rows it covers. So a
// run the app left running and re-attaches to later continues exactly after the last committed
// line (nothing lost, nothing doubled), and the same code serves a live run, a re-attached one and
// the final drain of a run that ended. FileIngestor::poll() waits for its commit, so it runs here,
// never on the UI thread; a run's final status is written only after that drain, in order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "db/ingest.h"
#include "db/run_store.h"

namespace flotilla::ui {

inline constexpr char kMetricsSource[] = "metrics.jsonl";

// How a run ends in the store once its file is drained.
struct RunEnd {
  db::RunStatus status = db::RunStatus::kFailed;
  std::string reason;
  std::optional<int64_t> exit_code;
  bool only_if_running = false;  // a lost run: leave it alone if its summary already ended it
};

class IngestThread {
 public:
  explicit IngestThread(db::Writer& writer, int poll_ms = 200);
  ~IngestThread();  // drains every tracked run once, then stops
  IngestThread(const IngestThread&) = delete;
  IngestThread& operator=(const IngestThread&) = delete;

  // Starts (or keeps) ingesting `metrics_path` for the run from its committed offset.
  void track(int64_t run_id, const std::string& metrics_path);
  // Stops ingesting the run (left running: a later start resumes from the committed offset).
  void untrack(int64_t run_id);
  // Ingests what is left of the run's file, then applies `end` and stops tracking it.
  void finish(int64_t run_id, const std::string& metrics_path, RunEnd end);
  // Blocks until every request made before the call has been handled (tests).
  void sync();

  // Called on the ingest thread: rows of a run were committed (run id, new offset).
  std::function<void(int64_t, int64_t)> on_ingested;
  // Called on the ingest thread after a finish() was applied (run id, status written).
  std::function<void(int64_t, db::RunStatus)> on_finished;
  // Called on the ingest thread when a commit failed (run id, message).
  std::function<void(int64_t, const std::string&)> on_error;

 private:
  struct Tracked {
    std::string path;
    std::unique_ptr<db::FileIngestor> file;
    std::optional<RunEnd> end;
    bool busy = false;     // being polled with the lock released
    bool removed = false;  // untracked while busy: erased after the poll
  };
  void loop();
  void pollOne(int64_t run_id, Tracked& t);
  void apply(int64_t run_id, const RunEnd& end);

  db::Writer& writer_;
  int poll_ms_;
  std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::map<int64_t, Tracked> runs_;
  uint64_t requests_ = 0, handled_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace flotilla::ui
