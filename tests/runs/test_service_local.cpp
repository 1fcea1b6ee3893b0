// The runs service (runs/service.h) for a run on this machine, with the real worker and a real
// SQLite file: start -> watch -> completed, every step stored once; its checkpoints listed from
// disk; a stop through the hooks, then resume in the same row continuing at the checkpoint's step;
// a fork from a checkpoint as a new run recorded as the parent's fork; a checkpoint asked of a run
// watched elsewhere; what a run can do (abilities) in words; the refusals that change nothing.
#include <algorithm>
#include <thread>

#include "db/run_records.h"
#include "engine/core/error.h"
#include "runs/service.h"
#include "runs_fixture.h"

using namespace runs_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

runs::ServiceOptions options_for(const std::string& dir) {
  runs::ServiceOptions o;
  o.ssh.database_path = dir + "/runs.db";
  o.runs_root = dir + "/runs";
  o.worker_path = FLOTILLA_WORKER_PATH;
  o.origin = "test";
  o.stop_with_parent = true;
  o.worker_env = {"OMP_NUM_THREADS=1"};
  o.no_bind = true;
  return o;
}

// Watches `run` on a thread; stop() asks for the stop the CLI's Ctrl-C asks for.
class ServiceWatcher {
 public:
  explicit ServiceWatcher(runs::ActiveRun& run) {
    hooks_.note = [this](const std::string& n) {
      std::lock_guard<std::mutex> lock(mutex_);
      notes_ += n + "\n";
    };
    hooks_.stop_requested = [this] { return stop_.load(); };
    hooks_.kill_requested = [this] { return kill_.load(); };
    thread_ = std::thread([this, &run] {
      out_ = run.watch(hooks_);
      done_ = true;
    });
  }
  ~ServiceWatcher() {
    if (thread_.joinable()) {
      kill_ = true;
      thread_.join();
    }
  }
  void stop() { stop_ = true; }
  bool wait(double seconds) {
    const bool ended = wait_until([this] { return done_.load(); }, seconds);
    if (ended) thread_.join();
    return ended;
  }
  const runs::WatchResult& result() const { return out_; }
  std::string notes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return notes_;
  }

 private:
  runs::WatchHooks hooks_;
  std::atomic<bool> stop_{false}, kill_{false}, done_{false};
  std::mutex mutex_;
  std::string notes_;
  runs::WatchResult out_;
  std::thread thread_;
};

runs::RunRequest request(const std::string& toml, const std::string& name) {
  runs::RunRequest r;
  r.config = config_of(toml);
  r.name = name;
  r.explicit_name = true;
  return r;
}

void starts_watches_and_lists_checkpoints(runs::RunService& service) {
  auto run = service.start(request(tiny_config(40, "", 20), "svc-complete"));
  CHECK(run->id() > 0 && run->name() == "svc-complete");
  CHECK(run->where_text() == "this machine");
  CHECK(run->checkpoint_refusal().empty());
  ServiceWatcher w(*run);
  CHECK(w.wait(120));
  CHECK_MSG(w.result().exit_code == 0, "exit %d: %s", w.result().exit_code, w.notes().c_str());
  CHECK(w.result().end.status == db::RunStatus::kCompleted && w.result().recorded);
  const std::string db_path = service.options().ssh.database_path;
  CHECK(stored(db_path, run->id()).status == db::RunStatus::kCompleted);
  CHECK(steps_stored(db_path, run->id()) == 40);
  CHECK(w.result().committed_rows > 0);
  const auto cps = service.checkpoints(run->id());
  CHECK_MSG(cps.size() == 2 && cps[0].step == 20 && cps[1].step == 40, "%zu checkpoints", cps.size());
  CHECK(!cps[1].local_dir.empty() && fs::exists(fs::path(cps[1].local_dir) / "MANIFEST"));
  // A local checkpoint is fetched as itself; a step it does not have is refused naming the ones it has.
  CHECK(service.fetch_checkpoint(run->id(), 20) == cps[0].local_dir);
  bool refused = false;
  try {
    service.fetch_checkpoint(run->id(), 30);
  } catch (const runs::Refusal& e) {
    refused = std::string(e.what()).find("(it has 20, 40)") != std::string::npos;
  }
  CHECK(refused);
  // What a completed run can do, without the caller knowing its kind.
  const runs::Abilities a = service.abilities(stored(db_path, run->id()));
  CHECK(!a.resume.empty() && !a.attach.empty() && !a.checkpoint.empty() && a.remove.empty());
  CHECK(runs::RunService::where_text(stored(db_path, run->id())) == "this machine");
  bool attach_refused = false;
  try {
    service.attach(run->id());
  } catch (const runs::Refusal& e) {
    attach_refused = std::string(e.what()).find("no live worker") != std::string::npos;
  }
  CHECK(attach_refused);
}

int64_t stopped_run(runs::RunService& service, const std::string& name, const std::string& extra) {
  auto run = service.start(request(tiny_config(100000, extra, 100000), name));
  ServiceWatcher w(*run);
  const std::string db_path = service.options().ssh.database_path;
  CHECK(wait_until([&] { return steps_stored(db_path, run->id()) >= 5; }, 90));
  // A run watched by another thread (another process, for the CLI's `runs checkpoint`) is asked
  // for a checkpoint through the service.
  service.request_checkpoint(run->id());
  CHECK(wait_until([&] { return !service.checkpoints(run->id()).empty(); }, 60));
  w.stop();
  CHECK(w.wait(90));
  CHECK_MSG(w.result().exit_code == 10, "exit %d: %s", w.result().exit_code, w.notes().c_str());
  CHECK(stored(db_path, run->id()).status == db::RunStatus::kStopped);
  return run->id();
}

void resumes_in_the_same_row(runs::RunService& service) {
  const std::string db_path = service.options().ssh.database_path;
  const int64_t id = stopped_run(service, "svc-resume", "");
  const int64_t at = service.checkpoints(id).back().step;
  CHECK(service.abilities(stored(db_path, id)).resume.empty());
  // Change its length so the resumed worker ends soon: the stored config file says 100000 steps;
  // the test stops it again once it has gone on past the checkpoint.
  auto run = service.resume(id, {});
  CHECK(run->id() == id);
  ServiceWatcher w(*run);
  CHECK(wait_until([&] { return stored(db_path, id).status == db::RunStatus::kRunning; }, 30));
  CHECK(wait_until([&] { return steps_stored(db_path, id) >= at + 5; }, 90));
  // Resuming a run that is running is refused with the way to watch it; nothing changes.
  bool refused = false;
  try {
    service.resume(id, {});
  } catch (const runs::Refusal& e) {
    refused = std::string(e.what()).find("running already") != std::string::npos;
  }
  CHECK(refused);
  w.stop();
  CHECK(w.wait(90));
  CHECK(stored(db_path, id).status == db::RunStatus::kStopped);
  // It went on from the checkpoint: the first step after the resume is at + 1, none is stored twice.
  const db::Database d(db_path);
  const auto loss = db::metric_points(d, id, "loss");
  std::vector<int64_t> steps;
  for (const auto& p : loss) steps.push_back(static_cast<int64_t>(p.step));
  CHECK(std::adjacent_find(steps.begin(), steps.end()) == steps.end());
  CHECK(std::find(steps.begin(), steps.end(), at + 1) != steps.end());
}

// A run saved by 2 ranks (dp=2) continues on 1: the worker re-cuts its checkpoint (d32-reshard);
// the service passes the layout as --set parallel.dp=1 and launches one rank.
void resumes_on_another_layout(runs::RunService& service) {
  const std::string db_path = service.options().ssh.database_path;
  const int64_t id = stopped_run(service, "svc-layout", "[parallel]\ndp = 2\n");
  CHECK(stored(db_path, id).world_size.value_or(0) == 2);
  const int64_t at = service.checkpoints(id).back().step;
  runs::ResumeRequest r;
  r.layout.dp = 1;
  auto run = service.resume(id, r);
  ServiceWatcher w(*run);
  CHECK(wait_until([&] { return steps_stored(db_path, id) >= at + 5; }, 90));
  w.stop();
  CHECK(w.wait(90));
  CHECK_MSG(w.result().exit_code == 10, "exit %d: %s", w.result().exit_code, w.notes().c_str());
  const db::Run after = stored(db_path, id);
  CHECK_MSG(after.world_size.value_or(0) == 1, "world %lld",
            static_cast<long long>(after.world_size.value_or(0)));
  const db::Database d(db_path);
  std::vector<int64_t> steps;
  for (const auto& p : db::metric_points(d, id, "loss")) steps.push_back(p.step);
  CHECK(std::adjacent_find(steps.begin(), steps.end()) == steps.end());
  CHECK(std::find(steps.begin(), steps.end(), at + 1) != steps.end());
  // The worker said it re-cut the checkpoint from 2 ranks to 1 (its own event).
  bool recut = false;
  for (const db::EventInfo& e : db::list_events(d, id))
    if (e.message.find("has 2 rank(s), this run has 1") != std::string::npos &&
        e.message.find("re-cut to this layout") != std::string::npos)
      recut = true;
  CHECK(recut);
}

void forks_from_a_checkpoint(runs::RunService& service) {
  const std::string db_path = service.options().ssh.database_path;
  const int64_t parent = stopped_run(service, "svc-parent", "");
  const auto cps = service.checkpoints(parent);
  CHECK(!cps.empty());
  runs::ForkRequest f;
  f.step = cps.front().step;
  f.name = "svc-child";
  f.sets = {"train.steps=" + std::to_string(cps.front().step + 10)};
  auto child = service.fork(parent, f);
  CHECK(child->id() != parent && child->name() == "svc-child");
  ServiceWatcher w(*child);
  CHECK(w.wait(120));
  CHECK_MSG(w.result().exit_code == 0, "exit %d: %s", w.result().exit_code, w.notes().c_str());
  const db::Run r = stored(db_path, child->id());
  CHECK(r.parent_id && *r.parent_id == parent && r.parent_kind == "fork");
  // It started at the checkpoint: 10 steps stored, the first one after the checkpoint's step.
  const db::Database d(db_path);
  const auto loss = db::metric_points(d, child->id(), "loss");
  CHECK_MSG(loss.size() == 10 && static_cast<int64_t>(loss.front().step) == cps.front().step + 1, "%zu steps",
            loss.size());
}

void bad_names_are_refused_before_anything(runs::RunService& service) {
  bool refused = false;
  try {
    service.start(request(tiny_config(10), "../escape"));
  } catch (const flotilla::Error& e) {
    refused = e.code() == flotilla::ExitCode::kConfig;
  }
  CHECK(refused);
  const db::Database d(service.options().ssh.database_path);
  CHECK(!db::find_run(d, "../escape"));
}

}  // namespace

int main() {
  const std::string dir = scratch("service_local");
  runs::RunService service(options_for(dir));
  { db::Database create(service.options().ssh.database_path); }
  starts_watches_and_lists_checkpoints(service);
  bad_names_are_refused_before_anything(service);
  resumes_in_the_same_row(service);
  forks_from_a_checkpoint(service);
  resumes_on_another_layout(service);
  return flotilla_test::summary("test_service_local");
}
