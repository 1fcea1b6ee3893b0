// The supervisor with a real 2-rank data-parallel run on Gloo (issue 4 faults, docs/reliability.md C1, C5):
// - kill -9 of rank 1 -> the group is ended (no process survives), the root cause names rank 1,
//   the group restarts from the last verified checkpoint, and the final parameters are bitwise
//   equal to the same run without the fault;
// - SIGSTOP of rank 1 -> the stall is reported naming rank 1 (silent), while rank 0 is seen alive
//   inside a collective; the group is ended and restarted, and the run completes.
#include <dirent.h>
#include <signal.h>

#include <fstream>

#include "check.h"
#include "engine/checkpoint/checkpoint.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

std::string config_text() {
  return "[run]\nname = \"launchdp\"\nseed = 9\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len "
         "= 32\n"
         "[data]\nsynthetic_tokens = 30000\n"
         "[train]\nsteps = 24\nmicro_batch = 2\nseq_len = 16\n"
         "[parallel]\ndp = 2\nzero = 1\ntimeout_s = 120\n"
         "[checkpoint]\nevery = 4\nkeep_last = 2\n";
}

// Rank processes: children of the launcher, ordered by their RANK environment variable.
std::vector<pid_t> ranks_of(pid_t launcher, int n) {
  std::vector<pid_t> out(static_cast<size_t>(n), -1);
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    const pid_t pid = static_cast<pid_t>(atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream st("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    std::getline(st, stat);
    const auto close = stat.rfind(')');
    int ppid = 0;
    char state = 0;
    if (close == std::string::npos || std::sscanf(stat.c_str() + close + 2, "%c %d", &state, &ppid) != 2 ||
        ppid != launcher)
      continue;
    std::ifstream env("/proc/" + std::to_string(pid) + "/environ");
    std::string var;
    while (std::getline(env, var, '\0'))
      if (var.rfind("RANK=", 0) == 0) {
        const int r = atoi(var.c_str() + 5);
        if (r >= 0 && r < n) out[static_cast<size_t>(r)] = pid;
      }
  }
  closedir(d);
  return out;
}

pid_t start(const std::string& cfg, const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> argv = {FLOTILLA_WORKER_PATH, "launch", "--nproc-per-node", "2",
                                   "--master-port",      "0",      "--no-bind"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  for (const auto& a : {"--", "train", "--config"}) argv.push_back(a);
  argv.push_back(cfg);
  argv.push_back("--out-dir");
  argv.push_back(out);
  return spawn(argv, kEnv, out + ".log");
}

}  // namespace

int main() {
  const std::string root = fresh_dir("launch_dp");
  const std::string cfg = root + "/run.toml";
  write_text(cfg, config_text());

  const pid_t ref = start(cfg, root + "/ref", {});
  CHECK_MSG(wait_exit(ref) == 0, "%s", read_file(root + "/ref.log").c_str());
  CHECK(last_step(root + "/ref") == 24);

  // C1 with two ranks.
  {
    const std::string out = root + "/kill";
    const pid_t launcher = start(cfg, out, {"--max-restarts", "1"});
    CHECK(wait_until([&] { return last_step(out) >= 6; }, 90));
    const auto pids = ranks_of(launcher, 2);
    CHECK(pids[0] > 0 && pids[1] > 0);
    if (pids[1] > 0) kill(pids[1], SIGKILL);
    const int code = wait_exit(launcher);
    const std::string log = read_file(out + ".log");
    CHECK_MSG(code == 0, "exit %d: %s", code, log.c_str());
    CHECK_MSG(log.find("launch: rank 1 killed by signal 9") != std::string::npos, "%s", log.c_str());
    for (pid_t p : pids) CHECK(p > 0 && kill(-p, 0) != 0);  // both ranks' process groups are gone
    CHECK(last_step(out) == 24);
    const auto a = checkpoint_section(root + "/ref", 24, "params"), b = checkpoint_section(out, 24, "params");
    CHECK(!a.empty() && a == b);
  }

  // C5 with two ranks: rank 1 stopped; rank 0 waits in a collective.
  {
    const std::string out = root + "/stop";
    const pid_t launcher =
        start(cfg, out, {"--max-restarts", "1", "--step-timeout", "3", "--term-grace", "1"});
    CHECK(wait_until([&] { return last_step(out) >= 6; }, 90));
    const auto pids = ranks_of(launcher, 2);
    if (pids[1] > 0) kill(pids[1], SIGSTOP);
    const int code = wait_exit(launcher);
    const std::string log = read_file(out + ".log");
    CHECK_MSG(code == 0, "exit %d: %s", code, log.c_str());
    CHECK_MSG(log.find("launch: rank 1 made no progress for") != std::string::npos, "%s", log.c_str());
    CHECK(log.find("no heartbeat for") != std::string::npos);
    CHECK_MSG(log.find("rank 0 waiting in ") != std::string::npos, "%s",
              log.c_str());  // the stalled collective
    for (pid_t p : pids) CHECK(p > 0 && kill(-p, 0) != 0);
    CHECK(last_step(out) == 24);
  }
  return summary("launch_dp");
}
