// The queue's scheduler (runs/scheduler.h) on this machine's CPU, with the real worker and a real
// SQLite file:
// - one scheduler per workspace: a second is refused naming the first's pid and host; a holder
//   whose process is gone (a SIGKILLed scheduler) is replaced at once;
// - exactly once under crashes: a scheduler (a forked child) is killed (_exit 137, as SIGKILL
//   leaves things) at seeded points of an entry's start (after the claim, after the run's row is
//   created, after its worker started, after its id is written back, after it is watched); a new
//   scheduler continues each time. In the end every entry is done and every run was created once
//   and its worker started once (one run row per entry under its reserved name, one "worker pid"
//   status event per run, every step stored once);
// - killed right after it requeued a run (after-end), the next scheduler resumes that run once;
// - a run whose worker is killed outright is requeued at the head with its lost steps and their
//   cost, and resumes from its newest checkpoint, every step stored once.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <random>

#include "db/queue.h"
#include "db/run_records.h"
#include "engine/core/error.h"
#include "runs/process.h"
#include "runs/scheduler.h"
#include "runs_fixture.h"

using namespace runs_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

runs::SchedulerOptions options_for(const std::string& dir) {
  runs::SchedulerOptions o;
  o.service.ssh.database_path = dir + "/runs.db";
  o.service.runs_root = dir + "/runs";
  o.service.worker_path = FLOTILLA_WORKER_PATH;
  o.service.worker_env = {"OMP_NUM_THREADS=1"};
  o.service.no_bind = true;
  o.origin = "test scheduler";
  o.tick_s = 0.2;
  return o;
}

int64_t add(db::Database& d, const std::string& name, int steps, int64_t priority = 0) {
  db::NewQueueEntry n;
  n.name = name;
  n.explicit_name = true;
  n.config_toml = tiny_config(steps, "", 20);
  n.priority = priority;
  return db::add_queue_entry(d, n, db::now_seconds());
}

void second_scheduler_is_refused(const std::string& dir) {
  runs::Scheduler first(options_for(dir));
  first.acquire();
  runs::Scheduler second(options_for(dir));
  std::string why;
  try {
    second.acquire();
  } catch (const runs::Refusal& e) {
    why = e.what();
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  CHECK_MSG(why.find("already served by test scheduler (pid " + std::to_string(getpid()) + " on " + host) !=
                std::string::npos,
            "%s", why.c_str());
  // A tick of the refused one changes nothing and starts nothing either (it throws the same).
  bool refused_again = false;
  try {
    second.tick();
  } catch (const runs::Refusal&) {
    refused_again = true;
  }
  CHECK(refused_again);
}

void dead_holder_is_replaced(const std::string& dir) {
  // A scheduler in a child process takes the lease and dies without releasing it (SIGKILL).
  const pid_t child = fork();
  if (child == 0) {
    runs::Scheduler s(options_for(dir));
    s.acquire();
    ::_exit(137);
  }
  int status = 0;
  waitpid(child, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 137);
  {
    const db::Database d(dir + "/runs.db");
    const auto lease = db::scheduler_lease(d);
    CHECK(lease && lease->pid == child);
  }
  runs::Scheduler next(options_for(dir));
  next.acquire();  // at once: its pid is gone on this host and boot (no 30 s wait)
  const db::Database d(dir + "/runs.db");
  CHECK(db::scheduler_lease(d)->token == next.token());
}

// A scheduler in a child, killed at `crash` ("" none): returns its exit status.
int serve_in_child(const std::string& dir, const std::string& crash) {
  const pid_t child = fork();
  if (child == 0) {
    if (crash.empty())
      unsetenv("FLOTILLA_SCHED_CRASH_AT");
    else
      setenv("FLOTILLA_SCHED_CRASH_AT", crash.c_str(), 1);
    alarm(90);  // a scheduler that never empties the queue fails the test, it does not hang it
    int rc = 1;
    try {
      runs::Scheduler s(options_for(dir));
      rc = s.serve(true, nullptr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child scheduler: %s\n", e.what());
      rc = 3;
    }
    std::fflush(nullptr);
    ::_exit(rc);
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void exactly_once_under_crashes(const std::string& dir, unsigned seed) {
  const std::string db_path = dir + "/runs.db";
  std::vector<std::string> names;
  {
    db::Database d(db_path);
    for (int i = 0; i < 4; ++i) {
      names.push_back("crash-" + std::to_string(seed) + "-" + std::to_string(i));
      add(d, names.back(), 40, 4 - i);
    }
  }
  // Every point once, in a seeded order: each child scheduler is killed the first time it reaches
  // its point (a start cut short at any point leaves at most one run, so 4 entries reach all 5).
  std::vector<std::string> points = {"after-claim", "after-create", "after-start", "after-record",
                                     "after-running"};
  std::mt19937 rng(seed);
  std::shuffle(points.begin(), points.end(), rng);
  int crashed = 0;
  for (const std::string& p : points) {
    const std::string at = p + ":1";
    const int rc = serve_in_child(dir, at);
    CHECK_MSG(rc == 137 || rc == 0, "scheduler crashed at %s exited %d", at.c_str(), rc);
    if (rc == 137) ++crashed;
  }
  CHECK_MSG(crashed == static_cast<int>(points.size()), "only %d of the seeded crashes happened", crashed);
  CHECK(serve_in_child(dir, "") == 0);  // a last one serves the queue to its end

  const db::Database d(db_path);
  for (const std::string& name : names) {
    const auto e = db::get_queue_entry(d, name);
    CHECK_MSG(e.state == db::EntryState::kDone, "entry %s is %s: %s", name.c_str(),
              db::entry_state_name(e.state), e.why.c_str());
    const auto run = db::find_run(d, name);
    CHECK_MSG(run && run->status == db::RunStatus::kCompleted, "run %s", name.c_str());
    if (!run) continue;
    CHECK(e.run_id && *e.run_id == run->id);
    CHECK(!db::find_run(d, name + "-2"));  // never created twice under another name
    int worker_starts = 0, decisions = 0;
    for (const db::EventInfo& ev : db::list_events(d, run->id)) {
      if (ev.kind == "status" && ev.message.find("worker pid") != std::string::npos) ++worker_starts;
      if (ev.kind == "scheduled") ++decisions;
    }
    CHECK_MSG(worker_starts == 1, "run %s: its worker started %d times", name.c_str(), worker_starts);
    CHECK_MSG(decisions == 1, "run %s: %d decisions recorded", name.c_str(),
              decisions);  // one, whoever finished it
    std::vector<int64_t> steps;
    for (const auto& pt : db::metric_points(d, run->id, "loss"))
      steps.push_back(static_cast<int64_t>(pt.step));
    CHECK_MSG(steps.size() == 40 && std::adjacent_find(steps.begin(), steps.end()) == steps.end(),
              "run %s: %zu steps", name.c_str(), steps.size());
  }
}

// A run whose worker is killed outright (SIGKILL of its tree: an OOM killer, a hard stop of the
// machine) goes back to the head of the queue with the steps after its newest checkpoint recorded
// as lost, priced at the run's measured cost per step, and resumes from that checkpoint in the same
// row: every step from 1 to the end stored exactly once.
void killed_run_is_requeued_and_resumed(const std::string& dir) {
  const std::string db_path = dir + "/runs.db";
  {
    db::Database d(db_path);
    db::NewQueueEntry n;
    n.name = "killed";
    n.explicit_name = true;
    n.config_toml = tiny_config(3000, "[budget]\nusd_per_hour = 36\n", 500);
    n.max_restarts = 1;
    db::add_queue_entry(d, n, db::now_seconds());
  }
  runs::Scheduler sched(options_for(dir));
  sched.acquire();
  const auto tick_until = [&](auto pred, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      sched.tick();
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return pred();
  };
  const auto entry = [&] { return db::get_queue_entry(db::Database(db_path), "killed"); };
  CHECK(tick_until([&] { return entry().state == db::EntryState::kRunning; }, 60));
  const int64_t id = entry().run_id.value_or(0);
  int64_t saved = 0, stored_steps = 0;
  CHECK(tick_until(
      [&] {
        const db::Database d(db_path);
        const auto cps = db::list_checkpoints(d, id);
        saved = cps.empty() ? 0 : cps.back().step;
        stored_steps = static_cast<int64_t>(db::metric_points(d, id, "loss").size());
        return saved > 0 && stored_steps >= saved + 30;
      },
      60));
  const db::Run run = stored(db_path, id);
  const pid_t pid = flotilla::runs::live_worker_pid(run.run_dir);
  CHECK(pid > 0);
  // Frozen first (SIGSTOP to the launcher and its ranks), so the steps the kill loses are known
  // exactly: those its record has after its newest checkpoint.
  std::vector<pid_t> tree = flotilla::runs::child_pids(pid);
  tree.push_back(pid);
  for (pid_t p : tree) kill(p, SIGSTOP);
  // Stopped for sure (state T in /proc: a loaded machine may run a rank on for a while, to finish
  // the write it was in).
  const auto stopped = [](pid_t p) {
    std::ifstream f("/proc/" + std::to_string(p) + "/stat");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t paren = text.rfind(')');
    return paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'T';
  };
  CHECK(wait_until([&] { return std::all_of(tree.begin(), tree.end(), stopped); }, 30));
  // What the frozen worker wrote is final: its record (metrics.jsonl) names the last step and the
  // newest checkpoint the kill leaves, whatever the store has taken in so far (a loaded machine's
  // watch can lag by seconds, so the store is not the measure here).
  int64_t last_written = 0, saved_written = 0;
  {
    std::ifstream f(run.run_dir + "/metrics.jsonl");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t complete = text.rfind('\n');
    text.resize(complete == std::string::npos ? 0 : complete + 1);
    const auto number_after = [](const std::string& line, const std::string& key) -> int64_t {
      const size_t at = line.find("\"" + key + "\":");
      return at == std::string::npos ? -1 : std::atoll(line.c_str() + at + key.size() + 3);
    };
    size_t begin = 0;
    while (begin < text.size()) {
      const size_t end = text.find('\n', begin);
      const std::string line = text.substr(begin, end - begin);
      begin = end + 1;
      if (line.find("\"type\":\"step\"") != std::string::npos)
        last_written = std::max(last_written, number_after(line, "step"));
      else if (line.find("\"type\":\"checkpoint\"") != std::string::npos)
        saved_written = std::max(saved_written, number_after(line, "step"));
    }
  }
  CHECK_MSG(last_written > saved_written && saved_written > 0, "record: step %lld, checkpoint %lld",
            static_cast<long long>(last_written), static_cast<long long>(saved_written));
  flotilla::runs::kill_worker_tree(pid);
  CHECK(tick_until([&] { return entry().starts >= 2 || db::entry_finished(entry().state); }, 60));
  const db::QueueEntry requeued = entry();
  // (+1: a frozen rank can hold its last line unfinished, without its newline, which the watcher
  // stores only at the end, once the kill leaves it final.)
  const int64_t expect_lost = last_written - saved_written;
  CHECK_MSG(requeued.starts == 2 &&
                (requeued.lost_steps == expect_lost || requeued.lost_steps == expect_lost + 1) &&
                (requeued.lost_steps == 0 || requeued.lost_usd > 0),
            "%s, %lld starts, lost %lld steps (expected %lld) ($%g): %s",
            db::entry_state_name(requeued.state), static_cast<long long>(requeued.starts),
            static_cast<long long>(requeued.lost_steps), static_cast<long long>(expect_lost),
            requeued.lost_usd, requeued.why.c_str());
  CHECK(tick_until([&] { return db::entry_finished(entry().state); }, 90));
  const db::QueueEntry e = entry();
  CHECK_MSG(e.state == db::EntryState::kDone, "%s: %s", db::entry_state_name(e.state), e.why.c_str());
  CHECK(stored(db_path, id).status == db::RunStatus::kCompleted);
  const db::Database d(db_path);
  std::vector<int64_t> steps;
  for (const auto& pt : db::metric_points(d, id, "loss")) steps.push_back(static_cast<int64_t>(pt.step));
  CHECK_MSG(steps.size() == 3000 && steps.front() == 1 && steps.back() == 3000 &&
                std::adjacent_find(steps.begin(), steps.end()) == steps.end(),
            "%zu steps", steps.size());
}

// Scheduler::stop_run (successive halving's call): the run stops with a checkpoint and its entry
// is done with the reason given; a run of a sweep's entry carries the tag sweep:<group>. The runs
// store through one Writer the caller gives (as the app's scheduler does).
void stop_run_records_why(const std::string& dir) {
  const std::string db_path = dir + "/runs.db";
  {
    db::Database d(db_path);
    db::NewQueueEntry n;
    n.name = "halved";
    n.explicit_name = true;
    n.config_toml = tiny_config(100000, "", 100000);
    n.group = "lr-sweep";
    db::add_queue_entry(d, n, db::now_seconds());
  }
  db::Writer writer(db_path);
  runs::SchedulerOptions o = options_for(dir);
  o.service.writer = &writer;
  runs::Scheduler sched(o);
  const auto entry = [&] { return db::get_queue_entry(db::Database(db_path), "halved"); };
  const auto tick_until = [&](auto pred, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      sched.tick();
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return pred();
  };
  CHECK(tick_until([&] { return entry().state == db::EntryState::kRunning; }, 60));
  const int64_t id = entry().run_id.value_or(0);
  CHECK(sched.watched_runs() == std::vector<int64_t>{id});
  CHECK(wait_until([&] { return steps_stored(db_path, id) >= 5; }, 60));
  sched.stop_run(id, "successive halving: validation loss 2.31, worse than the kept half");
  CHECK(tick_until([&] { return db::entry_finished(entry().state); }, 60));
  const db::QueueEntry e = entry();
  CHECK_MSG(
      e.state == db::EntryState::kDone &&
          e.why ==
              "stopped by the scheduler: successive halving: validation loss 2.31, worse than the kept half",
      "%s: %s", db::entry_state_name(e.state), e.why.c_str());
  const db::Run run = stored(db_path, id);
  CHECK(run.status == db::RunStatus::kStopped);
  CHECK(std::find(run.tags.begin(), run.tags.end(), "sweep:lr-sweep") != run.tags.end());
  CHECK(sched.watched_runs().empty());
}

// The scheduler killed right after it put a killed run back in the queue (after-end): the next
// one resumes it once, from its checkpoint, and sees it to its end.
void crash_after_requeue(const std::string& dir) {
  const std::string db_path = dir + "/runs.db";
  {
    db::Database d(db_path);
    db::NewQueueEntry n;
    n.name = "requeue-crash";
    n.explicit_name = true;
    n.config_toml = tiny_config(3000, "", 200);
    db::add_queue_entry(d, n, db::now_seconds());
  }
  const pid_t child = fork();
  if (child == 0) {
    setenv("FLOTILLA_SCHED_CRASH_AT", "after-end", 1);
    alarm(90);
    runs::Scheduler s(options_for(dir));
    s.serve(true, nullptr);
    ::_exit(0);
  }
  const auto entry = [&] { return db::get_queue_entry(db::Database(db_path), "requeue-crash"); };
  CHECK(wait_until([&] { return entry().run_id.has_value(); }, 60));
  const int64_t id = entry().run_id.value_or(0);
  CHECK(wait_until(
      [&] {
        const db::Database d(db_path);
        return !db::list_checkpoints(d, id).empty();
      },
      60));
  flotilla::runs::kill_worker_tree(flotilla::runs::live_worker_pid(stored(db_path, id).run_dir));
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 137, "the scheduler ended with status %d", status);
  CHECK(entry().state == db::EntryState::kQueued && entry().starts == 1);  // requeued, then it died
  CHECK(serve_in_child(dir, "") == 0);
  const db::QueueEntry e = entry();
  CHECK_MSG(e.state == db::EntryState::kDone && e.starts == 2, "%s, %lld starts: %s",
            db::entry_state_name(e.state), static_cast<long long>(e.starts), e.why.c_str());
  const db::Database d(db_path);
  int resumes = 0;
  for (const db::EventInfo& ev : db::list_events(d, id))
    if (ev.kind == "status" && ev.message.find("failed -> running") != std::string::npos) ++resumes;
  CHECK_MSG(resumes == 1, "resumed %d times", resumes);
  std::vector<int64_t> steps;
  for (const auto& pt : db::metric_points(d, id, "loss")) steps.push_back(static_cast<int64_t>(pt.step));
  CHECK_MSG(steps.size() == 3000 && steps.front() == 1 && steps.back() == 3000 &&
                std::adjacent_find(steps.begin(), steps.end()) == steps.end(),
            "%zu steps", steps.size());
}

}  // namespace

int main() {
  const std::string dir = scratch("scheduler_crash");
  second_scheduler_is_refused(dir);
  dead_holder_is_replaced(dir);
  {  // release the lease the last test took (its scheduler is gone)
    runs::Scheduler s(options_for(dir));
    s.acquire();
  }
  const char* seeds = std::getenv("FLOTILLA_SCHED_SEEDS");
  std::vector<unsigned> list = {11, 29};
  if (seeds) list = {static_cast<unsigned>(std::atoi(seeds))};
  for (unsigned seed : list) exactly_once_under_crashes(dir, seed);
  crash_after_requeue(dir);
  killed_run_is_requeued_and_resumed(dir);
  stop_run_records_why(dir);
  return flotilla_test::summary("test_scheduler_crash");
}
