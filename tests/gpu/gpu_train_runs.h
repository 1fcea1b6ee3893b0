// Helpers of the multi-GPU training tests (test_cuda_dp, test_cuda_tp, test_cuda_pp): the real
// worker run on one GPU or through `launch` on several, and step losses compared with a bound.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
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

}  // namespace gpu_test
