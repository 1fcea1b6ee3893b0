// Issue 36's "done when" on a link whose speed is known (two SSH nodes in network namespaces, each
// node's egress shaped to the fixture's RATE by netns-nodes.sh):
//  1. a run with tensor parallelism across the link (tp = 2, one rank per node), measured at its
//     start (parallel.measure_links = auto, stored with the run): its comm efficiency (comm_report)
//     judges tp's all-reduces against that measured a <-> b link, within 20% of RATE;
//  2. the advice (run_advice) names the layout change with its numbers (tp_across_nodes:
//     parallel.tp=1 parallel.dp=2);
//  3. the same config with that change (`--set`) has measurably shorter steps: dp moves the
//     gradients once per step where tp moved every layer's activations four times.
// Figures (efficiency table, advice, before/after step times) are printed for the closing note.
// Label slow: two runs over a 5 MB/s link take about a minute here.
#include <sstream>

#include "check.h"
#include "db/database.h"
#include "db/links.h"
#include "db/sql.h"
#include "netns_cli.h"
#include "runs/comm_advice.h"
#include "runs/comm_efficiency.h"

using namespace flotilla_test;

namespace {

constexpr int kSteps = 8;
constexpr int kWarmup = 3;  // steps left out of the means (connection set-up, first allocations)

// 0.87 M parameters (3.5 MB of gradients per step for dp); with tp = 2 each layer all-reduces
// 16 x 64 x 128 x 4 bytes = 0.5 MB of activations twice forward and twice backward (8.4 MB).
std::string config_text() {
  return "[run]\nname = \"netadv\"\nseed = 9\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 4\nn_head = 4\nn_embd = 128\nvocab_size = 512\n"
         "max_seq_len = 64\n"
         "[data]\nsynthetic_tokens = 60000\n"
         "[train]\nsteps = " +
         std::to_string(kSteps) +
         "\nmicro_batch = 16\nseq_len = 64\n"
         "[parallel]\ndp = 1\ntp = 2\ntimeout_s = 120\nmeasure_links = \"auto\"\n";
}

int64_t run_id(const flotilla::db::Database& db, const std::string& name) {
  return flotilla::db::query_int(db, "SELECT id FROM runs WHERE name = '" + name + "'");
}

double mean_of(const flotilla::db::Database& db, int64_t run, const std::string& metric) {
  return static_cast<double>(flotilla::db::query_int(
             db,
             "SELECT CAST(AVG(value) * 1000 AS INTEGER) FROM metrics WHERE run_id = " + std::to_string(run) +
                 " AND name = '" + metric + "' AND step > " + std::to_string(kWarmup))) /
         1000.0;
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
  if (rate <= 0 || net.nodes().size() < 2) return flotilla_test::summary("netns_advice");
  CHECK(net.limit_all(net.rate()));

  CliWorkspace ws(fresh_dir("netns_advice"));
  for (size_t i = 0; i < 2; ++i) {
    const std::string why = add_trusted_netns_node(ws, net, i, i == 0 ? "a" : "b");
    CHECK_MSG(why.empty(), "%s", why.c_str());
    if (!why.empty()) return flotilla_test::summary("netns_advice");
  }
  const std::string cfg = ws.log_dir() + "/advice.toml";
  write_text(cfg, config_text());

  // 1. tp across the link.
  const ProcResult before = ws.run({"run", cfg, "--nodes", "a,b", "--no-bind", "--name", "before"});
  std::printf("$ flotilla run advice.toml --nodes a,b   (tp = 2 across a %s link)\n%s\n", net.rate().c_str(),
              before.output.c_str());
  CHECK_MSG(before.exit_code == 0, "exit %d", before.exit_code);
  std::vector<flotilla::runs::Advice> advice;
  double before_ms = 0, before_tps = 0;
  {
    flotilla::db::Database db(ws.db());
    const int64_t run = run_id(db, "before");
    CHECK_MSG(flotilla::db::run_link_measurement(db, run).has_value(),
              "the run's start stored no link measurement");
    const flotilla::runs::CommReport report = flotilla::runs::comm_report(db, run);
    std::printf("%s\n", flotilla::runs::comm_table_text(report).c_str());
    const flotilla::runs::GroupEfficiency* tp = nullptr;
    for (const auto& g : report.groups)
      if (g.group == "tp") tp = &g;
    CHECK_MSG(tp != nullptr, "no tp group in the report: %s", report.note.c_str());
    if (tp != nullptr) {
      CHECK(tp->crosses_nodes);
      const double link = tp->link.bytes_per_s.value_or(0);
      CHECK_MSG(link > 0.8 * rate && link < 1.2 * rate, "tp judged against %.0f B/s (%s), shaped to %.0f B/s",
                link, tp->link.source.c_str(), rate);
      CHECK_MSG(tp->link.source.find("start") != std::string::npos, "link source: %s",
                tp->link.source.c_str());
      CHECK_MSG(tp->share.has_value() && *tp->share > 0.2, "tp's share of the link %.2f",
                tp->share.value_or(-1));
    }
    advice = flotilla::runs::run_advice(db, run);
    std::printf("%s\n", flotilla::runs::advice_text(advice).c_str());
    before_ms = mean_of(db, run, "step_ms");
    before_tps = mean_of(db, run, "tokens_per_s");
  }
  std::string change;
  for (const auto& a : advice)
    if (a.rule == "tp_across_nodes") change = a.change;
  CHECK_MSG(change == "parallel.tp=1 parallel.dp=2", "tp_across_nodes change '%s' (%zu pieces of advice)",
            change.c_str(), advice.size());
  if (change.empty()) return flotilla_test::summary("netns_advice");

  // 3. Following it.
  std::vector<std::string> args = {"run", cfg, "--nodes", "a,b", "--no-bind", "--name", "after"};
  std::istringstream sets(change);
  for (std::string s; sets >> s;) args.insert(args.end(), {"--set", s});
  const ProcResult after = ws.run(args);
  CHECK_MSG(after.exit_code == 0, "exit %d: %s", after.exit_code, after.output.c_str());
  flotilla::db::Database db(ws.db());
  const int64_t after_run = run_id(db, "after");
  const double after_ms = mean_of(db, after_run, "step_ms");
  const double after_tps = mean_of(db, after_run, "tokens_per_s");
  std::printf("%s\n", flotilla::runs::comm_table_text(flotilla::runs::comm_report(db, after_run)).c_str());
  std::printf(
      "step time before %.1f ms (%.0f tok/s), after `--set %s` %.1f ms (%.0f tok/s): %.0f%% shorter\n",
      before_ms, before_tps, change.c_str(), after_ms, after_tps, 100 * (1 - after_ms / before_ms));
  CHECK_MSG(after_ms > 0 && after_ms < 0.75 * before_ms, "before %.1f ms, after %.1f ms", before_ms,
            after_ms);
  return flotilla_test::summary("netns_advice");
}
