// Every CPU kernel family against a float64 reference written here: the forward against the
// double forward, and the backward against central finite differences (h = 1e-6) of
// J = sum(dout * forward(x)) computed in double. Inputs are random and never zero; shapes are
// odd-sized so thread slices, SIMD tails and attention's 64-row query blocks all get exercised.
// Tolerances (error relative to the tensor's largest element): forward 2e-5, gradients 2e-5;
// the fp32 kernels measure 5e-8..1.5e-6 here, a wrong term in a gradient lands above 1e-2.
// Accumulating outputs are pre-filled with random values to check they add rather than overwrite.
#include <cmath>
#include <cstdint>
#include <vector>

#include "check.h"
#include "engine/backend/registry.h"
#include "test_gradcheck_util.h"
#include "test_reference_ops.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

constexpr double kFwdTol = 2e-5;
constexpr double kGradTol = 2e-5;

Backend& be() { return get_backend("cpu"); }

// Grad written into `acc` (pre-filled with `prefill`) minus the prefill.
Vec delta(const std::vector<float>& acc, const std::vector<float>& prefill) {
  Vec d(acc.size());
  for (size_t i = 0; i < acc.size(); ++i) d[i] = static_cast<double>(acc[i]) - prefill[i];
  return d;
}

// ---------------------------------------------------------------- tests

void test_encoder(Rng& rng) {
  const int B = 2, T = 5, C = 37, Vp = 11, maxT = 7;
  std::vector<int32_t> inp = {3, 7, 3, 0, 9, 7, 7, 1, 3, 10};  // repeated tokens: scatter must add
  auto wte = random_vec(rng, Vp * C), wpe = random_vec(rng, maxT * C);
  std::vector<float> out(B * T * C);
  be().encoder_forward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
  Vec ref(out.size());
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        ref[(b * T + t) * C + c] = static_cast<double>(wte[inp[b * T + t] * C + c]) + wpe[t * C + c];
  CHECK(rel_err(out, ref) <= kFwdTol);

  auto dout = random_vec(rng, out.size());
  auto pre_wte = random_vec(rng, wte.size()), pre_wpe = random_vec(rng, wpe.size());
  auto dwte = pre_wte, dwpe = pre_wpe;
  be().encoder_backward(dwte.data(), dwpe.data(), dout.data(), inp.data(), B, T, C);
  const Vec dd = to_double(dout);
  auto J_wte = [&](const Vec& w) {
    double s = 0;
    for (int r = 0; r < B * T; ++r)
      for (int c = 0; c < C; ++c) s += dd[r * C + c] * (w[inp[r] * C + c] + wpe[(r % T) * C + c]);
    return s;
  };
  auto J_wpe = [&](const Vec& p) {
    double s = 0;
    for (int r = 0; r < B * T; ++r)
      for (int c = 0; c < C; ++c) s += dd[r * C + c] * (wte[inp[r] * C + c] + p[(r % T) * C + c]);
    return s;
  };
  const double e1 =
      rel_err(delta(dwte, pre_wte), finite_diff(J_wte, to_double(wte), all_indices(wte.size())));
  const double e2 =
      rel_err(delta(dwpe, pre_wpe), finite_diff(J_wpe, to_double(wpe), all_indices(wpe.size())));
  CHECK_MSG(e1 <= kGradTol, "encoder dwte rel err %g", e1);
  CHECK_MSG(e2 <= kGradTol, "encoder dwpe rel err %g", e2);
}

void test_layernorm(Rng& rng) {
  const int N = 9, C = 45;
  auto x = random_vec(rng, N * C, -2, 2), w = random_vec(rng, C), b = random_vec(rng, C);
  std::vector<float> out(N * C), mean(N), rstd(N);
  be().layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  const Vec xd = to_double(x), wd = to_double(w), bd = to_double(b);
  CHECK(rel_err(out, ref_layernorm(xd, wd, bd, N, C)) <= kFwdTol);

  const Vec dout = to_double(random_vec(rng, N * C));
  std::vector<float> doutf(dout.begin(), dout.end());
  auto pre_x = random_vec(rng, N * C), pre_w = random_vec(rng, C), pre_b = random_vec(rng, C);
  auto dx = pre_x, dw = pre_w, db = pre_b;
  be().layernorm_backward(dx.data(), dw.data(), db.data(), doutf.data(), x.data(), w.data(), mean.data(),
                          rstd.data(), N, C);
  auto Jx = [&](const Vec& v) { return dot(dout, ref_layernorm(v, wd, bd, N, C)); };
  auto Jw = [&](const Vec& v) { return dot(dout, ref_layernorm(xd, v, bd, N, C)); };
  auto Jb = [&](const Vec& v) { return dot(dout, ref_layernorm(xd, wd, v, N, C)); };
  const double ex = rel_err(delta(dx, pre_x), finite_diff(Jx, xd, all_indices(xd.size())));
  const double ew = rel_err(delta(dw, pre_w), finite_diff(Jw, wd, all_indices(wd.size())));
  const double eb = rel_err(delta(db, pre_b), finite_diff(Jb, bd, all_indices(bd.size())));
  CHECK_MSG(ex <= kGradTol, "layernorm dinp rel err %g", ex);
  CHECK_MSG(ew <= kGradTol, "layernorm dweight rel err %g", ew);
  CHECK_MSG(eb <= kGradTol, "layernorm dbias rel err %g", eb);
}

void test_matmul(Rng& rng, int N, int IC, int OC, bool with_bias) {
  auto x = random_vec(rng, N * IC), w = random_vec(rng, OC * IC);
  auto bias = with_bias ? random_vec(rng, OC) : std::vector<float>();
  std::vector<float> out(N * OC);
  be().matmul_forward(out.data(), x.data(), w.data(), with_bias ? bias.data() : nullptr, N, IC, OC);
  const Vec xd = to_double(x), wd = to_double(w), bd = to_double(bias);
  const double ef = rel_err(out, ref_matmul(xd, wd, bd, N, IC, OC));
  CHECK_MSG(ef <= kFwdTol, "matmul %dx%dx%d forward rel err %g", N, IC, OC, ef);

  const Vec dout = to_double(random_vec(rng, N * OC));
  std::vector<float> doutf(dout.begin(), dout.end());
  std::vector<float> dx(N * IC, 123.0f);  // overwritten
  auto pre_w = random_vec(rng, OC * IC), pre_b = random_vec(rng, OC);
  auto dw = pre_w, db = pre_b;
  be().matmul_backward(dx.data(), dw.data(), with_bias ? db.data() : nullptr, doutf.data(), x.data(),
                       w.data(), N, IC, OC);
  Rng pick(7);
  auto Jx = [&](const Vec& v) { return dot(dout, ref_matmul(v, wd, bd, N, IC, OC)); };
  auto Jw = [&](const Vec& v) { return dot(dout, ref_matmul(xd, v, bd, N, IC, OC)); };
  const auto ix = sample_indices(pick, xd.size(), 300), iw = sample_indices(pick, wd.size(), 300);
  const double ex = rel_err(gather(dx, ix), finite_diff(Jx, xd, ix));
  const double ew = rel_err(gather(delta(dw, pre_w), iw), finite_diff(Jw, wd, iw));
  CHECK_MSG(ex <= kGradTol, "matmul %dx%dx%d dinp rel err %g", N, IC, OC, ex);
  CHECK_MSG(ew <= kGradTol, "matmul %dx%dx%d dweight rel err %g", N, IC, OC, ew);
  if (with_bias) {
    auto Jb = [&](const Vec& v) { return dot(dout, ref_matmul(xd, wd, v, N, IC, OC)); };
    const double eb = rel_err(delta(db, pre_b), finite_diff(Jb, bd, all_indices(bd.size())));
    CHECK_MSG(eb <= kGradTol, "matmul dbias rel err %g", eb);
  }
}

void test_attention(Rng& rng) {
  const int B = 2, T = 70, C = 24, NH = 3;  // T > 64: two query blocks, the second partial
  auto qkv = random_vec(rng, B * T * 3 * C, -1.5f, 1.5f);
  std::vector<float> out(B * T * C), lse(B * NH * T);
  be().attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH);
  const Vec qd = to_double(qkv);
  const double ef = rel_err(out, ref_attention(qd, B, T, C, NH));
  CHECK_MSG(ef <= kFwdTol, "attention forward rel err %g", ef);

  const Vec dout = to_double(random_vec(rng, B * T * C));
  std::vector<float> doutf(dout.begin(), dout.end());
  std::vector<float> dqkv(qkv.size(), 55.0f);  // overwritten
  be().attention_backward(dqkv.data(), doutf.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH);
  auto J = [&](const Vec& v) { return dot(dout, ref_attention(v, B, T, C, NH)); };
  // Sample across q, k and v of early, middle and late positions (k/v of late positions get
  // gradient only from late queries: the causal mask must be right for them to match).
  Rng pick(11);
  const auto idx = sample_indices(pick, qd.size(), 360);
  const double eg = rel_err(gather(dqkv, idx), finite_diff(J, qd, idx));
  CHECK_MSG(eg <= kGradTol, "attention dqkv rel err %g", eg);
}

void test_gelu(Rng& rng) {
  const size_t n = 1001;
  auto x = random_vec(rng, n, -6, 6);
  std::vector<float> out(n);
  be().gelu_forward(out.data(), x.data(), n);
  Vec ref(n);
  for (size_t i = 0; i < n; ++i) ref[i] = ref_gelu(x[i]);
  CHECK(rel_err(out, ref) <= kFwdTol);
  auto dout = random_vec(rng, n);
  std::vector<float> dx(n);
  be().gelu_backward(dx.data(), x.data(), dout.data(), n);
  Vec fd(n);
  for (size_t i = 0; i < n; ++i) fd[i] = dout[i] * (ref_gelu(x[i] + 1e-6) - ref_gelu(x[i] - 1e-6)) / 2e-6;
  const double e = rel_err(dx, fd);
  CHECK_MSG(e <= kGradTol, "gelu backward rel err %g", e);
  // In place, as the model runs it.
  auto inplace = dout;
  be().gelu_backward(inplace.data(), x.data(), inplace.data(), n);
  CHECK(inplace == dx);
}

void test_residual(Rng& rng) {
  const size_t n = 777;
  auto a = random_vec(rng, n), b = random_vec(rng, n);
  std::vector<float> out(n);
  be().residual_forward(out.data(), a.data(), b.data(), n);
  bool exact = true;
  for (size_t i = 0; i < n; ++i) exact = exact && out[i] == a[i] + b[i];
  CHECK(exact);
}

void test_softmax_crossentropy(Rng& rng) {
  const int N = 5, V = 67, Vp = 128;
  auto logits = random_vec(rng, N * Vp, -4, 4);
  for (int j = 0; j < V; j += 9) logits[2 * Vp + j] += 40.0f;  // a peaked row: needs the max shift
  for (int r = 0; r < N; ++r)
    for (int j = V; j < Vp; ++j) logits[r * Vp + j] = 1000.0f;  // padding must be ignored
  std::vector<int32_t> targets = {0, 66, 9, 31, 5};
  std::vector<float> losses(N), lse(N);
  be().softmax_crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
  const Vec ld = to_double(logits);
  CHECK(rel_err(losses, ref_ce(ld, targets, N, V, Vp)) <= kFwdTol);

  const float dloss = 0.37f;
  std::vector<float> dlogits(N * Vp, 9.0f);
  be().softmax_crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), dloss, N, V,
                                     Vp);
  auto J = [&](const Vec& v) {
    double s = 0;
    for (double l : ref_ce(v, targets, N, V, Vp)) s += dloss * l;
    return s;
  };
  const double e = rel_err(dlogits, finite_diff(J, ld, all_indices(ld.size())));
  CHECK_MSG(e <= kGradTol, "softmax_crossentropy backward rel err %g", e);
  bool pad_zero = true;
  for (int r = 0; r < N; ++r)
    for (int j = V; j < Vp; ++j) pad_zero = pad_zero && dlogits[r * Vp + j] == 0.0f;
  CHECK(pad_zero);
  // In place over the logits, as the model runs it.
  auto inplace = logits;
  be().softmax_crossentropy_backward(inplace.data(), inplace.data(), lse.data(), targets.data(), dloss, N, V,
                                     Vp);
  CHECK(inplace == dlogits);
}

}  // namespace

int main() {
  Rng rng(2024);
  test_encoder(rng);
  test_layernorm(rng);
  test_matmul(rng, 6, 8, 5, true);
  test_matmul(rng, 37, 19, 23, true);   // M split with ragged thread slices
  test_matmul(rng, 5, 13, 200, false);  // N >= 8M: column split (the LM head shape)
  test_attention(rng);
  test_gelu(rng);
  test_residual(rng);
  test_softmax_crossentropy(rng);
  return flotilla_test::summary("ops_gradcheck");
}
