// A node of a running 2-node job is lost (issue 20): `flotilla run --cluster` trains over Gloo on
// n1 and n2 of the real loopback Slurm; mid-run, n2 "loses power": its slurmd and every process of
// its step (slurmstepd and the rank-1 worker) are SIGKILLed. The job must end (the surviving rank
// cannot finish without its peer) and the store must say how: failed, with the job's state or
// the worker's exit, never completed, never left running; the steps stored before the loss stay,
// each once. Afterwards n2's slurmd is started again with its own command line and environment
// and resumed, so the shared fixture cluster is whole for the next test. Label slow (it waits for
// Gloo's timeout or Slurm's node timeout).
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "db/clusters.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "slurm_fixture.h"

using namespace flotilla_test;

namespace {

// The NUL-separated contents of /proc/PID/FILE as strings.
std::vector<std::string> proc_strings(pid_t pid, const char* file) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file, std::ios::binary);
  std::vector<std::string> out;
  std::string item;
  while (std::getline(in, item, '\0')) out.push_back(item);
  return out;
}

std::string proc_comm(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string s;
  std::getline(in, s);
  return s;
}

pid_t parent_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = all.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(all.substr(close + 2));
  std::string state;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

// Every process whose environment says it runs on Slurm node `node`, and the slurmstepd above it.
std::vector<pid_t> node_processes(const std::string& node) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 1 || pid == getpid()) continue;
    for (const std::string& kv : proc_strings(pid, "environ"))
      if (kv == "SLURMD_NODENAME=" + node) {
        out.push_back(pid);
        for (pid_t up = parent_of(pid); up > 1; up = parent_of(up))
          if (proc_comm(up) == "slurmstepd") out.push_back(up);
        break;
      }
  }
  closedir(d);
  return out;
}

int loss_rows(const std::string& db_path, int64_t run_id, int& distinct) {
  flotilla::db::Database db(db_path);
  flotilla::db::Stmt st(db, "SELECT count(*), count(DISTINCT step) FROM metrics WHERE run_id = ?1 AND name = 'loss'");
  st.bind(1, run_id);
  st.step();
  distinct = static_cast<int>(st.i64(1));
  return static_cast<int>(st.i64(0));
}

}  // namespace

int main() {
  std::string why;
  const std::string conf = fixture_slurm_conf(why);
  if (conf.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return kSkipExit;
  }
  SshdFixture fx("slurm_node_lost");
  if (const std::string w = start_login_node(fx, conf); !w.empty()) {
    std::printf("SKIP: %s\n", w.c_str());
    return kSkipExit;
  }
  CliWorkspace ws(fx.root());
  const std::string added = add_trusted_cluster(ws, fx, "flo");
  CHECK_MSG(added.empty(), "%s", added.c_str());

  const std::string cfg = fx.root() + "/run.toml";
  write_text(cfg,
             "[run]\nname = \"lost\"\nseed = 3\nthreads = 1\n"
             "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n"
             "[data]\nsynthetic_tokens = 30000\n"
             "[train]\nsteps = 200000\nmicro_batch = 2\nseq_len = 16\n"
             "[parallel]\ndp = 2\ntimeout_s = 20\n"
             "[checkpoint]\nevery = 200\nkeep_last = 2\n");
  const std::string log = fx.root() + "/run.log";
  const pid_t cli = ws.spawn({"run", cfg, "--cluster", "flo", "--nodes", "2", "--time", "00:10:00", "--quiet"}, log);

  // Training on both nodes: steps in the store.
  int64_t run_id = 0;
  int rows = 0, distinct = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline) {
    {
      flotilla::db::Database db(ws.db());
      if (const auto run = flotilla::db::find_run(db, "lost")) run_id = run->id;
    }
    if (run_id > 0 && loss_rows(ws.db(), run_id, distinct) >= 50) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  rows = run_id > 0 ? loss_rows(ws.db(), run_id, distinct) : 0;
  CHECK_MSG(rows >= 50, "no training seen: %d rows\n%s", rows, read_file(log).c_str());
  if (rows < 50) {
    ::kill(cli, SIGKILL);
    return summary("test_slurm_node_lost");
  }

  // n2 loses power: its slurmd and every process of its step, at once.
  const std::string run_dir = std::string(FLOTILLA_SLURM_DIR) + "/run";
  const pid_t slurmd = static_cast<pid_t>(std::atoi(read_file(run_dir + "/slurmd-n2.pid").c_str()));
  CHECK(slurmd > 1);
  const std::vector<std::string> slurmd_argv = proc_strings(slurmd, "cmdline");
  const std::vector<std::string> slurmd_env = proc_strings(slurmd, "environ");
  CHECK(!slurmd_argv.empty());
  const std::vector<pid_t> victims = node_processes("n2");
  CHECK_MSG(!victims.empty(), "no process of n2's step found");
  ::kill(slurmd, SIGKILL);
  for (pid_t p : victims) ::kill(p, SIGKILL);
  std::printf("killed n2: slurmd %d and %zu step process(es) at %d loss rows\n", slurmd, victims.size(), rows);

  // The job ends and the watcher records how.
  const int code = wait_exit(cli);
  const std::string out = read_file(log);
  std::printf("flotilla run exited %d:\n%s", code, out.c_str());
  CHECK_MSG(code != 0, "a run that lost a node exited 0");
  {
    flotilla::db::Database db(ws.db());
    const flotilla::db::Run run = flotilla::db::get_run(db, run_id);
    CHECK_MSG(run.status == flotilla::db::RunStatus::kFailed, "status %s", flotilla::db::to_string(run.status));
    std::string statuses;
    for (const auto& e : flotilla::db::list_events(db, run_id))
      if (e.kind == "status") statuses += e.message + "\n";
    std::printf("status events:\n%s", statuses.c_str());
    // Which way it ended, in the store's words: the job's state (a node failed) or the worker's exit.
    CHECK_MSG(contains(statuses, "-> failed: slurm job") &&
                  (contains(statuses, "NODE_FAIL") || contains(statuses, "worker exit")),
              "%s", statuses.c_str());
    const auto job = flotilla::db::find_slurm_job(db, run_id);
    CHECK(job.has_value());
    if (job) {
      std::printf("job %s ended %s\n", job->job_id.c_str(), job->state.c_str());
      CHECK_MSG(job->state != "RUNNING" && job->state != "PENDING" && job->state != "COMPLETED", "job state %s",
                job->state.c_str());
    }
  }
  const int after = loss_rows(ws.db(), run_id, distinct);
  CHECK_MSG(after >= rows && after == distinct, "%d loss rows over %d steps", after, distinct);

  // n2 powers on again: the same slurmd with its own environment, then resumed (it was declared
  // down, or will be); the next test finds both nodes idle.
  std::vector<std::string> env;
  for (const std::string& kv : slurmd_env)
    if (kv.rfind("SLURM", 0) == 0 || kv.rfind("PATH=", 0) == 0 || kv.rfind("HOME=", 0) == 0) env.push_back(kv);
  const pid_t restarted = spawn(slurmd_argv, env, fx.root() + "/slurmd-n2.log");
  (void)restarted;
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const std::string slurm_env = "SLURM_CONF=" + conf;
  bool idle = false;
  for (int i = 0; i < 90 && !idle; ++i) {
    wait_exit(spawn({"/usr/bin/scontrol", "update", "nodename=n2", "state=resume"}, {slurm_env},
                    fx.root() + "/resume.log"));
    wait_exit(spawn({"/usr/bin/scontrol", "-o", "show", "node", "n2"}, {slurm_env}, fx.root() + "/sinfo.log"));
    idle = contains(read_file(fx.root() + "/sinfo.log"), "State=IDLE ");
    if (!idle) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (!idle) {
    wait_exit(spawn({"/usr/bin/scontrol", "show", "node", "n2"}, {slurm_env}, fx.root() + "/node.log"));
    wait_exit(spawn({"/usr/bin/squeue", "-a"}, {slurm_env}, fx.root() + "/squeue.log"));
  }
  CHECK_MSG(idle, "n2 is not idle again: %s\n%s\n%s\n%s", read_file(fx.root() + "/sinfo.log").c_str(),
            read_file(fx.root() + "/slurmd-n2.log").c_str(), read_file(fx.root() + "/node.log").c_str(),
            read_file(fx.root() + "/squeue.log").c_str());
  return summary("test_slurm_node_lost");
}
