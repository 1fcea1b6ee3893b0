// Layout search for plan --recommend (see recommend.h).
#include "engine/plan/recommend.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "engine/config/config_validate.h"
#include "engine/train/device_model.h"

namespace flotilla {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

std::string gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

std::vector<LayoutCandidate> recommend_layouts(const RunConfig& base, int world, const DeviceProfile& device,
                                               const PlanOptions& options) {
  std::vector<LayoutCandidate> out;
  if (world < 1) return out;
  const int64_t global_tokens = tokens_per_step(base);
  const int T = base.train.seq_len;
  for (int dp : divisors(world)) {
    for (int tp : divisors(world / dp)) {
      const int pp = world / (dp * tp);
      for (int zero : {0, 1, 2}) {
        if (zero > 0 && dp == 1) continue;  // nothing to shard over
        for (int b = 1; b <= 64; b *= 2) {
          const int64_t per_micro = static_cast<int64_t>(b) * T * dp;
          if (global_tokens % per_micro != 0) continue;
          RunConfig c = base;
          c.parallel.dp = dp;
          c.parallel.tp = tp;
          c.parallel.pp = pp;
          c.parallel.zero = zero;
          c.train.micro_batch = b;
          c.train.global_batch_tokens = global_tokens;
          const int64_t accum = global_tokens / per_micro;
          c.parallel.micro_batches = pp > 1 ? static_cast<int>(accum) : 1;
          if (pp > 1 && accum < pp) continue;  // a pipeline needs at least one micro-batch per stage
          if (!validate(c, world).empty()) continue;
          LayoutCandidate cand;
          cand.config = c;
          cand.plan = make_plan(c, device, options);
          if (!cand.plan.fits) continue;
          // What `train` itself refuses on this device (on CUDA: pp > 1, ZeRO-2, odd head sizes).
          if (const auto problems = device_training_problems(c); !problems.empty()) {
            cand.runnable = false;
            cand.note = problems.front().message;
          }
          out.push_back(std::move(cand));
        }
      }
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const LayoutCandidate& a, const LayoutCandidate& b) {
    if (a.plan.step_s != b.plan.step_s) return a.plan.step_s < b.plan.step_s;
    return a.plan.peak().total() < b.plan.peak().total();
  });
  return out;
}

std::string recommendations_to_text(const std::vector<LayoutCandidate>& c, int world,
                                    const DeviceProfile& device, size_t top) {
  std::string s;
  char line[512];
  std::snprintf(line, sizeof line, "Layouts for %d rank(s) of %s (%s each), fastest first:\n\n", world,
                device.name.c_str(), gib(device.mem_bytes).c_str());
  s += line;
  if (c.empty()) {
    s += "  no layout fits: reduce train.micro_batch or the model, enable train.recompute, add devices,\n"
         "  or use devices with more memory.\n";
    return s;
  }
  std::snprintf(line, sizeof line, "  %-4s %-4s %-4s %-4s %-5s %-6s %-6s %12s %10s %12s  %s\n", "#", "dp",
                "tp", "pp", "zero", "micro", "accum", "mem/device", "step", "tokens/s", "");
  s += line;
  for (size_t i = 0; i < c.size() && i < top; ++i) {
    const Plan& p = c[i].plan;
    std::snprintf(line, sizeof line, "  %-4zu %-4d %-4d %-4d %-5d %-6d %-6lld %12s %8.3f s %12.0f  %s\n",
                  i + 1, p.dp, p.tp, p.pp, p.zero, p.B, static_cast<long long>(p.grad_accum_steps),
                  gib(p.peak().total()).c_str(), p.step_s, p.tokens_per_s,
                  c[i].runnable ? "" : ("(" + c[i].note + ")").c_str());
    s += line;
  }
  if (c.size() > top) {
    std::snprintf(line, sizeof line, "  ... %zu more (--top N)\n", c.size() - top);
    s += line;
  }
  const auto best = std::find_if(c.begin(), c.end(), [](const LayoutCandidate& x) { return x.runnable; });
  if (best != c.end()) {
    const Plan& p = best->plan;
    std::snprintf(line, sizeof line,
                  "\nFastest layout this build runs: --set parallel.dp=%d --set parallel.zero=%d "
                  "--set train.micro_batch=%d\n",
                  p.dp, p.zero, p.B);
    s += line;
  }
  return s;
}

std::string recommendations_to_json(const std::vector<LayoutCandidate>& c, size_t top) {
  nlohmann::json arr = nlohmann::json::array();
  for (size_t i = 0; i < c.size() && i < top; ++i) {
    const Plan& p = c[i].plan;
    arr.push_back({{"dp", p.dp},
                   {"tp", p.tp},
                   {"pp", p.pp},
                   {"zero", p.zero},
                   {"micro_batch", p.B},
                   {"grad_accum_steps", p.grad_accum_steps},
                   {"memory_per_device_bytes", p.peak().total()},
                   {"step_s", p.step_s},
                   {"tokens_per_s", p.tokens_per_s},
                   {"bubble", p.bubble},
                   {"runnable", c[i].runnable},
                   {"note", c[i].note}});
  }
  return nlohmann::json{{"layouts", arr}, {"count", c.size()}}.dump(2);
}

}  // namespace flotilla
