// docs/reliability.md C6 and C1 through `launch`, with a real 2-rank data-parallel run on Gloo.
// C6: one all_reduce on rank 1 fails (FLOTILLA_TEST_FAIL_COLLECTIVE, first attempt only): every rank
//     stops (nobody waits in the next collective: the whole fault-and-restart is bounded in time),
//     launch names rank 1 as the root cause with the failing collective, restarts from the last
//     verified checkpoint, and the final parameters equal a run without the fault, bit for bit.
// C1 at seeded points: kill -9 of a seeded rank at a seeded step (several seeds, not one); each
//     time the group restarts and the final parameters equal the fault-free run's.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <random>

#include "check.h"
#include "engine/checkpoint/checkpoint.h"
#include "launch_dp_util.h"
#include "worker_run.h"

using namespace flotilla_test;

int main() {
  const std::string root = fresh_dir("launch_collective_fault");
  const std::string cfg = root + "/run.toml";
  write_text(cfg, launch_dp_config());
  const pid_t ref = start_launch_dp(cfg, root + "/ref", {});
  CHECK_MSG(wait_exit(ref) == 0, "%s", read_file(root + "/ref.log").c_str());
  const auto ref_params = checkpoint_section(root + "/ref", 24, "params");
  CHECK(!ref_params.empty());

  // C6: rank 1's 30th all_reduce fails (inside step 10 or so, after the step-8 checkpoint).
  {
    const std::string out = root + "/c6";
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t launcher =
        start_launch_dp(cfg, out, {"--max-restarts", "1"}, {"FLOTILLA_TEST_FAIL_COLLECTIVE=1:30"});
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
    const pid_t launcher = start_launch_dp(cfg, out, {"--max-restarts", "1"});
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
