// Helpers of the multi-GPU training tests (test_cuda_dp, test_cuda_tp, test_cuda_pp): the real
// worker run on one GPU or through `launch` on several, and step losses compared with a bound.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "check.h"
#include "worker_run.h"

namespace gpu_test {

// The worker with these arguments must exit 0 (`what` names the run in the failure).
inline void run_ok(const std::vector<std::string>& args, const std::string& what) {
  const auto r = flotilla_test::run_worker(args);
  CHECK_MSG(r.exit_code == 0, "%s: exit %d\n%s", what.c_str(), r.exit_code, r.output.c_str());
}

inline std::vector<std::string> train_args(const std::string& cfg, const std::string& out,
                                           const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"train", "--config", cfg, "--out-dir", out, "--quiet", "--no-stdout-metrics"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// `train` on one GPU.
inline void train_single(const std::string& cfg, const std::string& out,
                         const std::vector<std::string>& extra) {
  run_ok(train_args(cfg, out, extra), out);
}

// `launch --nproc-per-node n -- train ...`: one GPU pinned per rank.
inline void train_ranks(int n, const std::string& cfg, const std::string& out,
                        const std::vector<std::string>& extra) {
  std::vector<std::string> a = {
      "launch", "--nproc-per-node", std::to_string(n), "--master-port", "0", "--no-bind", "--"};
  const auto t = train_args(cfg, out, extra);
  a.insert(a.end(), t.begin(), t.end());
  run_ok(a, out);
}

// Every step from `from` to `steps` of `got` within `rel` (relative) of `want`; prints the worst.
inline void compare_losses(const char* what, const std::map<int64_t, float>& got,
                           const std::map<int64_t, float>& want, double rel, int64_t steps,
                           int64_t from = 1) {
  const size_t expect = static_cast<size_t>(steps - from + 1);
  double worst = 0;
  size_t seen = 0;
  for (const auto& [step, w] : want) {
    if (step < from) continue;
    const auto it = got.find(step);
    if (it == got.end()) continue;
    ++seen;
    const double err = std::fabs(static_cast<double>(it->second) - w) / std::fabs(static_cast<double>(w));
    worst = std::fmax(worst, err);
    CHECK_MSG(err <= rel, "%s: step %lld loss %.7g vs %.7g", what, static_cast<long long>(step),
              static_cast<double>(it->second), static_cast<double>(w));
  }
  CHECK_MSG(seen == expect && want.size() >= expect, "%s: compared %zu steps, expected %zu", what, seen,
            expect);
  std::printf("  %-36s %zu steps, worst relative loss difference %.3g (bound %.3g)\n", what, seen, worst,
              rel);
}

// A layout's run `name` under dir (its losses `full`, kSteps = steps) against itself: run again,
// the same loss and final parameter bits; stopped after step 4 and resumed on the GPUs, the same
// losses; the step-4 checkpoint resumed on the CPU (same layout over Gloo, where the build has
// it), within `rel`. `run` starts the layout's `launch` into an out dir with extra arguments.
using LayoutRun = std::function<void(const std::string& out, const std::vector<std::string>& extra)>;
inline void check_repeat_and_resume(const std::string& dir, const std::string& name, const LayoutRun& run,
                                    const std::map<int64_t, float>& full, double rel, int64_t steps) {
  using flotilla_test::checkpoint_section;
  using flotilla_test::last_step;
  using flotilla_test::step_losses;
  const std::string base = dir + "/" + name;
  run(base + "-again", {});
  CHECK_MSG(step_losses(base + "-again") == full, "%s: two deterministic runs differ", name.c_str());
  CHECK(checkpoint_section(base, steps, "params") == checkpoint_section(base + "-again", steps, "params"));
  run(base + "-resume", {"--stop-after", "4"});
  CHECK(last_step(base + "-resume") == 4);
  const std::string copy = "cp -a '" + base + "-resume' '" + base + "-cpu'";
  CHECK(std::system(copy.c_str()) == 0);
  run(base + "-resume", {});
  CHECK_MSG(step_losses(base + "-resume") == full, "%s resumed at step 4: losses differ", name.c_str());
#if defined(FLOTILLA_HAVE_GLOO)
  run(base + "-cpu", {"--set", "run.device=cpu", "--set", "parallel.backend=gloo"});
  compare_losses((name + " GPU checkpoint resumed on CPUs").c_str(), step_losses(base + "-cpu"), full, rel,
                 steps, 5);
#else
  (void)rel;  // scripts/gpu-check builds without Gloo: CPU ranks cannot meet
  std::printf("  SKIP %s resumed on CPUs: this build has no Gloo (CPU collectives)\n", name.c_str());
#endif
}

}  // namespace gpu_test
