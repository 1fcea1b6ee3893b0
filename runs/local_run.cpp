// A run on this machine (see local_run.h for the files-not-pipes decision).
#include "runs/local_run.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <thread>

#include "db/errors.h"
#include "db/ingest.h"
#include "db/run_store.h"
#include "engine/core/clock.h"
#include "engine/core/error.h"
#include "engine/core/run_lock.h"
#include "engine/core/stop_request.h"
#include "runs/file_tail.h"
#include "runs/place.h"
#include "runs/worker_command.h"

namespace flotilla::runs {
namespace {

using Clock = std::chrono::steady_clock;

double file_mtime(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
}

// launch's own records in worker.log (the rest of it is text): the event it writes when a rank
// fails, its root cause.
struct LaunchReports {
  FileTail tail;
  std::vector<EventRecord> poll() {
    std::vector<EventRecord> out;
    for (const MetricsRecord& r : tail.poll())
      if (r.type == MetricsRecordType::kEvent) out.push_back(r.event());
    return out;
  }
};

}  // namespace

void remove_start_files(const std::string& run_dir) {
  std::error_code ec;
  for (const char* f :
       {"run.toml", kWorkerPidFile, kWorkerLogFile, kMetricsFile, "config.toml", "train.log", kRunLockFile,
        kStopRequestFile})
    std::filesystem::remove(std::filesystem::path(run_dir) / f, ec);
  for (const char* d : {"checkpoints/trash", "checkpoints", "trash"})
    std::filesystem::remove(std::filesystem::path(run_dir) / d, ec);  // only when empty
  std::filesystem::remove(run_dir, ec);                                 // only when empty
}

LocalWatch start_local_run(db::Writer* writer, int64_t run_id, const std::string& name,
                           const SpawnOptions& spawn, const std::string& origin, int64_t total_steps) {
  LocalWatch w;
  w.run_id = run_id;
  w.name = name;
  w.run_dir = spawn.run_dir;
  w.total_steps = total_steps;
  w.origin = origin;
  struct stat st {};
  if (::stat((spawn.run_dir + "/" + kWorkerLogFile).c_str(), &st) == 0)
    w.log_offset = static_cast<uint64_t>(st.st_size);
  remove_stop_request(spawn.run_dir);  // an earlier start's Stop is not this one's
  try {
    w.pid = spawn_worker(spawn);
  } catch (const RunFolderBusy& e) {
    // Refused, not failed: the run stays as it was (its earlier group is still ending).
    throw RunFolderBusy("run " + name + " " + e.what(), e.pids);
  } catch (const Error& e) {
    if (writer && run_id > 0) {
      try {
        RunEnd end;
        end.status = db::RunStatus::kFailed;
        end.note = "could not start: " + std::string(e.what());
        end.reason = origin + ": the worker " + end.note;
        writer->run([&](db::Database& db) { record_end(db, run_id, end); });
      } catch (const db::DbError&) {
        // The store refused too (full?): the settling of stale runs ends this row later.
      }
    }
    throw;
  }
  w.start_time = process_start_time(w.pid);
  if (writer && run_id > 0) {
    const std::string why =
        origin + ": worker pid " + std::to_string(w.pid) + ": " + command_line(spawn.argv);
    try {
      writer->run([&](db::Database& db) { record_running(db, run_id, 0, why); });
    } catch (const db::DbError& e) {
      // The store cannot say the run is running (full, or locked past the timeout): a worker it
      // does not know about would train unrecorded and leave the row 'created' for good. Stop the
      // worker before it trains, and remove a new run's row (and what the start wrote) so nothing
      // is left behind; a resumed run keeps the status it had.
      kill_worker_tree(w.pid);
      int status = 0;
      while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
      }
      bool removed = false;
      try {
        bool fresh = false;  // true only once the removal has committed
        writer->run([&](db::Database& db) {
          fresh = db::get_run(db, run_id).status == db::RunStatus::kCreated;
          if (fresh) db::delete_run(db, run_id);
        });
        removed = fresh;
      } catch (const db::DbError&) {
        // The settling of stale runs ends the row (its worker.pid shows a worker ran).
      }
      if (removed) remove_start_files(spawn.run_dir);
      throw db::DbError(e.kind(), "recording run " + name + " as running failed: " + e.what() +
                                      " Its worker (pid " + std::to_string(w.pid) +
                                      ") was stopped before it trained" +
                                      (removed ? "; the new run was removed. Start it again once the "
                                                 "database can be written."
                                               : "; the next flotilla command that can write the database "
                                                 "removes the new run."));
    }
  }
  return w;
}

LocalWatch attach_local_run(int64_t run_id, const std::string& name, const std::string& run_dir,
                            const std::string& origin, int64_t total_steps) {
  LocalWatch w;
  w.run_id = run_id;
  w.name = name;
  w.run_dir = run_dir;
  w.total_steps = total_steps;
  w.origin = origin;
  w.own_child = false;
  w.pid = live_worker_pid(run_dir);
  w.start_time = w.pid > 0 ? process_start_time(w.pid) : "";
  struct stat st {};
  if (::stat((run_dir + "/" + kWorkerLogFile).c_str(), &st) == 0)
    w.log_offset = static_cast<uint64_t>(st.st_size);
  return w;
}

namespace {

// This machine as a place: the worker is our child (or found again by pid and start time), its
// metrics are <run dir>/metrics.jsonl, its signals are SIGTERM (checkpoint, exit 10), SIGUSR1 (a
// checkpoint) and SIGKILL of its tree, its end is its exit status (or, re-attached, its summary).
class LocalPlace : public Place {
 public:
  LocalPlace(const LocalWatch& w, db::Writer* writer)
      : w_(w), writer_(writer && w.run_id > 0 ? writer : nullptr),
        launch_{FileTail(w.run_dir + "/" + kWorkerLogFile, w.log_offset)} {}

  std::string source() const override { return kMetricsFile; }
  std::string label() const override { return "the worker (pid " + std::to_string(w_.pid) + ")"; }
  double idle_seconds() const override { return w_.poll_seconds; }
  double budget_period() const override { return 0.2; }  // a cent-a-second run stops within a fifth of a cent
  int drain_turns() const override { return 3; }
  bool pull_on_leave() const override { return true; }

  MetricsChunk read(uint64_t offset) override {
    MetricsChunk c;
    const int fd = ::open(path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return c;
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      return c;
    }
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size < offset) offset = 0;  // the file was replaced by a shorter one: read it again
    c.start = offset;
    if (size > offset) {
      std::string buf(static_cast<size_t>(std::min<uint64_t>(size - offset, 8u << 20)), '\0');
      const ssize_t got = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(offset));
      if (got > 0) {
        buf.resize(static_cast<size_t>(got));
        const size_t nl = buf.rfind('\n');
        if (nl != std::string::npos) c.text = buf.substr(0, nl + 1);  // a torn line waits for its end
        c.end = c.start + c.text.size();
      }
    }
    ::close(fd);
    return c;
  }

  void stop(StopCause cause, const std::string& why, const Note& note) override {
    if (cause == StopCause::kUser && !why.empty() && note)
      note("stop requested: the worker saves a checkpoint at its next step, then exits");
    // Before the signal: the worker words its end from it (engine/core/stop_request.h).
    write_stop_request(w_.run_dir, {cause == StopCause::kBudget ? "budget" : "stop",
                                    cause == StopCause::kBudget ? why : "on request", w_.origin});
    signal_worker(SIGTERM);
  }
  void checkpoint(bool, const Note&) override { signal_worker(SIGUSR1); }
  void kill(const Note& note) override {
    if (note) note("kill requested (SIGKILL): progress since the last checkpoint is lost");
    if (w_.own_child || process_alive(w_.pid, w_.start_time)) kill_worker_tree(w_.pid);
  }

  bool turn(const Turn& t, db::Writer* writer, const Note& note) override {
    report_launch(t.cause, writer, note);
    bool exited = false;
    if (w_.own_child) {
      const pid_t r = ::waitpid(w_.pid, &status_, WNOHANG);
      exited = r == w_.pid || (r < 0 && errno == ECHILD);
    } else {
      exited = !process_alive(w_.pid, w_.start_time);
    }
    if (exited) {
      ended_at_ = db::now_seconds();
      ended_boot_ = clk::boot_now();  // the cost interval's end, whatever the wall clock does
    }
    return exited;
  }

  PlaceEnd end(const EndContext& c, db::Writer* writer, const Note& note) override {
    report_launch(c.cause, writer, note);
    PlaceEnd e;
    int64_t stored_summary_steps = -1;  // the summary the store holds, re-attached (-1: none read)
    e.root_cause = root_cause_;
    if (w_.own_child) {
      e.signal = WIFSIGNALED(status_) ? WTERMSIG(status_) : 0;
      e.exit_code = WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + e.signal;
      // A rank that failed said why on its stderr (worker.log): that is the cause a user can act on
      // ("data.val: ... too few for one batch ..."), not only which rank exited with which code.
      if (e.exit_code != 0 && e.exit_code != static_cast<int>(ExitCode::kPreempted) &&
          c.cause == StopCause::kNone) {
        if (const std::string said = worker_error_message(w_.run_dir); !said.empty()) {
          e.root_cause = said;
        } else if (e.exit_code == static_cast<int>(ExitCode::kIo)) {
          // Its message went to worker.log, on the disk that failed it: say what is known here.
          struct statvfs vfs {};
          const bool have = ::statvfs(w_.run_dir.c_str(), &vfs) == 0;
          e.root_cause =
              "its message did not reach worker.log; its record reaches step " + std::to_string(c.last_step) +
              (have ? "; the disk holding " + w_.run_dir + " has " +
                          std::to_string(static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize) + " bytes free"
                    : std::string());
        }
      }
      e.end = end_for_exit(WIFEXITED(status_) ? WEXITSTATUS(status_) : 0, e.signal, c.cause, w_.origin,
                           c.stop_note, e.root_cause);
      e.end.at = ended_at_;
      e.end.at_boot = ended_boot_;
    } else {
      std::string summary_exit = c.summary_exit;
      double summary_time = c.summary_time;
      if (summary_exit.empty() && writer_) {
        // The summary may have been stored before we attached.
        try {
          db::OpenOptions o;
          o.create = false;
          o.quick_check = false;
          const db::Database reader(writer_->path(), o);
          const db::Run r = db::get_run(reader, w_.run_id);
          MetricsRecord rec;
          if (!r.summary_json.empty() && parse_metrics_line(r.summary_json, rec) == ParseStatus::kRecord &&
              rec.type == MetricsRecordType::kSummary) {
            summary_exit = rec.summary().exit;
            summary_time = rec.time;
            stored_summary_steps = rec.summary().steps;
          }
        } catch (const db::DbError&) {
        }
      }
      e.end = end_for_summary(summary_exit, w_.origin, "", c.cause, c.stop_note);
      e.end.only_if_running = false;
      e.end.at = summary_time > 0 ? summary_time : file_mtime(path());
      e.exit_code = e.end.exit_code ? static_cast<int>(*e.end.exit_code) : 1;
    }
    RecordState record;
    record.whole_bytes = c.offset;
    struct stat mst {};
    record.torn = ::stat(path().c_str(), &mst) == 0 && static_cast<uint64_t>(mst.st_size) > record.whole_bytes;
    // A watcher that died after committing the summary line (a killed app or scheduler) leaves this
    // re-attached watch nothing to read: the summary the store holds is the record's.
    record.has_summary = !c.summary_exit.empty() || stored_summary_steps >= 0;
    record.summary_steps =
        c.summary_exit.empty() && stored_summary_steps >= 0 ? stored_summary_steps : c.summary_steps;
    record.last_step = c.last_step;
    e.record = record;
    return e;
  }

  std::string vanished_note() const override {
    return "stopping the worker (pid " + std::to_string(w_.pid) + ") with a checkpoint; " + w_.run_dir +
           " keeps its metrics.jsonl and checkpoints";
  }
  std::string lost_note(const std::string& what) const override { return what; }

 private:
  std::string path() const { return w_.run_dir + "/" + kMetricsFile; }
  void signal_worker(int sig) {
    if (w_.pid > 0 && (w_.own_child || process_alive(w_.pid, w_.start_time))) ::kill(w_.pid, sig);
  }
  void report_launch(StopCause cause, db::Writer* writer, const Note& note) {
    for (const EventRecord& e : launch_.poll()) {
      // A stop we asked for ends every rank with exit 10: launch reports it as a failed rank, but
      // it is the requested end, not an error.
      const bool requested =
          cause != StopCause::kNone &&
          e.message.find("(" + exit_name(static_cast<int>(ExitCode::kPreempted)) + ")") != std::string::npos;
      if (!requested && e.level == "error") root_cause_ = e.message;
      const std::string level = requested ? "info" : e.level;
      if (writer) {
        const int64_t id = w_.run_id;
        const std::string message = "launch: " + e.message, fields = e.fields_json;
        writer->submit([=](db::Database& db) {
          db::add_event(db, id, db::now_seconds(), "launch", level, message, fields);
        });
      }
      if (!requested && note) note((level == "info" ? std::string() : level + ": ") + "launch: " + e.message);
    }
  }

  LocalWatch w_;
  db::Writer* writer_;
  LaunchReports launch_;
  std::string root_cause_;
  int status_ = 0;
  double ended_at_ = 0, ended_boot_ = 0;
};

}  // namespace

LocalOutcome watch_local_run(db::Writer* writer, const LocalWatch& w, const WatchHooks& hooks) {
  LocalPlace place(w, writer);
  const PlaceOutcome p = watch_place(place, writer, w.run_id, w.name, hooks);
  LocalOutcome out;
  out.exit_code = p.exit_code;
  out.signal = p.signal;
  out.end = p.end;
  out.recorded = p.recorded;
  out.stored_all = p.stored_all;
  out.store_error = p.store_error;
  out.last_step = p.last_step;
  out.root_cause = p.root_cause;
  out.vanished = p.vanished;
  return out;
}

}  // namespace flotilla::runs
