// A dp=2 run across the slow link (issue 36): `flotilla run CONFIG --nodes a,b` with one rank on
// each namespace node, once with the link unthrottled and once at the fixture's RATE. Each step
// all-reduces the gradients (parameters x 4 bytes) between the nodes; with two ranks every rank
// sends about that many bytes each way per step, so the throttled run's steps must be longer by
// about gradient bytes / RATE, and its communication time (time_ms.comm) must carry that growth.
// Figures are printed for the notes (issue 36's closing note quotes them).
#include "check.h"
#include "db/database.h"
#include "db/sql.h"
#include "netns_cli.h"

using namespace flotilla_test;

namespace {

constexpr int kSteps = 20;
constexpr int kWarmup = 4;  // steps left out of the means (connection set-up, first allocations)

std::string config_text() {
  // ~0.46 M parameters: 1.85 MB of gradients per step, 0.37 s at 40 mbit/s; compute is ~10 ms.
  return "[run]\nname = \"netdp\"\nseed = 7\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 128\nvocab_size = 512\nmax_seq_len "
         "= 32\n"
         "[data]\nsynthetic_tokens = 30000\n"
         "[train]\nsteps = " +
         std::to_string(kSteps) +
         "\nmicro_batch = 2\nseq_len = 16\n"
         "[parallel]\ndp = 2\ntimeout_s = 120\nmeasure_links = \"off\"\n";
}

struct RunFigures {
  double step_ms = 0, comm_ms = 0;
  int64_t parameters = 0;
};

// Mean step and comm time (ms) of the run named `name` over steps after the warm-up.
RunFigures figures(const std::string& db_path, const std::string& name) {
  flotilla::db::Database db(db_path);
  const std::string run = "(SELECT id FROM runs WHERE name = '" + name + "')";
  const auto mean_us = [&](const std::string& metric) {
    return static_cast<double>(flotilla::db::query_int(
               db, "SELECT CAST(AVG(value) * 1000 AS INTEGER) FROM metrics WHERE run_id = " + run +
                       " AND name = '" + metric + "' AND step > " + std::to_string(kWarmup))) /
           1000.0;
  };
  RunFigures f;
  f.step_ms = mean_us("step_ms");
  f.comm_ms = mean_us("time_ms.comm");
  f.parameters = flotilla::db::query_int(db, "SELECT parameters FROM runs WHERE id = " + run);
  return f;
}

}  // namespace

int main() {
  const NetnsNodes net(FLOTILLA_NETNS_STATE);
  if (!net.unavailable().empty()) {
    std::printf("SKIP: %s\n", net.unavailable().c_str());
    return kNetnsSkip;
  }
  const double rate = tc_rate_bytes_per_s(net.rate());
  CHECK_MSG(rate > 0, "the fixture has no rate limit (%s)", net.rate().c_str());
  if (rate <= 0 || net.nodes().size() < 2) return flotilla_test::summary("netns_dp2");

  CliWorkspace ws(fresh_dir("netns_dp2"));
  for (size_t i = 0; i < 2; ++i) {
    const std::string why = add_trusted_netns_node(ws, net, i, i == 0 ? "a" : "b");
    CHECK_MSG(why.empty(), "%s", why.c_str());
    if (!why.empty()) return flotilla_test::summary("netns_dp2");
  }
  const std::string cfg = ws.log_dir() + "/dp2.toml";
  write_text(cfg, config_text());

  // Unthrottled first (the deploy of the worker to both nodes happens here too).
  CHECK(net.limit_all("off"));
  const ProcResult fast = ws.run({"run", cfg, "--nodes", "a,b", "--no-bind", "--name", "fast"});
  CHECK(net.limit_all(net.rate()));
  CHECK_MSG(fast.exit_code == 0, "unthrottled run exit %d: %s", fast.exit_code, fast.output.c_str());
  const ProcResult slow = ws.run({"run", cfg, "--nodes", "a,b", "--no-bind", "--name", "slow"});
  CHECK_MSG(slow.exit_code == 0, "throttled run exit %d: %s", slow.exit_code, slow.output.c_str());

  const RunFigures f = figures(ws.db(), "fast");
  const RunFigures s = figures(ws.db(), "slow");
  const double grad_bytes = static_cast<double>(s.parameters) * 4;
  const double expected_ms = grad_bytes / rate * 1000;
  std::printf(
      "parameters %lld, gradient bytes per step %.0f, link %s = %.2f MB/s: expected +%.0f ms per step\n",
      static_cast<long long>(s.parameters), grad_bytes, net.rate().c_str(), rate / 1e6, expected_ms);
  std::printf(
      "unthrottled: step %.1f ms, comm %.1f ms\nthrottled:   step %.1f ms, comm %.1f ms (+%.1f ms per "
      "step)\n",
      f.step_ms, f.comm_ms, s.step_ms, s.comm_ms, s.step_ms - f.step_ms);
  CHECK(s.parameters > 100000 && f.parameters == s.parameters);
  CHECK_MSG(f.step_ms > 0 && s.step_ms > 0, "no step times stored");
  // The link says the step grows by gradient bytes / RATE (Gloo's two-rank all-reduce sends about
  // the buffer each way; per-layer buckets add a little per message); the bounds allow for it.
  const double growth = s.step_ms - f.step_ms;
  CHECK_MSG(growth > 0.8 * expected_ms && growth < 1.5 * expected_ms,
            "step grew %.1f ms, the link says %.1f ms", growth, expected_ms);
  // And it is communication time that grew.
  CHECK_MSG(s.comm_ms - f.comm_ms > 0.7 * expected_ms, "comm grew %.1f ms, the link says %.1f ms",
            s.comm_ms - f.comm_ms, expected_ms);
  return flotilla_test::summary("netns_dp2");
}
