// The trainer's device branch (run.device = "cuda", or the host reference in tests): one optimizer
// step, evaluation and the host mirror, over the DeviceModel seam (device_model.h).
//
// Non-obvious decision: the step keeps the CPU path's order and arithmetic exactly where the host
// decides anything (loss mean over accumulation steps, the clip test `norm > clip` and the scale
// clip / norm computed in double then rounded to float, the spike guard, the lr schedule), so a
// device run differs from a CPU run only by what the kernels compute, and the host reference
// implementation reproduces the CPU path bit for bit (tests/engine/test_train_device_seam.cpp).
#include <cmath>
#include <string>

#include "engine/cpu/peak.h"
#include "engine/train/trainer_loop.h"

namespace flotilla::train_detail {

void Loop::push_to_device() {
  device->set_params(model.params());
  device->set_moments(dp->m(), dp->v());
}

void Loop::pull_from_device() {
  device->get_params(model.params());
  device->get_moments(dp->m(), dp->v());
}

double Loop::device_eval_sum(const std::vector<MicroBatch>& batches) {  // without pipeline stages
  double sum = 0;
  for (const MicroBatch& mb : batches)
    sum += device->forward(mb.inputs.data(), mb.targets.data(), mb.pos()) * mb.loss_weight;
  return sum;
}

StepRecord Loop::device_train_step() {
  const auto t_step = Clock::now();
  const double tp_wait0 = tp_wait_ms();  // the TP all-reduces inside forward_backward and grad_norm
  StepRecord r;
  r.step = step + 1;
  device->begin_step(r.step, coord.dp);
  double loss_sum = 0;
  const auto t_data = Clock::now();
  const LossMean loss_mean = read_batches(*train_loader, accum, micro);
  r.data_ms = ms_since(t_data);
  double comm_ms = 0;
  if (pipeline) {
    // The CPU path's pipeline branch over the device's stage: accum / micro_batches rounds of the
    // schedule, then the tied wte gradient summed between the first and the last stage.
    device->zero_grad();
    loss_sum = pipeline_rounds(nullptr, r);
    if (comm::ProcessGroup* tied = tied_group()) {
      const auto t0 = Clock::now();
      device->all_reduce_tied_grad(*tied);
      comm_ms += ms_since(t0);
    }
    groups.pp->broadcast(&loss_sum, 1, cfg.parallel.pp - 1);  // the last stage has the loss
  } else {
    for (int64_t k = 0; k < accum; ++k) {
      const MicroBatch& mb = micro[static_cast<size_t>(k)];
      const auto t0 = Clock::now();
      // Forward and backward are one device call; the time is reported as forward.
      loss_sum +=
          device->forward_backward(mb.inputs.data(), mb.targets.data(), mb.loss_scale, k > 0, mb.pos()) *
          mb.loss_weight;
      r.forward_ms += ms_since(t0);
    }
  }
  if (groups.dp->size() > 1) {
    const auto t0 = Clock::now();
    device->average_grads(*groups.dp);
    comm_ms += ms_since(t0);
  }
  r.loss = static_cast<float>(dp->mean(loss_mean.of(loss_sum, accum)));
  const auto t_opt = Clock::now();
  r.grad_norm = device->grad_norm();
  const StepDecision decision = decide(r);
  if (!decision.skip) {
    device->update(adamw_hyper(cfg.optim, r.lr), decision.grad_scale, r.step);
    loss_ema = next_loss_ema(loss_ema, r.loss);
  }
  r.comm_ms = comm_ms + dp->comm_ms() + (tp_wait_ms() - tp_wait0);
  dp->reset_comm_ms();
  r.optimizer_ms = ms_since(t_opt);
  step = r.step;
  tokens += tokens_per_step;
  r.tokens = tokens;
  r.step_ms = ms_since(t_step);
  r.tokens_per_s = static_cast<double>(tokens_per_step) / (r.step_ms / 1000.0);
  r.mfu = cpu::mfu_ratio(flops_per_token * r.tokens_per_s, peak_flops * world_size);
  r.peak_rss_bytes = 0;  // filled by the caller's common code
  for (const DeviceMemory& m : device->memory()) r.gpus.push_back({m.device, m.used_bytes, m.total_bytes});
  return r;
}

}  // namespace flotilla::train_detail
