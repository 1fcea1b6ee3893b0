// What Slurm's commands print, parsed: the cluster probe's sections, `scontrol show config`,
// `sinfo` per node, `scontrol show partition -o`, the batched `squeue` poll and a job's exit marker.
//
// Decision: every parser here is a pure function of the text, and every command whose output they
// read is run by a constant script inside a login shell with its output fenced by markers
// (kProbeBegin ... kProbeEnd, one "@@section NAME" / "@@rc N" pair per command). Whatever a login
// banner, a `module` setup or a profile prints outside the fence is dropped, and a command that
// fails leaves its own section with its exit status instead of shifting the others. Lines that do
// not parse are skipped (never guessed at); a field Slurm did not print keeps its default.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "remote/probe.h"

namespace flotilla::remote {

inline constexpr const char* kProbeBegin = "@@flotilla-slurm-begin@@";
inline constexpr const char* kProbeEnd = "@@flotilla-slurm-end@@";

// One command's output inside the fence.
struct ProbeSection {
  std::string text;
  int rc = -1;  // the command's exit status (-1: its "@@rc" line is missing)
};
// The sections between the markers, by name. Empty when the begin marker is missing.
std::map<std::string, ProbeSection> split_probe_sections(std::string_view output);

// What `scontrol show config` says the cluster supports.
struct SlurmConfig {
  std::map<std::string, std::string> values;  // every "Key = value" line
  std::string version;                        // SLURM_VERSION
  std::string cluster_name;
  bool accounting = false;     // AccountingStorageType is not accounting_storage/none
  bool requeue = true;         // JobRequeue = 1
  std::string preempt_type;    // e.g. "preempt/none"
  std::string preempt_mode;    // e.g. "OFF", "REQUEUE"
  int64_t min_job_age_s = -1;  // MinJobAge in seconds (-1: not printed)
};
SlurmConfig parse_scontrol_config(std::string_view text);

// One node as `sinfo -h -N -o '%N|%T|%c|%m|%G|%P'` prints it (one line per node and partition;
// the parser merges them).
struct SlurmNode {
  std::string name;
  std::string state;  // e.g. "idle", "allocated", "mixed", "down", "drained"
  int cpus = 0;
  int64_t memory_mb = 0;
  int gpus = 0;                         // summed over the gres entries "gpu[:type]:N"
  std::string gpu_type;                 // the first typed gpu gres ("" untyped)
  std::vector<std::string> partitions;  // without the default partition's '*'
};
inline constexpr const char* kSinfoFormat = "%N|%T|%c|%m|%G|%P";
std::vector<SlurmNode> parse_sinfo_nodes(std::string_view text);
// "gpu:a100:4(S:0-1),gpu:v100:2" -> 6 GPUs, type "a100". Other gres are ignored.
int gres_gpu_count(std::string_view gres, std::string* first_type = nullptr);

// One line of `scontrol show partition -o`.
struct SlurmPartition {
  std::string name;
  bool is_default = false;
  std::string state;     // "UP", "DOWN", "DRAIN", "INACTIVE"
  std::string max_time;  // e.g. "02:00:00", "UNLIMITED"
  std::string default_time;
  std::string max_nodes;  // e.g. "UNLIMITED", "1"
  std::string nodes;      // hostlist, e.g. "n[1-2]"
  int total_cpus = 0;
  int total_nodes = 0;
  int total_gpus = 0;  // from TRES=...,gres/gpu=N
};
std::vector<SlurmPartition> parse_partitions(std::string_view text);
// "Key=value Key2=value2 ..." of a one-line scontrol record into a map (a value ends at the next
// " Key=" whose key is a word; so values with spaces, like a node's OS=, stay whole).
std::map<std::string, std::string> parse_scontrol_record(std::string_view line);

// Slurm's time formats ("[days-]hours:minutes:seconds", "minutes:seconds", "minutes",
// "UNLIMITED"/"INFINITE" -> -1, "INVALID"/"N/A"/"" -> nullopt) in seconds.
std::optional<int64_t> parse_slurm_duration(std::string_view text);

// One job of the batched poll `squeue -h -o kSqueueFormat -j A,B,...`.
struct SqueueJob {
  std::string job_id;
  std::string state;   // PENDING, RUNNING, COMPLETING, ...
  std::string reason;  // e.g. "Priority", "Resources", "JobHeldUser", "None"
  std::optional<int64_t> elapsed_s, time_left_s;
  std::string expected_start;  // %S: "N/A" or an ISO time
  int nodes = 0;
  std::string nodelist;  // %R: the nodes when running, "(Reason)" when pending
};
inline constexpr const char* kSqueueFormat = "%i|%T|%r|%M|%L|%S|%D|%R";
std::vector<SqueueJob> parse_squeue(std::string_view text);

// Where a pending job stands in its partition's queue: the pending jobs of the same partition that
// Slurm orders before it (priority, then job id: `squeue -h -t PD -o '%i|%P' --sort=-p,i`).
struct QueuePlace {
  int ahead = 0;          // pending jobs of its partition before it
  std::string partition;  // as squeue names it ("cpu", or "cpu,short" for a job given several)
};
inline constexpr const char* kQueueOrderFormat = "%i|%P";
// nullopt when `job_id` is not among the pending jobs listed.
std::optional<QueuePlace> parse_queue_place(std::string_view text, const std::string& job_id);
// "next in partition cpu's queue" or "3 jobs ahead in partition cpu".
std::string queue_place_text(const QueuePlace& place);

// A pending reason in plain words ("Resources" -> "waiting for free nodes"); unknown codes are
// returned as they are.
std::string plain_reason(std::string_view reason);

// The exit marker the batch script writes when srun returns: "exit=N restarts=R time=T".
struct ExitMarker {
  int exit_code = -1;
  int restarts = 0;
  int64_t time = 0;
};
std::optional<ExitMarker> parse_exit_marker(std::string_view text);

// One node's GPUs as a step inside the job's allocation sees them (`srun --overlap --label`: each
// task prints "@@node NAME" first, then nvidia-smi's CSV rows, or "flotilla:no-nvidia-smi").
struct JobNodeGpus {
  std::string node;           // SLURMD_NODENAME
  bool nvidia_smi = true;     // false: the node has no nvidia-smi
  std::vector<GpuInfo> gpus;  // as remote::parse_nvidia_smi_csv reads them
};
// Groups srun's labelled lines ("0: text", the label padded with spaces) by task; lines without a
// label (srun's own messages) are skipped. Nodes in the order of their task numbers.
std::vector<JobNodeGpus> parse_job_gpus(std::string_view text);

}  // namespace flotilla::remote
