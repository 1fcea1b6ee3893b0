// The whole GPT-2 model against a float64 re-implementation written here (from the reference ops):
// loss equal to the double loss, and every parameter tensor's gradient equal to central finite
// differences of the double loss (h = 1e-6) at sampled entries. The model is tiny (L2 C32 H4,
// V100 padded to 128, B2 T8) and its parameters are set to random values of O(0.3) rather than the
// 0.02 initialisation, so attention is far from uniform and every term of every gradient matters.
// Tolerance: error relative to the tensor's largest gradient 2e-5 (measured 2e-7..1e-6 in fp32
// forward/backward through 2 layers); loss 1e-5 relative.
// Also: gradients accumulate and scale with loss_scale; padded vocab rows get exactly zero
// gradient; the loss at GPT-2 initialisation is ln(vocab) within a stated bound.
#include <cmath>
#include <cstdint>
#include <vector>

#include "check.h"
#include "engine/model/gpt.h"
#include "test_gradcheck_util.h"
#include "test_reference_ops.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

constexpr int kB = 2, kT = 8;

struct RefModel {
  ModelDims d;
  std::vector<size_t> off;  // tensor offsets in the flat parameter vector
  std::vector<int32_t> inputs, targets;

  const double* t(const Vec& p, int index) const { return p.data() + off[static_cast<size_t>(index)]; }
  Vec slice(const Vec& p, int index, size_t layer, size_t size) const {
    const double* s = t(p, index) + layer * size;
    return Vec(s, s + size);
  }

  double loss(const Vec& p) const {
    const int C = d.n_embd, L = d.n_layer, V = d.vocab_size, Vp = d.padded_vocab, N = kB * kT;
    const size_t uC = static_cast<size_t>(C);
    Vec x(static_cast<size_t>(N) * uC);
    for (int r = 0; r < N; ++r)
      for (int c = 0; c < C; ++c) x[r * C + c] = t(p, kWte)[inputs[r] * C + c] + t(p, kWpe)[(r % kT) * C + c];
    for (size_t l = 0; l < static_cast<size_t>(L); ++l) {
      const Vec h = ref_layernorm(x, slice(p, kLn1w, l, uC), slice(p, kLn1b, l, uC), N, C);
      const Vec qkv = ref_matmul(h, slice(p, kQkvw, l, 3 * uC * uC), slice(p, kQkvb, l, 3 * uC), N, C, 3 * C);
      const Vec att = ref_attention(qkv, kB, kT, C, d.n_head);
      const Vec proj = ref_matmul(att, slice(p, kAttprojw, l, uC * uC), slice(p, kAttprojb, l, uC), N, C, C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
      const Vec h2 = ref_layernorm(x, slice(p, kLn2w, l, uC), slice(p, kLn2b, l, uC), N, C);
      Vec f = ref_matmul(h2, slice(p, kFcw, l, 4 * uC * uC), slice(p, kFcb, l, 4 * uC), N, C, 4 * C);
      for (double& v : f) v = ref_gelu(v);
      const Vec proj2 =
          ref_matmul(f, slice(p, kFcprojw, l, 4 * uC * uC), slice(p, kFcprojb, l, uC), N, 4 * C, C);
      for (size_t i = 0; i < x.size(); ++i) x[i] += proj2[i];
    }
    const Vec xf = ref_layernorm(x, slice(p, kLnfw, 0, uC), slice(p, kLnfb, 0, uC), N, C);
    const Vec logits = ref_matmul(xf, slice(p, kWte, 0, static_cast<size_t>(Vp) * uC), Vec(), N, C, Vp);
    double sum = 0;
    for (double l : ref_ce(logits, targets, N, V, Vp)) sum += l;
    return sum / N;
  }
};

void test_gradients() {
  ModelDims d;
  d.n_layer = 2;
  d.n_head = 4;
  d.n_embd = 32;
  d.vocab_size = 100;
  d.padded_vocab = pad_vocab(d.vocab_size);
  d.max_seq_len = 8;
  Model model(d);
  model.init_random(5);
  Rng rng(99);
  const auto sizes = param_sizes(d);
  for (int i = 0; i < kNumParamTensors; ++i) {
    float* t = model.param_tensor(i);
    size_t n = sizes[static_cast<size_t>(i)];
    if (i == kWte) n = static_cast<size_t>(d.vocab_size) * static_cast<size_t>(d.n_embd);  // padding stays 0
    const bool ln_weight = i == kLn1w || i == kLn2w || i == kLnfw;
    const auto r = random_vec(rng, n, -0.3f, 0.3f);
    for (size_t j = 0; j < n; ++j) t[j] = ln_weight ? 1.0f + r[j] : r[j];
  }
  RefModel ref;
  ref.d = d;
  for (int i = 0; i < kNumParamTensors; ++i) ref.off.push_back(model.param_offset(i));
  for (int i = 0; i < kB * kT; ++i) {
    ref.inputs.push_back(static_cast<int32_t>(rng.below(100)));
    ref.targets.push_back(static_cast<int32_t>(rng.below(100)));
  }

  model.zero_grad();
  const float loss = model.forward(ref.inputs.data(), ref.targets.data(), kB, kT);
  model.backward(1.0f);
  const Vec p(model.params(), model.params() + model.num_params());
  const double ref_loss = ref.loss(p);
  CHECK_MSG(std::fabs(loss - ref_loss) <= 1e-5 * ref_loss, "loss %.9g vs float64 %.9g", loss, ref_loss);

  const std::vector<float> g1(model.grads(), model.grads() + model.num_params());
  Rng pick(3);
  for (int i = 0; i < kNumParamTensors; ++i) {
    const size_t off = model.param_offset(i);
    size_t n = sizes[static_cast<size_t>(i)];
    if (i == kWpe) n = static_cast<size_t>(kT) * static_cast<size_t>(d.n_embd);
    if (i == kWte) n = static_cast<size_t>(d.vocab_size) * static_cast<size_t>(d.n_embd);
    auto idx = sample_indices(pick, n, 48);
    for (auto& k : idx) k += off;
    const Vec fd = finite_diff([&](const Vec& v) { return ref.loss(v); }, p, idx);
    const double e = rel_err(gather(g1, idx), fd);
    CHECK_MSG(e <= 2e-5, "%s gradient rel err %g", param_name(i), e);
  }
  bool pad_zero = true;
  const float* gwte = model.grad_tensor(kWte);
  for (size_t j = static_cast<size_t>(d.vocab_size) * d.n_embd; j < sizes[kWte]; ++j)
    pad_zero = pad_zero && gwte[j] == 0;
  CHECK(pad_zero);

  // Accumulation and loss_scale: a second forward/backward(0.5) adds half the gradient again.
  model.forward(ref.inputs.data(), ref.targets.data(), kB, kT);
  model.backward(0.5f);
  double worst = 0, scale = 0;
  for (size_t j = 0; j < g1.size(); ++j) {
    worst = std::max(worst, std::fabs(model.grads()[j] - 1.5 * g1[j]));
    scale = std::max(scale, std::fabs(1.5 * g1[j]));
  }
  CHECK_MSG(worst <= 1e-6 * scale, "accumulated gradient off by %g (scale %g)", worst, scale);
  CHECK_THROWS(model.backward(1.0f), "needs a preceding forward");
}

// With N(0, 0.02) weights and unit-variance LayerNorm outputs the logits have standard deviation
// about 0.02 * sqrt(C), so the expected loss is ln V + (0.02^2 C) / 2 = ln V + 0.013 for C = 64.
// The bound 0.05 leaves room for the sampling noise of 128 tokens and nothing for a broken init.
void test_initial_loss() {
  ModelDims d;
  d.n_layer = 2;
  d.n_head = 4;
  d.n_embd = 64;
  d.vocab_size = 50257;
  d.padded_vocab = pad_vocab(d.vocab_size);
  d.max_seq_len = 64;
  Model model(d);
  model.init_random(1337);
  const int B = 2, T = 64;
  Rng rng(8);
  std::vector<int32_t> tok(B * T + 1);
  for (auto& x : tok) x = static_cast<int32_t>(rng.below(50257));
  const float loss = model.forward(tok.data(), tok.data() + 1, B, T);
  CHECK_MSG(std::fabs(loss - std::log(50257.0)) < 0.05, "initial loss %.4f vs ln(50257) = %.4f", loss,
            std::log(50257.0));
  CHECK(model.activation_bytes() == activation_floats(d, B, T) * sizeof(float));
  // Bad inputs are runtime errors naming the fault, not crashes.
  tok[5] = 50257;
  CHECK_THROWS(model.forward(tok.data(), nullptr, B, T), "outside the vocabulary");
  CHECK_THROWS(model.forward(tok.data(), nullptr, 1, 65), "max_seq_len");
}

}  // namespace

int main() {
  test_gradients();
  test_initial_loss();
  return flotilla_test::summary("model_gradcheck");
}
