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
#include "runs/file_tail.h"
#include "runs/worker_command.h"

namespace flotilla::runs {
namespace {

using Clock = std::chrono::steady_clock;

double file_mtime(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
}

// The metrics of a run: by committed offset into the store, or (no store) by an offset of its own.
class MetricsSource {
 public:
  MetricsSource(db::Writer* writer, int64_t run_id, const std::string& path) : tail_(path) {
    if (writer && run_id > 0) file_ = std::make_unique<db::FileIngestor>(*writer, run_id, path, kMetricsFile);
  }
  // New complete records (committed when stored). Throws DbError when the store refused them
  // (the offset stays: the same lines are read again next time). hooks.on_record sees each record
  // once: a chunk the store refused is parsed again on every retry, and the records of it that
  // were already reported are not reported again.
  std::vector<MetricsRecord> poll(const WatchHooks& hooks) {
    std::vector<MetricsRecord> got;
    if (file_) {
      int64_t chunk = -1;  // the committed offset the records being parsed start after
      int64_t seen = 0;    // records parsed after it
      file_->ingestor().on_record = [&](const MetricsRecord& r) {
        if (file_->offset() != chunk) {
          chunk = file_->offset();
          seen = 0;
        }
        ++seen;
        if (!(chunk == replay_offset_ && seen <= replay_count_) && hooks.on_record) hooks.on_record(r);
        got.push_back(r);
      };
      try {
        file_->poll();
      } catch (...) {
        file_->ingestor().on_record = nullptr;
        // The refused chunk starts at the committed offset: what of it was reported stays reported.
        if (chunk == file_->offset()) {
          if (replay_offset_ != chunk) replay_count_ = 0;
          replay_offset_ = chunk;
          replay_count_ = std::max(replay_count_, seen);
        }
        throw;
      }
      file_->ingestor().on_record = nullptr;
      offset_ = static_cast<uint64_t>(file_->offset());
    } else {
      got = tail_.poll();
      for (const MetricsRecord& r : got)
        if (hooks.on_record) hooks.on_record(r);
      offset_ = tail_.offset();
    }
    if (!got.empty() && hooks.on_committed) hooks.on_committed(got, offset_);
    return got;
  }
  uint64_t offset() const { return offset_; }

 private:
  FileTail tail_;
  std::unique_ptr<db::FileIngestor> file_;
  uint64_t offset_ = 0;
  int64_t replay_offset_ = -1, replay_count_ = 0;  // records after replay_offset_ already reported
};

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
       {"run.toml", kWorkerPidFile, kWorkerLogFile, kMetricsFile, "config.toml", "train.log", kRunLockFile})
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

LocalOutcome watch_local_run(db::Writer* writer, const LocalWatch& w, const WatchHooks& hooks) {
  const bool stored = writer && w.run_id > 0;
  const Note& note = hooks.note;
  std::unique_ptr<db::Database> reader;
  if (stored) {
    db::OpenOptions o;
    o.create = false;
    o.quick_check = false;
    reader = std::make_unique<db::Database>(writer->path(), o);
  }
  MetricsSource metrics(stored ? writer : nullptr, w.run_id, w.run_dir + "/" + kMetricsFile);
  LaunchReports launch{FileTail(w.run_dir + "/" + kWorkerLogFile, w.log_offset)};
  BudgetGuard guard(w.run_id, 0.2);  // a cent-a-second run stops within a fifth of a cent
  LocalOutcome out;
  StopCause cause = StopCause::kNone;
  std::string stop_note, summary_exit;
  double summary_time = 0;
  bool stopping = false, killed = false, store_failing = false;
  bool store_full_once = false, store_busy_once = false;  // why the store refused rows for a while
  bool vanished = false;  // the run's row was deleted while its worker ran (runs delete --force)
  // Whether the run's row is gone from the store (not: the store cannot be read).
  const auto row_gone = [&] {
    try {
      db::get_run(*reader, w.run_id);
      return false;
    } catch (const db::DbError& e) {
      return e.kind() == db::DbErrorKind::kNotFound;
    }
  };
  int64_t summary_steps = 0;  // the summary record's step count (a record short of it is not completed)

  // Stores (or retries storing) what the worker wrote; never stops the watch.
  const auto pull = [&]() -> bool {
    if (vanished) return false;  // nothing can be stored for a row that is gone
    try {
      const std::vector<MetricsRecord> got = metrics.poll(hooks);
      if (store_failing) {
        store_failing = false;
        if (note)
          note(
              "the run database accepts writes again; the rest of the metrics were stored from "
              "metrics.jsonl");
      }
      for (const MetricsRecord& r : got) {
        if (r.type == MetricsRecordType::kStep && r.rank == 0) out.last_step = r.step().step;
        if (r.type == MetricsRecordType::kSummary) {
          summary_exit = r.summary().exit;
          summary_time = r.time;
          summary_steps = r.summary().steps;
        }
      }
      return !got.empty();
    } catch (const db::DbError& e) {
      out.store_error = e.what();
      // A deleted row refuses every row of the run (a foreign key): that is not a store to wait for.
      if (stored && row_gone()) {
        vanished = true;
        out.vanished = true;
        out.store_error = "run " + w.name + " was deleted from the run database while its worker ran";
        if (note)
          note(out.store_error + ": stopping the worker (pid " + std::to_string(w.pid) +
               ") with a checkpoint; " + w.run_dir + " keeps its metrics.jsonl and checkpoints");
        return false;
      }
      if (e.kind() == db::DbErrorKind::kBusy)
        store_busy_once = true;
      else
        store_full_once = true;
      if (!store_failing && note)
        note(std::string("storing the metrics failed: ") + e.what() +
             "; training goes on and metrics.jsonl keeps every record (they are stored once writing works "
             "again)");
      store_failing = true;
      return false;
    }
  };
  const auto report_launch = [&] {
    for (const EventRecord& e : launch.poll()) {
      // A stop we asked for ends every rank with exit 10: launch reports it as a failed rank, but
      // it is the requested end, not an error.
      const bool requested =
          cause != StopCause::kNone &&
          e.message.find("(" + exit_name(static_cast<int>(ExitCode::kPreempted)) + ")") != std::string::npos;
      if (!requested && e.level == "error") out.root_cause = e.message;
      const std::string level = requested ? "info" : e.level;
      if (stored && !vanished) {
        const int64_t id = w.run_id;
        const std::string message = "launch: " + e.message, fields = e.fields_json;
        writer->submit([=](db::Database& db) {
          db::add_event(db, id, db::now_seconds(), "launch", level, message, fields);
        });
      }
      if (!requested && note) note((level == "info" ? std::string() : level + ": ") + "launch: " + e.message);
    }
  };
  const auto signal_worker = [&](int sig) {
    if (w.pid > 0 && (w.own_child || process_alive(w.pid, w.start_time))) ::kill(w.pid, sig);
  };

  int status = 0;
  bool exited = false;
  double ended_at = 0, ended_boot = 0;
  for (;;) {
    if (hooks.leave_requested && hooks.leave_requested()) {
      pull();
      if (stored) writer->flush();
      out.exit_code = kLeft;
      out.recorded = false;
      return out;
    }
    if (!killed && hooks.kill_requested && hooks.kill_requested()) {
      killed = true;
      cause = StopCause::kKill;
      if (note) note("kill requested (SIGKILL): progress since the last checkpoint is lost");
      if (w.own_child || process_alive(w.pid, w.start_time)) kill_worker_tree(w.pid);
    }
    if (!stopping && hooks.stop_requested && hooks.stop_requested()) {
      stopping = true;
      if (cause == StopCause::kNone) cause = StopCause::kUser;
      if (note) note("stop requested: the worker saves a checkpoint at its next step, then exits");
      signal_worker(SIGTERM);
    }
    if (hooks.checkpoint_requested && hooks.checkpoint_requested()) signal_worker(SIGUSR1);
    const bool got = pull();
    report_launch();
    if (vanished && !stopping) {
      stopping = true;
      if (cause == StopCause::kNone) cause = StopCause::kUser;
      signal_worker(SIGTERM);
    }
    if (stored && !stopping) {
      try {
        const db::BudgetStatus b = guard.poll(*reader);
        if (b.action == db::BudgetAction::kStop) {
          stopping = true;
          cause = StopCause::kBudget;
          stop_note = b.note;
          if (note) note(b.message);
          if (hooks.on_budget) hooks.on_budget(b);
          writer->submit([id = w.run_id, m = b.message](db::Database& db) {
            db::add_event(db, id, db::now_seconds(), "budget", "warning", m);
          });
          signal_worker(SIGTERM);
        } else if (b.action == db::BudgetAction::kWarn) {
          if (note) note(b.message);
          if (hooks.on_budget) hooks.on_budget(b);
          writer->submit([id = w.run_id, m = b.message](db::Database& db) {
            db::add_event(db, id, db::now_seconds(), "budget", "warning", m);
          });
        }
      } catch (const db::DbError&) {
        // a busy or damaged reader: the next poll tries again
      }
    }
    if (w.own_child) {
      const pid_t r = ::waitpid(w.pid, &status, WNOHANG);
      exited = r == w.pid || (r < 0 && errno == ECHILD);
    } else {
      exited = !process_alive(w.pid, w.start_time);
    }
    if (exited) {
      ended_at = db::now_seconds();
      ended_boot = clk::boot_now();  // the cost interval's end, whatever the wall clock does
      break;
    }
    if (!got) std::this_thread::sleep_for(std::chrono::duration<double>(w.poll_seconds));
  }

  // The last records (checkpoint, summary) were written just before the exit: store them all.
  for (int idle = 0; idle < 3;) idle = pull() ? 0 : idle + 1;
  report_launch();
  if (w.own_child) {
    out.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + out.signal;
    // A rank that failed said why on its stderr (worker.log): that is the cause a user can act on
    // ("data.val: ... too few for one batch ..."), not only which rank exited with which code.
    if (out.exit_code != 0 && out.exit_code != static_cast<int>(ExitCode::kPreempted) &&
        cause == StopCause::kNone) {
      if (const std::string said = worker_error_message(w.run_dir); !said.empty()) {
        out.root_cause = said;
      } else if (out.exit_code == static_cast<int>(ExitCode::kIo)) {
        // Its message went to worker.log, on the disk that failed it: say what is known here.
        struct statvfs vfs {};
        const bool have = ::statvfs(w.run_dir.c_str(), &vfs) == 0;
        out.root_cause =
            "its message did not reach worker.log; its record reaches step " + std::to_string(out.last_step) +
            (have ? "; the disk holding " + w.run_dir + " has " +
                        std::to_string(static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize) + " bytes free"
                  : std::string());
      }
    }
    out.end = end_for_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 0, out.signal, cause, w.origin,
                           stop_note, out.root_cause);
    out.end.at = ended_at;
    out.end.at_boot = ended_boot;
  } else {
    if (summary_exit.empty() && stored) {
      // The summary may have been stored before we attached.
      try {
        const db::Run r = db::get_run(*reader, w.run_id);
        MetricsRecord rec;
        if (!r.summary_json.empty() && parse_metrics_line(r.summary_json, rec) == ParseStatus::kRecord &&
            rec.type == MetricsRecordType::kSummary) {
          summary_exit = rec.summary().exit;
          summary_time = rec.time;
        }
      } catch (const db::DbError&) {
      }
    }
    out.end = end_for_summary(summary_exit, w.origin, "", cause);
    out.end.only_if_running = false;
    out.end.at = summary_time > 0 ? summary_time : file_mtime(w.run_dir + "/" + kMetricsFile);
    out.exit_code = out.end.exit_code ? static_cast<int>(*out.end.exit_code) : 1;
  }
  if (stored && vanished) {
    // Nothing to record: the row is gone. The caller says so once; the folder keeps everything.
    out.stored_all = false;
    out.recorded = false;
    return out;
  }
  if (!store_failing) {  // (a failing store reads behind the file: its end is not recorded yet)
    RecordState record;
    record.whole_bytes = metrics.offset();
    struct stat mst {};
    record.torn = ::stat((w.run_dir + "/" + kMetricsFile).c_str(), &mst) == 0 &&
                  static_cast<uint64_t>(mst.st_size) > record.whole_bytes;
    record.has_summary = !summary_exit.empty();
    record.summary_steps = summary_steps;
    record.last_step = out.last_step;
    check_completed_record(out.end, record);
    if (out.exit_code == 0 && out.end.status == db::RunStatus::kFailed && out.end.exit_code)
      out.exit_code = static_cast<int>(*out.end.exit_code);
  }
  if (stored) {
    writer->flush();
    out.stored_all = !store_failing;
    if ((store_full_once || store_busy_once) && out.stored_all) {
      // Say what it was: a full disk and a lock held by another program call for different fixes.
      const std::string why = store_full_once && store_busy_once ? "full, and locked by another program,"
                              : store_busy_once                  ? "locked by another program"
                                                                 : "full";
      const std::string until = store_full_once && store_busy_once ? "had space and was free"
                                : store_busy_once                  ? "was free"
                                                                   : "had space";
      out.end.note += std::string(out.end.note.empty() ? "" : "; ") + "the store was " + why +
                      " for a while: its rows were stored from metrics.jsonl once it " + until;
    }
    try {
      // The end is recorded only after every row: a run still missing rows stays 'running', so
      // the next command's settle (stale_runs.cpp) stores the rest by offset and then its end.
      // (An end's few bytes can fit a full store that the rows did not.)
      if (!out.stored_all)
        throw db::DbError(db::DbErrorKind::kFull, "storing the metrics of run " + w.name + " failed: " +
                                                      (out.store_error.empty() ? "the store is full"
                                                                               : out.store_error));
      // The accruals close when the worker ended, not when its last rows finally got stored.
      if (out.end.at <= 0) out.end.at = db::now_seconds();
      writer->run([&](db::Database& db) { record_end(db, w.run_id, out.end); });
      writer->flush();
    } catch (const db::DbError& e) {
      out.recorded = false;
      out.store_error = e.what();
      if (note)
        note("recording the end of run " + w.name + " failed: " + e.what() +
             "; free space, then any flotilla runs command stores the rest of its metrics and its end");
    }
  }
  return out;
}

}  // namespace flotilla::runs
