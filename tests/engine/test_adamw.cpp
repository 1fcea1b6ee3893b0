// The one AdamW against a hand-written float64 reference of torch.optim.AdamW (bias correction, eps
// outside sqrt(v_hat), decoupled decay lr*wd*p) over three steps, with decay only on the groups
// marked as decaying; ZeRO ranges and in-kernel gradient scaling bitwise equal to the whole
// vector and pre-scaled gradients; the GPT-2 decay mask; the step policy (clip, skip); the global
// gradient norm against a double sum and its independence from the thread count; gradient scaling.
#include <omp.h>

#include <cmath>
#include <vector>

#include <cstring>

#include "check.h"
#include "engine/backend/registry.h"
#include "engine/model/gpt.h"
#include "engine/train/adamw.h"
#include "test_gradcheck_util.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

struct RefAdamW {
  std::vector<double> m, v;
  void step(std::vector<double>& p, const std::vector<float>& g, const std::vector<ParamGroup>& groups,
            double lr, const AdamWHyper& h, int t) {
    const double b1 = h.beta1, b2 = h.beta2;
    for (const auto& r : groups)
      for (size_t i = r.offset; i < r.offset + r.count; ++i) {
        const double wd = r.decay ? h.weight_decay : 0.0;
        m[i] = b1 * m[i] + (1 - b1) * g[i];
        v[i] = b2 * v[i] + (1 - b2) * static_cast<double>(g[i]) * g[i];
        const double m_hat = m[i] / (1 - std::pow(b1, t));
        const double v_hat = v[i] / (1 - std::pow(b2, t));
        p[i] -= lr * (m_hat / (std::sqrt(v_hat) + h.eps) + wd * p[i]);
      }
  }
};

AdamWHyper hyper() {
  AdamWHyper h;
  h.lr = 1e-2f;
  h.beta1 = 0.9f;
  h.beta2 = 0.95f;
  h.eps = 1e-8f;
  h.weight_decay = 0.1f;
  return h;
}

// Three groups: decaying, not decaying, decaying; odd sizes for SIMD tails.
const std::vector<ParamGroup> kGroups = {{0, 1001, true}, {1001, 999, false}, {2000, 1000, true}};

void test_step_matches_reference() {
  const size_t n = 3000;
  Rng rng(17);
  auto params = random_vec(rng, n);
  std::vector<double> ref(params.begin(), params.end());
  const AdamWHyper h = hyper();
  Backend& cpu = get_backend("cpu");
  AdamW opt(cpu, kGroups, 0, n);
  RefAdamW r{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  for (int t = 1; t <= 3; ++t) {
    const auto g = random_vec(rng, n, -0.1f, 0.1f);
    opt.step(params.data(), g.data(), h, t);
    r.step(ref, g, kGroups, h.lr, h, t);
  }
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(params[i] - ref[i]));
  // Each step moves a parameter by about lr = 1e-2; fp32 rounding of p (|p| <= 1) is ~6e-8.
  CHECK_MSG(worst <= 5e-7, "AdamW differs from the float64 reference by %g", worst);
  CHECK(std::fabs(opt.m()[5] - r.m[5]) <= 1e-7 && std::fabs(opt.v()[5] - r.v[5]) <= 1e-9);

  // Decay really applies only where marked: with zero gradients, a decaying parameter shrinks
  // by exactly (1 - lr*wd) and a non-decaying one does not move.
  AdamW fresh(cpu, kGroups, 0, n);
  std::vector<float> p2(n, 0.5f), zero(n, 0.0f);
  fresh.step(p2.data(), zero.data(), h, 1);
  CHECK_NEAR(p2[0], 0.5f * (1.0f - h.lr * h.weight_decay), 1e-7);
  CHECK(p2[1500] == 0.5f);
  CHECK_NEAR(p2[2999], 0.5f * (1.0f - h.lr * h.weight_decay), 1e-7);
  CHECK_THROWS(fresh.step(p2.data(), zero.data(), h, 0), "must be >= 1");
}

// ZeRO: two optimizers over halves of the same vector (the second with gradients indexed from its
// own start, as a reduce-scattered shard) give bitwise the whole-vector optimizer's result; and a
// grad_scale applied in the kernel is bitwise the gradients scaled first (the clipping path).
void test_ranges_and_scale() {
  const size_t n = 3000, half = 1500;
  Rng rng(5);
  const auto init = random_vec(rng, n);
  const AdamWHyper h = hyper();
  Backend& cpu = get_backend("cpu");
  std::vector<float> whole = init, split = init, in_kernel = init, prescaled = init;
  AdamW a(cpu, kGroups, 0, n), lo(cpu, kGroups, 0, half), hi(cpu, kGroups, half, half);
  AdamW sc(cpu, kGroups, 0, n), pre(cpu, kGroups, 0, n);
  for (int t = 1; t <= 3; ++t) {
    auto g = random_vec(rng, n, -0.1f, 0.1f);
    a.step(whole.data(), g.data(), h, t);
    lo.step(split.data(), g.data(), h, t);
    AdamW::Step s;
    s.params = split.data();
    s.grads = g.data() + half;
    s.grad_begin = half;
    hi.step(s, h, t);
    AdamW::Step k;
    k.params = in_kernel.data();
    k.grads = g.data();
    k.grad_scale = 0.37f;
    sc.step(k, h, t);
    for (float& x : g) x *= 0.37f;
    pre.step(prescaled.data(), g.data(), h, t);
  }
  CHECK(std::memcmp(whole.data(), split.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(a.m(), lo.m(), half * sizeof(float)) == 0 &&
        std::memcmp(a.m() + half, hi.m(), half * sizeof(float)) == 0);
  CHECK(std::memcmp(in_kernel.data(), prescaled.data(), n * sizeof(float)) == 0);
  // Host copies of the moments round-trip.
  std::vector<float> m(n), v(n);
  a.get_moments(m.data(), v.data());
  AdamW back(cpu, kGroups, 0, n);
  back.set_moments(m.data(), v.data());
  CHECK(std::memcmp(back.v(), a.v(), n * sizeof(float)) == 0);
}

void test_param_groups() {
  ModelDims d;
  d.n_layer = 2;
  d.n_head = 2;
  d.n_embd = 16;
  d.vocab_size = 100;
  d.padded_vocab = pad_vocab(100);
  d.max_seq_len = 32;
  Model model(d);
  const auto groups = param_groups(model);
  CHECK(groups.size() == static_cast<size_t>(kNumParamTensors));
  size_t end = 0;
  bool contiguous = true;
  for (const auto& r : groups) {
    contiguous = contiguous && r.offset == end;
    end = r.offset + r.count;
  }
  CHECK(contiguous && end == num_parameters(d));
  // 2-D weights and embeddings decay; biases and LayerNorm parameters do not.
  CHECK(groups[kWte].decay && groups[kWpe].decay && groups[kQkvw].decay && groups[kAttprojw].decay &&
        groups[kFcw].decay && groups[kFcprojw].decay);
  CHECK(!groups[kLn1w].decay && !groups[kLn1b].decay && !groups[kQkvb].decay && !groups[kAttprojb].decay &&
        !groups[kLn2w].decay && !groups[kFcb].decay && !groups[kFcprojb].decay && !groups[kLnfw].decay &&
        !groups[kLnfb].decay);
  // The layout-and-sizes form gives the same groups.
  const auto same = param_groups(model.layout(), param_sizes(d));
  CHECK(same.size() == groups.size() && same[kFcw].offset == groups[kFcw].offset);
}

// The step policy both trainer branches apply.
void test_step_policy() {
  TrainSection t;
  t.grad_clip = 1.0;
  t.spike_factor = 0;
  StepDecision d = decide_step(t, 3, 2.0f, 0.5f, 0);
  CHECK(!d.skip && d.grad_scale == 1.0f);
  d = decide_step(t, 3, 2.0f, 4.0f, 0);
  CHECK(!d.skip && d.grad_scale == static_cast<float>(1.0 / 4.0f));
  d = decide_step(t, 7, std::nanf(""), 4.0f, 0);
  CHECK(d.skip && d.why.find("step 7") != std::string::npos);
  d = decide_step(t, 7, 2.0f, INFINITY, 0);
  CHECK(d.skip);
  t.grad_clip = 0;
  d = decide_step(t, 3, 2.0f, 40.0f, 0);
  CHECK(d.grad_scale == 1.0f);
  t.spike_factor = 3.0;
  CHECK(decide_step(t, 9, 7.0f, 1.0f, 2.0).skip);   // 7 > 3 x 2
  CHECK(!decide_step(t, 9, 5.0f, 1.0f, 2.0).skip);  // 5 <= 6
  CHECK(!decide_step(t, 1, 50.0f, 1.0f, 0).skip);   // no running mean yet
  CHECK(next_loss_ema(0, 2.0f) == 2.0 && std::fabs(next_loss_ema(2.0, 4.0f) - 2.1) < 1e-12);
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
  test_ranges_and_scale();
  test_param_groups();
  test_step_policy();
  test_grad_norm_and_scale();
  return flotilla_test::summary("adamw");
}
