// Metrics protocol v1 writer (docs/metrics-protocol.md): one JSON object per line, to stdout
// and/or <run dir>/metrics.jsonl. Every record carries "v": 1, "type", "time" (Unix seconds) and
// "rank". Floats are written with enough digits to round-trip float32 exactly, so a loss read back
// from the file has the same bits the trainer computed (resume-equivalence tests rely on this).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace flotilla {

// One GPU in a step record's "gpus" array (ui/live/livedata.cpp). Utilisation is not measured
// (no NVML), so the record has no "util" member.
struct GpuRecord {
  int device = 0;
  uint64_t mem_bytes = 0;  // used on the device (cudaMemGetInfo total - free; every process)
  uint64_t mem_total_bytes = 0;
};

struct StepRecord {
  int64_t step = 0;
  int64_t tokens = 0;  // tokens consumed so far (all ranks)
  float loss = 0;      // mean train loss of this step's global batch
  double lr = 0;
  float grad_norm = 0;  // before clipping
  double tokens_per_s = 0;
  // model FLOP/s / peak FLOP/s (0 when the peak is unknown; NaN, written null, when the ceiling
  // read below the run's own speed: cpu::mfu_ratio)
  double mfu = 0;
  double step_ms = 0;
  double data_ms = 0, forward_ms = 0, backward_ms = 0, optimizer_ms = 0, comm_ms = 0;
  double bubble_ms = 0;  // pipeline: blocked waiting on the neighbouring stages (0 without pp)
  uint64_t peak_rss_bytes = 0;
  bool skipped = false;  // spike guard skipped the update
  // Per rank (multi-rank runs): data, forward, backward, optimizer, comm, step, bubble (ms).
  // forward/backward include the TP all-reduces inside them, which comm also counts.
  std::vector<std::vector<float>> ranks;
  std::vector<GpuRecord> gpus;  // this rank's GPUs (empty on the CPU: no "gpus" member)
};

struct EvalRecord {
  int64_t step = 0;
  int64_t tokens = 0;
  float val_loss = 0;
  int batches = 0;
};

// One evaluation task's scores at a step (eval.tasks): written by rank 0 after the ranks' partial
// sums were added, so it is the whole task's result. Scores in name order.
struct TaskRecord {
  int64_t step = 0;
  int64_t tokens = 0;
  std::string task;  // the task's name (metric names task/<task>/<score>)
  std::string kind;  // multiple_choice | perplexity | generate
  std::vector<std::pair<std::string, double>> scores;
  double seconds = 0;  // wall time of the task's evaluation
};

// Communication since the previous comm record (issue 36; docs/metrics-protocol.md "comm"): rank 0
// writes one right after each step record, covering the steps since the last one. Every figure is a
// MEAN PER STEP over those steps, from comm::CommStats deltas of rank 0's process groups that have
// more than one rank; ops with a count of 0 are left out. `bytes` follows nccl-tests' "size":
// all_reduce / broadcast the buffer, reduce_scatter the input, all_gather the output, send_recv the
// bytes sent + received by this rank.
struct CommOpRecord {
  std::string op;  // all_reduce | reduce_scatter | all_gather | broadcast | send_recv | barrier
  double count = 0, bytes = 0;
  double ms = 0, wait_ms = 0;  // busy (executing) and blocked (callers waiting), per step
};
struct CommGroupRecord {
  std::string group;  // dp | tp | pp | embed (the tied embedding's first/last stage group)
  int size = 1;
  std::vector<CommOpRecord> ops;
};
struct CommRecord {
  int64_t step = 0;    // the step record it follows
  int64_t steps = 0;   // steps it covers (the figures are means over them)
  double step_ms = 0;  // mean step time over those steps
  std::vector<CommGroupRecord> groups;
};

struct CheckpointRecord {
  int64_t step = 0;
  std::string dir;
  uint64_t bytes = 0;
  double seconds = 0;
  std::string reason;  // periodic | final | preempt | request
};

// Every write to the file is checked: the file is the run's record (docs/cli.md), so a write that
// fails (a full disk) throws Error(kIo) naming the file, the step and the reason, after cutting the
// file back to its last whole line (a resume appends to it). The run then ends failed, never
// "completed" with a torn record.
class MetricsWriter {
 public:
  // file_path may be empty (no file); to_stdout mirrors every record to stdout.
  MetricsWriter(const std::string& file_path, bool to_stdout, int rank = 0);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void run_start(const std::string& run_name, const std::string& config_json, int world_size,
                 uint64_t parameters, double flops_per_token, int64_t start_step,
                 const std::string& resumed_from, uint64_t baseline_rss_bytes = 0);
  void step(const StepRecord& r);
  void eval(const EvalRecord& r);
  void task(const TaskRecord& r);
  void checkpoint(const CheckpointRecord& r);
  void comm(const CommRecord& r);
  void sample(int64_t step, const std::vector<int32_t>& tokens, const std::string& text);
  // level: info | warning | error. Fields are extra string members.
  void event(const std::string& level, const std::string& message,
             const std::map<std::string, std::string>& fields = {});
  void summary(int64_t steps, int64_t tokens, float final_loss, float best_val_loss, double wall_s,
               double mean_tokens_per_s, double mean_mfu, const std::string& exit_reason,
               const std::string& stop_reason = "");  // stop_reason: written when not ""

  void sync();  // fsync the file (called at checkpoints and exit); throws Error(kIo) when it fails

 private:
  void emit(const std::string& line);
  [[noreturn]] void fail(int err, const std::string& doing);
  std::string path_;
  int fd_ = -1;
  uint64_t whole_bytes_ = 0;  // the file's size after the last record written whole
  bool failed_ = false;       // a write failed: the file takes nothing more
  int64_t step_ = 0;          // the step of the last step/eval/checkpoint record, for messages
  bool to_stdout_;
  int rank_;
};

double unix_time_now();

}  // namespace flotilla
