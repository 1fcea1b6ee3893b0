// The runs service (runs/service.h) for a run on SSH nodes, against a loopback sshd node with the
// real worker: start through a Placement -> watch -> completed with every step stored once; its
// checkpoints listed on the master over SSH and fetched to this machine (a real, loadable folder);
// a checkpoint asked of the running run from outside its watcher; a stop, then resume in the same
// row continuing after its checkpoint; a fork of the node run onto this machine from a fetched
// checkpoint; an untrusted host refused with the trust command before anything is created.
#include <algorithm>
#include <filesystem>
#include <thread>

#include "check.h"
#include "db/database.h"
#include "db/nodes.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "flotilla/build_info.h"
#include "runs/service.h"
#include "sshd_fixture.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;
namespace fs = std::filesystem;

namespace {

flotilla::RunConfig config(int64_t steps, int64_t every, int dp = 1) {
  return flotilla::parse_config_toml(
      "[run]\nname = \"svc\"\nseed = 7\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\n"
      "n_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n[train]\nsteps = " +
          std::to_string(steps) +
          "\nmicro_batch = 2\nseq_len = 16\n[checkpoint]\nevery = " + std::to_string(every) +
          "\nkeep_last = 3\n[parallel]\ndp = " + std::to_string(dp) + "\ntimeout_s = 60\n",
      "test");
}

template <typename F>
bool wait_for(F pred, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

std::vector<int64_t> steps_of(const std::string& path, int64_t id) {
  const db::Database d(path);
  std::vector<int64_t> out;
  for (const auto& p : db::metric_points(d, id, "loss")) out.push_back(p.step);
  return out;
}

// Watches `run` on a thread; stop() is the CLI's Ctrl-C.
class Watching {
 public:
  explicit Watching(runs::ActiveRun& run) {
    hooks_.stop_requested = [this] { return stop_.load(); };
    hooks_.note = [this](const std::string& n) {
      std::lock_guard<std::mutex> l(m_);
      notes_ += n + "\n";
    };
    t_ = std::thread([this, &run] {
      r_ = run.watch(hooks_);
      done_ = true;
    });
  }
  ~Watching() {
    stop_ = true;
    if (t_.joinable()) t_.join();
  }
  void stop() { stop_ = true; }
  bool wait(double s) {
    const bool ok = wait_for([this] { return done_.load(); }, s);
    if (ok) t_.join();
    return ok;
  }
  const runs::WatchResult& result() const { return r_; }
  std::string notes() {
    std::lock_guard<std::mutex> l(m_);
    return notes_;
  }

 private:
  runs::WatchHooks hooks_;
  std::atomic<bool> stop_{false}, done_{false};
  std::mutex m_;
  std::string notes_;
  runs::WatchResult r_;
  std::thread t_;
};

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("runs_service_nodes");
  if (!fx.start(0)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  const std::string db_path = fx.root() + "/ws/store.db";
  fs::create_directories(fx.root() + "/ws");
  runs::ServiceOptions o;
  o.ssh.database_path = db_path;
  o.runs_root = fx.root() + "/ws/runs";
  o.worker_path = FLOTILLA_WORKER_PATH;
  o.version = FLOTILLA_VERSION_STRING;
  o.origin = "test";
  o.no_bind = true;
  o.worker_env = {"OMP_NUM_THREADS=1"};
  runs::RunService service(o);
  {
    db::Database d(db_path);
    db::SshNode n;
    n.name = "a";
    n.host = "127.0.0.1";
    n.port = fx.node(0).port;
    n.user = local_user_name();
    n.key_path = fx.client_key();
    db::add_ssh_node(d, n);
  }

  // An untrusted host key refuses the start with the trust command; no run is created.
  runs::RunRequest req;
  req.config = config(60, 20);
  req.name = "svc-node";
  req.explicit_name = true;
  req.where = runs::Placement::on_nodes({"a"});
  req.where.no_bind = true;
  {
    bool refused = false;
    try {
      service.start(req);
    } catch (const runs::Refusal& e) {
      refused =
          std::string(e.what()).find("flotilla nodes trust a --fingerprint SHA256:") != std::string::npos;
    }
    CHECK(refused);
    const db::Database d(db_path);
    CHECK(!db::find_run(d, "svc-node"));
  }
  {  // trust it in the workspace's known_hosts, as `flotilla nodes trust` does
    db::Database d(db_path);
    flotilla::remote::Session s(runs::ssh_session_options(o.ssh, db::get_ssh_node(d, "a")));
    trust_and_connect(s);
  }

  // 1. Start -> completed; checkpoints on the master; fetch one.
  int64_t first = 0;
  {
    auto run = service.start(req);
    first = run->id();
    CHECK(run->where_text() == "node a");
    Watching w(*run);
    CHECK(w.wait(180));
    CHECK_MSG(w.result().exit_code == 0, "exit %d: %s", w.result().exit_code, w.notes().c_str());
    CHECK(w.result().end.status == db::RunStatus::kCompleted);
    const auto steps = steps_of(db_path, first);
    CHECK_MSG(steps.size() == 60 && steps.front() == 1 && steps.back() == 60, "%zu steps", steps.size());
    const auto cps = service.checkpoints(first);
    CHECK_MSG(cps.size() == 3 && cps.back().step == 60, "%zu checkpoints", cps.size());
    CHECK(!cps.empty() && cps.back().where.rfind("a:", 0) == 0 && cps.back().local_dir.empty());
    const std::string got = service.fetch_checkpoint(first, 40, fx.root() + "/fetched");
    CHECK_MSG(fs::exists(fs::path(got) / "MANIFEST"), "%s", got.c_str());
    CHECK(runs::RunService::where_text(db::get_run(db::Database(db_path), first)) == "node a");
  }

  // 2. A long run on 2 ranks: a checkpoint asked from outside the watcher, a stop, then resume in
  // the same row on another layout (1 rank): the worker re-cuts the checkpoint.
  {
    runs::RunRequest r2 = req;
    r2.config = config(100000, 100000, 2);
    r2.name = "svc-node-2";
    auto run = service.start(r2);
    const int64_t id = run->id();
    {
      Watching w(*run);
      CHECK(wait_for([&] { return steps_of(db_path, id).size() >= 5; }, 90));
      service.request_checkpoint(id);
      CHECK(wait_for([&] { return !service.checkpoints(id).empty(); }, 60));
      w.stop();
      CHECK(w.wait(90));
      CHECK_MSG(w.result().exit_code == 10, "exit %d: %s", w.result().exit_code, w.notes().c_str());
    }
    CHECK(db::get_run(db::Database(db_path), id).status == db::RunStatus::kStopped);
    const int64_t at = service.checkpoints(id).back().step;
    runs::ResumeRequest rr;
    rr.layout.dp = 1;
    auto again = service.resume(id, rr);
    CHECK(again->id() == id);
    Watching w(*again);
    CHECK(wait_for([&] { return steps_of(db_path, id).size() >= static_cast<size_t>(at) + 5; }, 90));
    w.stop();
    CHECK(w.wait(90));
    const auto steps = steps_of(db_path, id);
    CHECK(std::adjacent_find(steps.begin(), steps.end()) == steps.end());
    CHECK(std::find(steps.begin(), steps.end(), at + 1) != steps.end());
    {
      const db::Run r = db::get_run(db::Database(db_path), id);
      CHECK_MSG(r.world_size && *r.world_size == 1, "world %lld",
                static_cast<long long>(r.world_size.value_or(0)));
      CHECK(flotilla::parse_config_toml(r.config_toml, "t").parallel.dp == 1);
    }

    // 3. A fork of the node run onto this machine, from its checkpoint fetched over SSH.
    runs::ForkRequest f;
    f.step = at;
    f.name = "svc-node-fork";
    f.sets = {"train.steps=" + std::to_string(at + 10)};
    auto child = service.fork(id, f);
    CHECK(child->where_text() == "this machine");
    Watching wc(*child);
    CHECK(wc.wait(120));
    CHECK_MSG(wc.result().exit_code == 0, "exit %d: %s", wc.result().exit_code, wc.notes().c_str());
    const auto cs = steps_of(db_path, child->id());
    CHECK_MSG(cs.size() == 10 && cs.front() == at + 1, "%zu steps", cs.size());
    const db::Run cr = db::get_run(db::Database(db_path), child->id());
    CHECK(cr.parent_id && *cr.parent_id == id && cr.parent_kind == "fork");

    // 4. A fork of the local fork back onto node a, on 2 ranks: its checkpoint (1 rank) is uploaded
    // to the new run's folder there and re-cut by the worker.
    runs::ForkRequest back;
    back.name = "svc-node-back";
    back.where = runs::Placement::on_nodes({"a"});
    back.where->no_bind = true;
    back.layout.dp = 2;
    back.sets = {"train.steps=" + std::to_string(at + 20)};
    auto remote_child = service.fork(child->id(), back);
    CHECK(remote_child->where_text() == "node a");
    Watching wr(*remote_child);
    CHECK(wr.wait(180));
    CHECK_MSG(wr.result().exit_code == 0, "exit %d: %s", wr.result().exit_code, wr.notes().c_str());
    const auto rs = steps_of(db_path, remote_child->id());
    CHECK_MSG(rs.size() == 10 && rs.front() == at + 11, "%zu steps from %lld", rs.size(),
              static_cast<long long>(rs.empty() ? -1 : rs.front()));
    const db::Run rb = db::get_run(db::Database(db_path), remote_child->id());
    CHECK(rb.parent_id && *rb.parent_id == child->id() && rb.run_dir.rfind("a:", 0) == 0);
    CHECK(rb.world_size.value_or(0) == 2);

    // 5. The stopped node run resumed on this machine: the same row, its newest checkpoint fetched
    // into its new folder here, the steps going on after it.
    {
      const int64_t last = service.checkpoints(id).back().step;
      runs::ResumeRequest here;
      here.where = runs::Placement::here();
      auto moved = service.resume(id, here);
      CHECK(moved->id() == id && moved->where_text() == "this machine");
      Watching wm(*moved);
      CHECK(wait_for([&] { return steps_of(db_path, id).size() >= static_cast<size_t>(last) + 5; }, 90));
      wm.stop();
      CHECK(wm.wait(90));
      CHECK_MSG(wm.result().exit_code == 10, "exit %d: %s", wm.result().exit_code, wm.notes().c_str());
      const db::Run r = db::get_run(db::Database(db_path), id);
      CHECK(r.target == "local" && r.run_dir == o.runs_root + "/svc-node-2");
      CHECK(runs::RunService::where_text(r) == "this machine");
      const auto st = steps_of(db_path, id);
      CHECK(std::adjacent_find(st.begin(), st.end()) == st.end());
      CHECK(std::find(st.begin(), st.end(), last + 1) != st.end());
    }
    // 6. ... and back onto node a, on 2 ranks (tp=2: a dp change would change the global batch the
    // checkpoint keeps): its local checkpoint uploaded and re-cut there.
    {
      const int64_t last = service.checkpoints(id).back().step;
      runs::ResumeRequest there;
      there.where = runs::Placement::on_nodes({"a"});
      there.where->no_bind = true;
      there.layout.tp = 2;
      auto moved = service.resume(id, there);
      CHECK(moved->id() == id && moved->where_text() == "node a");
      Watching wm(*moved);
      CHECK(wait_for([&] { return steps_of(db_path, id).size() >= static_cast<size_t>(last) + 5; }, 90));
      wm.stop();
      CHECK(wm.wait(90));
      CHECK_MSG(wm.result().exit_code == 10, "exit %d: %s", wm.result().exit_code, wm.notes().c_str());
      const db::Run r = db::get_run(db::Database(db_path), id);
      CHECK(r.target == "a" && r.run_dir.rfind("a:", 0) == 0 && r.world_size.value_or(0) == 2);
      const auto st = steps_of(db_path, id);
      CHECK(std::adjacent_find(st.begin(), st.end()) == st.end());
      CHECK(std::find(st.begin(), st.end(), last + 1) != st.end());
    }
  }
  return summary("test_service_nodes_ssh");
}
