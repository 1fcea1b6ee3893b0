// The launch supervisor with real processes (docs/reliability.md C1, C5, R2).
//
// C1: a rank SIGKILLed mid-run -> the group is ended, the root cause ("rank 0 killed by signal 9
//     at step k") is reported, the group restarts from the last verified checkpoint, and the final
//     parameters equal a run without the fault, bit for bit. No process of the group survives.
// C5: a rank SIGSTOPped -> declared stalled after --step-timeout ("no heartbeat"), ended with
//     SIGKILL despite being stopped, restarted, and the run completes; wall time bounded.
// R2: a config error is never retried; a crash loop stops after --max-restarts.
#include <dirent.h>
#include <signal.h>

#include <chrono>
#include <fstream>

#include "check.h"
#include "engine/checkpoint/checkpoint.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

std::string config_text(int steps) {
  return R"(
[run]
name = "launch"
seed = 3
threads = 1
[model]
preset = "custom"
n_layer = 2
n_head = 2
n_embd = 32
vocab_size = 128
max_seq_len = 32
[data]
synthetic_tokens = 30000
[train]
steps = )" +
         std::to_string(steps) + R"(
micro_batch = 2
seq_len = 16
[checkpoint]
every = 5
keep_last = 2
)";
}

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  while (dirent* e = readdir(d)) {
    const pid_t pid = static_cast<pid_t>(atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string stat;
    std::getline(f, stat);
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    char state;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + close + 2, "%c %d", &state, &ppid) == 2 && ppid == parent && state != 'Z')
      out.push_back(pid);
  }
  closedir(d);
  return out;
}

bool group_gone(pid_t pgid) { return kill(-pgid, 0) != 0 && errno == ESRCH; }

}  // namespace

int main() {
  const std::string root = fresh_dir("launch_supervision");
  const std::string cfg = root + "/run.toml";
  write_text(cfg, config_text(30));

  // Reference: the same run without faults, under launch.
  const std::string ref = root + "/ref";
  auto r0 = run_worker({"launch", "--nproc-per-node", "1", "--master-port", "0", "--", "train", "--config",
                        cfg, "--out-dir", ref, "--quiet"},
                       kEnv);
  CHECK_MSG(r0.exit_code == 0, "%s", r0.output.c_str());
  CHECK(last_step(ref) == 30);

  // C1: kill -9 the rank after step 8.
  {
    const std::string out = root + "/c1";
    const pid_t launcher =
        spawn({FLOTILLA_WORKER_PATH, "launch", "--nproc-per-node", "1", "--master-port", "0",
               "--max-restarts", "2", "--", "train", "--config", cfg, "--out-dir", out},
              kEnv, out + ".log");
    CHECK(wait_until([&] { return last_step(out) >= 8; }, 60));
    const auto ranks = children_of(launcher);
    CHECK(ranks.size() == 1);
    const pid_t victim = ranks.empty() ? -1 : ranks[0];
    if (victim > 0) kill(victim, SIGKILL);
    const int code = wait_exit(launcher);
    const std::string log = read_file(out + ".log");
    CHECK_MSG(code == 0, "launcher exit %d: %s", code, log.c_str());
    CHECK_MSG(log.find("rank 0 killed by signal 9") != std::string::npos, "%s", log.c_str());
    CHECK(log.find("restarting all ranks from the last verified checkpoint (restart 1 of 2)") !=
          std::string::npos);
    CHECK(victim > 0 && group_gone(victim));
    CHECK(children_of(launcher).empty());
    CHECK(last_step(out) == 30);
    const auto a = checkpoint_section(ref, 30, "params"), b = checkpoint_section(out, 30, "params");
    CHECK(!a.empty() && a == b);  // resume after the crash is bitwise equivalent
  }

  // C5: SIGSTOP the rank; the supervisor must notice within the step timeout and restart.
  {
    const std::string out = root + "/c5";
    write_text(root + "/slow.toml", config_text(30));
    const pid_t launcher = spawn({FLOTILLA_WORKER_PATH, "launch", "--nproc-per-node", "1", "--master-port",
                                  "0", "--max-restarts", "1", "--step-timeout", "2", "--term-grace", "1",
                                  "--", "train", "--config", root + "/slow.toml", "--out-dir", out},
                                 kEnv, out + ".log");
    CHECK(wait_until([&] { return last_step(out) >= 6; }, 60));
    const auto ranks = children_of(launcher);
    CHECK(ranks.size() == 1);
    const pid_t victim = ranks.empty() ? -1 : ranks[0];
    const auto t0 = std::chrono::steady_clock::now();
    if (victim > 0) kill(victim, SIGSTOP);
    CHECK(wait_until([&] { return group_gone(victim); }, 15));
    const double detect_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK_MSG(detect_s < 2 + 1 + 3, "stall handled after %.1f s", detect_s);  // timeout + grace + margin
    const int code = wait_exit(launcher);
    const std::string log = read_file(out + ".log");
    CHECK_MSG(code == 0, "launcher exit %d: %s", code, log.c_str());
    CHECK_MSG(log.find("rank 0 made no progress for") != std::string::npos, "%s", log.c_str());
    CHECK(log.find("no heartbeat for") != std::string::npos);
    CHECK(last_step(out) == 30);
  }

  // R2: a config error is never retried.
  {
    write_text(root + "/bad.toml", "[train]\nsteps = -1\n");
    auto r = run_worker({"launch", "--nproc-per-node", "1", "--master-port", "0", "--max-restarts", "3", "--",
                         "train", "--config", root + "/bad.toml", "--out-dir", root + "/bad"},
                        kEnv);
    CHECK(r.exit_code == 3);
    CHECK(r.output.find("not retrying a config error") != std::string::npos);
    CHECK(r.output.find("restarting") == std::string::npos);
  }

  // R2: a crash loop stops after --max-restarts: the rank aborts at step 7 on every attempt
  // (resuming from step 5 each time), so the group fails 1 + 2 times and gives up with the cause.
  {
    auto env = kEnv;
    env.push_back("FLOTILLA_TEST_ABORT_AT_STEP=7");
    auto r = run_worker({"launch", "--nproc-per-node", "1", "--master-port", "0", "--max-restarts", "2", "--",
                         "train", "--config", cfg, "--out-dir", root + "/loop", "--quiet"},
                        env);
    CHECK(r.exit_code == 1);
    CHECK(r.output.find("giving up after 2 restart(s)") != std::string::npos);
    size_t kills = 0;
    for (size_t p = r.output.find("launch: rank 0 killed by signal 6"); p != std::string::npos;
         p = r.output.find("launch: rank 0 killed by signal 6", p + 1))
      ++kills;
    CHECK_MSG(kills == 3, "%zu aborts reported: %s", kills, r.output.c_str());
    // A missing config file is a config error: no retry.
    auto m = run_worker({"launch", "--nproc-per-node", "2", "--master-port", "0", "--max-restarts", "2", "--",
                         "train", "--config", root + "/missing.toml"},
                        kEnv);
    CHECK(m.exit_code == 3);
    CHECK(m.output.find("restarting") == std::string::npos);
  }
  return summary("launch_supervision");
}
