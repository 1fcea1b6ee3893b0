// Runs on Slurm clusters: submit and watch (see slurm_run.h for the folder and status design).
#include "runs/slurm_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "db/errors.h"
#include "db/ingest.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "remote/deploy.h"
#include "remote/remote_run.h"
#include "remote/slurm_cluster.h"
#include "remote/slurm_script.h"
#include "runs/node_models.h"
#include "runs/node_run.h"
#include "runs/place.h"
#include "runs/pricing.h"
#include "runs/run_setup.h"
#include "runs/run_status.h"
#include "runs/slurm_login.h"

namespace flotilla::runs {

using detail::on_login;

namespace {

using Clock = std::chrono::steady_clock;

// The cluster folder's name and the job name: the run name made safe, plus the store id.
std::string safe_id(const std::string& name, const std::string& id) {
  std::string out;
  for (char c : name) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
                    c == '_' || c == '-';
    out.push_back(ok ? c : '_');
  }
  while (!out.empty() && (out.front() == '-' || out.front() == '.')) out.erase(out.begin());
  if (out.size() > 40) out.resize(40);
  return (out.empty() ? std::string("run") : out) + "-" + id;
}

std::string job_name_for(const std::string& rid) {
  std::string name = "flotilla-" + rid;
  if (name.size() > 64) name.resize(64);
  return name;
}

// The spec of a request on `cluster` with `tasks` tasks per node; the paths are the caller's.
remote::BatchSpec batch_spec_for(const db::SlurmCluster& cluster, const SlurmStartRequest& req, int tasks) {
  remote::BatchSpec spec;
  spec.partition = req.partition.empty() ? cluster.partition : req.partition;
  spec.account = req.account.empty() ? cluster.account : req.account;
  spec.nodes = req.nodes;
  spec.tasks_per_node = tasks;
  spec.gpus_per_node = req.gpus_per_node;
  spec.time_limit = req.time_limit;
  spec.signal_lead_s = req.signal_lead_s;
  spec.requeue = req.auto_resume;
  return spec;
}

std::string usd(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "$%.4g", v);
  return buf;
}


}  // namespace

SlurmPrice slurm_price(const std::optional<db::PartitionPrice>& price, int nodes, int gpus_per_node,
                       int tasks_per_node) {
  SlurmPrice p;
  if (!price) return p;
  if (gpus_per_node > 0 && price->usd_per_gpu_hour) {
    const int gpus = nodes * gpus_per_node;
    p.usd_per_hour = gpus * *price->usd_per_gpu_hour;
    p.source = "partition " + price->partition + ": " + std::to_string(gpus) + " GPU(s) x " +
               usd(*price->usd_per_gpu_hour) + "/GPU-h";
  } else if (gpus_per_node == 0 && price->usd_per_cpu_hour) {
    const int cpus = nodes * tasks_per_node;
    p.usd_per_hour = cpus * *price->usd_per_cpu_hour;
    p.source = "partition " + price->partition + ": " + std::to_string(cpus) + " CPU task(s) x " +
               usd(*price->usd_per_cpu_hour) + "/CPU-h";
  }
  return p;
}

AllocatedTres parse_alloc_tres(const std::string& tres) {
  int64_t cpus = 0, gpus = 0, typed_gpus = 0;
  bool untyped = false;
  for (size_t at = 0; at < tres.size();) {
    size_t end = tres.find(',', at);
    if (end == std::string::npos) end = tres.size();
    const std::string item = tres.substr(at, end - at);
    at = end + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos || value.size() > 9) continue;
    const int64_t n = std::atoll(value.c_str());
    if (key == "cpu") cpus = n;
    if (key == "gres/gpu") {
      gpus = n;
      untyped = true;
    } else if (key.rfind("gres/gpu:", 0) == 0) {
      typed_gpus += n;
    }
  }
  if (!untyped) gpus = typed_gpus;  // "gres/gpu=8,gres/gpu:a100=8" counts 8, not 16
  return {cpus, gpus};
}

std::optional<SlurmPrice> slurm_price_allocated(const std::optional<db::PartitionPrice>& price,
                                                const std::string& tres, bool gpu_job) {
  if (!price) return std::nullopt;
  const auto [cpus, gpus] = parse_alloc_tres(tres);
  SlurmPrice p;
  if (gpu_job && gpus > 0 && price->usd_per_gpu_hour) {
    p.usd_per_hour = static_cast<double>(gpus) * *price->usd_per_gpu_hour;
    p.source = "partition " + price->partition + ": " + std::to_string(gpus) + " allocated GPU(s) x " +
               usd(*price->usd_per_gpu_hour) + "/GPU-h";
  } else if (!gpu_job && cpus > 0 && price->usd_per_cpu_hour) {
    p.usd_per_hour = static_cast<double>(cpus) * *price->usd_per_cpu_hour;
    p.source = "partition " + price->partition + ": " + std::to_string(cpus) + " allocated CPU(s) x " +
               usd(*price->usd_per_cpu_hour) + "/CPU-h";
  } else {
    return std::nullopt;
  }
  return p;
}

namespace {
// "budget but partition ... has no price: <the command that prices it>".
std::string unpriced_budget(const std::string& cluster, const std::string& partition) {
  return "budget but partition '" + (partition.empty() ? std::string("(default)") : partition) + "' of cluster " +
         cluster + " has no price: flotilla clusters price " + cluster + " " +
         (partition.empty() ? std::string("PARTITION") : partition) + " --gpu-hour USD (or --cpu-hour USD)";
}
}  // namespace

SlurmPreview preview_slurm_script(const db::SlurmCluster& cluster, const SlurmStartRequest& req,
                                  const std::optional<db::PartitionPrice>& price) {
  SlurmPreview out;
  int tasks = 0;
  try {
    tasks = ranks_per_node(req.config, req.nodes, req.tasks_per_node);
  } catch (const Error& e) {
    out.problems.push_back(e.what());
    tasks = std::max(1, req.tasks_per_node.value_or(1));
  }
  remote::BatchSpec spec = batch_spec_for(cluster, req, tasks);
  out.partition = spec.partition;
  out.account = spec.account;
  out.tasks_per_node = tasks;
  out.price = slurm_price(price, req.nodes, req.gpus_per_node, tasks);
  if (limits_of(req.config, req.budget_usd).max_usd && out.price.usd_per_hour <= 0)
    out.problems.push_back("the run has a " + unpriced_budget(cluster.name, spec.partition));
  // Stand-ins the validator accepts, replaced by the words the user reads after generation.
  const std::string home = "/flotilla-preview-home";
  const std::string rid = safe_id(req.name, "ID");
  spec.job_name = job_name_for(rid);
  spec.run_dir = home + "/.flotilla/runs/" + rid;
  spec.worker = home + "/.flotilla/bin/" + req.version + "-HASH/flotilla-worker";
  spec.config = spec.run_dir + "/run.toml";
  for (std::string& p : remote::validate_batch_spec(spec)) out.problems.push_back(std::move(p));
  if (!out.problems.empty()) return out;
  std::string script = remote::batch_script(spec);
  for (size_t at = script.find(home); at != std::string::npos; at = script.find(home, at + 1))
    script.replace(at, home.size(), "~");
  if (const size_t eol = script.find('\n'); eol != std::string::npos)
    script.insert(eol + 1,
                  "# Preview: \"~\" is your home on the login node; ID (the run's number) and HASH (the\n"
                  "# deployed worker's build) are known when the run is submitted.\n");
  out.script = std::move(script);
  return out;
}

SlurmWatch submit_slurm_run(db::Database& db, remote::Session& login, const db::SlurmCluster& cluster,
                            const SlurmStartRequest& req, const Note& note) {
  check_new_run_name(req.name);  // before any row, upload or job
  const int tasks = ranks_per_node(req.config, req.nodes, req.tasks_per_node);
  RunConfig config = req.config;
  config.run.name = req.name;
  if (req.max_restarts) config.run.max_restarts = *req.max_restarts;
  // A Hub name: config.json here for the shape, pinned to its commit; the cluster gets the weights.
  const std::string asked = config.model.init_from;
  resolve_model_source(config);
  validate_run_config(config, tasks * req.nodes);
  check_remote_write_paths(config, "cluster " + cluster.name);
  if (note && config.model.init_from != asked)
    note("model.init_from " + asked + " is " + config.model.init_from +
         " (its config.json read here; the cluster loads it from its own Hugging Face cache, or downloads it on "
         "its login node)");

  remote::BatchSpec spec = batch_spec_for(cluster, req, tasks);
  // The user's fields (partition, account, time, lead) are checked before the row exists. The run
  // dir, worker and config paths are only known after it, so valid stand-ins take their place
  // here; the full spec is generated (and checked) once they are known.
  spec.job_name = "flotilla-run";
  spec.run_dir = "/placeholder";
  spec.worker = "/placeholder";
  spec.config = "/placeholder";
  if (const auto problems = remote::validate_batch_spec(spec); !problems.empty()) {
    std::string m = "slurm run: ";
    for (size_t i = 0; i < problems.size(); ++i) m += (i ? "; " : "") + problems[i];
    throw Error(ExitCode::kUsage, m);
  }

  const RunLimits limits = limits_of(config, req.budget_usd);
  const SlurmPrice price =
      slurm_price(db::partition_price(db, cluster.id, spec.partition), req.nodes, req.gpus_per_node, tasks);
  db::NewRun nr;
  nr.name = req.name;
  nr.config_toml = config_to_toml(config);
  nr.config_json = config_to_json(config, -1);
  nr.budget_usd = limits.max_usd;
  nr.budget_warn_fraction = limits.warn_fraction;
  nr.max_hours = limits.max_hours;
  nr.target = "slurm:" + cluster.name;
  int64_t run_id = 0;
  db::write_tx(db, [&] {
    run_id = db::create_run(db, nr);
    if (limits.max_usd && price.usd_per_hour <= 0)
      throw db::DbError(db::DbErrorKind::kInvalid,
                        "run " + req.name + " has a " + unpriced_budget(cluster.name, spec.partition));
    db::set_run_price(db, run_id, price.usd_per_hour, price.source, {});
  });
  const std::string rid = safe_id(req.name, std::to_string(run_id));
  // From here on the run is in the store: a failure before its job exists (a deploy, an upload or
  // sbatch refused) ends it as failed with the reason, instead of leaving it 'created' for good.
  std::string job_id, dir;
  try {
    remote::DeployOptions deploy;
    deploy.worker_path = req.worker_path;
    deploy.version = req.version;
    const remote::DeployResult d = remote::deploy_worker(login, deploy);
    if (note)
      note("cluster " + cluster.name + ": worker " + d.dir + " (" + (d.reused ? "reused" : "uploaded") + ")");
    const std::string config_path = remote::upload_run_config(login, rid, config_to_toml(config));
    dir = remote::remote_run_dir(login, rid);
    // Models by name: fetched on the login node, into the cache the job's tasks share (they inherit
    // the login session's environment: sbatch --export=ALL); compute nodes often have no network.
    for (const std::string& line :
         fetch_models({{&login, d.worker, "cluster " + cluster.name + "'s login node"}}, rid, config, note,
                      req.cancelled))
      db::add_event(db, run_id, db::now_seconds(), "model", "info", line);
    spec.job_name = job_name_for(rid);
    spec.run_dir = dir;
    spec.worker = d.worker;
    spec.config = config_path;
    const std::string script = remote::batch_script(spec);
    remote::write_remote_file(login, dir + "/job.sh", script);
    job_id = remote::submit_batch(login, dir + "/job.sh");
    if (note)
      note("cluster " + cluster.name + ": submitted job " + job_id + " (" + std::to_string(req.nodes) +
           " node(s) x " + std::to_string(tasks) + " task(s), time limit " + req.time_limit + ")");

    db::SlurmJob job;
    job.run_id = run_id;
    job.cluster_id = cluster.id;
    job.job_id = job_id;
    job.partition = spec.partition;
    job.run_dir = dir;
    job.state = "PENDING";
    job.nodes = req.nodes;
    job.gpus_per_node = req.gpus_per_node;
    job.tasks_per_node = tasks;
    job.script = script;
    db::write_tx(db, [&] {
      db::add_slurm_job(db, job);
      record_queued(db, run_id, 0,
                     req.origin + ": slurm job " + job_id + " on cluster " + cluster.name);
    });
  } catch (const std::exception& e) {
    if (job_id.empty()) {
      RunEnd end;
      end.status = db::RunStatus::kFailed;
      end.note = std::string("submitting to cluster ") + cluster.name + " failed: " + e.what();
      end.reason = req.origin + ": " + end.note;
      end.exit_code = -1;
      try {
        record_end(db, run_id, end);
      } catch (const std::exception&) {
        // The original error says more than a second one would.
      }
    }
    throw;
  }

  SlurmWatch w;
  w.run_id = run_id;
  w.name = req.name;
  w.rid = rid;
  w.job_id = job_id;
  w.run_dir = dir;
  w.cluster = cluster.name;
  w.total_steps = config.train.steps;
  return w;
}

db::SshNode login_node(const db::SlurmCluster& c) {
  db::SshNode n;
  n.name = c.name;
  n.host = c.login_host;
  n.port = c.port;
  n.user = c.user;
  n.key_path = c.key_path;
  return n;
}

std::string login_host_key_message(const std::string& cluster, const remote::HostKeyError& e) {
  std::string m = "cluster " + cluster + ": login node: " + e.what();
  if (e.problem() == remote::HostKeyProblem::kUnknown && !e.presented().empty())
    m += "\nAfter verifying it, run:\n  flotilla clusters trust " + cluster + " --fingerprint " + e.presented();
  return m;
}

bool is_slurm_run(const db::Run& run) { return run.target.rfind("slurm:", 0) == 0; }

std::string slurm_attach_target(const db::Database& db, const db::Run& run, SlurmWatch& w,
                                db::SlurmCluster& cluster) {
  if (!is_slurm_run(run)) return "run " + run.name + " is not a Slurm run";
  const auto job = db::find_slurm_job(db, run.id);
  if (!job) return "run " + run.name + " was never submitted (no Slurm job recorded)";
  if (run.status != db::RunStatus::kQueued && run.status != db::RunStatus::kRunning &&
      run.status != db::RunStatus::kPreempted)
    return "run " + run.name + " has ended (" + db::to_string(run.status) + "): nothing to attach to";
  bool found = false;
  for (const auto& c : db::list_clusters(db))
    if (c.id == job->cluster_id) {
      cluster = c;
      found = true;
    }
  if (!found) return "the cluster of run " + run.name + " is no longer stored";
  w.run_id = run.id;
  w.name = run.name;
  w.rid = job->run_dir.substr(job->run_dir.find_last_of('/') + 1);
  w.job_id = job->job_id;
  w.run_dir = job->run_dir;
  w.cluster = cluster.name;
  const auto config = nlohmann::json::parse(run.config_json, nullptr, false);
  if (config.is_object() && config.contains("train") && config["train"].is_object())
    w.total_steps = config["train"].value("steps", int64_t{0});
  return "";
}

namespace {

// A Slurm cluster as a place: the job's rank 0 metrics in the cluster folder, tailed over the login
// session by offset (source "slurm:<cluster>:metrics.jsonl"); stop is scancel (TERM to the tasks
// while it runs: checkpoint, then exit); liveness is one squeue per poll, with the job's record on
// every change (queued, running, requeued: preempted -> queued -> running, an event per restart);
// the end is the batch script's exit marker, else what slurmctld or accounting says.
class SlurmPlace : public Place {
 public:
  SlurmPlace(remote::Session& login, const SlurmWatch& w, const Note& note) : login_(login), w_(w), note_(note) {}

  std::string source() const override { return "slurm:" + w_.cluster + ":metrics.jsonl"; }
  std::string label() const override { return "slurm job " + w_.job_id; }

  void begin(db::Writer* writer) override {
    if (!writer) return;
    const db::Database reader(writer->path());
    if (auto j = db::find_slurm_job(reader, w_.run_id)) {
      state_ = j->state;
      reason_ = j->reason;
      restarts_ = j->restarts;
      job_nodes_ = static_cast<int>(std::max<int64_t>(1, j->nodes));
    }
    sample_gpus_ = w_.gpu_sample_seconds > 0;
    last_poll_ = last_gpus_ = Clock::now() - std::chrono::hours(1);
  }

  MetricsChunk read(uint64_t offset) override {
    const remote::TailChunk t =
        on_login(login_, note_, [&](remote::Session& s) { return remote::tail_run_file(s, w_.rid, offset); });
    MetricsChunk c;
    c.start = offset;
    c.end = t.lines.empty() ? offset : t.offset;
    for (const auto& l : t.lines) (c.text += l) += '\n';
    return c;
  }

  // The worker's own clock over the records this watch stored (Unix seconds): how long a job ran
  // that started and ended between two polls, when Slurm's whole-second RunTime says 0.
  void stored(const std::vector<MetricsRecord>& records) override {
    for (const MetricsRecord& e : records)
      if (e.time > 0) {
        first_record_time_ = first_record_time_ > 0 ? std::min(first_record_time_, e.time) : e.time;
        last_record_time_ = std::max(last_record_time_, e.time);
      }
  }

  void stop(StopCause, const std::string& why, const Note& note) override {
    cancel(why.empty() ? "the run was deleted from the store" : why, note);
  }
  // A Slurm job checkpoints on its schedule and before its time limit, not on request
  // (ActiveRun::checkpoint_refusal says so before a front end offers it).
  void checkpoint(bool, const Note&) override {}
  void kill(const Note& note) override { cancel("kill requested", note); }
  bool budget_applies() const override { return state_ == "RUNNING"; }

  bool turn(const Turn& t, db::Writer* writer, const Note& note) override {
    const auto now = Clock::now();
    if (cancelled_ && !forced_ && now - cancelled_at_ > std::chrono::seconds(120)) {
      forced_ = true;  // the tasks did not end after TERM: Slurm's own cancel (TERM, KillWait, KILL)
      if (note) note("job " + w_.job_id + " still there 120 s after TERM: scancel");
      try {
        on_login(login_, note, [&](remote::Session& s) {
          remote::cancel_job(s, w_.job_id, false);
          return 0;
        });
      } catch (const Error& e) {
        if (note) note(std::string("scancel failed: ") + e.what());
      }
    }
    // Steps arriving while the store still says queued: ask Slurm now, not at the next poll, so
    // the run reads running (and accrues) from when its job did.
    const bool outran =
        t.got && state_ != "RUNNING" && state_ != "COMPLETING" && now - last_poll_ >= std::chrono::milliseconds(200);
    if (outran || now - last_poll_ >= std::chrono::duration<double>(w_.poll_seconds)) {
      last_poll_ = now;
      const auto jobs = on_login(login_, note, [&](remote::Session& s) { return remote::poll_jobs(s, {w_.job_id}); });
      if (jobs.empty()) return true;  // left the queue
      const remote::SqueueJob& j = jobs.front();
      if (j.state != state_ || j.reason != reason_) {
        changed(j, writer, note);
      } else if (j.state == "PENDING" && note && now - last_place_at_ >= std::chrono::seconds(30)) {
        // Still waiting: say so again when its place in the queue moved.
        last_place_at_ = now;
        if (std::string place = pending_place(j, note); place != last_place_) {
          last_place_ = std::move(place);
          note("job " + w_.job_id + " pending: " + remote::plain_reason(j.reason) + last_place_);
        }
      }
    }
    if (sample_gpus_ && !cancelled_ && state_ == "RUNNING" &&
        Clock::now() - last_gpus_ >= std::chrono::duration<double>(w_.gpu_sample_seconds)) {
      last_gpus_ = Clock::now();
      sample_all(writer, note);
    }
    return false;
  }

  PlaceEnd end(const EndContext& c, db::Writer*, const Note& note) override {
    // The end: the batch script's marker for this attempt, else what slurmctld (or accounting) says.
    const remote::TailChunk marker_file = on_login(login_, note, [&](remote::Session& s) {
      return remote::tail_run_file(s, w_.rid, 0, "slurm-exit", 1 << 16);
    });
    std::string marker_text;
    for (const auto& l : marker_file.lines) (marker_text += l) += '\n';
    const auto marker = remote::parse_exit_marker(marker_text);
    auto record = on_login(login_, note, [&](remote::Session& s) { return remote::show_job(s, w_.job_id); });
    std::string final_state = record.count("JobState") ? record["JobState"] : "";
    if (final_state.empty()) {
      if (auto acct = on_login(login_, note, [&](remote::Session& s) { return remote::sacct_job(s, w_.job_id); }))
        final_state = acct->state;
    }
    const std::string origin = "slurm job " + w_.job_id + (final_state.empty() ? "" : " " + final_state);
    PlaceEnd e;
    RunEnd& end = e.end;
    if (marker && marker->restarts >= restarts_) {
      e.exit_code = marker->exit_code;
      end = end_for_exit(e.exit_code, 0, c.cause, origin, c.stop_note);
      if (marker->time > 0) {
        // The marker counts whole seconds (`date +%s`): the end lies in [T, T+1). A job that started
        // and ended within one second would otherwise end before the running time the poll saw and
        // accrue nothing. Now (the watch saw the end) and the last record bound it from below.
        const double t = static_cast<double>(marker->time), now = db::now_seconds();
        end.at = std::max(std::clamp(now, t, t + 1.0), std::min(last_record_time_, now));
      }
    } else {
      // No marker for this attempt: the batch shell itself was killed (node failure, KillWait).
      const bool asked = c.cause != StopCause::kNone;
      end.status = asked ? db::RunStatus::kStopped : db::RunStatus::kFailed;
      end.reason = origin + ": the batch script left no exit marker";
      end.note = asked ? "cancelled on request"
                       : (final_state.empty() ? std::string("job ended without a record")
                                              : "job " + final_state + " (no exit recorded)");
      if (final_state == "NODE_FAIL") end.note = "a node of the job failed (NODE_FAIL)";
      if (final_state == "TIMEOUT") end.note = "time limit reached before a checkpoint";
      e.exit_code = asked ? static_cast<int>(ExitCode::kPreempted) : 1;
      end.exit_code = std::nullopt;
    }
    // A job that started and ended between two polls was never seen RUNNING: it ran for the record's
    // RunTime before its end, which is when its spend accrued (a queued run cannot end completed).
    // RunTime counts whole seconds, so a job shorter than one reads 0: then the span of its own
    // records says how long it ran (it ran at least that long).
    const std::optional<int64_t> ran_s =
        record.count("RunTime") ? remote::parse_slurm_duration(record["RunTime"]) : std::nullopt;
    const double recorded_s = last_record_time_ > first_record_time_ ? last_record_time_ - first_record_time_ : 0;
    const double ran_for = std::max(static_cast<double>(std::max<int64_t>(0, ran_s.value_or(0))), recorded_s);
    const bool ran = (marker && marker->restarts >= restarts_) || ran_for > 0;
    e.before_end = [this, final_state, ran, ran_for, record, restarts = restarts_](db::Database& wdb,
                                                                                  const RunEnd& end) {
      db::set_slurm_job_state(wdb, w_.run_id, final_state.empty() ? "GONE" : final_state, "", restarts);
      if (ran && db::get_run(wdb, w_.run_id).status == db::RunStatus::kQueued) {
        reprice(wdb, record);
        const double ended = end.at > 0 ? end.at : db::now_seconds();
        record_running(wdb, w_.run_id, ended - ran_for,
                       "slurm job " + w_.job_id + " ran between two polls (attempt " +
                           std::to_string(restarts + 1) + ")");
      }
    };
    return e;
  }

  std::string vanished_note() const override { return "cancelling job " + w_.job_id; }
  std::string lost_note(const std::string& what) const override {
    return "lost the login node of cluster " + w_.cluster + ": " + what + "\nJob " + w_.job_id +
           " may still be running; the run stays as it is in the store.";
  }

 private:
  void cancel(const std::string& why, const Note& note) {
    if (cancelled_) return;
    cancelled_ = true;
    cancelled_at_ = Clock::now();
    const bool graceful = state_ == "RUNNING";  // a pending job has nothing to checkpoint
    forced_ = !graceful;
    if (note)
      note(why + ": cancelling job " + w_.job_id +
           (graceful ? " (TERM to its tasks: checkpoint, then exit)" : " (not running yet)"));
    try {
      on_login(login_, note, [&](remote::Session& s) {
        remote::cancel_job(s, w_.job_id, graceful);
        return 0;
      });
    } catch (const Error& e) {
      if (note) note(std::string("scancel failed: ") + e.what());
    }
  }

  // What Slurm allocated (the job record's AllocTRES, else TRES) prices the run from its start on:
  // a whole-node partition gives every core, which the request did not say. Runs in the writer.
  void reprice(db::Database& wdb, const std::map<std::string, std::string>& rec) const {
    const int64_t run_id = w_.run_id;
    const auto at = rec.find("AllocTRES");
    const std::string tres = at != rec.end() && !at->second.empty()
                                 ? at->second
                                 : (rec.count("TRES") ? rec.at("TRES") : std::string());
    const auto job = db::find_slurm_job(wdb, run_id);
    if (!job || tres.empty()) return;
    // Device-hours count what was allocated: the accrual opened next reads it.
    const AllocatedTres got = parse_alloc_tres(tres);
    if (const int64_t devices = job->gpus_per_node > 0 ? got.gpus : got.cpus; devices > 0)
      db::set_slurm_job_devices(wdb, run_id, devices);
    const auto alloc = slurm_price_allocated(db::partition_price(wdb, job->cluster_id, job->partition), tres,
                                             job->gpus_per_node > 0);
    const double was = db::get_run(wdb, run_id).usd_per_hour.value_or(0);
    if (!alloc || std::abs(alloc->usd_per_hour - was) <= 1e-9) return;
    db::set_run_price(wdb, run_id, alloc->usd_per_hour, alloc->source, {});
    db::add_event(wdb, run_id, db::now_seconds(), "price", "info",
                  "slurm job " + w_.job_id + " allocated " + tres + ": " + usd(alloc->usd_per_hour) +
                      "/h from its start (submitted at " + usd(was) + "/h)");
  }

  // The job's state or pending reason changed: its full record says what the poll cannot
  // (restart count, start), and the run's status follows through run_status.h.
  void changed(const remote::SqueueJob& j, db::Writer* writer, const Note& note) {
    last_record_ = on_login(login_, note, [&](remote::Session& s) { return remote::show_job(s, w_.job_id); });
    const int64_t seen_restarts =
        last_record_.count("Restarts") ? std::atoll(last_record_["Restarts"].c_str()) : restarts_;
    const std::string was = state_;
    const bool requeued = seen_restarts > restarts_;
    const int64_t run_id = w_.run_id;
    const std::string job_id = w_.job_id;
    if (writer)
      writer->run([&, run_id, job_id](db::Database& wdb) {
        db::set_slurm_job_state(wdb, run_id, j.state, j.state == "PENDING" ? j.reason : "", seen_restarts);
        const db::RunStatus cur = db::get_run(wdb, run_id).status;
        if (requeued && cur == db::RunStatus::kRunning)
          record_requeued(wdb, run_id,
                          "slurm job " + job_id + " requeued (restart " + std::to_string(seen_restarts) + ")",
                          "requeued by Slurm");
        if (requeued)
          db::add_event(wdb, run_id, db::now_seconds(), "restart", "info",
                        "slurm job " + job_id + " requeued: restart " + std::to_string(seen_restarts) +
                            "; it resumes from its newest verified checkpoint");
        const db::RunStatus after = db::get_run(wdb, run_id).status;
        if (j.state == "PENDING" && after == db::RunStatus::kPreempted)
          record_queued(wdb, run_id, 0, "slurm job " + job_id + " pending: " + remote::plain_reason(j.reason));
        // Running since squeue's elapsed time ago (no clock or time zone of the cluster involved),
        // so the accrual starts when the job did, not when this poll saw it.
        const double started =
            db::now_seconds() - static_cast<double>(std::max<int64_t>(0, j.elapsed_s.value_or(0)));
        if ((j.state == "RUNNING" || j.state == "COMPLETING") && after != db::RunStatus::kRunning) {
          reprice(wdb, last_record_);
          record_running(wdb, run_id, started,
                         "slurm job " + job_id + " running on " + j.nodelist + " (attempt " +
                             std::to_string(seen_restarts + 1) + ")");
        }
      });
    if (note) {
      if (j.state == "PENDING") {
        last_place_ = pending_place(j, note);
        last_place_at_ = Clock::now();
        note("job " + w_.job_id + " pending: " + remote::plain_reason(j.reason) + last_place_);
      } else {
        note("job " + w_.job_id + " " + j.state + (j.nodelist.empty() ? "" : " on " + j.nodelist) +
             (was.empty() ? "" : " (was " + was + ")"));
      }
    }
    state_ = j.state;
    reason_ = j.reason;
    restarts_ = seen_restarts;
  }

  // " · 2 jobs ahead in partition cpu · expected start 2026-12-03T10:00:00" for a pending job, or "".
  std::string pending_place(const remote::SqueueJob& j, const Note& note) {
    std::vector<std::string> parts;
    try {
      if (auto place = on_login(login_, note, [&](remote::Session& s) { return remote::queue_place(s, w_.job_id); }))
        parts.push_back(remote::queue_place_text(*place));
    } catch (const Error&) {
      // The place is a courtesy: a failed squeue here never stops the watch.
    }
    if (!j.expected_start.empty() && j.expected_start != "N/A" && j.expected_start != "Unknown")
      parts.push_back("expected start " + j.expected_start);
    std::string out;
    for (const std::string& p : parts) out += " · " + p;
    return out;
  }

  // The GPUs of a running job, read from inside its allocation (the Live page's GPU plot). A
  // reading is a courtesy: it stops, with one note saying why, when no node has nvidia-smi or when
  // srun --overlap failed three times running; it never disturbs the watch.
  void sample_all(db::Writer* writer, const Note& note) {
    try {
      const std::vector<remote::JobNodeGpus> nodes = on_login(
          login_, note, [&](remote::Session& s) { return remote::sample_job_gpus(s, w_.job_id, job_nodes_); });
      gpu_failures_ = 0;
      std::vector<db::JobGpuSample> samples;
      std::string seen, absent;
      const double at = db::now_seconds();
      for (const remote::JobNodeGpus& n : nodes) {
        if (!n.nvidia_smi) {
          absent += (absent.empty() ? "" : ", ") + n.node;
          continue;
        }
        seen += (seen.empty() ? "" : ", ") + n.node + ": " + std::to_string(n.gpus.size()) + " GPU(s)";
        for (const remote::GpuInfo& g : n.gpus) {
          db::JobGpuSample s;
          s.run_id = w_.run_id;
          s.node = n.node;
          s.device = g.index;
          s.time = at;
          if (g.utilization_pct >= 0) s.utilization = g.utilization_pct;
          if (g.memory_total_bytes > 0) {
            s.memory_total = static_cast<int64_t>(g.memory_total_bytes);
            s.memory_used = static_cast<int64_t>(g.memory_used_bytes);
          }
          if (g.power_w >= 0) s.power_w = g.power_w;
          if (g.temperature_c >= 0) s.temperature_c = g.temperature_c;
          samples.push_back(std::move(s));
        }
      }
      if (!nodes.empty() && seen.empty()) {
        sample_gpus_ = false;
        if (note) note("no GPU readings for job " + w_.job_id + ": no nvidia-smi on " + absent);
        return;
      }
      if (!told_gpus_ && !seen.empty()) {
        told_gpus_ = true;
        if (note) note("GPU readings of job " + w_.job_id + " by srun --overlap: " + seen);
      }
      if (!samples.empty() && writer)
        writer->submit([samples](db::Database& wdb) { db::insert_job_samples(wdb, samples); });
    } catch (const remote::ConnectionLost&) {
      throw;
    } catch (const Error& e) {
      if (++gpu_failures_ >= 3) {
        sample_gpus_ = false;
        if (note) note(std::string("no more GPU readings for job ") + w_.job_id + ": " + e.what());
      }
    }
  }

  remote::Session& login_;
  SlurmWatch w_;
  Note note_;
  std::string state_, reason_;
  int64_t restarts_ = 0;
  int job_nodes_ = 1;
  bool cancelled_ = false, forced_ = false;
  Clock::time_point cancelled_at_{}, last_poll_{}, last_gpus_{}, last_place_at_{};
  std::map<std::string, std::string> last_record_;
  std::string last_place_;
  bool sample_gpus_ = false, told_gpus_ = false;
  int gpu_failures_ = 0;
  double first_record_time_ = 0, last_record_time_ = 0;
};

}  // namespace

int watch_slurm_run(db::Writer& writer, remote::Session& login, const SlurmWatch& w, const WatchHooks& hooks) {
  SlurmPlace place(login, w, hooks.note);
  return watch_place(place, &writer, w.run_id, w.name, hooks).exit_code;
}

}  // namespace flotilla::runs
