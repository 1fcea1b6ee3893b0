// Shared by the `launch` tests on a real 2-rank data-parallel Gloo run (test_launch_dp.cpp,
// test_launch_collective_fault.cpp): the run's config, starting `flotilla-worker launch` on it, and
// finding the rank processes to kill.
#pragma once

#include <dirent.h>
#include <sys/types.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "worker_run.h"

namespace flotilla_test {

inline const std::vector<std::string> kLaunchDpEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

// 24 steps of a small model on dp=2 with ZeRO-1, a checkpoint every 4 steps.
inline std::string launch_dp_config() {
  return "[run]\nname = \"launchdp\"\nseed = 9\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len "
         "= 32\n"
         "[data]\nsynthetic_tokens = 30000\n"
         "[train]\nsteps = 24\nmicro_batch = 2\nseq_len = 16\n"
         "[parallel]\ndp = 2\nzero = 1\ntimeout_s = 120\n"
         "[checkpoint]\nevery = 4\nkeep_last = 2\n";
}

// Rank processes: children of the launcher, ordered by their RANK environment variable.
inline std::vector<pid_t> ranks_of(pid_t launcher, int n) {
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

// `launch --nproc-per-node 2 [extra] -- train --config CFG --out-dir OUT`, its output in OUT.log.
inline pid_t start_launch_dp(const std::string& cfg, const std::string& out,
                             const std::vector<std::string>& extra,
                             const std::vector<std::string>& env_extra = {}) {
  std::vector<std::string> argv = {FLOTILLA_WORKER_PATH, "launch", "--nproc-per-node", "2",
                                   "--master-port",      "0",      "--no-bind"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  for (const auto& a : {"--", "train", "--config"}) argv.push_back(a);
  argv.push_back(cfg);
  argv.push_back("--out-dir");
  argv.push_back(out);
  std::vector<std::string> env = kLaunchDpEnv;
  env.insert(env.end(), env_extra.begin(), env_extra.end());
  return spawn(argv, env, out + ".log");
}

}  // namespace flotilla_test
