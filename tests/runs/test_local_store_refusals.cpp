// The store refuses writes for a while during a local run (issue 33, D13; docs/reliability.md):
// - full (PRAGMA max_page_count on the writer's connection: SQLite answers SQLITE_FULL as for a
//   full disk) while the worker writes steps and checkpoints;
// - locked: another process holds BEGIN EXCLUSIVE past the busy timeout.
// Either way the progress a watcher reports (hooks.on_record: the CLI's progress lines) names each
// record once, although the refused lines are read again on every retry; every record is stored
// once space or the lock is back; and the status note says what it was: full, or locked by another
// program.
#include <sqlite3.h>
#include <sys/wait.h>

#include <cstdio>
#include <map>

#include "db/sql.h"
#include "runs_fixture.h"

using namespace runs_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

void fill(db::Writer& writer, bool full) {
  writer.run([full](db::Database& d) {
    d.exec("PRAGMA max_page_count = " +
           (full ? std::to_string(db::query_int(d, "PRAGMA page_count")) : std::string("1073741823")));
  });
}

// Records as the file holds them (type, rank, step and time tell two apart).
std::string key_of(const flotilla::MetricsRecord& r) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "%d/%d/%lld/%.6f", static_cast<int>(r.type), r.rank,
                static_cast<long long>(r.step_number()), r.time);
  return buf;
}

int64_t records_in_file(const std::string& run_dir) {
  std::ifstream f(run_dir + "/metrics.jsonl");
  int64_t n = 0;
  for (std::string l; std::getline(f, l);) n += !l.empty();
  return n;
}

// Watches a run like the CLI does, counting how often each record is reported.
struct Counted {
  std::mutex mutex;
  std::map<std::string, int> seen;
  std::string notes;
  std::atomic<bool> stop{false};
  runs::LocalOutcome out;
  std::atomic<bool> done{false};
  std::thread thread;

  Counted(db::Writer* writer, const runs::LocalWatch& w) {
    thread = std::thread([this, writer, w] {
      runs::WatchHooks hooks;
      hooks.note = [this](const std::string& n) {
        std::lock_guard<std::mutex> lock(mutex);
        notes += n + "\n";
      };
      hooks.on_record = [this](const flotilla::MetricsRecord& r) {
        std::lock_guard<std::mutex> lock(mutex);
        ++seen[key_of(r)];
      };
      hooks.stop_requested = [this] { return stop.load(); };
      out = runs::watch_local_run(writer, w, hooks);
      done = true;
    });
  }
  bool wait(double s) {
    const bool ended = wait_until([this] { return done.load(); }, s);
    if (ended) thread.join();
    return ended;
  }
  ~Counted() {
    if (thread.joinable()) {
      stop = true;
      thread.join();
    }
  }
  // Records reported more than once, and how many were reported.
  std::pair<int, int64_t> repeats() {
    std::lock_guard<std::mutex> lock(mutex);
    int twice = 0;
    for (const auto& [k, n] : seen) twice += n > 1;
    return {twice, static_cast<int64_t>(seen.size())};
  }
  std::string all_notes() {
    std::lock_guard<std::mutex> lock(mutex);
    return notes;
  }
};

// Paced steps with a checkpoint every 10: progress goes on while the store refuses.
Started start_paced(db::Writer& writer, const std::string& dir, const std::string& name) {
  ::setenv("FLOTILLA_TEST_STEP_SLEEP_MS", "5", 1);  // the worker inherits it
  Started s = create_and_start(writer, dir, tiny_config(1000000, "", 10), name);
  ::unsetenv("FLOTILLA_TEST_STEP_SLEEP_MS");
  return s;
}

void check_after(Counted& c, db::Writer& writer, const Started& s, const std::string& what) {
  CHECK(c.wait(120));
  CHECK(c.out.stored_all && c.out.recorded);
  const auto [twice, reported] = c.repeats();
  const int64_t in_file = records_in_file(s.run.run_dir);
  CHECK_MSG(twice == 0 && reported == in_file,
            "%s: %d records reported more than once; %lld reported, %lld in the file", what.c_str(), twice,
            static_cast<long long>(reported), static_cast<long long>(in_file));
  const db::Run r = stored(writer.path(), s.run.run_id);
  std::printf("%s: %lld records reported; status %s (%s)\n", what.c_str(), static_cast<long long>(reported),
              db::to_string(r.status), r.status_note.c_str());
  CHECK(r.status == db::RunStatus::kStopped);
  int64_t step_lines = 0;
  {
    std::ifstream f(s.run.run_dir + "/metrics.jsonl");
    for (std::string l; std::getline(f, l);) step_lines += l.find("\"type\":\"step\"") != std::string::npos;
  }
  CHECK(steps_stored(writer.path(), s.run.run_id) == step_lines);  // none missing, none doubled
}

void full_for_a_while(db::Writer& writer, const std::string& dir) {
  Started s = start_paced(writer, dir, "full-for-a-while");
  Counted c(&writer, s.watch);
  CHECK(wait_until([&] { return steps_stored(writer.path(), s.run.run_id) >= 20; }, 60));
  fill(writer, true);
  CHECK(
      wait_until([&] { return c.all_notes().find("storing the metrics failed") != std::string::npos; }, 20));
  const int64_t at_full = records_in_file(s.run.run_dir);
  // Several retries, each reading the refused lines (checkpoints among them) again.
  CHECK(wait_until([&] { return records_in_file(s.run.run_dir) > at_full + 150; }, 60));
  fill(writer, false);
  const int64_t lines = records_in_file(s.run.run_dir);
  CHECK(wait_until([&] { return c.repeats().second >= lines; }, 30));
  c.stop = true;
  check_after(c, writer, s, "full");
  const db::Run r = stored(writer.path(), s.run.run_id);
  CHECK_MSG(r.status_note.find("the store was full for a while") != std::string::npos, "%s",
            r.status_note.c_str());
}

void locked_for_a_while(db::Writer& writer, const std::string& dir) {
  Started s = start_paced(writer, dir, "locked-for-a-while");
  Counted c(&writer, s.watch);
  CHECK(wait_until([&] { return steps_stored(writer.path(), s.run.run_id) >= 20; }, 60));
  // Another program holds the write lock for 12 s (the busy timeout is 5 s).
  int ready[2];
  CHECK(::pipe(ready) == 0);
  const pid_t holder = ::fork();
  if (holder == 0) {
    sqlite3* raw = nullptr;
    sqlite3_open(writer.path().c_str(), &raw);
    const int rc = sqlite3_exec(raw, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr);
    const char ok = rc == SQLITE_OK ? 'y' : 'n';
    (void)!::write(ready[1], &ok, 1);
    ::sleep(12);
    sqlite3_exec(raw, "COMMIT", nullptr, nullptr, nullptr);
    sqlite3_close(raw);
    ::_exit(0);
  }
  char ok = 0;
  CHECK(::read(ready[0], &ok, 1) == 1 && ok == 'y');
  CHECK(
      wait_until([&] { return c.all_notes().find("storing the metrics failed") != std::string::npos; }, 30));
  int status = 0;
  ::waitpid(holder, &status, 0);  // the lock is released
  const int64_t lines = records_in_file(s.run.run_dir);
  CHECK(wait_until([&] { return c.repeats().second >= lines; }, 30));
  c.stop = true;
  check_after(c, writer, s, "locked");
  const db::Run r = stored(writer.path(), s.run.run_id);
  CHECK_MSG(r.status_note.find("locked by another program") != std::string::npos &&
                r.status_note.find("full") == std::string::npos,
            "%s", r.status_note.c_str());
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace

int main() {
  const std::string dir = scratch("store_refusals");
  db::Writer writer(dir + "/store.db");
  full_for_a_while(writer, dir);
  locked_for_a_while(writer, dir);
  return flotilla_test::summary("test_local_store_refusals");
}
