// The runs layer's lifecycle of a run on SSH nodes, driven directly (the CLI and the app are thin
// over it) against two loopback sshd "nodes": start -> completed with every step stored once and
// each node charged its own stored price; a stop -> stopped on every node; the watcher leaves and
// a new one re-attaches from the committed offset; node b lost to a preemption -> the recovery
// moves its rank to a, re-prices the run on the node that remains, and the run completes in the
// same row with every step once. The start measures the links among the nodes (stored with the run).
#include <signal.h>

#include <map>
#include <thread>

#include "check.h"
#include "db/costs.h"
#include "db/database.h"
#include "db/links.h"
#include "db/nodes.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "engine/config/config_io.h"
#include "flotilla/build_info.h"
#include "runs/node_run.h"
#include "sshd_fixture.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

constexpr int kSteps = 300;

flotilla::RunConfig config(const std::string& name) {
  return flotilla::parse_config_toml(
      "[run]\nname = \"" + name +
          "\"\nseed = 7\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\n"
          "n_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n[train]\nsteps "
          "= " +
          std::to_string(kSteps) +
          "\nmicro_batch = 2\nseq_len = 16\n[parallel]\ndp = 2\ntimeout_s = 60\n[checkpoint]\nevery = "
          "100\nkeep_last = 2\n",
      "test");
}

struct World {
  SshdFixture* fx;
  std::string db_path;
  std::map<std::string, int> index;  // node name -> fixture node
  flotilla::remote::SessionOptions options(const db::SshNode& n) const {
    return fx->options(index.at(n.name));
  }
  std::vector<runs::Node> connected(const std::vector<std::string>& names) const {
    const db::Database d(db_path);
    std::vector<runs::Node> nodes;
    for (const auto& n : names) nodes.push_back(runs::Node{db::get_ssh_node(d, n), nullptr, ""});
    runs::connect_nodes(
        nodes, [this](const db::SshNode& r) { return options(r); }, nullptr);
    return nodes;
  }
};

int64_t steps_of(const std::string& path, int64_t id) {
  const db::Database d(path);
  return static_cast<int64_t>(db::metric_points(d, id, "loss").size());
}

runs::StartRequest request(const std::string& name) {
  runs::StartRequest r;
  r.config = config(name);
  r.name = name;
  r.nproc_per_node = 1;
  r.no_bind = true;
  r.worker_path = FLOTILLA_WORKER_PATH;
  r.version = FLOTILLA_VERSION_STRING;
  r.origin = "test";
  return r;
}

// SIGTERM to every process of node i's run (a spot notice), then its sshd goes away.
void preempt(SshdFixture& fx, int i, const std::string& rid) {
  const pid_t sid =
      static_cast<pid_t>(std::atol(read_file(fx.node(i).home + "/.flotilla/runs/" + rid + "/pid").c_str()));
  CHECK(sid > 1);
  for (pid_t p : all_pids())
    if (sid > 1 && proc_stat_field(p, 4) == sid) kill(p, SIGTERM);
  fx.stop(i);
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("runs_node_run");
  if (!fx.start(0) || !fx.start(1)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  World w{&fx, fx.root() + "/store.db", {{"a", 0}, {"b", 1}}};
  {
    db::Database d(w.db_path);
    for (const auto& [name, i] : w.index) {
      db::SshNode n;
      n.name = name;
      n.host = "127.0.0.1";
      n.port = fx.node(i).port;
      n.user = local_user_name();
      n.key_path = fx.client_key();
      n.usd_per_hour = name == "a" ? 3.6 : 1.8;
      db::add_ssh_node(d, n);
      flotilla::remote::Session s(fx.options(i));
      trust_and_connect(s);
    }
  }
  db::Writer writer(w.db_path);

  // 1. Start and watch to the end.
  {
    std::vector<runs::Node> nodes = w.connected({"a", "b"});
    db::Database d(w.db_path);
    const runs::Watch watch = runs::start_on_nodes(d, nodes, request("nodes-ok"), nullptr);
    const db::Run r0 = db::get_run(d, watch.run_id);
    CHECK(r0.usd_per_hour && std::abs(*r0.usd_per_hour - 5.4) < 1e-12);  // each node's own price, summed
    // parallel.measure_links = auto: the links among the run's nodes, measured at its start, stored with it.
    const auto links = db::run_link_measurement(d, watch.run_id);
    CHECK_MSG(links && links->links.size() == 4, "%zu links", links ? links->links.size() : size_t{0});
    if (links)
      for (const db::NodeLink& l : links->links)
        CHECK_MSG(l.bytes_per_s && *l.bytes_per_s > 0, "%s", l.error.c_str());
    const int code = runs::watch_node_run(writer, nodes, watch, {});
    CHECK(code == 0);
    const db::Run r = db::get_run(d, watch.run_id);
    CHECK(r.status == db::RunStatus::kCompleted);
    CHECK(steps_of(w.db_path, r.id) == kSteps);
    for (const db::Accrual& a : db::run_accruals(d, r.id))
      CHECK(a.end && (a.usd_per_hour == 3.6 || a.usd_per_hour == 1.8));
  }
  // 2. A stop reaches every node.
  {
    std::vector<runs::Node> nodes = w.connected({"a", "b"});
    db::Database d(w.db_path);
    runs::StartRequest req = request("nodes-stop");
    req.config.train.steps = 1000000;
    const runs::Watch watch = runs::start_on_nodes(d, nodes, req, nullptr);
    runs::WatchHooks hooks;
    hooks.stop_requested = [&] { return steps_of(w.db_path, watch.run_id) >= 10; };
    CHECK(runs::watch_node_run(writer, nodes, watch, hooks) == 10);
    const db::Run r = db::get_run(d, watch.run_id);
    CHECK_MSG(r.status == db::RunStatus::kStopped && r.status_note == "on request", "%s (%s)",
              db::to_string(r.status), r.status_note.c_str());
  }
  // 3. The watcher leaves; another re-attaches from the committed offset.
  {
    std::vector<runs::Node> nodes = w.connected({"a", "b"});
    db::Database d(w.db_path);
    runs::StartRequest req = request("nodes-left");
    req.config.train.steps = 2000;
    const runs::Watch watch = runs::start_on_nodes(d, nodes, req, nullptr);
    runs::WatchHooks leave;
    leave.leave_requested = [&] { return steps_of(w.db_path, watch.run_id) >= 20; };
    CHECK(runs::watch_node_run(writer, nodes, watch, leave) == runs::kLeft);
    const db::Run run = db::get_run(d, watch.run_id);
    CHECK(run.status == db::RunStatus::kRunning);
    std::vector<runs::Node> again;
    std::string rid, refusal;
    bool running = false;
    CHECK(runs::attach_target(d, run, again, rid).empty());
    std::vector<std::string> names;
    for (const auto& n : again) names.push_back(n.rec.name);
    again = w.connected(names);
    const runs::Watch w2 = runs::attach_watch(run, again, rid, "test (re-attached)", refusal, running);
    CHECK(refusal.empty());
    CHECK(runs::watch_node_run(writer, again, w2, {}) == 0);
    CHECK(db::get_run(d, run.id).status == db::RunStatus::kCompleted);
    CHECK(steps_of(w.db_path, run.id) == 2000);  // every step exactly once
  }
  // 4. Node b is preempted: its rank moves to a, the run is re-priced there and completes.
  {
    std::vector<runs::Node> nodes = w.connected({"a", "b"});
    db::Database d(w.db_path);
    runs::StartRequest req = request("nodes-recover");
    req.config.train.steps = kSteps;
    const runs::Watch watch = runs::start_on_nodes(d, nodes, req, nullptr);
    runs::Recovery recovery;
    recovery.enabled = true;
    recovery.settle_seconds = 2;
    recovery.options = [&](const db::SshNode& r) { return w.options(r); };
    recovery.worker_path = FLOTILLA_WORKER_PATH;
    recovery.version = FLOTILLA_VERSION_STRING;
    recovery.no_bind = true;
    std::thread victim([&] {
      wait_until([&] { return steps_of(w.db_path, watch.run_id) >= 8; }, 90);
      preempt(fx, 1, watch.rid);
    });
    const int code = runs::supervise_node_run(writer, nodes, watch, {}, recovery);
    victim.join();
    CHECK_MSG(code == 0, "exit %d", code);
    const db::Run r = db::get_run(d, watch.run_id);
    CHECK(r.status == db::RunStatus::kCompleted && r.target == "a");
    CHECK(steps_of(w.db_path, r.id) == kSteps);
    CHECK(r.usd_per_hour && *r.usd_per_hour == 3.6);  // priced again on the node that remains
    const auto shares = db::run_node_shares(d, r.id);
    CHECK(shares.size() == 1 && shares[0].node_name == "a");
    int recoveries = 0;
    for (const db::EventInfo& e : db::list_events(d, r.id))
      recoveries += e.kind == "recovery" && e.message.rfind("automatic recovery 1/3 (lost b)", 0) == 0;
    CHECK(recoveries == 1);
  }
  return summary("test_node_run_ssh");
}
