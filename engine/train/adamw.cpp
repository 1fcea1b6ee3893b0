// AdamW over parameter groups, and the step policy (see adamw.h). Non-obvious decision: the
// optimizer walks the flat vector as (offset, count, decay) groups intersected with its own range
// instead of holding per-tensor objects, so one class serves the whole vector, a ZeRO shard (a
// different range over the same groups), the host and a device alike; the decay mask is data.
#include "engine/train/adamw.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/backend/registry.h"
#include "engine/core/error.h"
#include "engine/model/model.h"
#include "engine/model/param_layout.h"

namespace flotilla {

AdamWHyper adamw_hyper(const OptimSection& o, double lr) {
  AdamWHyper h;
  h.lr = static_cast<float>(lr);
  h.beta1 = static_cast<float>(o.beta1);
  h.beta2 = static_cast<float>(o.beta2);
  h.eps = static_cast<float>(o.eps);
  h.weight_decay = static_cast<float>(o.weight_decay);
  return h;
}

std::vector<ParamGroup> param_groups(const ParamLayout& layout, const std::vector<size_t>& sizes) {
  std::vector<ParamGroup> out;
  size_t off = 0;
  for (int i = 0; i < layout.size(); ++i) {
    const size_t n = sizes[static_cast<size_t>(i)];
    if (n > 0) out.push_back(ParamGroup{off, n, layout[i].decays});
    off += n;
  }
  return out;
}

std::vector<ParamGroup> param_groups(const Model& model) {
  std::vector<ParamGroup> out;
  const ParamLayout& layout = model.layout();
  for (int i = 0; i < layout.size(); ++i)
    if (model.param_size(i) > 0)
      out.push_back(ParamGroup{model.param_offset(i), model.param_size(i), layout[i].decays});
  return out;
}

AdamW::AdamW(Backend& backend, std::vector<ParamGroup> groups, size_t begin, size_t count, float* m, float* v)
    : backend_(backend), groups_(std::move(groups)), begin_(begin), count_(count) {
  if ((m == nullptr) != (v == nullptr))
    throw Error(ExitCode::kInternal, "AdamW: give both moment buffers or neither");
  if (m == nullptr) {
    own_m_ = BackendBuffer(backend, count);
    own_v_ = BackendBuffer(backend, count);
    m_ = own_m_.data();
    v_ = own_v_.data();
  } else {
    m_ = m;
    v_ = v;
    backend.fill_zero(m_, count);
    backend.fill_zero(v_, count);
  }
}

void AdamW::step(const Step& s, const AdamWHyper& h, int64_t t) {
  if (t < 1) throw Error(ExitCode::kInternal, "AdamW::step: step " + std::to_string(t) + " must be >= 1");
  const size_t lo = begin_, hi = begin_ + count_;
  for (const ParamGroup& g : groups_) {
    const size_t a = std::max(g.offset, lo), b = std::min(g.offset + g.count, hi);
    if (a >= b) continue;
    const AdamWArgs args{h.lr, h.beta1,      h.beta2,        h.eps, g.decay ? h.weight_decay : 0.0f,
                         t,    s.grad_scale, s.rounding_seed};
    float* m = m_ + (a - lo);
    float* v = v_ + (a - lo);
    const size_t n = b - a, gi = a - s.grad_begin;
    if (s.master == nullptr) {
      if (s.grad_type != DType::kF32)
        throw Error(ExitCode::kInternal, "AdamW::step: fp32 parameters need fp32 gradients");
      backend_.adamw_update(static_cast<float*>(s.params) + a, static_cast<const float*>(s.grads) + gi, m, v,
                            n, args);
    } else if (s.grad_type == DType::kF32) {
      backend_.adamw_update(static_cast<bf16_t*>(s.params) + a, s.master + a,
                            static_cast<const float*>(s.grads) + gi, m, v, n, args);
    } else {
      backend_.adamw_update(static_cast<bf16_t*>(s.params) + a, s.master + a,
                            static_cast<const bf16_t*>(s.grads) + gi, m, v, n, args);
    }
  }
}

void AdamW::step(float* params, const float* grads, const AdamWHyper& h, int64_t t) {
  Step s;
  s.params = params;
  s.grads = grads;
  step(s, h, t);
}

void AdamW::set_moments(const float* m, const float* v) {
  backend_.upload(m_, m, count_ * sizeof(float));
  backend_.upload(v_, v, count_ * sizeof(float));
}

void AdamW::get_moments(float* m, float* v) const {
  backend_.download(m, m_, count_ * sizeof(float));
  backend_.download(v, v_, count_ * sizeof(float));
}

float global_grad_norm(const float* g, size_t n) {
  return static_cast<float>(std::sqrt(get_backend("cpu").sum_squares(g, n)));
}

void scale_grads(float* g, size_t n, float s) { get_backend("cpu").scale_values(g, n, s); }

StepDecision decide_step(const TrainSection& train, int64_t step, float loss, float grad_norm,
                         double loss_ema) {
  StepDecision d;
  // The clip factor in double, rounded once: every path and rank scales by the same float.
  if (train.grad_clip > 0 && grad_norm > train.grad_clip)
    d.grad_scale = static_cast<float>(train.grad_clip / grad_norm);
  const bool spike = train.spike_factor > 0 && loss_ema > 0 && loss > train.spike_factor * loss_ema;
  if (!std::isfinite(loss) || !std::isfinite(grad_norm) || spike) {
    d.skip = true;
    d.why = "step " + std::to_string(step) + ": skipped the update (loss " + std::to_string(loss) +
            ", grad norm " + std::to_string(grad_norm) + ")";
  }
  return d;
}

double next_loss_ema(double loss_ema, float loss) {
  return loss_ema <= 0 ? loss : 0.95 * loss_ema + 0.05 * loss;
}

}  // namespace flotilla
