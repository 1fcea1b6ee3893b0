// Budgets on SSH nodes (issue 16) over a loopback sshd "node": the same runs-layer budget guard
// stops a run on nodes at its config's budget.max_usd and another at budget.max_hours, on every
// node, with a checkpoint; the cost is charged at the stored price and the reason recorded; a
// --budget on an unpriced node is refused before anything is deployed, with the fix named.
#include <cstdio>

#include "check.h"
#include "cli_fixture.h"
#include "db/costs.h"
#include "db/database.h"
#include "db/run_records.h"
#include "db/run_store.h"

using namespace flotilla_test;
namespace db = flotilla::db;

namespace {

std::string config(const std::string& root, const std::string& name, const std::string& budget) {
  const std::string path = root + "/" + name + ".toml";
  write_text(path, "[run]\nname = \"" + name +
                       "\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\n"
                       "n_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n"
                       "[train]\nsteps = 1000000\nmicro_batch = 2\nseq_len = 16\n[checkpoint]\nevery = 1000000\n" +
                       budget);
  return path;
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("node_budget");
  if (!fx.start(0) || !fx.start(1)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  CliWorkspace ws(fx.root());
  CHECK_MSG(ws.add_trusted_node(fx, 0, "a"), "node a");
  CHECK_MSG(ws.add_trusted_node(fx, 1, "free"), "node free");

  // $36/h from the config (a cent a second), capped at two cents.
  ProcResult r = ws.run({"run", config(fx.root(), "node-usd", "[budget]\nusd_per_hour = 36.0\nmax_usd = 0.02\n"),
                         "--nodes", "a", "--no-bind"});
  CHECK_MSG(r.exit_code == 10, "exit %d\n%s", r.exit_code, r.output.c_str());
  {
    const db::Database d(ws.db());
    const db::Run run = db::get_run(d, "node-usd");
    const double cost = db::run_cost_usd(d, run.id);
    std::printf("node run max_usd 0.02 at $36/h: %s (%s), cost $%.4f, ran %.2f s\n", db::to_string(run.status),
                run.status_note.c_str(), cost, run.ended_at.value_or(0) - run.started_at.value_or(0));
    CHECK(run.status == db::RunStatus::kStopped);
    CHECK_MSG(
        run.status_note.rfind("budget reached: $0.0", 0) == 0 && run.status_note.find(" of $0.02") != std::string::npos,
        "note: %s", run.status_note.c_str());
    CHECK(run.usd_per_hour && *run.usd_per_hour == 36.0);
    CHECK(cost >= 0.02 - 1e-9 && cost < 0.2);  // node times are whole seconds (remote/remote_run.cpp)
    const auto cps = db::list_checkpoints(d, run.id);
    CHECK(!cps.empty() && cps.back().reason == "budget");
  }

  // A wall-time limit: 0.0005 h = 1.8 s of running.
  r = ws.run({"run", config(fx.root(), "node-hours", "[budget]\nmax_hours = 0.0005\n"), "--nodes", "a", "--no-bind"});
  CHECK_MSG(r.exit_code == 10, "exit %d\n%s", r.exit_code, r.output.c_str());
  {
    const db::Database d(ws.db());
    const db::Run run = db::get_run(d, "node-hours");
    std::printf("node run max_hours 0.0005: %s (%s), ran %.2f s\n", db::to_string(run.status), run.status_note.c_str(),
                run.ended_at.value_or(0) - run.started_at.value_or(0));
    CHECK(run.status == db::RunStatus::kStopped);
    CHECK_MSG(run.status_note.rfind("time limit reached: ", 0) == 0, "note: %s", run.status_note.c_str());
  }

  // A cap on a node nothing prices: refused before anything is created or deployed.
  r = ws.run({"run", config(fx.root(), "node-unpriced", ""), "--nodes", "free", "--budget", "1", "--no-bind"});
  CHECK(r.exit_code == 9);
  CHECK_MSG(contains(r.output, "could never be reached") && contains(r.output, "flotilla pricing node free"), "%s",
            r.output.c_str());
  CHECK(!db::find_run(db::Database(ws.db()), "node-unpriced"));
  return summary("test_cli_node_budget_ssh");
}
