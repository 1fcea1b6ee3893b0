// Pipeline parallelism: the GPipe and 1F1B schedules and the runner that executes one stage's
// part of a step over the PP group.
//
//   gpipe: every forward (micro-batches 0..m-1), then every backward (0..m-1); a stage keeps m
//          activation sets.
//   1f1b:  stage s runs w = min(p-s-1, m) warm-up forwards, then alternates one forward and one
//          backward, then cools down with the remaining w backwards; it keeps at most p-s sets.
// Backwards run in ascending micro-batch order in both, so gradients accumulate in the same order
// as sequential gradient accumulation on one process.
//
// One non-obvious decision: activations and gradients are sent asynchronously and only receives
// block (a send is waited for before its buffer's slot is reused, and at the end of the step).
// A stage then never waits on a send while its neighbour waits on a receive, so neither schedule
// needs the paired send-and-receive operations Megatron uses to avoid deadlock, and the time a
// stage spends blocked in receives and unfinished sends is exactly its pipeline bubble.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/comm/process_group.h"
#include "engine/model/gpt.h"
#include "engine/model/param_layout.h"
#include "engine/train/micro_batch.h"

namespace flotilla {

struct PipeAction {
  bool forward = true;
  int micro = 0;
  bool operator==(const PipeAction& o) const { return forward == o.forward && micro == o.micro; }
};

// The forward/backward order of `stage` among `stages` for `micro` micro-batches; kind is
// "gpipe" or "1f1b".
std::vector<PipeAction> pipeline_schedule(const std::string& kind, int stages, int stage, int micro);
// Activation sets the stage keeps at once under that schedule (its most micro-batches in flight).
int pipeline_slots(const std::string& kind, int stages, int stage, int micro);
// "F0 F1 B0 F2 B1 B2": for tests and logs.
std::string describe_schedule(const std::vector<PipeAction>& actions);

// What the runner drives: one stage's model, on the host (Model) or a device (GpuTrainer through
// the trainer's DeviceModel). Boundary buffers are (B*T, C) floats in the stage's own memory; the
// ProcessGroup sends and receives host or device buffers alike.
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  virtual const ModelDims& dims() const = 0;
  virtual const ModelShard& shard() const = 0;
  // Activation sets the schedule keeps at once (called once, before the first forward).
  virtual void set_activation_slots(int slots) = 0;
  // Model::forward_stage / stage_output / backward_stage / stage_input_grad, for B x T
  // (positions: Model's, or null).
  virtual float forward_stage(int slot, const int32_t* inputs, const float* stage_in, const int32_t* targets,
                              const int32_t* positions) = 0;
  virtual const float* stage_output(int slot) = 0;
  virtual void backward_stage(int slot, const float* dout, float loss_scale) = 0;
  virtual const float* stage_input_grad() = 0;
  // Where to receive the previous stage's output / the next stage's d(input).
  virtual float* receive_buffer(bool grad) = 0;
};

class PipelineRunner {
 public:
  // pp: the PP group (stage = pp.rank()); the model must be that stage's shard. B x T per micro-batch.
  PipelineRunner(Model& model, comm::ProcessGroup& pp, std::string schedule, int micro_batches, int B, int T);
  // The same over any stage (not owned; run.device = "cuda": the device model's stage).
  PipelineRunner(PipelineStage& stage, comm::ProcessGroup& pp, std::string schedule, int micro_batches, int B,
                 int T);
  ~PipelineRunner();
  PipelineRunner(const PipelineRunner&) = delete;
  PipelineRunner& operator=(const PipelineRunner&) = delete;

  struct Timing {
    double data_ms = 0, forward_ms = 0, backward_ms = 0, bubble_ms = 0;
  };

  // One schedule over micro_batches micro-batches: batches[0 .. micro_batches) (every stage holds
  // the same ones: the trainer reads them on every rank); before_last_backward runs right before
  // this stage's last backward (data-parallel overlap). Gradients accumulate with each batch's
  // loss_scale. Returns the sum of loss x loss_weight over the micro-batches on the last stage,
  // 0 elsewhere.
  double run(const MicroBatch* batches, const std::function<void()>& before_last_backward, Timing& timing);

  // Forward only over `count` batches one after another (evaluation). Returns the sum of
  // loss x loss_weight on the last stage, 0 elsewhere.
  double forward_only(const MicroBatch* batches, int count);

 private:
  void wait_slot(int slot, Timing& timing);

  std::unique_ptr<PipelineStage> host_;  // the Model adapter, when constructed from a Model
  PipelineStage& model_;
  comm::ProcessGroup& pp_;
  std::string schedule_;
  int micro_;
  int B_, T_;
  int stage_, stages_;
  size_t nc_;
  std::vector<std::vector<std::unique_ptr<comm::Work>>> pending_;  // per slot: sends in flight
};

}  // namespace flotilla
