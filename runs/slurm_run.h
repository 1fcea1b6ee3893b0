// A run on a Slurm cluster, the third kind of run beside local runs and runs on SSH nodes: submit
// it (deploy the worker to the shared file system, upload the config, generate and sbatch the
// batch script) and watch it (one squeue per poll, metrics tailed by committed byte offset, the
// end from sacct, `scontrol show job` or the job's exit marker), with the same store rows, status
// rules (run_status.h) and budget guard (watch.h) as the other kinds.
//
// Decision: the run's folder is ~/.flotilla/runs/<rid> on the login node, which must be on the
// file system the compute nodes share (as on every Slurm cluster: $HOME), so the node layer's
// deploy, config upload and byte-offset tail (remote/deploy.h, remote/remote_run.h) are reused
// unchanged and only the start and the liveness question differ: Slurm, not a pid, says whether
// the run lives. The store's run_dir stays empty (it names local or node folders only); the
// cluster folder is in slurm_jobs. Status: queued while pending, running while the job runs,
// preempted -> queued -> running across a requeue (an event per restart), then the end the
// worker's exit gives. Blocking: call from a worker thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "db/clusters.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "engine/config/run_config.h"
#include "remote/session.h"
#include "runs/watch.h"

namespace flotilla::runs {

struct SlurmStartRequest {
  RunConfig config;  // run.name is replaced by `name`
  std::string name;
  std::optional<double> budget_usd;
  std::optional<int> max_restarts;
  int nodes = 1;
  std::optional<int> tasks_per_node;  // default: dp*tp*pp / nodes
  int gpus_per_node = 0;
  std::string time_limit = "01:00:00";
  std::string partition;  // "": the cluster's default for Flotilla, else Slurm's default
  std::string account;    // "": the cluster's default for Flotilla, else none
  int signal_lead_s = 300;
  bool auto_resume = false;  // requeue after the time-limit checkpoint
  std::string worker_path, version;
  std::string origin = "flotilla run --cluster";
  // Polled while the login node fetches a model by name: true stops it and the submission. May be empty.
  std::function<bool()> cancelled;
};

struct SlurmWatch {
  int64_t run_id = 0;
  std::string name, rid, job_id, run_dir, cluster;
  int64_t total_steps = 0;
  double poll_seconds = 1;  // squeue at most this often
  // While the job runs, its nodes' GPUs (srun --overlap into the allocation, nvidia-smi) into
  // slurm_job_samples this often; 0: never. Nodes without nvidia-smi are not asked again.
  double gpu_sample_seconds = 10;  // one job step each time: kind to slurmctld
};

// The run's $/hour on `cluster`: nodes x GPUs per node x the partition's GPU-hour price, or for a
// CPU job nodes x tasks per node x the CPU-hour price; 0 and "" when unpriced. Pure of the store.
struct SlurmPrice {
  double usd_per_hour = 0;
  std::string source;
};
SlurmPrice slurm_price(const std::optional<db::PartitionPrice>& price, int nodes, int gpus_per_node,
                       int tasks_per_node);
// The same from what Slurm allocated once the job runs (scontrol's AllocTRES or TRES, e.g.
// "cpu=4,mem=2000M,node=2,billing=4,gres/gpu=8"): allocated GPUs x the GPU-hour price for a GPU
// job, allocated CPUs x the CPU-hour price for a CPU job (a whole-node partition bills every core).
// nullopt when the TRES or the price say nothing.
// What a TRES text says was allocated: CPUs, and GPUs (untyped "gres/gpu=N", else the sum of the
// typed "gres/gpu:TYPE=N"). Unknown or malformed items are skipped.
struct AllocatedTres {
  int64_t cpus = 0, gpus = 0;
};
AllocatedTres parse_alloc_tres(const std::string& tres);
std::optional<SlurmPrice> slurm_price_allocated(const std::optional<db::PartitionPrice>& price,
                                                const std::string& tres, bool gpu_job);

// What a request would submit, before anything exists: the batch script as submit_slurm_run
// generates it, except that the paths only the login node knows are written "~" (the user's home
// there), "ID" (the run's number in the store) and "HASH" (the deployed worker's build), and every
// problem that would refuse it (the layout over the nodes, partition, account, time limit, lead),
// each naming its field. Pure: no store, no connection (the wizard's Review page shows it).
struct SlurmPreview {
  std::string script;                 // "" when a problem prevents it
  std::vector<std::string> problems;  // each names its field
  std::string partition, account;     // as submitted ("": the cluster's own default)
  int tasks_per_node = 0;
  SlurmPrice price;
};
SlurmPreview preview_slurm_script(const db::SlurmCluster& cluster, const SlurmStartRequest& request,
                                  const std::optional<db::PartitionPrice>& price);

// Validates (flotilla::Error kConfig / kUsage naming the field; nothing is created), stores the
// run (target "slurm:<cluster>", status created, its price and limits: a budget on an unpriced
// partition is refused), deploys, uploads, submits (status queued) and returns the watch. The
// login session must be connected.
SlurmWatch submit_slurm_run(db::Database& db, remote::Session& login, const db::SlurmCluster& cluster,
                            const SlurmStartRequest& request, const Note& note);

// Re-attaching a Slurm run whose watcher died (`flotilla runs attach`, an app restart): "" and `w`,
// `cluster` filled when `run` is a Slurm run that has not ended, else why not. The watch resumes
// at the committed byte offset, so nothing is lost or stored twice.
std::string slurm_attach_target(const db::Database& db, const db::Run& run, SlurmWatch& w,
                                db::SlurmCluster& cluster);
// Whether a Slurm run can be resumed (`flotilla runs resume`, the app's Resume): "" with `cluster`
// filled when it ended stopped or failed, else why not and what to do instead. Pure of the cluster.
std::string slurm_resume_target(const db::Database& db, const db::Run& run, db::SlurmCluster& cluster);
// Resumes an ended Slurm run: the batch script it was submitted with is submitted again from its
// folder on the cluster, so the same worker build resumes from the newest verified checkpoint
// there (the script's worker runs with --resume auto), and the run goes back to queued under the
// new job id, with an event naming both jobs. The previous attempt's exit marker is kept aside, so
// it never reads as the new job's end. Error kUsage when slurm_resume_target refuses or the old job
// is still in Slurm's queue; kConfig when the worker or the run's folder is gone from the cluster.
// The login session must be connected; returns the watch (watch_slurm_run).
SlurmWatch resubmit_slurm_run(db::Database& db, remote::Session& login, const db::Run& run,
                              const std::string& origin, const Note& note);

// The login node as an SSH node value (never stored as one): the session layer's input.
db::SshNode login_node(const db::SlurmCluster& cluster);
// A login node's host key refusal in words: the problem and, for an unknown key, the command that
// trusts it once the user has checked the fingerprint (the CLI and the app say the same).
std::string login_host_key_message(const std::string& cluster, const remote::HostKeyError& e);

// True when the run's target is a Slurm cluster ("slurm:NAME").
bool is_slurm_run(const db::Run& run);

// Watches until the job has left the queue for good; records the end and returns the worker's
// exit code (the batch script's), kLeft when leave_requested, ExitCode::kComm when the login node
// is lost for good (the run stays as it is). A stop request or a reached budget cancels the job
// (TERM: the worker checkpoints and exits 10, recorded as stopped).
int watch_slurm_run(db::Writer& writer, remote::Session& login, const SlurmWatch& watch,
                    const WatchHooks& hooks);

}  // namespace flotilla::runs
