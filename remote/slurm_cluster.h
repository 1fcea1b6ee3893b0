// A Slurm cluster reached over SSH at its login node: probe it, submit, poll, cancel.
//
// Decision: every command runs in a login shell (`bash -l`, else `sh -l`) so the user's profile,
// `module load` lines and site PATH apply exactly as in an interactive login, and its output is
// fenced by markers (slurm_parse.h) so banners cannot break parsing. Scripts are constants; the
// only values that reach them are job ids (digits, checked) and paths, always single-quoted.
// Blocking: call from a worker thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "remote/session.h"
#include "remote/slurm_parse.h"

namespace flotilla::remote {

struct ClusterProbe {
  SlurmConfig config;
  std::vector<SlurmNode> nodes;
  std::vector<SlurmPartition> partitions;
  bool squeue_json = false;  // `squeue --json` works (Slurm built with its JSON plugin)
  bool sacct = false;        // `sacct` answers (accounting storage on and reachable)
  std::string sacct_note;    // why not, when it does not
  std::string raw;           // the fenced output, for `clusters probe --raw` and test captures
};

// The probe as stored (clusters.probe_json) and read back; raw output is not kept. A malformed
// text reads as an empty probe.
std::string cluster_probe_json(const ClusterProbe& probe);
ClusterProbe cluster_probe_from_json(const std::string& text);

// The probe script (constant): the sections config, nodes, partitions, squeue-json, sacct.
const std::string& cluster_probe_script();
// Parses a probe's full output (banners and all).
ClusterProbe parse_cluster_probe(const std::string& output);
// Runs the probe on the login node. Throws Error(kComm) when the fence is missing (the login shell
// failed) or scontrol is not found, with the output's tail.
ClusterProbe probe_cluster(Session& session);

// `script` (constant text) run in a login shell behind the fence; returns the fenced sections.
// `args` are passed as $1.. (each single-quoted).
std::map<std::string, ProbeSection> run_fenced(Session& session, const std::string& script,
                                               const std::vector<std::string>& args = {},
                                               double timeout_s = 60);

// sbatch --parsable of the script at `script_path` (on the cluster); returns the job id.
// Throws Error(kComm) with sbatch's message when it refuses.
std::string submit_batch(Session& session, const std::string& script_path);

// One squeue call for all `job_ids` (digits only; Error(kUsage) otherwise). Jobs no longer in the
// queue are absent from the result.
std::vector<SqueueJob> poll_jobs(Session& session, const std::vector<std::string>& job_ids);
// The place of pending job `job_id` in its partition's queue (nullopt: not pending any more).
std::optional<QueuePlace> queue_place(Session& session, const std::string& job_id);

// `scontrol show job -o ID` as key=value (JobState, ExitCode, Restarts, RunTime, TRES, ...); empty
// once slurmctld has forgotten the job (MinJobAge after it ended).
std::map<std::string, std::string> show_job(Session& session, const std::string& job_id);

// Writes `text` to `path` on the cluster (through the login shell's stdin; the path quoted).
void write_remote_file(Session& session, const std::string& path, const std::string& text);

// What accounting says of a job that left the queue: nullopt when sacct is absent or does not know it.
struct SacctJob {
  std::string state;  // COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED, ...
  int exit_code = -1;
  std::optional<int64_t> elapsed_s;
  std::string alloc_tres;  // e.g. "billing=4,cpu=4,gres/gpu=8,mem=16G,node=2"
};
std::optional<SacctJob> sacct_job(Session& session, const std::string& job_id);
// Parses `sacct -n -X -P -o JobID,State,ExitCode,Elapsed,AllocTRES -j ID` (exposed for tests).
std::optional<SacctJob> parse_sacct(const std::string& text, const std::string& job_id);

// graceful: `scancel --signal=TERM ID`: TERM to the job's steps (the tasks checkpoint and exit 10;
// srun and the batch shell are not signalled, since srun would KILL its tasks) and the job ends on
// its own. Not graceful (a pending job, or a job still there after the grace): plain `scancel ID`.
void cancel_job(Session& session, const std::string& job_id, bool graceful = false);

// The GPUs of running job `job_id`'s `nodes` nodes, read from inside its allocation: one
// `srun --jobid=ID --overlap --ntasks-per-node=1 --label` step (it shares the job's CPUs, memory
// and GPUs instead of waiting for free ones) running nvidia-smi on each node. Throws Error(kComm)
// with srun's message when the step could not run (an srun without --overlap, before Slurm 20.11;
// a site that forbids extra steps; a job that just ended).
std::vector<JobNodeGpus> sample_job_gpus(Session& session, const std::string& job_id, int nodes);

}  // namespace flotilla::remote
