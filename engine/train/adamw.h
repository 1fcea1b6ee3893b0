// AdamW optimizer state and step (PyTorch semantics), global gradient norm and scaling.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/model/gpt.h"

namespace flotilla {

struct OptimHyper {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled: p -= lr * weight_decay * p, on decaying ranges only
};

OptimHyper optim_hyper(const OptimSection& o);

// A contiguous run of parameters and whether weight decay applies to it.
struct DecayRange {
  size_t offset = 0;
  size_t size = 0;
  bool decay = false;
};

// The whole model's parameter buffer as ranges, one per tensor of its layout, decay as the table says.
std::vector<DecayRange> gpt_decay_ranges(const GptDims& d);

class AdamW {
 public:
  explicit AdamW(size_t n);  // moments zero-initialised

  // One step t >= 1 (1-based, drives the bias correction) over the n parameters; `ranges` must
  // cover [0, n) and says where decay applies. Operation order as torch.optim.AdamW:
  //   p *= 1 - lr*wd (decaying ranges); m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
  //   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
  void step(float* params, const float* grads, const std::vector<DecayRange>& ranges, float lr,
            const OptimHyper& h, int64_t t);

  size_t size() const { return m_.size(); }
  std::vector<float>& m() { return m_; }  // first moments (for checkpoints)
  std::vector<float>& v() { return v_; }  // second moments
  const std::vector<float>& m() const { return m_; }
  const std::vector<float>& v() const { return v_; }

 private:
  std::vector<float> m_, v_;
};

// sqrt(sum g^2), accumulated in double in fixed blocks: identical for any thread count.
float global_grad_norm(const float* g, size_t n);

// g *= s (e.g. clipping: s = clip / norm when norm > clip).
void scale_grads(float* g, size_t n, float s);

}  // namespace flotilla
