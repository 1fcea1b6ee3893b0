// Pipeline schedules and the stage runner (see pipeline.h for the send/receive decision).
#include "engine/parallel/pipeline.h"

#include <algorithm>
#include <chrono>

#include "engine/core/error.h"
#include "engine/model/param_layout.h"

namespace flotilla {
namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Model behind PipelineStage, with host receive buffers.
class HostStage final : public PipelineStage {
 public:
  HostStage(Model& model, int B, int T)
      : model_(model),
        B_(B),
        T_(T),
        act_in_(static_cast<size_t>(B) * static_cast<size_t>(T) * static_cast<size_t>(model.dims().n_embd)),
        grad_in_(act_in_.size()) {}
  const ModelDims& dims() const override { return model_.dims(); }
  const ModelShard& shard() const override { return model_.shard(); }
  void set_activation_slots(int slots) override { model_.set_activation_slots(slots); }
  float forward_stage(int slot, const int32_t* inputs, const float* stage_in, const int32_t* targets,
                      const int32_t* positions) override {
    return model_.forward_stage(slot, inputs, stage_in, targets, B_, T_, positions);
  }
  const float* stage_output(int slot) override { return model_.stage_output(slot); }
  void backward_stage(int slot, const float* dout, float loss_scale) override {
    model_.backward_stage(slot, dout, loss_scale);
  }
  const float* stage_input_grad() override { return model_.stage_input_grad(); }
  float* receive_buffer(bool grad) override { return grad ? grad_in_.data() : act_in_.data(); }

 private:
  Model& model_;
  int B_, T_;
  std::vector<float> act_in_, grad_in_;
};
}  // namespace

std::vector<PipeAction> pipeline_schedule(const std::string& kind, int stages, int stage, int micro) {
  if (stages < 1 || stage < 0 || stage >= stages || micro < 1)
    throw Error(ExitCode::kInternal, "pipeline_schedule: stage " + std::to_string(stage) + " of " +
                                         std::to_string(stages) + ", " + std::to_string(micro) +
                                         " micro-batches");
  std::vector<PipeAction> out;
  if (kind == "gpipe") {
    for (int i = 0; i < micro; ++i) out.push_back({true, i});
    for (int i = 0; i < micro; ++i) out.push_back({false, i});
    return out;
  }
  if (kind != "1f1b") throw_config("parallel.schedule \"" + kind + "\" is not one of gpipe, 1f1b");
  const int warmup = std::min(stages - stage - 1, micro);
  for (int i = 0; i < warmup; ++i) out.push_back({true, i});
  for (int i = 0; i < micro - warmup; ++i) {
    out.push_back({true, warmup + i});
    out.push_back({false, i});
  }
  for (int i = micro - warmup; i < micro; ++i) out.push_back({false, i});
  return out;
}

int pipeline_slots(const std::string& kind, int stages, int stage, int micro) {
  int in_flight = 0, most = 0;
  for (const PipeAction& a : pipeline_schedule(kind, stages, stage, micro)) {
    in_flight += a.forward ? 1 : -1;
    most = std::max(most, in_flight);
  }
  return most;
}

std::string describe_schedule(const std::vector<PipeAction>& actions) {
  std::string out;
  for (const PipeAction& a : actions) {
    if (!out.empty()) out += ' ';
    out.push_back(a.forward ? 'F' : 'B');
    out.append(std::to_string(a.micro));
  }
  return out;
}

PipelineRunner::PipelineRunner(Model& model, comm::ProcessGroup& pp, std::string schedule, int micro_batches,
                               int B, int T)
    : PipelineRunner(*new HostStage(model, B, T), pp, std::move(schedule), micro_batches, B, T) {
  host_.reset(&model_);
}

PipelineRunner::PipelineRunner(PipelineStage& model, comm::ProcessGroup& pp, std::string schedule,
                               int micro_batches, int B, int T)
    : model_(model),
      pp_(pp),
      schedule_(std::move(schedule)),
      micro_(micro_batches),
      B_(B),
      T_(T),
      stage_(pp.rank()),
      stages_(pp.size()) {
  if (model.shard().pp != stages_ || model.shard().stage != stage_)
    throw Error(ExitCode::kInternal, "PipelineRunner: model shard " + model.shard().describe() +
                                         " does not match PP group rank " + std::to_string(stage_) + " of " +
                                         std::to_string(stages_));
  const size_t n = static_cast<size_t>(B) * static_cast<size_t>(T);
  nc_ = n * static_cast<size_t>(model.dims().n_embd);
  const int slots = pipeline_slots(schedule_, stages_, stage_, micro_);
  model_.set_activation_slots(slots);
  pending_.resize(static_cast<size_t>(slots));
}

PipelineRunner::~PipelineRunner() {
  for (auto& list : pending_)
    for (auto& w : list) {
      try {
        w->wait();
      } catch (...) {  // the group is poisoned and the trainer reports the failure
      }
    }
}

void PipelineRunner::wait_slot(int slot, Timing& timing) {
  auto& list = pending_[static_cast<size_t>(slot)];
  if (list.empty()) return;
  const auto t0 = Clock::now();
  for (auto& w : list) w->wait();
  list.clear();
  timing.bubble_ms += ms_since(t0);
}

double PipelineRunner::run(const MicroBatch* batches, const std::function<void()>& before_last_backward,
                           Timing& timing) {
  const bool first = stage_ == 0, last = stage_ == stages_ - 1;
  const int slots = static_cast<int>(pending_.size());
  double loss_sum = 0;
  int backwards_left = micro_;
  for (const PipeAction& a : pipeline_schedule(schedule_, stages_, stage_, micro_)) {
    const int slot = a.micro % slots;
    const MicroBatch& mb = batches[a.micro];
    if (a.forward) {
      wait_slot(slot, timing);
      auto t0 = Clock::now();
      if (!first) {
        pp_.recv(model_.receive_buffer(false), nc_, stage_ - 1);
        timing.bubble_ms += ms_since(t0);
      }
      t0 = Clock::now();
      const float loss =
          model_.forward_stage(slot, mb.inputs.data(), first ? nullptr : model_.receive_buffer(false),
                               mb.targets.data(), mb.pos());
      timing.forward_ms += ms_since(t0);
      if (last)
        loss_sum += loss * mb.loss_weight;
      else
        pending_[static_cast<size_t>(slot)].push_back(
            pp_.send_async(model_.stage_output(slot), nc_, stage_ + 1));
    } else {
      auto t0 = Clock::now();
      if (!last) {
        pp_.recv(model_.receive_buffer(true), nc_, stage_ + 1);
        timing.bubble_ms += ms_since(t0);
      }
      if (--backwards_left == 0 && before_last_backward) before_last_backward();
      t0 = Clock::now();
      model_.backward_stage(slot, last ? nullptr : model_.receive_buffer(true), mb.loss_scale);
      timing.backward_ms += ms_since(t0);
      if (!first)
        pending_[static_cast<size_t>(slot)].push_back(
            pp_.send_async(model_.stage_input_grad(), nc_, stage_ - 1));
    }
  }
  for (int k = 0; k < slots; ++k) wait_slot(k, timing);
  return loss_sum;
}

double PipelineRunner::forward_only(const MicroBatch* batches, int count) {
  const bool first = stage_ == 0, last = stage_ == stages_ - 1;
  double loss_sum = 0;
  for (int b = 0; b < count; ++b) {
    const MicroBatch& mb = batches[b];
    if (!first) pp_.recv(model_.receive_buffer(false), nc_, stage_ - 1);
    const float loss = model_.forward_stage(
        0, mb.inputs.data(), first ? nullptr : model_.receive_buffer(false), mb.targets.data(), mb.pos());
    if (last)
      loss_sum += loss * mb.loss_weight;
    else
      pp_.send(model_.stage_output(0), nc_, stage_ + 1);
  }
  return loss_sum;
}

}  // namespace flotilla
