// Checkpoints and events (see run_records.h).
#include "db/run_records.h"

#include <algorithm>

#include "db/run_store.h"
#include "db/sql.h"

namespace flotilla::db {

std::vector<CheckpointInfo> list_checkpoints(const Database& db, int64_t run_id) {
  std::vector<CheckpointInfo> out;
  Stmt st(db,
          "SELECT step, dir, reason, bytes, seconds, time FROM checkpoints WHERE run_id = ?1 ORDER BY step");
  st.bind(1, run_id);
  while (st.step()) out.push_back({st.i64(0), st.text(1), st.text(2), st.i64(3), st.f64(4), st.f64(5)});
  return out;
}

void upsert_checkpoint(Database& db, int64_t run_id, int64_t step, const std::string& dir, int64_t bytes,
                       double seconds, const std::string& reason, double time) {
  Stmt st(db,
          "INSERT OR REPLACE INTO checkpoints(run_id, step, dir, bytes, seconds, reason, time) "
          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  st.bind(1, run_id)
      .bind(2, step)
      .bind(3, dir)
      .bind(4, bytes)
      .bind(5, seconds)
      .bind(6, reason)
      .bind(7, time)
      .run();
}

std::vector<EventInfo> list_events(const Database& db, int64_t run_id, int limit) {
  std::vector<EventInfo> out;
  Stmt st(db,
          "SELECT time, kind, level, message, fields, rank FROM events WHERE run_id = ?1 "
          "ORDER BY time DESC, id DESC LIMIT ?2");
  st.bind(1, run_id).bind(2, limit > 0 ? int64_t{limit} : int64_t{-1});
  while (st.step())
    out.push_back(
        {st.f64(0), 0, st.text(1), st.text(2), st.text(3), st.text(4), static_cast<int>(st.i64(5))});
  std::reverse(out.begin(), out.end());
  return out;
}

void add_end_request(Database& db, int64_t run_id, const EndRequest& request) {
  add_event(db, run_id, request.time > 0 ? request.time : now_seconds(), "request", "info",
            request.what + ": " + request.note);
}

std::optional<EndRequest> end_request(const Database& db, int64_t run_id) {
  // Since the newest "-> running" status event (a resumed run's earlier stops do not count).
  Stmt st(db,
          "SELECT time, message FROM events WHERE run_id = ?1 AND kind = 'request' AND time >= "
          "COALESCE((SELECT MAX(time) FROM events WHERE run_id = ?1 AND kind = 'status' AND "
          "message LIKE '%-> running%'), 0) ORDER BY time, id");
  st.bind(1, run_id);
  std::optional<EndRequest> best;
  const auto rank = [](const std::string& what) { return what == "kill" ? 3 : what == "budget" ? 2 : 1; };
  while (st.step()) {
    const std::string m = st.text(1);
    const size_t colon = m.find(": ");
    EndRequest r;
    r.time = st.f64(0);
    r.what = m.substr(0, colon);
    r.note = colon == std::string::npos ? std::string() : m.substr(colon + 2);
    if (r.what != "stop" && r.what != "budget" && r.what != "kill") continue;
    if (!best || rank(r.what) >= rank(best->what)) best = r;
  }
  return best;
}

std::vector<EventInfo> events_after(const Database& db, int64_t run_id, int64_t after_id) {
  std::vector<EventInfo> out;
  Stmt st(db,
          "SELECT time, id, kind, level, message, fields, rank FROM events WHERE run_id = ?1 AND id > ?2 "
          "ORDER BY id");
  st.bind(1, run_id).bind(2, after_id);
  while (st.step())
    out.push_back(
        {st.f64(0), st.i64(1), st.text(2), st.text(3), st.text(4), st.text(5), static_cast<int>(st.i64(6))});
  return out;
}

}  // namespace flotilla::db
