// Status transitions of every run kind (see run_status.h for the mapping).
#include "runs/run_status.h"

#include <signal.h>

#include <cstring>

#include "db/errors.h"
#include "engine/core/clock.h"
#include "engine/core/error.h"

namespace flotilla::runs {

std::string exit_name(int exit_code) {
  if (exit_code < 0) return "unknown";
  // A shell's status of a child a signal ended (srun's in a batch script, a wrapper's): 128 + N.
  if (exit_code > 128 && exit_code < 128 + 65)
    return "killed by signal " + std::to_string(exit_code - 128) + " (" + strsignal(exit_code - 128) + ")";
  return exit_code_name(static_cast<ExitCode>(exit_code));
}

RunEnd end_for_exit(int exit_code, int signal, StopCause cause, const std::string& origin,
                    const std::string& stop_note, const std::string& root_cause) {
  RunEnd e;
  e.exit_code = exit_code;
  const std::string code = "exit " + std::to_string(exit_code) + ": " + exit_name(exit_code);
  if (signal > 0) {
    e.exit_code = 128 + signal;
    if (cause == StopCause::kKill || cause == StopCause::kUser || cause == StopCause::kBudget) {
      e.status = db::RunStatus::kStopped;
      e.note = cause == StopCause::kKill     ? "killed on request"
               : cause == StopCause::kBudget ? (stop_note.empty() ? std::string("budget reached") : stop_note)
                                             : "on request";
      e.reason = origin + ": the worker was killed (signal " + std::to_string(signal) + ") as asked";
    } else {
      e.status = db::RunStatus::kFailed;
      e.note = std::string("killed by signal ") + std::to_string(signal) + " (" + strsignal(signal) + ")";
      e.reason = origin + ": the worker was " + e.note;
    }
    return e;
  }
  if (exit_code == 0) {
    e.status = db::RunStatus::kCompleted;
    e.reason = origin + ": worker exit 0";
    return e;
  }
  if (exit_code == static_cast<int>(ExitCode::kPreempted)) {
    switch (cause) {
      case StopCause::kUser:
        e.status = db::RunStatus::kStopped;
        e.note = "on request";
        break;
      case StopCause::kBudget:
        e.status = db::RunStatus::kStopped;
        e.note = stop_note.empty() ? std::string("budget reached") : stop_note;
        break;
      case StopCause::kKill:
        e.status = db::RunStatus::kStopped;
        e.note = "killed on request";
        break;
      case StopCause::kParentGone:
        e.status = db::RunStatus::kStopped;
        e.note = "its supervisor went away";
        break;
      case StopCause::kNone:
        e.status = db::RunStatus::kPreempted;
        e.note = "by a signal from outside";
        break;
    }
    // Exit 10 is "preempted" by its name; asked for, it is a stop with a checkpoint (issue 34 #16).
    e.reason = origin + ": worker " +
               (cause == StopCause::kNone ? code : "exit 10 (stopped with a checkpoint)") + "; " + e.note;
    return e;
  }
  if (cause == StopCause::kKill) {
    e.status = db::RunStatus::kStopped;
    e.note = "killed on request";
    e.reason = origin + ": worker " + code + " after a kill";
    return e;
  }
  e.status = db::RunStatus::kFailed;
  e.note = root_cause.empty() ? code : code + ": " + root_cause;
  e.reason = origin + ": worker " + e.note;
  return e;
}

RunEnd end_for_summary(const std::string& summary_exit, const std::string& origin, const std::string& why,
                       StopCause cause, const std::string& stop_note) {
  RunEnd e;
  e.only_if_running = true;
  if (summary_exit == "completed") {
    e.status = db::RunStatus::kCompleted;
    e.exit_code = 0;
  } else if (summary_exit == "preempted" || summary_exit == "stopped") {
    const bool ours = cause != StopCause::kNone || summary_exit == "stopped";
    e.status = ours ? db::RunStatus::kStopped : db::RunStatus::kPreempted;
    e.note = !ours                         ? "by a signal from outside"
             : cause == StopCause::kKill   ? "killed on request"
             : cause == StopCause::kBudget ? (stop_note.empty() ? std::string("budget reached") : stop_note)
                                           : "on request";
    if (!why.empty()) e.note += "; " + why;
    e.exit_code = static_cast<int>(ExitCode::kPreempted);
  } else if (summary_exit.empty() && cause == StopCause::kKill) {
    // Killed as asked (SIGKILL leaves no summary), whoever watched it: not a lost worker.
    e.status = db::RunStatus::kStopped;
    e.note = "killed on request";
    e.exit_code = 128 + SIGKILL;
  } else {
    e.status = db::RunStatus::kFailed;
    e.note = why.empty() ? std::string("lost: the worker ended without a summary record") : why;
  }
  e.reason = origin + ": " + (summary_exit.empty() ? e.note : "the worker's summary says " + summary_exit) +
             (why.empty() || summary_exit.empty() ? "" : " (" + why + ")");
  return e;
}

void check_completed_record(RunEnd& end, const RecordState& record) {
  if (end.status != db::RunStatus::kCompleted) return;
  const std::string after = record.last_step > 0 ? " after step " + std::to_string(record.last_step) : "";
  std::string why;
  if (record.torn)
    why = "its record metrics.jsonl ends with a torn line at byte " + std::to_string(record.whole_bytes) +
          after;
  else if (!record.has_summary)
    why = "its record metrics.jsonl ends" + after + " without the summary a finished run writes";
  else if (record.last_step > 0 && record.summary_steps > record.last_step)
    why = "its record metrics.jsonl stops at step " + std::to_string(record.last_step) +
          " but its summary counts " + std::to_string(record.summary_steps) + " steps";
  if (why.empty()) return;
  end.status = db::RunStatus::kFailed;
  end.exit_code = static_cast<int>(ExitCode::kIo);
  end.note = "record incomplete: " + why + " (the worker exited 0; was its disk full?)";
  end.reason += "; " + end.note;
}

void record_running(db::Database& db, int64_t run_id, double at, const std::string& reason) {
  const db::Run now = db::get_run(db, run_id);
  if (now.status == db::RunStatus::kRunning) return;
  // A start time given from elsewhere (a node's worker): its monotonic reading, taken back from the
  // present, so the cost interval is measured by the boot clock from here on (none for a time
  // that is ahead of ours or older than this boot).
  double at_boot = 0;
  if (at > 0) {
    const double ago = clk::wall_now() - at, boot = clk::boot_now();
    if (ago >= 0 && ago < boot) at_boot = boot - ago;
  }
  db::set_status(db, run_id, db::RunStatus::kRunning, at, reason, std::nullopt, "", at_boot);
}

void record_queued(db::Database& db, int64_t run_id, double at, const std::string& reason) {
  db::set_status(db, run_id, db::RunStatus::kQueued, at, reason);
}

void record_requeued(db::Database& db, int64_t run_id, const std::string& reason, const std::string& note) {
  db::set_status(db, run_id, db::RunStatus::kPreempted, 0, reason, std::nullopt, note);
}

db::RunStatus record_end(db::Database& db, int64_t run_id, const RunEnd& end) {
  const db::Run now = db::get_run(db, run_id);
  if (end.only_if_running && now.status != db::RunStatus::kRunning) {
    db::add_event(db, run_id, db::now_seconds(), "event", "warning", end.reason);
    return now.status;
  }
  if (!db::transition_allowed(now.status, end.status)) {
    db::add_event(db, run_id, db::now_seconds(), "event", "warning",
                  end.reason + " (left " + db::to_string(now.status) + ")");
    return now.status;
  }
  db::set_status(db, run_id, end.status, end.at, end.reason, end.exit_code, end.note, end.at_boot);
  return end.status;
}

std::string status_text(db::RunStatus status, const std::string& note) {
  std::string out = db::to_string(status);
  if (!note.empty()) out += " (" + note + ")";
  return out;
}

std::string status_text(const db::Run& run) { return status_text(run.status, run.status_note); }

}  // namespace flotilla::runs
