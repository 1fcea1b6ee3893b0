// docs/reliability.md C6 and C1 through `launch`, with a real 2-rank data-parallel run on Gloo.
// C6: one all_reduce on rank 1 fails (FLOTILLA_TEST_FAIL_COLLECTIVE, first attempt only): every rank
//     stops (nobody waits in the next collective: the whole fault-and-restart is bounded in time),
//     launch names rank 1 as the root cause with the failing collective, restarts from the last
//     verified checkpoint, and the final parameters equal a run without the fault, bit for bit.
// C1 at seeded points: kill -9 of a seeded rank at a seeded step (several seeds, not one); each
//     time the group restarts and the final parameters equal the fault-free run's.
#include <dirent.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <random>

#include "check.h"
#include "engine/checkpoint/checkpoint.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

const std::vector<std::string> kEnvBase = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

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

pid_t start(const std::string& cfg, const std::string& out, std::vector<std::string> extra,
            const std::vector<std::string>& env_extra = {}) {
  std::vector<std::string> argv = {FLOTILLA_WORKER_PATH, "launch", "--nproc-per-node", "2",
                                   "--master-port",      "0",      "--no-bind"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  for (const auto& a : {"--", "train", "--config"}) argv.push_back(a);
  argv.push_back(cfg);
  argv.push_back("--out-dir");
  argv.push_back(out);
  std::vector<std::string> env = kEnvBase;
  env.insert(env.end(), env_extra.begin(), env_extra.end());
  return spawn(argv, env, out + ".log");
}

}  // namespace

int main() {
  const std::string root = fresh_dir("launch_collective_fault");
  const std::string cfg = root + "/run.toml";
  write_text(cfg, config_text());
  const pid_t ref = start(cfg, root + "/ref", {});
  CHECK_MSG(wait_exit(ref) == 0, "%s", read_file(root + "/ref.log").c_str());
  const auto ref_params = checkpoint_section(root + "/ref", 24, "params");
  CHECK(!ref_params.empty());

  // C6: rank 1's 30th all_reduce fails (inside step 10 or so, after the step-8 checkpoint).
  {
    const std::string out = root + "/c6";
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t launcher = start(cfg, out, {"--max-restarts", "1"}, {"FLOTILLA_TEST_FAIL_COLLECTIVE=1:30"});
    const int code = wait_exit(launcher);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string log = read_file(out + ".log");
    CHECK_MSG(code == 0, "exit %d: %s", code, log.c_str());
    // Rank 1's own line names the injected fault. Both ranks exit 7, but rank 0 only because rank 1
    // closed the connection: launch names rank 1 whichever exit it reaps first.
    CHECK_MSG(log.find("injected collective failure") != std::string::npos &&
                  log.find("launch: rank 1 exited with code 7") != std::string::npos &&
                  log.find("launch: rank 0 exited with code 7") == std::string::npos,
              "root cause not named: %s", log.c_str());
    CHECK_MSG(log.find("restarting all ranks from the last verified checkpoint (restart 1 of 1)") !=
                  std::string::npos,
              "%s", log.c_str());
    CHECK_MSG(seconds < 60, "the fault and restart took %.1f s (a rank waited in a collective?)", seconds);
    CHECK(checkpoint_section(out, 24, "params") == ref_params);
  }

  // C1 at seeded points.
  std::mt19937 rng(1901);
  for (int i = 0; i < 3; ++i) {
    const int victim = i % 2;  // both ranks get killed across the seeds
    const int at_step = 3 + static_cast<int>(rng() % 16);
    const std::string out = root + "/kill-" + std::to_string(i);
    const pid_t launcher = start(cfg, out, {"--max-restarts", "1"});
    CHECK(wait_until([&] { return last_step(out) >= at_step; }, 90));
    const auto pids = ranks_of(launcher, 2);
    if (pids[static_cast<size_t>(victim)] > 0) kill(pids[static_cast<size_t>(victim)], SIGKILL);
    const int code = wait_exit(launcher);
    const std::string log = read_file(out + ".log");
    CHECK_MSG(code == 0, "seed %d: exit %d: %s", i, code, log.c_str());
    CHECK_MSG(log.find("launch: rank " + std::to_string(victim) + " killed by signal 9") != std::string::npos,
              "seed %d: %s", i, log.c_str());
    for (pid_t p : pids) CHECK(p > 0 && kill(-p, 0) != 0);  // no rank's process group survives
    CHECK_MSG(checkpoint_section(out, 24, "params") == ref_params,
              "seed %d (rank %d at step %d): params differ", i, victim, at_step);
    std::printf("seed %d: rank %d killed at step >= %d, restarted, params equal\n", i, victim, at_step);
  }
  return flotilla_test::summary("test_launch_collective_fault");
}
