// runs::place_mtbi on a crafted store (runs/interruptions.h): a place never preempted gets its
// stated prior (spot 24 h, on-demand and this machine 720 h), observed hours lengthen it, each
// preemption recorded the way the runs layer records one (a status change running -> preempted,
// which closes the run's accruals) divides it; a preemption counts on the node where the run was
// running, not on the node a recovery moved it to; several nodes add their rates; a Slurm
// cluster and one partition of it; and the file and --set the scheduler passes to the worker.
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "check.h"
#include "db/clusters.h"
#include "db/costs.h"
#include "db/database.h"
#include "db/run_store.h"
#include "engine/train/checkpoint_interval.h"
#include "runs/interruptions.h"

using namespace flotilla;

namespace {

constexpr double H = 3600;
constexpr double T0 = 1.7e9;

int64_t run_on(db::Database& d, const std::string& name, const std::vector<int64_t>& nodes) {
  db::NewRun r;
  r.name = name;
  r.created_at = T0;
  const int64_t id = db::create_run(d, r);
  for (int64_t n : nodes) db::attach_node(d, id, n, 1);
  return id;
}

}  // namespace

int main() {
  namespace fs = std::filesystem;
  const std::string dir = std::string(FLOTILLA_TEST_TMP) + "/place_mtbi_" + std::to_string(getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  db::Database d(dir + "/store.db");
  const int64_t local = db::ensure_node(d, "local", "local");
  const int64_t b = db::ensure_node(d, "b", "ssh");
  const int64_t c = db::ensure_node(d, "c", "ssh");
  db::NodePricing spot;
  spot.spot = true;
  spot.usd_per_hour = 1.0;
  db::set_node_pricing(d, b, spot);
  const double now = T0 + 100 * H;

  // Prior only: nothing ran anywhere.
  runs::Mtbi m = runs::place_mtbi(d, "node:b", now);
  CHECK_NEAR(m.seconds, 24 * H, 1e-6);
  CHECK(m.preemptions == 0 && m.observed_hours == 0);
  CHECK_MSG(m.basis == "node b: 0 preemptions in 0.0 h (spot prior: 1 per 24 h)", "%s", m.basis.c_str());
  CHECK_NEAR(runs::place_mtbi(d, "node:c", now).seconds, 720 * H, 1e-6);
  CHECK_NEAR(runs::place_mtbi(d, "local", now).seconds, 720 * H, 1e-6);
  CHECK_NEAR(runs::place_mtbi(d, "node:unknown", now).seconds, 720 * H, 1e-6);  // not stored: on-demand prior
  CHECK(runs::place_mtbi(d, "elsewhere", now).seconds == 0);
  CHECK(runs::place_mtbi(d, "nodes:", now).seconds == 0);

  // A calm local run of 40 h: (40 + 720) / 1.
  const int64_t r1 = run_on(d, "calm", {local});
  db::set_status(d, r1, db::RunStatus::kRunning, T0);
  db::set_status(d, r1, db::RunStatus::kCompleted, T0 + 40 * H, "done");
  m = runs::place_mtbi(d, "local", now);
  CHECK_NEAR(m.observed_hours, 40, 1e-9);
  CHECK_NEAR(m.seconds, 760 * H, 1e-3);

  // On spot node b: running 10 h, preempted, restarted 1 h later, preempted again after 6 h.
  // (16 + 24) / (2 + 1) = 13.33 h.
  const int64_t r2 = run_on(d, "spot-run", {b});
  db::set_status(d, r2, db::RunStatus::kRunning, T0);
  db::set_status(d, r2, db::RunStatus::kPreempted, T0 + 10 * H, "preempted by the system");
  db::set_status(d, r2, db::RunStatus::kRunning, T0 + 11 * H);
  db::set_status(d, r2, db::RunStatus::kPreempted, T0 + 17 * H, "preempted by the system");
  m = runs::place_mtbi(d, "node:b", now);
  CHECK(m.preemptions == 2);
  CHECK_NEAR(m.observed_hours, 16, 1e-9);
  CHECK_NEAR(m.seconds, 40.0 / 3 * H, 1e-3);
  CHECK_MSG(m.basis == "node b: 2 preemptions in 16 h (spot prior: 1 per 24 h)", "%s", m.basis.c_str());
  // A user's stop is no interruption, and a run still running counts its hours up to now.
  db::set_status(d, r2, db::RunStatus::kRunning, T0 + 18 * H);
  db::set_status(d, r2, db::RunStatus::kStopped, T0 + 20 * H, "stopped on request");
  const int64_t r3 = run_on(d, "open-run", {b});
  db::set_status(d, r3, db::RunStatus::kRunning, now - 4 * H);
  m = runs::place_mtbi(d, "node:b", now);
  CHECK(m.preemptions == 2);
  CHECK_NEAR(m.observed_hours, 22, 1e-9);
  CHECK_NEAR(m.seconds, 46.0 / 3 * H, 1e-3);

  // A recovery moves a preempted run from c to ... c's preemption stays on c: the run ran on c
  // when it was preempted, then on local only (c detached).
  const int64_t r4 = run_on(d, "moved", {c});
  db::set_status(d, r4, db::RunStatus::kRunning, T0);
  db::set_status(d, r4, db::RunStatus::kPreempted, T0 + 5 * H, "preempted by the system");
  db::detach_node(d, r4, c);
  db::attach_node(d, r4, local, 1);
  db::set_status(d, r4, db::RunStatus::kRunning, T0 + 6 * H);
  db::set_status(d, r4, db::RunStatus::kCompleted, T0 + 8 * H);
  const runs::Mtbi on_c = runs::place_mtbi(d, "node:c", now);
  CHECK(on_c.preemptions == 1);
  CHECK_NEAR(on_c.seconds, (5 + 720) / 2.0 * H, 1e-3);
  m = runs::place_mtbi(d, "local", now);
  CHECK(m.preemptions == 0);
  CHECK_NEAR(m.observed_hours, 42, 1e-9);

  // Several nodes: any one interrupts the run, the rates add.
  const runs::Mtbi on_b = runs::place_mtbi(d, "node:b", now);
  const runs::Mtbi both = runs::place_mtbi(d, "nodes:b,c", now);
  CHECK_NEAR(both.seconds, 1.0 / (1.0 / on_b.seconds + 1.0 / on_c.seconds), 1e-6);
  CHECK(both.preemptions == 3);
  CHECK(both.basis.find("node b: ") == 0 && both.basis.find("; node c: ") != std::string::npos);

  // A Slurm cluster: a job on partition gpu requeued once after 30 h; one on cpu never.
  db::SlurmCluster hpc;
  hpc.name = "hpc";
  hpc.login_host = "login";
  const int64_t cl = db::add_cluster(d, hpc);
  const auto slurm_run = [&](const std::string& name, const std::string& partition) {
    const int64_t id = run_on(d, name, {});
    db::SlurmJob j;
    j.run_id = id;
    j.cluster_id = cl;
    j.job_id = name;
    j.partition = partition;
    j.run_dir = "/shared/" + name;
    j.nodes = 1;
    j.submitted_at = T0;
    db::add_slurm_job(d, j);
    return id;
  };
  const int64_t g = slurm_run("on-gpu", "gpu");
  db::set_status(d, g, db::RunStatus::kRunning, T0);
  db::set_status(d, g, db::RunStatus::kPreempted, T0 + 30 * H, "slurm job requeued");
  db::set_status(d, g, db::RunStatus::kQueued, T0 + 30 * H + 60);
  db::set_status(d, g, db::RunStatus::kRunning, T0 + 31 * H);
  db::set_status(d, g, db::RunStatus::kCompleted, T0 + 41 * H);
  const int64_t p = slurm_run("on-cpu", "cpu");
  db::set_status(d, p, db::RunStatus::kRunning, T0);
  db::set_status(d, p, db::RunStatus::kCompleted, T0 + 80 * H);
  m = runs::place_mtbi(d, "cluster:hpc/gpu", now);
  CHECK(m.preemptions == 1);
  CHECK_NEAR(m.seconds, (40 + 720) / 2.0 * H, 1e-3);
  CHECK(m.basis.find("cluster hpc (partition gpu): 1 preemption in 40 h") == 0);
  m = runs::place_mtbi(d, "cluster:hpc/cpu", now);
  CHECK(m.preemptions == 0);
  CHECK_NEAR(m.seconds, 800 * H, 1e-3);
  m = runs::place_mtbi(d, "cluster:hpc", now);
  CHECK(m.preemptions == 1);
  CHECK_NEAR(m.seconds, (120 + 720) / 2.0 * H, 1e-3);
  CHECK_NEAR(runs::place_mtbi(d, "cluster:other", now).seconds, 720 * H, 1e-6);

  // What the scheduler passes: --set at start, the file while the run goes on.
  CHECK(runs::mtbi_override(on_b) == "checkpoint.mtbi_s=55200");
  const std::string run_dir = dir + "/run";
  fs::create_directories(run_dir);
  CHECK(runs::write_mtbi_file(run_dir, on_b));
  const auto note = read_mtbi_file(run_dir);
  CHECK(note && std::abs(note->mtbi_s - on_b.seconds) < 1e-6 && note->source == on_b.basis);
  CHECK(!runs::write_mtbi_file(run_dir, runs::Mtbi{}));
  CHECK(!runs::write_mtbi_file(dir + "/missing", on_b));
  return flotilla_test::summary("place_mtbi");
}
