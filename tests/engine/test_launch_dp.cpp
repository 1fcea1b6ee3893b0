// The supervisor with a real 2-rank data-parallel run on Gloo (issue 4 faults, docs/reliability.md C1, C5):
// - kill -9 of rank 1 -> the group is ended (no process survives), the root cause names rank 1,
//   the group restarts from the last verified checkpoint, and the final parameters are bitwise
//   equal to the same run without the fault;
// - SIGSTOP of rank 1 -> the stall is reported naming rank 1 (silent), while rank 0 is seen alive
//   inside a collective; the group is ended and restarted, and the run completes.
#include <signal.h>

#include <fstream>

#include "check.h"
#include "engine/checkpoint/checkpoint.h"
#include "launch_dp_util.h"
#include "worker_run.h"

using namespace flotilla_test;

int main() {
  const std::string root = fresh_dir("launch_dp");
  const std::string cfg = root + "/run.toml";
  write_text(cfg, launch_dp_config());

  const pid_t ref = start_launch_dp(cfg, root + "/ref", {});
  CHECK_MSG(wait_exit(ref) == 0, "%s", read_file(root + "/ref.log").c_str());
  CHECK(last_step(root + "/ref") == 24);

  // C1 with two ranks.
  {
    const std::string out = root + "/kill";
    const pid_t launcher = start_launch_dp(cfg, out, {"--max-restarts", "1"});
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
        start_launch_dp(cfg, out, {"--max-restarts", "1", "--step-timeout", "3", "--term-grace", "1"});
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
