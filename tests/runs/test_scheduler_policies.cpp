// The scheduler's standard policies (runs/scheduler_policies.h) on a crafted queue: the work view
// idle autostop reads (nodes of started entries busy; the nodes a queued entry may go to, or its
// last decision chose, wanted; paused and finished entries count for nothing; a key that no longer
// parses is ignored), and add_standard_policies adding both tick hooks and the wake; a place a start
// failed on lately is left out of placement, and the words say so.
#include <string>

#include "db/nodes.h"
#include "db/queue.h"
#include "engine/config/config_io.h"
#include "runs/scheduler_policies.h"
#include "store_fixture.h"

using namespace store_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

int64_t add(db::Database& d, const std::string& name, std::vector<std::string> places) {
  db::NewQueueEntry e;
  e.name = name;
  e.config_toml = "[run]\n";
  e.places = std::move(places);
  return db::add_queue_entry(d, e, 100);
}

}  // namespace

int main() {
  const fs::path dir = scratch("runs_scheduler_policies", "all");
  db::Database d((dir / "flotilla.db").string());

  const int64_t running = add(d, "r", {});
  CHECK(db::claim_queue_entry(d, running, "tok", "nodes:a,b", "", "{}", 101));
  const int64_t queued = add(d, "q", {"node:c", "local", "cluster:hpc"});
  const int64_t anywhere = add(d, "w", {});
  db::set_queue_entry_why(
      d, anywhere, "waits for node d",
      R"({"time": 102, "start": false, "waits": true, "chosen": "node:d", "words": "", "places": []})", 102);
  const int64_t paused = add(d, "p", {"node:e"});
  db::pause_queue_entry(d, paused, 103);
  const int64_t cancelled = add(d, "x", {"node:f"});
  db::cancel_queue_entry(d, cancelled, 104);
  add(d, "bad", {"node:$(rm -rf x)"});

  runs::WorkView v = runs::queue_work_view(d);
  CHECK(v.busy == std::set<std::string>({"a", "b"}));
  CHECK_MSG(v.wanted == std::set<std::string>({"c", "d"}), "wanted: %zu nodes", v.wanted.size());

  // Once the running entry is done, its nodes are free for autostop's idle clock.
  CHECK(db::finish_queue_entry(d, running, db::EntryState::kDone, "completed", 105));
  CHECK(runs::queue_work_view(d).busy.empty());
  (void)queued;

  runs::SchedulerOptions o;
  o.service.ssh.database_path = (dir / "flotilla.db").string();
  auto autostop = runs::add_standard_policies(o, "", {});
  CHECK(autostop != nullptr && o.tick_hooks.size() == 2 && static_cast<bool>(o.wake_node));
  // A node without an autostop row wakes as it is: nothing to start.
  std::string why;
  CHECK(o.wake_node("c", &why));
  // A place a start failed on is left out (the scheduler's unavailable places), named in the words.
  db::SshNode dead;
  dead.name = "dead";
  dead.host = "127.0.0.1";
  dead.port = 9;
  dead.usd_per_hour = 0.5;
  db::add_ssh_node(d, dead);
  const int64_t only = add(d, "only-dead", {"node:dead"});
  const auto entry = *db::find_queue_entry(d, only);
  const flotilla::RunConfig cfg = flotilla::parse_config_toml(
      "[model]\npreset = \"tiny\"\nvocab_size = 512\nmax_seq_len = 64\n[data]\nsource = \"synthetic\"\n"
      "[train]\nsteps = 20\nmicro_batch = 2\nseq_len = 32\n",
      "test");
  const runs::PlaceChoice tried = runs::choose_by_cost(d, entry, cfg, -1, 200);
  CHECK_MSG(tried.start && tried.key == "node:dead", "without the failure the node is chosen: %s",
            tried.words.c_str());
  const runs::PlaceChoice avoided =
      runs::choose_by_cost(d, entry, cfg, -1, 200, std::nullopt,
                           {{"node:dead", "could not start there at 03:12: connection refused"}});
  CHECK(!avoided.start);
  CHECK_MSG(
      avoided.words.find("node dead: left out for now (could not start there at 03:12") != std::string::npos,
      "words: %s", avoided.words.c_str());
  return flotilla_test::summary("test_scheduler_policies");
}
