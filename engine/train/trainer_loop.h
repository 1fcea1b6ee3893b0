// The trainer's state while a run is in progress (internal to engine/train: trainer_setup.cpp
// builds it, trainer.cpp runs the steps, trainer_checkpoint.cpp saves and resumes).
//
// One non-obvious decision: every rank builds the same rank grid from the config (TP innermost,
// then DP, then PP) and holds exactly one model shard; the DP group is the set of ranks with the
// same shard, so DataParallel, ZeRO and the per-rank checkpoint files work on shards unchanged.
// A single process is the 1 x 1 x 1 grid with one-rank groups.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/comm/rendezvous.h"
#include "engine/config/run_config.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/data/loader.h"
#include "engine/eval/task.h"
#include "engine/model/gpt.h"
#include "engine/model/param_layout.h"
#include "engine/parallel/data_parallel.h"
#include "engine/parallel/pipeline.h"
#include "engine/parallel/rank_grid.h"
#include "engine/train/checkpoint_interval.h"
#include "engine/train/device_model.h"
#include "engine/train/heartbeat.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/metrics.h"
#include "engine/train/micro_batch.h"
#include "engine/train/trainer.h"
#include "engine/train/trainer_state.h"

namespace flotilla::train_detail {

using Clock = std::chrono::steady_clock;

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Human-readable progress: to the chosen stream (stderr for `train`) and, for rank 0, appended to
// <run dir>/train.log so a run folder carries its own history. A failed write to train.log (a full
// disk) ends the run like a failed metrics write (metrics.h): Error(kIo) naming the file, the step
// (`*step`) and the reason; the stream is a terminal's or a log's and is not checked.
class Progress {
 public:
  Progress(std::FILE* out, const std::string& log_path, const int64_t* step)
      : out_(out), path_(log_path), step_(step) {
    if (!log_path.empty()) {
      log_ = std::fopen(log_path.c_str(), "a");
      if (!log_) throw_io("cannot open " + log_path + ": " + errno_string(errno));
    }
  }
  ~Progress() {
    if (log_) std::fclose(log_);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  template <typename... A>
  void line(const char* fmt, A... args) {
    if (out_) {
      std::fprintf(out_, fmt, args...);
      std::fputc('\n', out_);
      std::fflush(out_);
    }
    if (!log_) return;
    errno = 0;
    const bool ok =
        std::fprintf(log_, fmt, args...) >= 0 && std::fputc('\n', log_) != EOF && std::fflush(log_) == 0;
    if (!ok) {
      const int err = errno != 0 ? errno : EIO;
      std::fclose(log_);  // nothing more goes to it (its buffer is dropped with it)
      log_ = nullptr;
      throw_io("writing " + path_ + " failed at step " + std::to_string(step_ ? *step_ : 0) + ": " +
               errno_string(err) + "; the run stops here (free space on that disk, then resume the run)");
    }
  }

 private:
  std::FILE* out_;
  std::string path_;
  const int64_t* step_;
  std::FILE* log_ = nullptr;
};

// "dp=2 x tp=1 x pp=2"
std::string layout_text(int dp, int tp, int pp);

// Before a run starts (validate_or_throw, on every rank): when it will resume a checkpoint saved under
// another layout, keeps the checkpoint's global batch if the config leaves it to the default (returns
// a note saying so, else ""), and a layout validate() refuses is refused naming the saved and the
// requested layout and the layouts that would work.
std::string prepare_layout_change(RunConfig& cfg, int world_size);

// "63.2 MiB" for an event's words (the exact byte count stays in its fields for programs); the
// string form takes a byte count as text ("N bytes" when it is not a number).
std::string mib_text(double bytes);
std::string mib_text(const std::string& bytes);

struct Loop {
  const TrainOptions& opt;
  RunConfig cfg;
  std::string out_dir;
  comm::DistEnv env;
  std::unique_ptr<comm::ProcessGroup> world;  // null for a single process
  int rank = 0;
  int world_size = 1;
  parallel::RankGrid grid;
  parallel::RankCoord coord;
  parallel::ParallelGroups groups;            // one-rank groups where a degree is 1
  std::unique_ptr<comm::ProcessGroup> embed;  // pp > 2: first and last stage (tied wte)
  ModelDims dims;
  Backend& backend;
  Model model;  // this rank's shard
  std::unique_ptr<DataParallel> dp;
  std::unique_ptr<PipelineRunner> pipeline;  // pp > 1
  // run.device = "cuda" (device_model.h): the steps run there; `model` and dp's moments are its
  // host mirror, refreshed before checkpoints and samples. Null on the CPU path.
  std::unique_ptr<DeviceModel> device;
  std::unique_ptr<DataLoader> train_loader;
  std::unique_ptr<DataLoader> val_loader;
  CheckpointStore store;
  MetricsWriter metrics;
  Progress progress;
  Rng rng;
  Heartbeat heartbeat;
  LrSchedule schedule;
  int64_t step = 0;  // completed optimizer steps
  int64_t tokens = 0;
  int64_t accum = 1;
  int64_t tokens_per_step = 0;
  float best_val = 0;
  double last_save_seconds = -1;
  double peak_flops = 0;
  double flops_per_token = 0;
  double loss_ema = 0;
  // Steps in a row whose loss or gradient norm was not finite (each one's update skipped): the run
  // fails when they reach kNonFiniteLimit or cover the whole run (trainer.cpp).
  int64_t nonfinite_run = 0;
  // A step ran faster than the MFU ceiling allows: the ceiling is wrong (measured under load), so
  // MFU is not reported from then on (null in the records, "n/a" in the text).
  bool ceiling_wrong = false;
  std::string base_fingerprint;  // LoRA: the frozen base's weight files (checkpoints record it)
  int64_t lr_offset = 0;         // negative control "lr": schedule off by one step after resume
  // This step's micro-batches (accum of them, read before the first forward: micro_batch.h), and
  // whether the data has ignored targets (labeled fine-tuning shards) and document positions.
  std::vector<MicroBatch> micro;
  bool labeled = false;
  double step_counted = 0;
  // Training-time samples: the first id, and the ids that end one (set by the first sample()).
  std::optional<std::vector<int32_t>> sample_start;
  std::vector<int32_t> sample_stop_ids;  // targets with a loss in the whole global batch of this step

  Loop(const TrainOptions& o, const RunConfig& c, const std::string& dir, const comm::DistEnv& e,
       std::unique_ptr<comm::ProcessGroup> w);

  bool sharded() const { return cfg.parallel.tp > 1 || cfg.parallel.pp > 1; }
  comm::ProcessGroup* tied_group() const;  // first+last stage group (pp > 1, those stages)

  void barrier();
  std::string broadcast_string(const std::string& s);  // every rank gets rank 0's string

  void setup_groups();
  void setup_data();
  void setup_model();

  // trainer_checkpoint.cpp
  std::string resume();
  void check_trainer_state(const LoadedCheckpoint& ck);  // throws Error(kCheckpoint): damaged
  void apply_checkpoint(const LoadedCheckpoint& ck);
  void restore_own_files(const LoadedCheckpoint& ck);                // the checkpoint's own layout
  void reshard(const LoadedCheckpoint& ck, const TrainerState& st);  // another layout
  TrainerState current_state() const;
  void save(const std::string& reason);
  void agree_on_save(const std::optional<Error>& mine, const std::string& what,
                     const std::function<void()>& cleanup);

  float evaluate();
  void sample();

  // eval.tasks (trainer_tasks.cpp): the tasks loaded once with the run's tokenizer (setup_tasks,
  // after resume); at each evaluation every data-parallel rank runs its share of each task's units
  // on its whole-model replica, the partial sums are added over the DP group and rank 0 writes one
  // task record per task (evaluate_tasks). checkpoint.keep_best: the score it keeps by (keep_metric,
  // "" none), each evaluated step's value of it, and the best saved checkpoint (note_keep_best, at
  // each save, pins it in the store).
  std::vector<eval::TaskPtr> eval_tasks;
  std::string keep_metric;
  bool keep_higher = true;
  std::map<int64_t, double> keep_scores;
  int64_t keep_best_step = -1;
  double keep_best_value = 0;
  void setup_tasks();
  void evaluate_tasks();
  void note_keep_best();  // in save(), before the state is written: this step may become the best
  void restore_keep_best(const TrainerState& st);
  // Reads `count` micro-batches from `loader` into `out`, sets each batch's loss_scale and
  // loss_weight (micro_batch.h; normalised over the DP group when targets are ignored) and returns
  // how the weighted loss sum becomes the mean loss on this rank (before the mean over DP ranks).
  LossMean read_batches(DataLoader& loader, int64_t count, std::vector<MicroBatch>& out);
  void trace_rows(const DataLoader& loader, const std::vector<MicroBatch>& batches) const;  // tests
  StepRecord train_step();
  // The step policy (adamw.h decide_step) at r's step, loss and norm: fills r.lr and r.skipped,
  // logs a skipped step; both branches of the step call it.
  StepDecision decide(StepRecord& r);
  // accum / micro_batches rounds of the pipeline schedule (host model or device stage alike):
  // returns the summed loss (last stage), fills r's data/forward/backward/bubble times.
  // before_last_backward runs before the step's last backward (data-parallel overlap).
  double pipeline_rounds(const std::function<void()>& before_last_backward, StepRecord& r);

  // trainer_device.cpp: the device branch of the step, evaluation and the host mirror.
  StepRecord device_train_step();
  double device_eval_sum(const std::vector<MicroBatch>& batches);  // sum of loss x loss_weight
  void push_to_device();    // host mirror (params, moments) -> device (start, resume)
  void pull_from_device();  // device -> host mirror (checkpoint, sample)
  // {stop, checkpoint, auto save}: stop if any rank was asked to; checkpoint once per new request,
  // however many ranks received it (requests = this rank's checkpoint_request_count()); the
  // checkpoint.every = "auto" save when rank 0's `auto_due` says so.
  std::tuple<bool, bool, bool> exchange(StepRecord& r, bool stop, int requests, bool auto_due = false);
  // checkpoint.every = "auto" (checkpoint_interval.h), rank 0 only: made after resume(); after each
  // step, whether a save is due (a new or changed interval is reported: event and log line).
  std::unique_ptr<CheckpointInterval> auto_interval;
  void start_auto_interval();
  bool auto_interval_due(const StepRecord& r);
  void report_interval(const IntervalChoice& choice);
  int requests_honoured = 0;  // the highest request count any rank had at the last request checkpoint
  double tp_wait_ms() const;  // time blocked in TP collectives since the group was made
};

}  // namespace flotilla::train_detail
