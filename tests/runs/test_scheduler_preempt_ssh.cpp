// A queued run preempted on an SSH node goes back to the head of the queue and finishes on another
// place with another layout (issue 37 item 3), with the real scheduler, a loopback sshd "node" and
// the real worker: the entry starts on node a with dp=2; once a checkpoint is stored, every process
// of its run on the node gets SIGTERM (a spot notice, as test_cli_recover does); the run ends
// preempted (the worker checkpointed as it stopped: no step lost), the entry is requeued at the
// head with the lost steps recorded, and the scheduler resumes the same run row on this machine
// with dp=1 from that checkpoint. (A local run killed outright, whose steps after its newest
// checkpoint are lost and priced, is test_scheduler_crash's.) The loss series is
// continuous: every step from 1 to the last stored exactly once.
//
// Placement here is the test's (SchedulerOptions::choose): node a first, this machine after a
// preemption, so the test does not depend on how the places' prices compare.
#include <algorithm>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "check.h"
#include "db/database.h"
#include "db/nodes.h"
#include "db/queries.h"
#include "db/queue.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "flotilla/build_info.h"
#include "runs/scheduler.h"
#include "sshd_fixture.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 3000;

std::string config_toml() {
  return "[run]\nname = \"pre\"\nseed = 7\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = "
         "2\n"
         "n_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n[train]\nsteps "
         "= " +
         std::to_string(kSteps) +
         "\nmicro_batch = 2\nseq_len = 16\n[checkpoint]\nevery = 100\nkeep_last = 3\n[parallel]\ndp = 2\n"
         "timeout_s = 60\n";
}

std::vector<int64_t> steps_of(const std::string& path, int64_t id) {
  const db::Database d(path);
  std::vector<int64_t> out;
  for (const auto& p : db::metric_points(d, id, "loss")) out.push_back(static_cast<int64_t>(p.step));
  return out;
}

// Queues `name`, lets it start on node a with dp=2, then sends `sig` to every process of its run on
// the node once a checkpoint is stored (SIGTERM: a spot notice, the worker checkpoints, exit 10).
// The entry must go back to the head of the queue and the run finish here on dp=1, every step
// stored once.
void moves_after_preemption(SshdFixture& fx, runs::Scheduler& sched, const std::string& db_path,
                            const std::string& name, int sig) {
  {
    db::Database d(db_path);
    db::NewQueueEntry e;
    e.name = name;
    e.explicit_name = true;
    e.config_toml = config_toml();
    e.max_restarts = 2;
    db::add_queue_entry(d, e, db::now_seconds());
  }
  const auto tick_until = [&](auto pred, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
      sched.tick();
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return pred();
  };
  const auto entry = [&] { return db::get_queue_entry(db::Database(db_path), name); };
  CHECK(tick_until([&] { return entry().state == db::EntryState::kRunning; }, 90));
  const int64_t id = entry().run_id.value_or(0);
  CHECK(id > 0);
  const db::Run on_node = db::get_run(db::Database(db_path), id);
  CHECK_MSG(on_node.run_dir.rfind("a:", 0) == 0, "%s", on_node.run_dir.c_str());
  // A checkpoint stored and some steps after it: then the signal.
  int64_t stored_before = 0;
  CHECK(tick_until(
      [&] {
        const db::Database d(db_path);
        const auto cps = db::list_checkpoints(d, id);
        stored_before = static_cast<int64_t>(steps_of(db_path, id).size());
        return !cps.empty() && stored_before >= cps.back().step + 20;
      },
      120));
  const std::string rid = fs::path(on_node.run_dir.substr(on_node.run_dir.find(':') + 1)).filename().string();
  const std::string pid = read_file(fx.node(0).home + "/.flotilla/runs/" + rid + "/pid");
  const pid_t sid = static_cast<pid_t>(std::atol(pid.c_str()));
  CHECK_MSG(sid > 1, "no pid file for run %s on the node", rid.c_str());
  for (pid_t p : all_pids())
    if (sid > 1 && proc_stat_field(p, 4) == sid) kill(p, sig);

  // Requeued at the head, then resumed here on 1 rank, to its end.
  CHECK(tick_until([&] { return entry().starts >= 2 || db::entry_finished(entry().state); }, 120));
  CHECK(tick_until([&] { return db::entry_finished(entry().state); }, 180));
  const db::QueueEntry e = entry();
  CHECK_MSG(e.state == db::EntryState::kDone && e.starts == 2 && e.place == "local", "%s: %s %lld %s: %s",
            name.c_str(), db::entry_state_name(e.state), static_cast<long long>(e.starts), e.place.c_str(),
            e.why.c_str());
  CHECK(e.run_id && *e.run_id == id);  // the same run row, resumed
  const db::Database d(db_path);
  const db::Run after = db::get_run(d, id);
  CHECK_MSG(after.status == db::RunStatus::kCompleted, "%s", db::to_string(after.status));
  CHECK(after.target == "local" && after.world_size.value_or(0) == 1);
  const auto steps = steps_of(db_path, id);
  CHECK_MSG(steps.size() == static_cast<size_t>(kSteps) && steps.front() == 1 && steps.back() == kSteps,
            "%zu steps, %lld..%lld", steps.size(), static_cast<long long>(steps.empty() ? 0 : steps.front()),
            static_cast<long long>(steps.empty() ? 0 : steps.back()));
  CHECK(std::adjacent_find(steps.begin(), steps.end()) == steps.end());
  // The lost work is on the entry: none after a spot notice (the worker checkpointed as it
  // stopped), the steps after the newest checkpoint after a kill, priced at the node's rate.
  if (sig == SIGTERM) {
    CHECK_MSG(e.lost_steps == 0, "lost %lld", static_cast<long long>(e.lost_steps));
  } else {
    CHECK_MSG(e.lost_steps >= 20 && e.lost_usd > 0, "lost %lld steps, $%g",
              static_cast<long long>(e.lost_steps), e.lost_usd);
  }
  int scheduled = 0;
  bool requeued = false;
  for (const db::EventInfo& ev : db::list_events(d, id)) {
    if (ev.kind == "scheduled") ++scheduled;
    if (ev.kind == "scheduled" && ev.message.find("back at the head of the queue") != std::string::npos)
      requeued = true;
  }
  CHECK_MSG(scheduled == 3 && requeued, "%d scheduled events", scheduled);
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("runs_scheduler_preempt");
  if (!fx.start(0)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  const std::string db_path = fx.root() + "/ws/store.db";
  fs::create_directories(fx.root() + "/ws");
  runs::SchedulerOptions o;
  o.service.ssh.database_path = db_path;
  o.service.runs_root = fx.root() + "/ws/runs";
  o.service.worker_path = FLOTILLA_WORKER_PATH;
  o.service.version = FLOTILLA_VERSION_STRING;
  o.service.no_bind = true;
  o.service.worker_env = {"OMP_NUM_THREADS=1"};
  o.origin = "test scheduler";
  o.tick_s = 0.2;
  std::mutex notes_mutex;
  std::string notes;
  o.note = [&](const std::string& line) {
    std::lock_guard<std::mutex> l(notes_mutex);
    notes += line + "\n";
  };
  // Node a (2 ranks) for a first start, this machine (1 rank) once preempted.
  o.choose = [](db::Database& d, const db::QueueEntry& e, const flotilla::RunConfig& cfg, int64_t steps_to_go,
                double now) {
    if (e.name != "pre") return runs::choose_by_cost(d, e, cfg, steps_to_go, now);  // the real placement
    runs::PlaceChoice c;
    c.start = true;
    if (e.starts == 0) {
      c.key = "node:a";
      c.where = runs::Placement::on_nodes({"a"});
      c.where.no_bind = true;
      c.layout.dp = 2;
      c.words = "on node a (test): dp=2";
    } else {
      c.key = "local";
      c.where = runs::Placement::here();
      c.layout.dp = 1;
      c.words = "on this machine (test): dp=1, " + std::to_string(steps_to_go) + " steps to go";
    }
    return c;
  };
  {
    db::Database d(db_path);
    db::SshNode n;
    n.name = "a";
    n.host = "127.0.0.1";
    n.port = fx.node(0).port;
    n.user = local_user_name();
    n.key_path = fx.client_key();
    n.usd_per_hour = 36;  // a cent a second: the lost work has a price
    db::add_ssh_node(d, n);
    flotilla::remote::Session s(runs::ssh_session_options(o.service.ssh, db::get_ssh_node(d, "a")));
    trust_and_connect(s);
  }
  runs::Scheduler sched(o);
  sched.acquire();
  moves_after_preemption(fx, sched, db_path, "pre", SIGTERM);

  // The real placement with the node in the inventory: node a costs $36/h, this machine has no
  // price ($0): the entry runs here, and its decision weighs both, with the node's figures.
  {
    db::Database d(db_path);
    db::NewQueueEntry n;
    n.name = "cheap";
    n.explicit_name = true;
    n.config_toml = config_toml();
    n.config_toml.replace(n.config_toml.find("steps = 3000"), 12, "steps = 200");
    n.places = {"node:a", "local"};
    db::add_queue_entry(d, n, db::now_seconds());
  }
  const auto cheap = [&] { return db::get_queue_entry(db::Database(db_path), "cheap"); };
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!db::entry_finished(cheap().state) && std::chrono::steady_clock::now() < end) {
    sched.tick();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const db::QueueEntry c = cheap();
  CHECK_MSG(c.state == db::EntryState::kDone && c.place == "local", "%s on %s: %s",
            db::entry_state_name(c.state), c.place.c_str(), c.why.c_str());
  const auto decision = nlohmann::json::parse(c.decision_json, nullptr, false);
  bool node_weighed = false;
  if (decision.is_object() && decision.contains("places"))
    for (const auto& p : decision["places"])
      if (p.value("key", "") == "node:a" && p.value("fits", false) && p["usd"].is_number() &&
          p["usd"].get<double>() > 0)
        node_weighed = true;
  CHECK_MSG(node_weighed && decision.value("chosen", "") == "local", "%s", c.decision_json.c_str());
  CHECK_MSG(decision.value("words", "").find("node a") != std::string::npos, "%s", c.decision_json.c_str());
  fx.stop(0);
  return summary("test_scheduler_preempt_ssh");
}
