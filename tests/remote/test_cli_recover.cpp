// Automatic recovery of a run on SSH nodes after a preemption, end to end with real sshd "nodes"
// on 127.0.0.1 and the real `flotilla run CONFIG --nodes a,b --auto-recover`:
//  1. with a spare: node b is "preempted" mid-run (SIGTERM to every process of its run, as a spot
//     shutdown does, then its sshd goes away); the run checkpoints, the watcher finds b gone,
//     deploys to the spare c and resumes on a,c; the run completes.
//  2. without a spare: the same preemption; b's rank moves to a (1 node x 2 ranks, same world).
//  3. without --auto-recover: the run ends preempted; `flotilla runs resume` restarts it on a.
//  4. the master a preempted, with --mirror-checkpoints: b becomes the master, c joins, the run
//     resumes from the mirrored checkpoint uploaded to b.
// Both times the store has every step exactly once, the per-step losses equal the same config run
// locally with 2 ranks and no interruption, the recovery is recorded as an event, the run's
// target and nodes are the new ones, and b accrues no cost after the preemption. Node a's GPU (a
// stand-in nvidia-smi) is sampled into system_samples while the run is watched.
#include <signal.h>
#include <sys/stat.h>

#include <cmath>
#include <functional>
#include <map>

#include "check.h"
#include "db/database.h"
#include "db/sql.h"
#include "cli_fixture.h"

using namespace flotilla_test;

namespace {

constexpr int kSteps = 300;  // ~1 ms a step: long enough that the preemption lands mid-run

CliWorkspace* g_ws = nullptr;
std::string g_db;

ProcResult cli(const std::vector<std::string>& args) { return g_ws->run(args); }

std::string config_text() {
  return "[run]\nname = \"rec\"\nseed = 7\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n"
         "[data]\nsynthetic_tokens = 30000\n"
         "[train]\nsteps = " + std::to_string(kSteps) + "\nmicro_batch = 2\nseq_len = 16\n"
         "[parallel]\ndp = 2\ntimeout_s = 60\n"
         "[checkpoint]\nevery = 100\nkeep_last = 2\n";
}

std::string query_text(const std::string& sql) {
  flotilla::db::Database db(g_db);
  flotilla::db::Stmt st(db, sql);
  return st.step() ? st.text(0) : "";
}

std::map<int64_t, double> stored_losses(const std::string& run) {
  std::map<int64_t, double> out;
  flotilla::db::Database db(g_db);
  flotilla::db::Stmt st(db, "SELECT m.step, m.value FROM metrics m JOIN runs r ON r.id = m.run_id "
                            "WHERE r.name = ?1 AND m.name = 'loss' ORDER BY m.step");
  st.bind(1, run);
  while (st.step()) out[st.i64(0)] = st.f64(1);
  return out;
}

// SIGTERM to every process of node i's detached run (a spot shutdown notice), then node i's sshd
// goes away for good.
void preempt(SshdFixture& fx, int i, const std::string& rid) {
  const std::string pid = read_file(fx.node(i).home + "/.flotilla/runs/" + rid + "/pid");
  const pid_t sid = static_cast<pid_t>(std::atol(pid.c_str()));
  CHECK_MSG(sid > 1, "no pid file for run %s on node %d", rid.c_str(), i);
  for (pid_t p : all_pids())
    if (sid > 1 && proc_stat_field(p, 4) == sid) kill(p, SIGTERM);
  fx.stop(i);
}

// Runs `args` (flotilla run ... --auto-recover), preempting node 1 once 8 steps are stored.
// Returns the command's exit status; `out` gets its output.
int run_with_preemption(SshdFixture& fx, const std::vector<std::string>& args, const std::string& rid,
                        std::string& out, int victim = 1, std::function<bool()> ready_when = nullptr) {
  const std::string log = g_ws->log_dir() + "/run-" + rid + ".log";
  const pid_t run = g_ws->spawn(args, log);
  bool preempted = false, reaped = false;
  int status = 0;
  wait_until(
      [&] {
        const std::string m = read_file(fx.node(0).home + "/.flotilla/runs/" + rid + "/metrics.jsonl");
        const bool ready = ready_when ? ready_when() : std::count(m.begin(), m.end(), '\n') >= 8;
        if (ready) {
          preempt(fx, victim, rid);
          preempted = true;
          return true;
        }
        reaped = waitpid(run, &status, WNOHANG) == run;
        return reaped;
      },
      90);
  const int code = reaped ? (WIFEXITED(status) ? WEXITSTATUS(status) : 128) : wait_exit(run);
  out = read_file(log);
  CHECK_MSG(preempted, "node %d was never preempted: %s", victim, out.c_str());
  return code;
}

void check_run(const std::string& name, const std::map<int64_t, double>& reference, const std::string& target,
               int64_t lost_id, const std::string& lost = "b") {
  const std::map<int64_t, double> losses = stored_losses(name);
  CHECK_MSG(static_cast<int>(losses.size()) == kSteps, "run %s: %zu steps stored", name.c_str(), losses.size());
  double worst = 0;
  for (const auto& [step, loss] : reference) {
    const auto it = losses.find(step);
    if (it == losses.end()) {
      worst = INFINITY;
      continue;
    }
    worst = std::max(worst, std::fabs(it->second - loss) / std::max(1e-6, std::fabs(loss)));
  }
  CHECK_MSG(worst < 1e-5, "run %s: losses differ from the local 2-rank run by %.3g (relative)", name.c_str(), worst);
  flotilla::db::Database db(g_db);
  const int64_t id = flotilla::db::query_int(db, "SELECT id FROM runs WHERE name = '" + name + "'");
  CHECK(flotilla::db::query_int(db, "SELECT COUNT(*) FROM metrics WHERE run_id = " + std::to_string(id) +
                                        " AND name = 'loss'") == kSteps);
  CHECK(query_text("SELECT status FROM runs WHERE id = " + std::to_string(id)) == "completed");
  CHECK_MSG(query_text("SELECT target FROM runs WHERE id = " + std::to_string(id)) == target,
            "target %s", query_text("SELECT target FROM runs WHERE id = " + std::to_string(id)).c_str());
  CHECK(flotilla::db::query_int(db, "SELECT COUNT(*) FROM events WHERE run_id = " + std::to_string(id) +
                                        " AND kind = 'recovery' AND message LIKE 'automatic recovery 1/3 (lost " + lost + ")%'") == 1);
  // The starter's choice is recorded with the run, for whoever re-attaches (runs attach, the app).
  CHECK(flotilla::db::query_int(db, "SELECT COUNT(*) FROM events WHERE run_id = " + std::to_string(id) +
                                        " AND kind = 'recovery-policy' AND fields LIKE '%\"auto\":true%'") == 1);
  CHECK(flotilla::db::query_int(db, "SELECT COUNT(*) FROM run_nodes WHERE run_id = " + std::to_string(id) +
                                        " AND node_id = " + std::to_string(lost_id)) == 0);
  // b accrued while it ran, and nothing is left open for it.
  CHECK(flotilla::db::query_int(db, "SELECT COUNT(*) FROM cost_accruals WHERE run_id = " + std::to_string(id) +
                                        " AND node_id = " + std::to_string(lost_id)) >= 1);
  CHECK(flotilla::db::query_int(db, "SELECT COUNT(*) FROM cost_accruals WHERE run_id = " + std::to_string(id) +
                                        " AND end_time IS NULL") == 0);
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("cli_recover");
  // Node a has a GPU as far as its login shell can tell: a stand-in nvidia-smi on its PATH
  // answers the query the watcher samples every few seconds.
  const std::string fake_bin = fx.root() + "/node0-bin";
  std::filesystem::create_directories(fake_bin);
  write_text(fake_bin + "/nvidia-smi", "#!/bin/sh\necho '0, NVIDIA H200, 143771, 20480, 87, 45, 301.5, 560.35'\n");
  ::chmod((fake_bin + "/nvidia-smi").c_str(), 0755);
  if (!fx.start(0, "ed25519", "", "", "PATH=" + fake_bin + ":/usr/local/bin:/usr/bin:/bin") || !fx.start(1) ||
      !fx.start(2)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  CliWorkspace ws(fx.root());
  g_ws = &ws;
  g_db = ws.db();
  CHECK(ws.add_trusted_node(fx, 0, "a", {"--price-per-hour", "3.6"}));
  CHECK(ws.add_trusted_node(fx, 1, "b", {"--price-per-hour", "1.8"}));
  CHECK(ws.add_trusted_node(fx, 2, "c", {"--price-per-hour", "1.2"}));
  const int64_t b_id = [] {
    flotilla::db::Database db(g_db);
    return flotilla::db::query_int(db, "SELECT id FROM nodes WHERE name = 'b'");
  }();

  const std::string cfg = fx.root() + "/tiny.toml";
  write_text(cfg, config_text());
  // The reference: the same config on this machine, 2 ranks, never interrupted.
  const std::string local_dir = fx.root() + "/local";
  const ProcResult local = run_worker({"launch", "--nproc-per-node", "2", "--master-port", "0", "--no-bind", "--",
                                       "train", "--config", cfg, "--out-dir", local_dir},
                                      {"OMP_NUM_THREADS=1"});
  CHECK_MSG(local.exit_code == 0, "%s", local.output.c_str());
  std::map<int64_t, double> reference;
  for (const auto& [step, loss] : step_losses(local_dir)) reference[step] = loss;
  CHECK(static_cast<int>(reference.size()) == kSteps);

  // 1. b preempted, the spare c takes its place. Run ids: 1 ("rec-1"), then 2.
  std::string out;
  int code = run_with_preemption(fx,
                                 {"run", cfg, "--nodes", "a,b", "--no-bind", "--name", "rec", "--auto-recover",
                                  "--spare", "c", "--recover-after", "1"},
                                 "rec-1", out);
  CHECK_MSG(code == 0, "exit %d: %s", code, out.c_str());
  CHECK_MSG(contains(out, "automatic recovery 1/3 (lost b): 2 node(s) x 1 rank(s) on a,c, from the checkpoint at step"),
            "%s", out.c_str());
  check_run("rec", reference, "a,c", b_id);
  CHECK(std::filesystem::exists(fx.node(2).home + "/.flotilla/runs/rec-1/metrics.jsonl") ||
        std::filesystem::exists(fx.node(2).home + "/.flotilla/runs/rec-1/run.toml"));

  {
    // GPU samples of node a, written while the run was watched (87 % at 20480 MiB used).
    flotilla::db::Database db(g_db);
    const std::string a = "(SELECT id FROM nodes WHERE name = 'a')";
    CHECK_MSG(flotilla::db::query_int(db, "SELECT COUNT(*) FROM system_samples WHERE node_id = " + a +
                                              " AND device = 0 AND utilization = 87 AND memory_used = " +
                                              std::to_string(20480LL << 20)) >= 1,
              "no GPU sample of node a");
    CHECK(flotilla::db::query_int(db, "SELECT COUNT(*) FROM system_samples WHERE node_id = (SELECT id FROM nodes "
                                      "WHERE name = 'c')") == 0);  // no nvidia-smi there
  }

  {
    // The run's checkpoints are listed from the master and the newest is fetched whole.
    const ProcResult list = cli({"runs", "checkpoints", "rec", "--json"});
    const auto j = nlohmann::json::parse(list.output, nullptr, false);
    CHECK_MSG(list.exit_code == 0 && j.is_array() && !j.empty(), "%s", list.output.c_str());
    const int64_t newest = (j.is_array() && !j.empty()) ? j.back()["step"].get<int64_t>() : -1;
    CHECK(newest == kSteps);
    const ProcResult fetched = cli({"runs", "fetch", "rec", "--out", fx.root() + "/fetched"});
    CHECK_MSG(fetched.exit_code == 0, "%s", fetched.output.c_str());
    char leaf[32];
    std::snprintf(leaf, sizeof leaf, "step-%08lld", static_cast<long long>(newest));
    const std::string dir = fx.root() + "/fetched/" + leaf;
    CHECK_MSG(fetched.output.find(dir) != std::string::npos, "%s", fetched.output.c_str());
    CHECK(std::filesystem::exists(dir + "/MANIFEST") && std::filesystem::exists(dir + "/trainer.json"));
    CHECK(!std::filesystem::exists(dir + ".part"));
    // The fetched checkpoint is a complete one: the worker exports it on this machine.
    const ProcResult exported = run_worker(
        {"export", "--checkpoint", dir, "--format", "safetensors", "--out", fx.root() + "/exported.safetensors"},
        {"OMP_NUM_THREADS=1"});
    CHECK_MSG(exported.exit_code == 0, "%s", exported.output.c_str());
    CHECK(cli({"runs", "fetch", "rec", "--step", "12345"}).exit_code == 2);
  }

  // 2. b (back up) preempted again in a new run, no spare: its rank moves to a.
  CHECK(fx.start(1));
  code = run_with_preemption(fx,
                             {"run", cfg, "--nodes", "a,b", "--no-bind", "--name", "rec2", "--auto-recover",
                              "--recover-after", "1"},
                             "rec2-2", out);
  CHECK_MSG(code == 0, "exit %d: %s", code, out.c_str());
  CHECK_MSG(contains(out, "automatic recovery 1/3 (lost b): 1 node(s) x 2 rank(s) on a"), "%s", out.c_str());
  check_run("rec2", reference, "a", b_id);

  // 3. Without --auto-recover the preempted run stays preempted (exit 10); `runs resume` then
  //    restarts it on what remains (b is gone again: its rank goes to a) and it completes.
  CHECK(fx.start(1));
  code = run_with_preemption(fx, {"run", cfg, "--nodes", "a,b", "--no-bind", "--name", "rec3"}, "rec3-3", out);
  CHECK_MSG(code == 10, "exit %d: %s", code, out.c_str());
  CHECK(query_text("SELECT status FROM runs WHERE name = 'rec3'") == "preempted");
  const ProcResult resumed = cli({"runs", "resume", "rec3", "--no-bind"});
  CHECK_MSG(resumed.exit_code == 0, "exit %d: %s", resumed.exit_code, resumed.output.c_str());
  CHECK_MSG(contains(resumed.output, "resumed by flotilla runs resume (lost b): 1 node(s) x 2 rank(s) on a"), "%s",
            resumed.output.c_str());
  {
    flotilla::db::Database db(g_db);
    const int64_t id = flotilla::db::query_int(db, "SELECT id FROM runs WHERE name = 'rec3'");
    const std::map<int64_t, double> losses = stored_losses("rec3");
    CHECK_MSG(static_cast<int>(losses.size()) == kSteps, "%zu steps", losses.size());
    bool same = static_cast<int>(losses.size()) == kSteps;
    for (const auto& [step, loss] : reference)
      same = same && losses.count(step) && std::fabs(losses.at(step) - loss) <= 1e-5 * std::fabs(loss);
    CHECK(same);
    CHECK(query_text("SELECT status FROM runs WHERE id = " + std::to_string(id)) == "completed");
    CHECK(query_text("SELECT target FROM runs WHERE id = " + std::to_string(id)) == "a");
  }
  // A completed run is not resumed; a running one would be (exit 9).
  CHECK(cli({"runs", "resume", "rec3"}).exit_code == 9);

  // 4. The master itself is preempted. With --mirror-checkpoints each checkpoint was copied to the
  //    workspace as it was written, so b becomes the master, the spare c takes the second place,
  //    and the run resumes from the mirrored copy uploaded to b.
  CHECK(fx.start(1));
  const int64_t a_id = [] {
    flotilla::db::Database db(g_db);
    return flotilla::db::query_int(db, "SELECT id FROM nodes WHERE name = 'a'");
  }();
  // Preempted once a checkpoint has been mirrored (any: the mirror keeps the newest two).
  const std::string mirror = fx.root() + "/ws/checkpoints/rec4";
  const auto mirrored = [&] {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(mirror, ec)) {
      const std::string leaf = e.path().filename().string();
      if (leaf.size() == 13 && leaf.rfind("step-", 0) == 0) return true;
    }
    return false;
  };
  code = run_with_preemption(fx,
                             {"run", cfg, "--nodes", "a,b", "--no-bind", "--name", "rec4", "--set",
                              "checkpoint.every=20", "--auto-recover", "--spare", "c", "--mirror-checkpoints",
                              "--recover-after", "1"},
                             "rec4-4", out, 0, mirrored);
  CHECK_MSG(code == 0, "exit %d: %s", code, out.c_str());
  CHECK_MSG(contains(out, "automatic recovery 1/3 (lost a): 2 node(s) x 1 rank(s) on b,c, from the mirrored "
                          "checkpoint at step"),
            "%s", out.c_str());
  check_run("rec4", reference, "b,c", a_id, "a");
  CHECK(query_text("SELECT run_dir FROM runs WHERE name = 'rec4'").rfind("b:/", 0) == 0);

  // Without --auto-recover the flags that need it are refused.
  CHECK(cli({"run", cfg, "--nodes", "a", "--spare", "c"}).exit_code == 2);
  CHECK(cli({"run", cfg, "--nodes", "a,b", "--auto-recover", "--spare", "b"}).exit_code == 2);
  return flotilla_test::summary("test_cli_recover");
}
