// Settling stale local runs (see stale_runs.h).
#include "runs/stale_runs.h"

#include <sys/stat.h>

#include <fstream>

#include "db/errors.h"
#include "db/ingest.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "engine/train/metrics_reader.h"
#include "runs/local_run.h"
#include "runs/node_run.h"
#include "runs/process.h"
#include "runs/run_status.h"

namespace flotilla::runs {
namespace {

double file_mtime(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// Whether a metrics file holds a step record (a worker trained at least one step).
bool has_step_record(const std::string& metrics) {
  std::ifstream f(metrics);
  for (std::string line; std::getline(f, line);)
    if (line.find("\"type\":\"step\"") != std::string::npos) return true;
  return false;
}

}  // namespace

bool is_local_run(const db::Run& run) { return !run.run_dir.empty() && !is_node_run_dir(run.run_dir); }

std::string live_worker_delete_refusal(const db::Run& run) {
  const long pid = is_local_run(run) ? live_worker_pid(run.run_dir) : 0;
  if (pid <= 0) return "";
  return "run " + run.name + " has a live worker (pid " + std::to_string(pid) +
         ") that is still training, so it is not deleted (not even with --force): stop it first from the "
         "command or app that watches it (Ctrl-C stops it with a checkpoint; if nothing watches it, "
         "flotilla runs attach " +
         run.name + ", then Ctrl-C), then delete it";
}

std::vector<SettledRun> settle_stale_local_runs(db::Writer& writer, const std::string& origin,
                                                double created_grace_s) {
  std::vector<SettledRun> out;
  std::vector<db::Run> candidates;
  try {
    writer.run([&](db::Database& db) {
      db::RunFilter f;
      f.statuses = {db::RunStatus::kRunning, db::RunStatus::kCreated};
      for (const db::RunListItem& item : db::list_runs(db, f))
        if (is_local_run(item.run) ||
            (item.run.run_dir.empty() && item.run.status == db::RunStatus::kCreated))
          candidates.push_back(item.run);
    });
  } catch (const db::DbError&) {
    return out;
  }
  const double now = db::now_seconds();
  for (const db::Run& run : candidates) {
    if (!run.run_dir.empty() && live_worker_pid(run.run_dir) > 0)
      continue;  // alive: somebody's, or unwatched
    const std::string metrics = run.run_dir + "/" + kMetricsFile;
    if (run.status == db::RunStatus::kCreated && !run.run_dir.empty() &&
        exists(run.run_dir + "/" + kWorkerPidFile) && !has_step_record(metrics)) {
      // A start the store refused (start_local_run stopped its worker before it trained, but could
      // not remove the row on the full disk), or a worker that died with its command before its
      // first step: nothing was trained, so nothing is left, not even the row (L6).
      bool removed = false;
      try {
        bool fresh = false;  // true only once the removal has committed
        writer.run([&](db::Database& db) {
          fresh = db::get_run(db, run.id).status == db::RunStatus::kCreated;
          if (fresh) db::delete_run(db, run.id);
        });
        removed = fresh;
      } catch (const db::DbError&) {
        continue;  // still full or busy: the next command tries again
      }
      if (removed) {
        remove_start_files(run.run_dir);
        out.push_back({run.id, run.name, db::RunStatus::kFailed,
                       "its start could not be recorded and it never trained: removed", true});
      }
      continue;
    }
    if (run.status == db::RunStatus::kCreated && !run.run_dir.empty() &&
        exists(run.run_dir + "/" + kWorkerPidFile)) {
      // Its worker ran although the store never recorded it running (the store refused that write,
      // issue 33 D12): it is a lost running run from its worker's start, settled as one below.
      try {
        writer.run([&](db::Database& db) {
          record_running(db, run.id, file_mtime(run.run_dir + "/" + kWorkerPidFile),
                         origin + ": its worker ran while the run database could not record its start");
        });
      } catch (const db::DbError&) {
        continue;  // still full or busy: the next command tries again
      }
    } else if (run.status == db::RunStatus::kCreated) {
      if (now - run.created_at < created_grace_s) continue;
      RunEnd end;
      end.status = db::RunStatus::kFailed;
      end.note = "never started (its start was interrupted: the worker did not run)";
      end.reason = origin + ": " + end.note;
      try {
        writer.run([&](db::Database& db) { record_end(db, run.id, end); });
        out.push_back({run.id, run.name, end.status, end.note});
      } catch (const db::DbError&) {
      }
      continue;
    }
    try {
      // What it wrote while nobody stored it, from the committed offset.
      RecordState record;
      if (exists(metrics)) {
        db::FileIngestor file(writer, run.id, metrics, kMetricsFile);
        while (file.poll() > 0) {
        }
        record.whole_bytes = static_cast<uint64_t>(file.offset());
        struct stat st {};
        record.torn =
            ::stat(metrics.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) > record.whole_bytes;
      }
      std::string exit;
      double at = 0;
      std::optional<db::EndRequest> asked;  // a stop or kill someone asked for before it ended
      writer.run([&](db::Database& db) {
        asked = db::end_request(db, run.id);
        const db::Run now_run = db::get_run(db, run.id);
        MetricsRecord rec;
        if (!now_run.summary_json.empty() &&
            parse_metrics_line(now_run.summary_json, rec) == ParseStatus::kRecord &&
            rec.type == MetricsRecordType::kSummary) {
          exit = rec.summary().exit;
          at = rec.time;
          record.summary_steps = rec.summary().steps;
        }
      });
      const std::string why =
          exists(run.run_dir + "/" + kWorkerPidFile)
              ? "lost: its worker is no longer running and left no summary record (what it wrote was stored)"
              : "lost: no worker.pid in " + run.run_dir + " (nothing is running for it)";
      const StopCause cause = !asked                    ? StopCause::kNone
                              : asked->what == "kill"   ? StopCause::kKill
                              : asked->what == "budget" ? StopCause::kBudget
                                                        : StopCause::kUser;
      RunEnd end = end_for_summary(exit, origin, exit.empty() && cause != StopCause::kKill ? why : "", cause,
                                   asked ? asked->note : "");
      record.has_summary = !exit.empty();
      check_completed_record(end, record);  // never "completed" on a torn record
      if (!exit.empty() && end.status != db::RunStatus::kCompleted)
        end.note += "; it ended while nobody watched it";
      end.at = at > 0 ? at : file_mtime(metrics);
      if (end.at <= 0) end.at = run.started_at.value_or(now);
      db::RunStatus written = end.status;
      writer.run([&](db::Database& db) { written = record_end(db, run.id, end); });
      writer.flush();
      out.push_back({run.id, run.name, written, end.note});
    } catch (const db::DbError&) {
      // Still full or busy: the next command tries again.
    }
  }
  return out;
}

}  // namespace flotilla::runs
