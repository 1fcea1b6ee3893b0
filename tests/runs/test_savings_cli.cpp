// What the scheduler saved (issue 37 item 6), over a store with crafted queue entries, decisions,
// accruals and idle time (savings_fixture.h states every figure and how it was computed by hand):
// - runs::scheduler_savings gives the hand-computed figures per run and in total (the measured cost
//   from the accruals, the counterfactuals scaled by measured/predicted cost, or time on a free
//   place; unfinished entries not counted; preemption losses and idle cost);
// - `flotilla costs --savings` prints the same cells and summary, and --json the same numbers.
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "check.h"
#include "db/database.h"
#include "runs/figures.h"
#include "runs/savings.h"
#include "savings_fixture.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;
using nlohmann::json;

namespace {

std::string g_root;
int g_calls = 0;

ProcResult cli(const std::vector<std::string>& args) {
  const std::string log = g_root + "/cli" + std::to_string(++g_calls) + ".log";
  std::vector<std::string> argv = {FLOTILLA_CLI_PATH, "--db", g_root + "/store.db"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r;
  r.exit_code = wait_exit(spawn(argv, {"DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM="}, log));
  r.output = read_file(log);
  return r;
}

bool near(double a, double b) { return std::fabs(a - b) < 1e-9; }

}  // namespace

int main() {
  g_root = fresh_dir("savings_cli");
  const double now = db::now_seconds();
  savings_fixture::build(g_root + "/store.db", now);

  runs::Savings s;
  {
    const db::Database d(g_root + "/store.db");
    s = runs::scheduler_savings(d, now);
  }
  CHECK(s.runs.size() == 2);
  CHECK(s.unfinished == 1);
  CHECK_MSG(near(s.measured_usd, savings_fixture::kMeasured), "measured %.6f", s.measured_usd);
  CHECK_MSG(near(s.saved_vs_most_expensive, savings_fixture::kSavedVsMostExpensive), "vs dearest %.6f",
            s.saved_vs_most_expensive);
  CHECK_MSG(near(s.saved_vs_first_free, savings_fixture::kSavedVsFirstFree), "vs first free %.6f",
            s.saved_vs_first_free);
  CHECK(s.counted_vs_most_expensive == 2 && s.counted_vs_first_free == 2);
  CHECK_MSG(near(s.preemption_usd, savings_fixture::kPreemption), "preemption %.6f", s.preemption_usd);
  CHECK(s.preemption_steps == 40 && s.restarts == 1);
  CHECK_MSG(near(s.idle_usd, savings_fixture::kIdle), "idle %.6f", s.idle_usd);
  if (s.runs.size() == 2) {
    const runs::RunSavings& cheap = s.runs[0];
    CHECK(cheap.run == "cheap-run" && cheap.chosen == "node:b");
    CHECK(cheap.most_expensive == "cluster:hpc" && cheap.first_free == "node:a");
    CHECK(cheap.scale_basis == "cost" && near(cheap.scale, 1.5));
    CHECK(cheap.measured_usd && near(*cheap.measured_usd, 1.5));
    CHECK(cheap.saved_vs_most_expensive && near(*cheap.saved_vs_most_expensive, 4.5));
    CHECK(cheap.saved_vs_first_free && near(*cheap.saved_vs_first_free, 3.0));
    const runs::RunSavings& local = s.runs[1];
    CHECK(local.run == "local-run" && local.chosen == "local");
    CHECK(local.most_expensive == "node:b" && local.first_free == "local");  // node:a does not fit
    CHECK(local.scale_basis == "time" && near(local.scale, 2.0));
    CHECK(local.measured_usd && near(*local.measured_usd, 0));
    CHECK(local.saved_vs_most_expensive && near(*local.saved_vs_most_expensive, 1.0));
    CHECK(local.saved_vs_first_free && near(*local.saved_vs_first_free, 0));
    CHECK(local.restarts == 1 && near(local.lost_usd, 0.25));
  }
  const std::string words = runs::savings_summary(s);
  std::printf("%s\n", words.c_str());
  CHECK(words.find("$5.50 against the most expensive place") != std::string::npos);
  CHECK(words.find("$3.00 against the first free place") != std::string::npos);
  CHECK(words.find("Preemptions cost $0.2500 (1 restart, 40 steps lost); idle machines cost $3.00") !=
        std::string::npos);

  // The command prints the same cells and the same summary.
  const ProcResult text = cli({"costs", "--savings"});
  CHECK_MSG(text.exit_code == 0, "exit %d\n%s", text.exit_code, text.output.c_str());
  CHECK_MSG(text.output.find(words) != std::string::npos, "%s", text.output.c_str());
  for (const runs::RunSavings& r : s.runs) {
    std::string line;
    for (const std::string& c : runs::savings_cells(r)) line += c + "\t";
    line.back() = '\n';
    CHECK_MSG(text.output.find(line) != std::string::npos, "no line %s in\n%s", line.c_str(),
              text.output.c_str());
  }
  const ProcResult js = cli({"costs", "--savings", "--json"});
  CHECK_MSG(js.exit_code == 0, "exit %d\n%s", js.exit_code, js.output.c_str());
  const json j = json::parse(js.output, nullptr, false);
  CHECK(j.is_object());
  if (j.is_object()) {
    // The command reads the present, not the test's `now`: finished runs and closed idle time
    // give the same dollars whenever they are read.
    CHECK(near(j.value("saved_vs_most_expensive", -1.0), s.saved_vs_most_expensive));
    CHECK(near(j.value("saved_vs_first_free", -1.0), s.saved_vs_first_free));
    CHECK(near(j.value("idle_usd", -1.0), s.idle_usd));
    CHECK(near(j.value("preemption_usd", -1.0), s.preemption_usd));
    CHECK(j["runs"].size() == 2);
  }
  return summary("savings_cli");
}
