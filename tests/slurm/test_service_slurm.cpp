// The runs service (runs/service.h) for a run on the real loopback Slurm: start through a
// Placement -> watch -> completed (queued, running, completed in the store); its checkpoints
// listed in the cluster folder over the login node and one fetched to this machine; "checkpoint
// now" refused for a Slurm job in words; a stopped 2-rank job resumed through the service in the same
// row as a new job on another layout (dp=2 -> tp=2; one needing another rank count refused),
// continuing after its checkpoint; a fork of the Slurm run onto this machine.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <thread>

#include "check.h"
#include "db/clusters.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "flotilla/build_info.h"
#include "runs/service.h"
#include "slurm_fixture.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;
namespace fs = std::filesystem;

namespace {

flotilla::RunConfig config(int64_t steps, int64_t every, int dp = 1) {
  return flotilla::parse_config_toml(
      "[run]\nname = \"svc\"\nseed = 11\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\n"
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
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pred();
}

std::vector<int64_t> steps_of(const std::string& path, int64_t id) {
  const db::Database d(path);
  std::vector<int64_t> out;
  for (const auto& p : db::metric_points(d, id, "loss")) out.push_back(p.step);
  return out;
}

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
  std::string why;
  const std::string conf = fixture_slurm_conf(why);
  if (conf.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return kSkipExit;
  }
  SshdFixture fx("service_slurm");
  if (const std::string w = start_login_node(fx, conf); !w.empty()) {
    std::printf("SKIP: %s\n", w.c_str());
    return kSkipExit;
  }
  CliWorkspace ws(fx.root());
  if (const std::string w = add_trusted_cluster(ws, fx, "flo"); !w.empty()) {
    std::printf("FAIL: %s\n", w.c_str());
    return 1;
  }
  ::setenv("HOME", (fx.root() + "/client-home").c_str(), 1);  // as the CLI runs here: no ~/.ssh/config
  runs::ServiceOptions o;
  o.ssh.database_path = ws.db();
  o.runs_root = fx.root() + "/ws/runs";
  o.worker_path = FLOTILLA_WORKER_PATH;
  o.version = FLOTILLA_VERSION_STRING;
  o.origin = "test";
  o.no_bind = true;
  o.worker_env = {"OMP_NUM_THREADS=1"};
  runs::RunService service(o);

  runs::RunRequest req;
  req.config = config(40, 20);
  req.name = "svc-slurm";
  req.explicit_name = true;
  req.where = runs::Placement::on_cluster("flo");
  req.where.time_limit = "00:10:00";
  req.where.partition = "cpu";

  // 1. Start -> completed; checkpoints in the cluster folder; fetch one; no checkpoint on request.
  int64_t id = 0;
  {
    auto run = service.start(req);
    id = run->id();
    CHECK(run->where_text().rfind("slurm cluster flo, job ", 0) == 0);
    CHECK(!run->checkpoint_refusal().empty());
    Watching w(*run);
    CHECK(w.wait(240));
    CHECK_MSG(w.result().exit_code == 0, "exit %d: %s", w.result().exit_code, w.notes().c_str());
    CHECK(w.result().end.status == db::RunStatus::kCompleted);
    const auto steps = steps_of(ws.db(), id);
    CHECK_MSG(steps.size() == 40 && steps.back() == 40, "%zu steps", steps.size());
    const auto cps = service.checkpoints(id);
    CHECK_MSG(cps.size() == 2 && cps.front().step == 20 && cps.back().step == 40, "%zu checkpoints",
              cps.size());
    CHECK(!cps.empty() && cps.back().where.rfind("flo:", 0) == 0);
    const std::string got = service.fetch_checkpoint(id, 20, fx.root() + "/fetched");
    CHECK_MSG(fs::exists(fs::path(got) / "MANIFEST"), "%s", got.c_str());
    const db::Run r = db::get_run(db::Database(ws.db()), id);
    CHECK(runs::RunService::where_text(r) == "slurm cluster flo");
    const runs::Abilities a = service.abilities(r);
    CHECK(!a.checkpoint.empty() && !a.resume.empty());
    bool refused = false;
    try {
      service.request_checkpoint(id);
    } catch (const runs::Refusal& e) {
      refused = std::string(e.what()).find("on its schedule") != std::string::npos;
    }
    CHECK(refused);
  }

  // 2. A fork of the Slurm run onto this machine from its step-20 checkpoint.
  {
    runs::ForkRequest f;
    f.step = 20;
    f.name = "svc-slurm-fork";
    auto child = service.fork(id, f);
    Watching w(*child);
    CHECK(w.wait(120));
    CHECK_MSG(w.result().exit_code == 0, "exit %d: %s", w.result().exit_code, w.notes().c_str());
    const auto cs = steps_of(ws.db(), child->id());
    CHECK_MSG(cs.size() == 20 && cs.front() == 21, "%zu steps", cs.size());
  }

  // 3. A stop (scancel: checkpoint, exit 10), then resume in the same row as a new job.
  {
    runs::RunRequest r2 = req;
    r2.config = config(100000, 100000, 2);
    r2.name = "svc-slurm-2";
    r2.where.slurm_nodes = 2;
    auto run = service.start(r2);
    const int64_t id2 = run->id();
    {
      Watching w(*run);
      CHECK(wait_for([&] { return steps_of(ws.db(), id2).size() >= 5; }, 120));
      w.stop();
      CHECK(w.wait(180));
      CHECK_MSG(w.result().end.status == db::RunStatus::kStopped, "%s: %s",
                db::to_string(w.result().end.status), w.notes().c_str());
    }
    const std::string job1 = db::find_slurm_job(db::Database(ws.db()), id2)->job_id;
    const auto cps = service.checkpoints(id2);
    CHECK(!cps.empty());
    const int64_t at = cps.empty() ? 0 : cps.back().step;
    // On another layout with the job's 2 ranks (dp=2 -> tp=2); one needing 1 rank is refused first.
    runs::ResumeRequest one;
    one.layout.dp = 1;
    bool refused = false;
    try {
      service.resume(id2, one);
    } catch (const runs::Refusal& e) {
      refused = std::string(e.what()).find("= 2 rank(s)") != std::string::npos;
    }
    CHECK(refused);
    runs::ResumeRequest tp2;
    tp2.layout.dp = 1;
    tp2.layout.tp = 2;
    auto again = service.resume(id2, tp2);
    CHECK(again->id() == id2);
    CHECK(db::find_slurm_job(db::Database(ws.db()), id2)->job_id != job1);
    Watching w(*again);
    CHECK(wait_for([&] { return steps_of(ws.db(), id2).size() >= static_cast<size_t>(at) + 5; }, 120));
    w.stop();
    CHECK(w.wait(180));
    const auto steps = steps_of(ws.db(), id2);
    CHECK(std::adjacent_find(steps.begin(), steps.end()) == steps.end());
    CHECK(std::find(steps.begin(), steps.end(), at + 1) != steps.end());
    const db::Database d(ws.db());
    bool recut = false;
    for (const db::EventInfo& e : db::list_events(d, id2))
      recut |= e.message.find("re-cut to this layout") != std::string::npos;
    CHECK(recut);
    CHECK(flotilla::parse_config_toml(db::get_run(d, id2).config_toml, "t").parallel.tp == 2);
  }
  return summary("test_service_slurm");
}
