// `flotilla runs attach RUN` against two real sshd "nodes" on 127.0.0.1 (docs/reliability.md R1, S6):
// `flotilla run CONFIG --nodes a,b` is SIGKILLed mid-run while the ranks keep training; a new
// `runs attach` reconnects, tails from the committed offset and ends with the run's status. The
// store then has every step exactly once, the run is completed, and costs were charged from the
// real start on the node to the worker's recorded exit, in one interval per node: the unwatched
// time is neither free nor counted twice. A second run is attached the same way and stopped with
// SIGINT: the stop reaches both nodes (each wrote its exit code; no process of the run is left).
#include <sys/stat.h>

#include <cmath>
#include <ctime>
#include <set>
#include <thread>

#include "check.h"
#include "cli_fixture.h"
#include "db/database.h"
#include "db/sql.h"

using namespace flotilla_test;

namespace {

constexpr int kSteps = 2000;  // a few seconds of training: it outlives the killed watcher

CliWorkspace* g_ws = nullptr;
std::string g_db;

pid_t cli_spawn(const std::vector<std::string>& args, const std::string& log) {
  return g_ws->spawn(args, log);
}
ProcResult cli(const std::vector<std::string>& args) { return g_ws->run(args); }

double query_double(const flotilla::db::Database& db, const std::string& sql) {
  flotilla::db::Stmt st(db, sql);
  return st.step() ? st.f64(0) : -1;
}

int64_t stored_losses(const std::string& run) {
  const flotilla::db::Database db(g_db);
  return flotilla::db::query_int(
      db, "SELECT COUNT(*) FROM metrics m JOIN runs r ON r.id = m.run_id WHERE r.name = '" + run +
              "' AND m.name = 'loss'");
}

int lines_of(const std::string& path) {
  const std::string m = read_file(path);
  return static_cast<int>(std::count(m.begin(), m.end(), '\n'));
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("cli_attach");
  if (!fx.start(0) || !fx.start(1)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  CliWorkspace ws(fx.root());
  g_ws = &ws;
  g_db = ws.db();
  CHECK_MSG(ws.add_trusted_node(fx, 0, "a", {"--price-per-hour", "3.6"}), "node a");
  CHECK_MSG(ws.add_trusted_node(fx, 1, "b", {"--price-per-hour", "1.8"}), "node b");
  const std::string cfg = fx.root() + "/tiny.toml";
  write_text(cfg,
             "[run]\nname = \"att\"\nseed = 7\nthreads = 1\n"
             "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\n"
             "max_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n"
             "[train]\nsteps = " +
                 std::to_string(kSteps) +
                 "\nmicro_batch = 2\nseq_len = 16\n"
                 "[parallel]\ndp = 2\ntimeout_s = 60\n[checkpoint]\nevery = 500\nkeep_last = 2\n");

  // Starts `run --nodes a,b --name NAME` and SIGKILLs it once node a's rank 0 wrote `lines` lines
  // and the store holds `rows` loss rows of it; returns the epoch time of the kill (0 if the run
  // process ended first).
  const auto start_and_kill = [&](const std::string& name, const std::string& rid, int lines, int rows) {
    const pid_t run = cli_spawn({"run", cfg, "--nodes", "a,b", "--no-bind", "--name", name},
                                fx.root() + "/" + name + ".log");
    const std::string metrics = fx.node(0).home + "/.flotilla/runs/" + rid + "/metrics.jsonl";
    double killed_at = 0;
    wait_until(
        [&] {
          if (lines_of(metrics) >= lines && stored_losses(name) >= rows) {
            ::kill(run, SIGKILL);
            killed_at = static_cast<double>(std::time(nullptr));
            return true;
          }
          return waitpid(run, nullptr, WNOHANG) == run;
        },
        90);
    if (killed_at > 0) wait_exit(run);
    return killed_at;
  };

  // R1: the watching process dies mid-run; the ranks keep going; attach finishes the job.
  const double killed_at = start_and_kill("att", "att-1", 10, 20);
  CHECK_MSG(killed_at > 0, "the run ended before it could be killed: %s",
            read_file(fx.root() + "/att.log").c_str());
  const std::string run_dir = fx.node(0).home + "/.flotilla/runs/att-1";
  {
    flotilla::db::Database db(g_db);
    CHECK(flotilla::db::query_int(
              db, "SELECT COUNT(*) FROM runs WHERE name = 'att' AND status = 'running'") == 1);
    // The killed watcher had committed part of the file: attach must resume after it, not redo it.
    CHECK(flotilla::db::query_int(db, "SELECT byte_offset FROM ingest_offsets WHERE run_id = 1") > 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // unwatched training time
  const ProcResult attach = cli({"runs", "attach", "att"});
  CHECK_MSG(attach.exit_code == 0, "attach exit %d: %s", attach.exit_code, attach.output.c_str());
  // It found the ranks still training: the unwatched time is part of the run.
  CHECK_MSG(contains(attach.output,
                     "attached to run att (id 1) on 2 node(s), remote dir ~/.flotilla/runs/att-1, running"),
            "%s", attach.output.c_str());

  const ProcResult csv = cli({"runs", "export", "att", "--csv", "--metric", "loss"});
  CHECK_MSG(csv.exit_code == 0, "%s", csv.output.c_str());
  std::set<long> steps;
  int rows = 0;
  for (size_t pos = csv.output.find('\n'); pos != std::string::npos && pos + 1 < csv.output.size();) {
    const size_t next = csv.output.find('\n', pos + 1);
    steps.insert(std::atol(csv.output.substr(pos + 1, next - pos - 1).c_str()));
    ++rows;
    pos = next;
  }
  CHECK_MSG(rows == kSteps && static_cast<int>(steps.size()) == kSteps && *steps.begin() == 1 &&
                *steps.rbegin() == kSteps,
            "%d rows, %zu distinct steps", rows, steps.size());
  {
    flotilla::db::Database db(g_db);
    using flotilla::db::query_int;
    CHECK(query_int(db,
                    "SELECT COUNT(*) FROM metrics m JOIN runs r ON r.id = m.run_id WHERE r.name = 'att' "
                    "AND m.name = 'loss'") == kSteps);
    CHECK(
        query_int(
            db, "SELECT COUNT(*) FROM runs WHERE name = 'att' AND status = 'completed' AND exit_code = 0") ==
        1);
    CHECK(query_int(db, "SELECT byte_offset FROM ingest_offsets WHERE run_id = 1") ==
          static_cast<int64_t>(read_file(run_dir + "/metrics.jsonl").size()));
    // Costs: one interval per node (never reopened, so no gap and no overlap), from the node's
    // own start to the worker's recorded exit, which came after the watcher was killed.
    CHECK(query_int(db, "SELECT COUNT(*) FROM cost_accruals WHERE run_id = 1") == 2);
    CHECK(query_int(db, "SELECT COUNT(DISTINCT node_id) FROM cost_accruals WHERE run_id = 1") == 2);
    CHECK(query_int(db, "SELECT COUNT(*) FROM cost_accruals WHERE run_id = 1 AND end_time IS NULL") == 0);
    const long node_start = std::atol(read_file(run_dir + "/started_at").c_str());
    struct stat st {};
    CHECK(::stat((run_dir + "/exit_code").c_str(), &st) == 0);
    // The end is the worker's own (its summary record, or the wrapper's exit_code file).
    CHECK(query_int(db,
                    "SELECT COUNT(*) FROM cost_accruals a JOIN runs r ON r.id = a.run_id WHERE r.id = 1 AND "
                    "a.start_time = r.started_at AND a.end_time = r.ended_at AND r.started_at = " +
                        std::to_string(node_start) + " AND abs(r.ended_at - " + std::to_string(st.st_mtime) +
                        ") <= 2") == 2);
    CHECK_MSG(static_cast<double>(st.st_mtime) >= killed_at + 1, "ended %ld, watcher killed at %.0f",
              static_cast<long>(st.st_mtime), killed_at);
    // Charged: both nodes for the whole start-to-end span, at their own prices.
    const double usd =
        query_double(db,
                     "SELECT SUM(usd_per_hour * (end_time - start_time) / 3600) FROM cost_accruals "
                     "WHERE run_id = 1");
    const double span = query_double(db, "SELECT ended_at - started_at FROM runs WHERE id = 1");
    CHECK_MSG(span > 1 && std::fabs(usd - (3.6 + 1.8) * span / 3600) < 1e-9, "usd %.9f over %.3f s", usd,
              span);
  }
  // Nothing left to attach to; a run that does not exist.
  CHECK(cli({"runs", "attach", "att"}).exit_code == 9);
  CHECK(cli({"runs", "attach", "nope"}).exit_code == 4);

  // Ctrl-C of an attached watcher stops the run on every node.
  const double killed2 = start_and_kill("att2", "att2-2", 6, 0);
  CHECK(killed2 > 0);
  const std::string log2 = fx.root() + "/attach2.log";
  const pid_t watcher = cli_spawn({"runs", "attach", "att2"}, log2);
  const std::string metrics2 = fx.node(0).home + "/.flotilla/runs/att2-2/metrics.jsonl";
  const int seen = lines_of(metrics2);
  CHECK(wait_until(
      [&] { return contains(read_file(log2), "attached to run att2") && lines_of(metrics2) > seen + 2; },
      60));
  // Checkpoint now, from another terminal: the master's launch gets SIGUSR1, every rank agrees at
  // the next step and training goes on; the checkpoint arrives in the store with reason "request".
  const ProcResult asked = cli({"runs", "checkpoint", "att2"});
  CHECK_MSG(asked.exit_code == 0 && contains(asked.output, "asked run att2 for a checkpoint"), "exit %d: %s",
            asked.exit_code, asked.output.c_str());
  CHECK_MSG(wait_until(
                [&] {
                  flotilla::db::Database db(g_db);
                  return flotilla::db::query_int(db,
                                                 "SELECT COUNT(*) FROM checkpoints WHERE run_id = 2 AND "
                                                 "reason = 'request'") >= 1;
                },
                60),
            "no requested checkpoint reached the store: %s", read_file(log2).c_str());
  ::kill(watcher, SIGINT);
  const int stop_exit = wait_exit(watcher);
  CHECK_MSG(stop_exit == 10, "attach after SIGINT exit %d: %s", stop_exit, read_file(log2).c_str());
  for (int i = 0; i < 2; ++i) {
    const std::string dir = fx.node(i).home + "/.flotilla/runs/att2-2";
    CHECK_MSG(!read_file(dir + "/exit_code").empty(), "node %d has no exit code", i);
    const pid_t wrapper = static_cast<pid_t>(std::atol(read_file(dir + "/pid").c_str()));
    CHECK_MSG(wrapper > 0 && !process_alive(wrapper), "node %d's run (pid %d) is still alive", i, wrapper);
  }
  {
    flotilla::db::Database db(g_db);
    CHECK(flotilla::db::query_int(
              db, "SELECT COUNT(*) FROM runs WHERE name = 'att2' AND status = 'stopped'") == 1);
    CHECK(flotilla::db::query_int(
              db, "SELECT COUNT(*) FROM cost_accruals WHERE run_id = 2 AND end_time IS NULL") == 0);
  }
  // A run that has ended takes no checkpoint request.
  CHECK(cli({"runs", "checkpoint", "att2"}).exit_code == 9);
  return flotilla_test::summary("test_cli_attach");
}
