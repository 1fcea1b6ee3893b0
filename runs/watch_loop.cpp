// The one watch loop over a Place (see place.h): written once for this machine, SSH nodes and
// Slurm clusters.
#include <chrono>
#include <memory>
#include <thread>

#include "db/errors.h"
#include "db/ingest.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "engine/core/error.h"
#include "remote/session.h"
#include "runs/place.h"

namespace flotilla::runs {
namespace {

// A run's metrics into the store by committed byte offset, whatever the place: the rows and the
// offset they end at commit in one transaction, so a watcher that dies, a store that was full for a
// while, or an app that restarts continues exactly after the last stored line. A refused commit
// leaves the offset where it was (the same lines are read again next time), and hooks.on_record sees
// each record once however often its chunk is retried.
class Committer {
 public:
  Committer(Place& place, db::Writer* writer, int64_t run_id)
      : place_(place),
        writer_(writer && run_id > 0 ? writer : nullptr),
        run_id_(run_id),
        source_(place.source()) {
    if (writer_) {
      ingestor_ = std::make_unique<db::Ingestor>(*writer_, run_id);
      ingestor_->batch_rows = static_cast<size_t>(-1);  // one transaction per chunk
      int64_t at = 0;
      writer_->run([&](db::Database& db) { at = db::committed_offset(db, run_id, source_); });
      offset_ = static_cast<uint64_t>(at);
    }
  }

  // New records (stored, or only parsed without a store). Throws DbError when the store refused them.
  std::vector<MetricsRecord> poll(const WatchHooks& hooks) {
    const MetricsChunk chunk = place_.read(offset_);
    if (chunk.text.empty()) return {};
    std::vector<MetricsRecord> got;
    const int64_t start = static_cast<int64_t>(chunk.start);
    int64_t seen = 0;
    const auto deliver = [&](const MetricsRecord& r) {
      ++seen;
      if (!(start == replay_offset_ && seen <= replay_count_) && hooks.on_record) hooks.on_record(r);
      got.push_back(r);
    };
    const uint64_t next = chunk.end;
    if (writer_) {
      ingestor_->on_record = deliver;
      ingestor_->parse_lines(chunk.text);
      ingestor_->on_record = nullptr;
      const int64_t run_id = run_id_, end = static_cast<int64_t>(next);
      const std::string source = source_;
      const db::Ticket t = ingestor_->submit_with(
          [=](db::Database& db) { db::set_committed_offset(db, run_id, source, end); });
      if (!writer_->wait(t)) {
        // What was reported of the refused chunk stays reported.
        if (replay_offset_ != start) replay_count_ = 0;
        replay_offset_ = start;
        replay_count_ = std::max(replay_count_, seen);
        // The writer's kind says why: a lock held by another program (kBusy) or a run row that is
        // gone (kConstraint) is not a full disk. Anything else reads as the storage refusing writes.
        const db::WriterStats ws = writer_->stats();
        const db::DbErrorKind kind =
            ws.last_error_kind == db::DbErrorKind::kBusy || ws.last_error_kind == db::DbErrorKind::kConstraint
                ? ws.last_error_kind
                : db::DbErrorKind::kFull;
        throw db::DbError(kind, "storing the metrics of " + place_.label() + " (" + source_ + ") at byte " +
                                    std::to_string(chunk.start) + " failed: " + ws.last_error);
      }
    } else {
      size_t at = 0;
      while (at < chunk.text.size()) {
        const size_t nl = chunk.text.find('\n', at);
        const std::string_view line(chunk.text.data() + at, nl - at);
        at = nl + 1;
        MetricsRecord r;
        if (parse_metrics_line(line, r) == ParseStatus::kRecord) deliver(r);
      }
    }
    offset_ = next;
    place_.stored(got);
    if (!got.empty() && hooks.on_committed) hooks.on_committed(got, offset_);
    return got;
  }
  uint64_t offset() const { return offset_; }

 private:
  Place& place_;
  db::Writer* writer_;
  int64_t run_id_;
  std::string source_;
  std::unique_ptr<db::Ingestor> ingestor_;
  uint64_t offset_ = 0;
  int64_t replay_offset_ = -1, replay_count_ = 0;  // records after replay_offset_ already reported
};

PlaceOutcome watch_once(Place& place, db::Writer* writer, int64_t run_id, const std::string& name,
                        const WatchHooks& hooks) {
  const bool stored = writer && run_id > 0;
  const Note& note = hooks.note;
  std::unique_ptr<db::Database> reader;
  if (stored) {
    db::OpenOptions o;
    o.create = false;
    o.quick_check = false;
    reader = std::make_unique<db::Database>(writer->path(), o);
  }
  place.begin(writer);
  Committer metrics(place, writer, run_id);
  BudgetGuard guard(run_id, place.budget_period());
  PlaceOutcome out;
  EndContext ctx;
  bool stopping = false, killed = false, store_failing = false;
  bool store_full_once = false, store_busy_once = false;  // why the store refused rows for a while
  bool vanished = false;  // the run's row was deleted while its worker ran (runs delete --force)
  // Whether the run's row is gone from the store (not: the store cannot be read).
  const auto row_gone = [&] {
    try {
      db::get_run(*reader, run_id);
      return false;
    } catch (const db::DbError& e) {
      return e.kind() == db::DbErrorKind::kNotFound;
    }
  };
  // Stores (or retries storing) what the run wrote; never stops the watch for the store's sake.
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
        if (r.type == MetricsRecordType::kStep && r.rank == 0) ctx.last_step = r.step().step;
        if (r.type == MetricsRecordType::kSummary) {
          ctx.summary_exit = r.summary().exit;
          ctx.summary_time = r.time;
          ctx.summary_steps = r.summary().steps;
        }
      }
      return !got.empty();
    } catch (const db::DbError& e) {
      out.store_error = e.what();
      // A deleted row refuses every row of the run (a foreign key): that is not a store to wait for.
      if (stored && row_gone()) {
        vanished = true;
        out.vanished = true;
        out.store_error = "run " + name + " was deleted from the run database while its worker ran";
        if (note) note(out.store_error + ": " + place.vanished_note());
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

  // A stop or kill is stored before the worker is signalled (db::add_end_request), so whoever sees
  // the end (this watcher, another process's, the settling of a run nobody watched) reads it.
  const auto store_request = [&](const std::string& what, const std::string& why) {
    if (!stored || vanished) return;
    try {
      writer->run([&](db::Database& db) { db::add_end_request(db, run_id, {what, why, 0}); });
    } catch (const db::DbError&) {
      // A store that refuses now: this watcher still knows the cause it records at the end.
    }
  };
  try {
    for (;;) {
      if (hooks.leave_requested && hooks.leave_requested()) {
        if (place.pull_on_leave()) pull();
        if (writer) writer->flush();
        out.exit_code = kLeft;
        out.recorded = false;
        return out;
      }
      if (!killed && hooks.kill_requested && hooks.kill_requested()) {
        killed = true;
        ctx.cause = StopCause::kKill;
        store_request("kill", "killed on request");
        place.kill(note);
      }
      if (!stopping && hooks.stop_requested && hooks.stop_requested()) {
        stopping = true;
        if (ctx.cause == StopCause::kNone) ctx.cause = StopCause::kUser;
        store_request("stop", "on request");
        place.stop(StopCause::kUser, "stop requested", note);
      }
      if (hooks.checkpoint_requested && hooks.checkpoint_requested()) place.checkpoint(stopping, note);
      const bool got = pull();
      if (vanished && !stopping) {
        stopping = true;
        if (ctx.cause == StopCause::kNone) ctx.cause = StopCause::kUser;
        place.stop(StopCause::kUser, "", nullptr);
      }
      if (stored && !stopping && place.budget_applies()) {
        try {
          const db::BudgetStatus b = guard.poll(*reader);
          if (b.action != db::BudgetAction::kNone) {
            if (note) note(b.message);
            if (hooks.on_budget) hooks.on_budget(b);
            writer->submit([run_id, m = b.message](db::Database& db) {
              db::add_event(db, run_id, db::now_seconds(), "budget", "warning", m);
            });
          }
          if (b.action == db::BudgetAction::kStop) {
            stopping = true;
            ctx.cause = StopCause::kBudget;
            ctx.stop_note = b.note;
            store_request("budget", b.note);
            place.stop(StopCause::kBudget, b.note, note);
          }
        } catch (const db::DbError&) {
          // a busy or damaged reader: the next poll tries again
        }
      }
      Turn t;
      t.got = got;
      t.cause = ctx.cause;
      t.stopping = stopping;
      t.store_ok = !vanished && !store_failing;
      if (place.turn(t, stored && !vanished ? writer : nullptr, note)) break;
      if (!got) std::this_thread::sleep_for(std::chrono::duration<double>(place.idle_seconds()));
    }
    // The last records (checkpoint, summary) were written just before the end: store them all.
    for (int idle = 0; idle < place.drain_turns();) idle = pull() ? 0 : idle + 1;
    Turn last;
    last.cause = ctx.cause;
    last.stopping = true;
    last.store_ok = !vanished && !store_failing;
    ctx.offset = metrics.offset();
    ctx.store_failing = store_failing;
    if (stored && !vanished && ctx.cause == StopCause::kNone) {
      // Asked by someone else (the app's Kill of a run `flotilla run` watches, `flotilla runs stop`):
      // the request they stored says so.
      try {
        if (const auto asked = db::end_request(*reader, run_id)) {
          ctx.cause = asked->what == "kill"     ? StopCause::kKill
                      : asked->what == "budget" ? StopCause::kBudget
                                                : StopCause::kUser;
          if (ctx.cause == StopCause::kBudget) ctx.stop_note = asked->note;
        }
      } catch (const db::DbError&) {
      }
    }
    PlaceEnd e = place.end(ctx, stored && !vanished ? writer : nullptr, note);
    out.exit_code = e.exit_code;
    out.signal = e.signal;
    out.end = std::move(e.end);
    out.root_cause = e.root_cause;
    out.last_step = ctx.last_step;
    if (stored && vanished) {
      // Nothing to record: the row is gone. The caller says so once; the run's folder keeps everything.
      out.stored_all = false;
      out.recorded = false;
      return out;
    }
    if (e.record && !store_failing) {  // (a failing store reads behind the file: its end is not known yet)
      check_completed_record(out.end, *e.record);
      if (out.exit_code == 0 && out.end.status == db::RunStatus::kFailed && out.end.exit_code)
        out.exit_code = static_cast<int>(*out.end.exit_code);
    }
    if (!stored) return out;
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
      if (!out.stored_all)
        throw db::DbError(db::DbErrorKind::kFull,
                          "storing the metrics of run " + name + " failed: " +
                              (out.store_error.empty() ? "the store is full" : out.store_error));
      // The accruals close when the run ended, not when its last rows finally got stored.
      if (out.end.at <= 0) out.end.at = db::now_seconds();
      writer->run([&](db::Database& db) {
        if (e.before_end) e.before_end(db, out.end);
        record_end(db, run_id, out.end);
      });
      writer->flush();
    } catch (const db::DbError& err) {
      out.recorded = false;
      out.store_error = err.what();
      if (note)
        note("recording the end of run " + name + " failed: " + err.what() +
             "; free space, then any flotilla runs command stores the rest of its metrics and its end");
    }
    return out;
  } catch (const remote::ConnectionLost& e) {
    if (writer) writer->flush();
    if (note) note(place.lost_note(e.what()));
    out.exit_code = static_cast<int>(ExitCode::kComm);
    out.recorded = false;
    return out;
  }
}

}  // namespace

PlaceOutcome watch_place(Place& place, db::Writer* writer, int64_t run_id, const std::string& name,
                         const WatchHooks& hooks) {
  for (;;) {
    PlaceOutcome out = watch_once(place, writer, run_id, name, hooks);
    if (out.exit_code == kLeft || !writer || !place.recover(*writer, out.exit_code, hooks)) return out;
  }
}

}  // namespace flotilla::runs
