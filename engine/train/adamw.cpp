// AdamW over the flat parameter buffer. Non-obvious decision: the optimizer walks the buffer as
// a list of (offset, size, decay) ranges instead of holding per-tensor objects, so it works on any
// flat layout (a ZeRO shard is just a different range list) and the decay mask is data, testable
// on its own. The arithmetic runs in the backend's adamw kernel.
#include "engine/train/adamw.h"

#include <cmath>
#include <string>

#include "engine/backend/registry.h"
#include "engine/core/error.h"

namespace flotilla {

OptimHyper optim_hyper(const OptimSection& o) {
  OptimHyper h;
  h.beta1 = static_cast<float>(o.beta1);
  h.beta2 = static_cast<float>(o.beta2);
  h.eps = static_cast<float>(o.eps);
  h.weight_decay = static_cast<float>(o.weight_decay);
  return h;
}

std::vector<DecayRange> gpt_decay_ranges(const GptDims& d) {
  std::vector<DecayRange> ranges;
  const ParamLayout layout(d);
  size_t off = 0;
  for (int i = 0; i < layout.size(); ++i) {
    const size_t n = layout.full_size(i);
    ranges.push_back(DecayRange{off, n, layout[i].decays});
    off += n;
  }
  return ranges;
}

AdamW::AdamW(size_t n) : m_(n, 0.0f), v_(n, 0.0f) {}

void AdamW::step(float* params, const float* grads, const std::vector<DecayRange>& ranges, float lr,
                 const OptimHyper& h, int64_t t) {
  if (t < 1) throw Error(ExitCode::kInternal, "AdamW::step: step " + std::to_string(t) + " must be >= 1");
  Backend& be = get_backend("cpu");
  for (const DecayRange& r : ranges) {
    if (r.offset + r.size > m_.size())
      throw Error(ExitCode::kInternal, "AdamW::step: range [" + std::to_string(r.offset) + ", " +
                                           std::to_string(r.offset + r.size) + ") exceeds " +
                                           std::to_string(m_.size()) + " parameters");
    be.adamw_update(params + r.offset, grads + r.offset, m_.data() + r.offset, v_.data() + r.offset, r.size,
                    lr, h.beta1, h.beta2, h.eps, r.decay ? h.weight_decay : 0.0f, t);
  }
}

float global_grad_norm(const float* g, size_t n) {
  return static_cast<float>(std::sqrt(get_backend("cpu").sum_squares(g, n)));
}

void scale_grads(float* g, size_t n, float s) { get_backend("cpu").scale_values(g, n, s); }

}  // namespace flotilla
