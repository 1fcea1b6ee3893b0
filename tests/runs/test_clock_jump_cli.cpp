// The wall clock steps by a day while a priced `flotilla run` with a time limit trains (issue 33,
// D6; docs/reliability.md): the real flotilla and flotilla-worker binaries, with the clock seam's
// test hook (FLOTILLA_TEST_WALL_OFFSET_FILE, engine/core/clock.h) stepping the wall clock of the CLI
// and its worker mid-run, +1 day and then -1 day, as NTP or a VM resume would. Neither may reach
// a false time limit (max_hours = 2), and the cost, the running time and the run's wall duration
// must be the real elapsed time (within a tolerance), costs by day must sum to the total, and
// nothing may be negative or zero.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "check.h"
#include "db/costs.h"
#include "db/database.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string g_root;
constexpr double kUsdPerHour = 36.0;

int64_t steps_of(const std::string& name) {
  const db::Database d(g_root + "/store.db");
  const auto r = db::find_run(d, name);
  return r ? static_cast<int64_t>(db::metric_points(d, r->id, "loss").size()) : 0;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

ProcResult cli(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  const std::string log = g_root + "/cli-" + std::to_string(Clock::now().time_since_epoch().count()) + ".log";
  std::vector<std::string> argv = {"/bin/sh",         "-c",   "cd \"$0\" && exec \"$@\"", g_root,
                                   FLOTILLA_CLI_PATH, "--db", g_root + "/store.db"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r;
  r.exit_code = wait_exit(spawn(argv, env, log));
  r.output = read_file(log);
  return r;
}

void a_step_of(double jump_s, const std::string& name) {
  const std::string offset_file = g_root + "/" + name + ".offset";
  write_text(offset_file, "0\n");
  // 300 steps paced at >= 20 ms: 6 s or more of training, long enough to step the clock inside.
  const std::string cfg = g_root + "/" + name + ".toml";
  write_text(
      cfg, "[run]\nname = \"" + name +
               "\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\n"
               "vocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n[train]\nsteps = 300\n"
               "micro_batch = 2\nseq_len = 16\n[checkpoint]\nevery = 100\n[budget]\nusd_per_hour = 36.0\n"
               "max_hours = 2.0\n");
  const std::vector<std::string> env = {"OMP_NUM_THREADS=1",
                                        "DISPLAY=",
                                        "WAYLAND_DISPLAY=",
                                        "QT_QPA_PLATFORM=",
                                        "FLOTILLA_TEST_STEP_SLEEP_MS=20",
                                        "FLOTILLA_TEST_WALL_OFFSET_FILE=" + offset_file};
  const std::string log = g_root + "/" + name + ".log";
  std::vector<std::string> argv = {
      "/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", g_root, FLOTILLA_CLI_PATH, "--db", g_root + "/store.db",
      "run",     cfg};
  const auto started = Clock::now();
  const pid_t pid = spawn(argv, env, log);
  CHECK(wait_until([&] { return steps_of(name) >= 1; }, 120));
  const auto first_step = Clock::now();
  CHECK(wait_until([&] { return steps_of(name) >= 60; }, 120));
  write_text(offset_file, std::to_string(jump_s) + "\n");  // the wall clock steps, mid-run
  const int code = wait_exit(pid);
  const auto ended = Clock::now();
  const double elapsed = std::chrono::duration<double>(ended - started).count();  // an upper bound
  const double training = std::chrono::duration<double>(ended - first_step).count();
  const std::string out = read_file(log);
  std::printf("step %+.0f s: %.1f s in flotilla run (%.1f s from its first stored step)\n%s", jump_s, elapsed,
              training, out.substr(out.rfind("run " + name)).c_str());

  // No false time limit: the run completes its 300 steps.
  CHECK_MSG(code == 0 && !has(out, "time limit") && has(out, "run " + name + " completed"), "exit %d\n%s",
            code, out.c_str());
  const db::Database d(g_root + "/store.db");
  const db::Run r = db::get_run(d, name);
  CHECK_MSG(r.status == db::RunStatus::kCompleted, "%s (%s)", db::to_string(r.status), r.status_note.c_str());
  // Running time and cost: the real elapsed time, never a day more, never zero or negative.
  const double running = db::run_running_seconds(d, r.id);
  CHECK_MSG(running >= 0.5 * training && running <= elapsed + 0.5, "running %.3f s, elapsed %.3f s", running,
            elapsed);
  const double usd = db::run_cost_usd(d, r.id);
  CHECK_NEAR(usd, kUsdPerHour * running / 3600.0, 1e-6);
  for (const db::Accrual& a : db::run_accruals(d, r.id)) {
    CHECK(a.end.has_value());
    CHECK_MSG(a.seconds(0) >= 0 && a.seconds(0) <= elapsed + 0.5, "accrual of %.3f s", a.seconds(0));
  }
  // The run's wall duration (runs show, the CLI's last line) is real time too.
  const db::RunSummary s = db::run_summary(d, r.id);
  CHECK_MSG(s.training_s >= 0.5 * training && s.training_s <= elapsed + 0.5, "wall %.3f s, elapsed %.3f s", s.training_s,
            elapsed);
  CHECK_MSG(s.cost_usd && *s.cost_usd > 0 && *s.cost_usd <= kUsdPerHour * (elapsed + 0.5) / 3600.0, "cost $%.6f", s.cost_usd.value_or(-1));
  // Costs by day sum to the total, which is this run's cost plus the earlier runs'.
  double by_run = 0, by_day = 0;
  for (const auto& l : db::costs_by_run(d)) by_run += l.usd;
  for (const auto& l : db::costs_by_day(d)) {
    CHECK(l.usd >= 0);
    by_day += l.usd;
  }
  CHECK_MSG(std::fabs(by_run - by_day) < 1e-7, "by run $%.6f, by day $%.6f", by_run, by_day);
  CHECK(by_run <= kUsdPerHour * 2 * (elapsed + 0.5) / 3600.0);  // never a day's worth
  // The CLI's `runs show` and `costs` say the same, whatever the wall clock does now.
  const ProcResult show = cli({"runs", "show", name}, env);
  CHECK_MSG(show.exit_code == 0 && !has(show.output, "wall -") && !has(show.output, "24h"), "%s",
            show.output.c_str());
  const ProcResult costs = cli({"costs"}, env);
  CHECK_MSG(costs.exit_code == 0 && !has(costs.output, "$864") && !has(costs.output, "$-"), "%s",
            costs.output.c_str());
}

}  // namespace

int main() {
  g_root = fresh_dir("runs_clock_jump");
  a_step_of(86400, "ahead");    // +1 day
  a_step_of(-86400, "behind");  // -1 day
  return summary("test_clock_jump_cli");
}
