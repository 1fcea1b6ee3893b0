// `flotilla run CONFIG --cluster NAME` (see run_slurm.h): the CLI's hooks around runs/slurm_run.h.
#include "app/cli/run_slurm.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>

#include "app/cli/node_session.h"
#include "db/clusters.h"
#include "db/costs.h"
#include "db/writer.h"
#include "flotilla/build_info.h"
#include "remote/session.h"
#include "runs/run_speed.h"
#include "runs/slurm_run.h"
#include "runs/worker_command.h"

namespace flotilla::cli {
namespace {

std::atomic<int> g_stop{0};
void on_stop(int sig) { g_stop = sig; }

// While alive, SIGINT/SIGTERM/SIGHUP only set g_stop (the watch cancels the job).
class StopSignals {
 public:
  StopSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
    ::sigaction(SIGHUP, &sa, &old_hup_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGHUP, &old_hup_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{}, old_hup_{};
};

void note_stderr(const std::string& text) { std::fprintf(stderr, "flotilla: %s\n", text.c_str()); }

// Watches `w` on the connected login session (Ctrl-C cancels), prints the summary, returns the exit code.
int watch_and_report(const Context& ctx, remote::Session& login, const runs::SlurmWatch& w, bool quiet) {
  runs::WatchHooks hooks;
  hooks.note = note_stderr;
  auto last = std::chrono::steady_clock::now() - std::chrono::hours(1);
  if (!quiet)
    hooks.on_record = [&](const MetricsRecord& e) {
      if (e.type != MetricsRecordType::kStep || e.rank != 0) return;
      const auto now = std::chrono::steady_clock::now();
      if (now - last < std::chrono::seconds(1) && e.step().step != w.total_steps) return;
      last = now;
      std::printf("step %lld/%lld  loss %.4f\n", static_cast<long long>(e.step().step),
                  static_cast<long long>(w.total_steps), static_cast<double>(e.step().loss));
      std::fflush(stdout);
    };
  hooks.stop_requested = [] { return g_stop.load() != 0; };
  const std::string path = database_path(ctx);
  db::Writer writer(path);
  const int exit_code = runs::watch_slurm_run(writer, login, w, hooks);
  if (!quiet) {
    db::Database reader(path);
    const db::RunSummary s = runs::run_summary(reader, w.run_id);
    std::printf("run %s %s: %lld steps, final loss %s, %s\n", w.name.c_str(), s.status.c_str(),
                static_cast<long long>(s.steps), s.final_loss ? format_number(*s.final_loss).c_str() : "-",
                format_duration(s.wall_s).c_str());
  }
  return exit_code;
}

// Connects to the cluster's login node; false (the trust command printed) when its key is not trusted.
bool connect_login(remote::Session& login, const db::SlurmCluster& cluster) {
  try {
    login.connect();
    return true;
  } catch (const remote::HostKeyError& e) {
    std::fprintf(stderr, "flotilla: %s\n", runs::login_host_key_message(cluster.name, e).c_str());
    return false;
  }
}

}  // namespace

int run_on_cluster(const Context& ctx, const ClusterRunRequest& r) {
  db::Database db = open_store(ctx, "flotilla run");
  const db::SlurmCluster cluster = db::get_cluster(db, r.cluster);
  remote::Session login(node_session_options(ctx, runs::login_node(cluster)));
  if (!connect_login(login, cluster)) return kExitRefused;
  runs::SlurmStartRequest req;
  req.config = r.config;
  req.name = r.name;
  req.budget_usd = r.budget_usd;
  req.nodes = r.nodes;
  req.tasks_per_node = r.tasks_per_node;
  req.gpus_per_node = r.gpus_per_node;
  req.time_limit = r.time_limit;
  req.partition = r.partition;
  req.account = r.account;
  req.signal_lead_s = r.signal_lead_s;
  req.auto_resume = r.auto_resume;
  req.worker_path = runs::find_worker();
  req.version = FLOTILLA_VERSION_STRING;
  StopSignals signals;
  const runs::SlurmWatch w = runs::submit_slurm_run(db, login, cluster, req, note_stderr);
  std::printf("run %s: slurm job %s on cluster %s\n", w.name.c_str(), w.job_id.c_str(), cluster.name.c_str());
  std::fflush(stdout);

  return watch_and_report(ctx, login, w, r.quiet);
}

int attach_cluster_run(const Context& ctx, const std::string& run_name, bool quiet) {
  StopSignals signals;
  db::Database db = open_store(ctx, "flotilla runs attach");
  const db::Run run = db::get_run(db, run_name);
  runs::SlurmWatch w;
  db::SlurmCluster cluster;
  if (const std::string why = runs::slurm_attach_target(db, run, w, cluster); !why.empty()) {
    note_stderr(why);
    return kExitRefused;
  }
  remote::Session login(node_session_options(ctx, runs::login_node(cluster)));
  if (!connect_login(login, cluster)) return kExitRefused;
  if (!quiet) {
    std::printf("attached to run %s: slurm job %s on cluster %s\n", w.name.c_str(), w.job_id.c_str(),
                cluster.name.c_str());
    std::fflush(stdout);
  }
  return watch_and_report(ctx, login, w, quiet);
}

int resume_cluster_run(const Context& ctx, const std::string& run_name, bool quiet) {
  StopSignals signals;
  db::Database db = open_store(ctx, "flotilla runs resume");
  const db::Run run = db::get_run(db, run_name);
  db::SlurmCluster cluster;
  if (const std::string why = runs::slurm_resume_target(db, run, cluster); !why.empty()) {
    note_stderr(why);
    return kExitRefused;
  }
  remote::Session login(node_session_options(ctx, runs::login_node(cluster)));
  if (!connect_login(login, cluster)) return kExitRefused;
  runs::SlurmWatch w;
  try {
    w = runs::resubmit_slurm_run(db, login, run, "flotilla runs resume", note_stderr);
  } catch (const Error& e) {
    if (e.code() != ExitCode::kUsage) throw;
    note_stderr(e.what());  // the old job is still in the queue: nothing was changed
    return kExitRefused;
  }
  std::printf("run %s: resumed as slurm job %s on cluster %s\n", w.name.c_str(), w.job_id.c_str(),
              cluster.name.c_str());
  std::fflush(stdout);
  return watch_and_report(ctx, login, w, quiet);
}

}  // namespace flotilla::cli
