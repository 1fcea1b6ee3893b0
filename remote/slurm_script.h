// The batch script of a Slurm run, and the checks on every value that reaches it or sbatch.
//
// Decision: the script is a pure function of a validated BatchSpec. Names Slurm interprets
// (partition, account, job name) and the time limit pass an allow-list before anything is
// generated, so they can sit in #SBATCH lines as they are; every path is single-quoted in the
// body and refused in a directive unless it is plain. The time-limit signal goes to the batch
// shell (`--signal=B:USR1@LEAD`), whose trap turns it into a TERM for the tasks, sent through
// Slurm to the job's steps (`scancel --signal=TERM JOBID`), never to srun: srun answers a TERM by
// killing its tasks, which would lose the checkpoint. The worker's TERM is "checkpoint at the next
// step and exit 10"; its USR1 would only checkpoint and go on.
// When auto-resume is on, the script requeues the job itself once the tasks exited 10 after that
// signal (`scontrol requeue`: the job keeps its id, SLURM_RESTART_COUNT rises, the worker resumes
// from its newest verified checkpoint); otherwise the job is submitted --no-requeue. Every
// attempt appends "exit=N restarts=R time=T" to <run dir>/slurm-exit, the record where
// accounting is off.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace flotilla::remote {

struct BatchSpec {
  std::string job_name;   // validate_slurm_name("job name")
  std::string partition;  // "": the cluster's default partition
  std::string account;    // "": the user's default account
  int nodes = 1;
  int tasks_per_node = 1;   // one flotilla-worker per task
  int gpus_per_node = 0;    // 0: no --gpus-per-node
  int cpus_per_task = 0;    // 0: Slurm's default
  std::string time_limit;   // HH:MM:SS or D-HH:MM:SS, finite (validate_time_limit)
  int signal_lead_s = 300;  // USR1 this long before the limit
  bool requeue = false;     // auto-resume: requeue after the lead signal's checkpoint
  std::string run_dir;      // absolute, on the shared file system; output goes to <run dir>/slurm.out
  std::string worker;       // the deployed flotilla-worker wrapper
  std::string config;       // the run config on the shared file system
  std::vector<std::string> train_args;  // extra `train` flags, each quoted
};

// "" when acceptable, else one sentence naming `field` ("partition", "account", "job name"):
// 1-64 characters of letters, digits, '.', '_', '-', not starting with '-' or '.'.
std::string validate_slurm_name(std::string_view field, std::string_view value);
// "" when `value` is a finite Slurm time limit written [D-]HH:MM:SS (minutes and seconds < 60,
// more than 0 seconds, at most 365 days), else why not.
std::string validate_time_limit(std::string_view value);
// Seconds of a time limit that passed validate_time_limit.
long time_limit_seconds(std::string_view value);
// Every problem with the spec, each naming its field (empty when it can be generated).
std::vector<std::string> validate_batch_spec(const BatchSpec& spec);

// The script, for sbatch --parsable. Throws flotilla::Error(kUsage) listing every problem of
// validate_batch_spec().
std::string batch_script(const BatchSpec& spec);

// The worker's exit code for "stopped by a signal, resumable" (ExitCode::kPreempted).
inline constexpr int kResumeExitCode = 10;

}  // namespace flotilla::remote
