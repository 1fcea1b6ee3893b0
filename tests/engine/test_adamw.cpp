// AdamW against a hand-written float64 reference of torch.optim.AdamW (bias correction, eps
// outside sqrt(v_hat), decoupled decay lr*wd*p) over three steps, with decay only on the ranges
// marked as decaying; the GPT-2 decay mask; the global gradient norm against a double sum and its
// independence from the thread count; gradient scaling.
#include <omp.h>

#include <cmath>
#include <vector>

#include "check.h"
#include "engine/train/adamw.h"
#include "test_gradcheck_util.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

struct RefAdamW {
  std::vector<double> m, v;
  void step(std::vector<double>& p, const std::vector<float>& g, const std::vector<DecayRange>& ranges,
            double lr, const OptimHyper& h, int t) {
    const double b1 = h.beta1, b2 = h.beta2;
    for (const auto& r : ranges)
      for (size_t i = r.offset; i < r.offset + r.size; ++i) {
        const double wd = r.decay ? h.weight_decay : 0.0;
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * static_cast<double>(g[i]) * g[i];
        const double m_hat = m[i] / (1 - std::pow(b1, t));
        const double v_hat = v[i] / (1 - std::pow(b2, t));
        p[i] -= lr * (m_hat / (std::sqrt(v_hat) + h.eps) + wd * p[i]);
      }
  }
};

void test_step_matches_reference() {
  const size_t n = 3000;
  Rng rng(17);
  auto params = random_vec(rng, n);
  std::vector<double> ref(params.begin(), params.end());
  // Three ranges: decaying, not decaying, decaying; odd sizes for SIMD tails.
  const std::vector<DecayRange> ranges = {{0, 1001, true}, {1001, 999, false}, {2000, 1000, true}};
  OptimHyper h;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  const float lr = 1e-2f;
  AdamW opt(n);
  RefAdamW r{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  for (int t = 1; t <= 3; ++t) {
    const auto g = random_vec(rng, n, -0.1f, 0.1f);
    opt.step(params.data(), g.data(), ranges, lr, h, t);
    r.step(ref, g, ranges, lr, h, t);
  }
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(params[i] - ref[i]));
  // Each step moves a parameter by about lr = 1e-2; fp32 rounding of p (|p| <= 1) is ~6e-8.
  CHECK_MSG(worst <= 5e-7, "AdamW differs from the float64 reference by %g", worst);
  CHECK(std::fabs(opt.m()[5] - r.m[5]) <= 1e-7 && std::fabs(opt.v()[5] - r.v[5]) <= 1e-9);

  // Decay really applies only where marked: with zero gradients, a decaying parameter shrinks
  // by exactly (1 - lr*wd) and a non-decaying one does not move.
  AdamW fresh(n);
  std::vector<float> p2(n, 0.5f), zero(n, 0.0f);
  fresh.step(p2.data(), zero.data(), ranges, lr, h, 1);
  CHECK_NEAR(p2[0], 0.5f * (1.0f - lr * h.weight_decay), 1e-7);
  CHECK(p2[1500] == 0.5f);
  CHECK_NEAR(p2[2999], 0.5f * (1.0f - lr * h.weight_decay), 1e-7);
  CHECK_THROWS(fresh.step(p2.data(), zero.data(), ranges, lr, h, 0), "must be >= 1");
}

void test_gpt_decay_ranges() {
  GptDims d;
  d.n_layer = 2;
  d.n_head = 2;
  d.n_embd = 16;
  d.vocab_size = 100;
  d.padded_vocab = pad_vocab(100);
  d.max_seq_len = 32;
  const auto ranges = gpt_decay_ranges(d);
  CHECK(ranges.size() == static_cast<size_t>(kNumParamTensors));
  size_t end = 0;
  bool contiguous = true;
  for (const auto& r : ranges) {
    contiguous = contiguous && r.offset == end;
    end = r.offset + r.size;
  }
  CHECK(contiguous && end == num_parameters(d));
  // 2-D weights and embeddings decay; biases and LayerNorm parameters do not.
  CHECK(ranges[kWte].decay && ranges[kWpe].decay && ranges[kQkvw].decay && ranges[kAttprojw].decay &&
        ranges[kFcw].decay && ranges[kFcprojw].decay);
  CHECK(!ranges[kLn1w].decay && !ranges[kLn1b].decay && !ranges[kQkvb].decay && !ranges[kAttprojb].decay &&
        !ranges[kLn2w].decay && !ranges[kFcb].decay && !ranges[kFcprojb].decay && !ranges[kLnfw].decay &&
        !ranges[kLnfb].decay);
}

void test_grad_norm_and_scale() {
  const size_t n = 100003;  // several 16384-element blocks and a ragged tail
  Rng rng(23);
  auto g = random_vec(rng, n, -2, 2);
  double ref = 0;
  for (float x : g) ref += static_cast<double>(x) * x;
  ref = std::sqrt(ref);
  const float norm = global_grad_norm(g.data(), n);
  CHECK_NEAR(norm, ref, 1e-6 * ref);
  omp_set_num_threads(1);
  const float norm1 = global_grad_norm(g.data(), n);
  omp_set_num_threads(2);
  const float norm2 = global_grad_norm(g.data(), n);
  CHECK(norm1 == norm2);  // bitwise: the blocks, not the threads, fix the summation order
  auto scaled = g;
  scale_grads(scaled.data(), n, 0.25f);
  bool ok = true;
  for (size_t i = 0; i < n; ++i) ok = ok && scaled[i] == g[i] * 0.25f;
  CHECK(ok);
}

}  // namespace

int main() {
  test_step_matches_reference();
  test_gpt_decay_ranges();
  test_grad_norm_and_scale();
  return flotilla_test::summary("adamw");
}
