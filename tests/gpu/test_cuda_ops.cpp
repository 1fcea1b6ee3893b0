// Every CUDA kernel family against its CPU twin (engine/cpu/<family>.h) on random inputs, in fp32
// and bf16 storage, with the per-dtype tolerances of gpu_test_util.h. bf16 inputs are rounded to
// bf16 on the host first, so the CPU reference sees exactly what the GPU sees; accumulating
// outputs start from random values, so "+=" is checked too. Skips without a device.
#include <algorithm>
#include <cmath>
#include <memory>

#include "engine/cpu/adamw.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/encoder.h"
#include "engine/cpu/gelu.h"
#include "engine/cpu/global_norm.h"
#include "engine/cpu/layernorm.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/residual.h"
#include "engine/cpu/softmax_crossentropy.h"
#include "engine/cuda/adamw.h"
#include "engine/cuda/attention.h"
#include "engine/cuda/context.h"
#include "engine/cuda/encoder.h"
#include "engine/cuda/gelu.h"
#include "engine/cuda/global_norm.h"
#include "engine/cuda/layernorm.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/residual.h"
#include "engine/cuda/softmax_crossentropy.h"
#include "gpu_test_util.h"

namespace fc = flotilla::cuda;
namespace cpu = flotilla::cpu;
using gpu_test::compare;
using gpu_test::DeviceBuf;
using gpu_test::random_vec;

namespace {

template <typename T>
constexpr bool kBf16 = sizeof(T) == 2;

template <typename T>
void test_encoder(fc::Context& ctx) {
  const int B = 3, Tn = 37, C = 96, Vp = 64;
  std::vector<int32_t> ids(static_cast<size_t>(B) * Tn);
  flotilla::Rng rng(7);
  for (auto& t : ids) t = static_cast<int32_t>(rng.below(20));  // many repeats: the scatter sums
  auto wte = random_vec(static_cast<size_t>(Vp) * C, 1, 1, kBf16<T>), wpe = random_vec(static_cast<size_t>(Tn) * C, 2, 1, kBf16<T>);
  auto dout = random_vec(ids.size() * C, 3, 1, kBf16<T>);
  auto dwte = random_vec(wte.size(), 4, 1, kBf16<T>), dwpe = random_vec(wpe.size(), 5, 1, kBf16<T>);
  std::unique_ptr<DeviceBuf<int32_t>> d_ids(gpu_test::new_ids(ids));
  DeviceBuf<T> d_wte(wte), d_wpe(wpe), d_out(ids.size() * C), d_dout(dout), d_dwte(dwte), d_dwpe(dwpe);
  fc::encoder_forward<T>(ctx, d_out.get(), d_ids->get(), d_wte.get(), d_wpe.get(), nullptr, B, Tn, C);
  fc::encoder_backward<T>(ctx, d_dwte.get(), d_dwpe.get(), d_dout.get(), d_ids->get(), nullptr, B, Tn, C);
  std::vector<float> out(ids.size() * C);
  cpu::encoder_forward(out.data(), ids.data(), wte.data(), wpe.data(), nullptr, B, Tn, C);
  cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), ids.data(), nullptr, B, Tn, C);
  compare<T>("encoder_forward", d_out.download(), out);
  compare<T>("encoder_backward dwte", d_dwte.download(), dwte);
  compare<T>("encoder_backward dwpe", d_dwpe.download(), dwpe);
}

template <typename T>
void test_layernorm(fc::Context& ctx) {
  const long N = 300;
  const int C = 200;
  const size_t NC = static_cast<size_t>(N) * C;
  auto a = random_vec(NC, 11, 1, kBf16<T>), b = random_vec(NC, 12, 1, kBf16<T>);
  auto w = random_vec(C, 13, 1, kBf16<T>), bias = random_vec(C, 14, 1, kBf16<T>);
  auto dout = random_vec(NC, 15, 1, kBf16<T>), dinp = random_vec(NC, 16, 1, kBf16<T>);
  auto dw = random_vec(C, 17, 1, kBf16<T>), db = random_vec(C, 18, 1, kBf16<T>);
  // CPU: residual then LayerNorm; the GPU does both in the fused kernel.
  std::vector<float> res(NC), out(NC), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  cpu::residual_forward(res.data(), a.data(), b.data(), NC);
  if (kBf16<T>)
    for (auto& x : res) x = gpu_test::round_bf16(x);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), res.data(), w.data(), bias.data(), N, C);
  DeviceBuf<T> d_a(a), d_b(b), d_w(w), d_bias(bias), d_res(NC), d_out(NC), d_out2(NC), d_dout(dout), d_dinp(dinp),
      d_dw(dw), d_db(db);
  DeviceBuf<float> d_mean(static_cast<size_t>(N)), d_rstd(static_cast<size_t>(N));
  fc::residual_layernorm_forward<T>(ctx, d_res.get(), d_out.get(), d_mean.get(), d_rstd.get(), d_a.get(), d_b.get(),
                                    d_w.get(), d_bias.get(), N, C);
  fc::layernorm_forward<T>(ctx, d_out2.get(), d_mean.get(), d_rstd.get(), d_res.get(), d_w.get(), d_bias.get(), N, C);
  compare<T>("residual_layernorm_forward residual", d_res.download(), res);
  compare<T>("residual_layernorm_forward out", d_out.download(), out);
  compare<T>("layernorm_forward out", d_out2.download(), out);
  compare<float>("layernorm_forward mean", d_mean.download(), mean);
  compare<T>("layernorm_forward rstd", d_rstd.download(), rstd);
  cpu::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), res.data(), w.data(), mean.data(),
                          rstd.data(), N, C);
  fc::layernorm_backward<T>(ctx, d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_res.get(), d_w.get(),
                            d_mean.get(), d_rstd.get(), N, C);
  compare<T>("layernorm_backward dinp", d_dinp.download(), dinp);
  compare<T>("layernorm_backward dweight", d_dw.download(), dw);
  compare<T>("layernorm_backward dbias", d_db.download(), db);
}

template <typename T>
void test_matmul(fc::Context& ctx) {
  const int N = 130, IC = 96, OC = 136;
  auto inp = random_vec(static_cast<size_t>(N) * IC, 21, 1, kBf16<T>);
  auto w = random_vec(static_cast<size_t>(OC) * IC, 22, 0.1f, kBf16<T>), bias = random_vec(OC, 23, 1, kBf16<T>);
  auto dout = random_vec(static_cast<size_t>(N) * OC, 24, 1, kBf16<T>);
  auto dw = random_vec(w.size(), 25, 1, kBf16<T>), db = random_vec(OC, 26, 1, kBf16<T>);
  std::vector<float> out(static_cast<size_t>(N) * OC), gel(out.size()), dinp(inp.size());
  cpu::matmul_forward(out.data(), inp.data(), w.data(), bias.data(), N, IC, OC);
  cpu::gelu_forward(gel.data(), out.data(), out.size());
  DeviceBuf<T> d_inp(inp), d_w(w), d_bias(bias), d_out(out.size()), d_gel(out.size()), d_out2(out.size()),
      d_dout(dout), d_dinp(inp.size()), d_dw(dw), d_db(db);
  fc::matmul_forward<T>(ctx, d_out.get(), d_inp.get(), d_w.get(), d_bias.get(), N, IC, OC, d_gel.get());
  compare<T>("matmul_forward (+bias, gelu epilogue) pre", d_out.download(), out);
  compare<T>("matmul_forward (+bias, gelu epilogue) gelu", d_gel.download(), gel);
  std::vector<float> nob(out.size());
  cpu::matmul_forward(nob.data(), inp.data(), w.data(), nullptr, N, IC, OC);
  fc::matmul_forward<T>(ctx, d_out2.get(), d_inp.get(), d_w.get(), static_cast<const T*>(nullptr), N, IC, OC);
  compare<T>("matmul_forward (no bias)", d_out2.download(), nob);
  cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
  fc::matmul_backward<T>(ctx, d_dinp.get(), d_dw.get(), d_db.get(), d_dout.get(), d_inp.get(), d_w.get(), N, IC, OC);
  compare<T>("matmul_backward dinp", d_dinp.download(), dinp);
  compare<T>("matmul_backward dweight (+=)", d_dw.download(), dw);
  compare<T>("matmul_backward dbias (+=)", d_db.download(), db);
}

template <typename T>
void test_attention(fc::Context& ctx, int C, int NH) {
  const int B = 2, Tn = 131;  // not a multiple of the 64-row tiles
  const size_t N = static_cast<size_t>(B) * Tn;
  auto qkv = random_vec(N * 3 * C, 31, 1, kBf16<T>), dout = random_vec(N * C, 32, 1, kBf16<T>);
  std::vector<float> out(N * C), lse(static_cast<size_t>(B) * NH * Tn), dqkv(qkv.size());
  cpu::attention_forward(out.data(), lse.data(), qkv.data(), nullptr, B, Tn, NH, NH, C / NH);
  DeviceBuf<T> d_qkv(qkv), d_out(out.size()), d_dout(dout), d_dqkv(qkv.size()), d_outref(out);
  DeviceBuf<float> d_lse(lse.size()), d_lseref(lse);
  fc::attention_forward<T>(ctx, d_out.get(), d_lse.get(), d_qkv.get(), nullptr, B, Tn, NH, NH, C / NH);
  const std::string hs = " hs=" + std::to_string(C / NH);
  compare<T>(("attention_forward out" + hs).c_str(), d_out.download(), out);
  compare<float>(("attention_forward lse" + hs).c_str(), d_lse.download(), lse);
  // Backward from the CPU forward's out/lse, so only the backward is compared here.
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), nullptr, B, Tn, NH, NH,
                          C / NH);
  fc::attention_backward<T>(ctx, d_dqkv.get(), d_dout.get(), d_qkv.get(), d_outref.get(), d_lseref.get(), nullptr, B,
                           Tn, NH, NH, C / NH);
  compare<T>(("attention_backward dqkv" + hs).c_str(), d_dqkv.download(), dqkv);
}

template <typename T>
void test_elementwise(fc::Context& ctx) {
  for (size_t n : {size_t{4096}, size_t{1001}}) {  // packed and scalar paths
    auto x = random_vec(n, 41, 2, kBf16<T>), y = random_vec(n, 42, 1, kBf16<T>);
    std::vector<float> g(n), dg(n), r(n);
    cpu::gelu_forward(g.data(), x.data(), n);
    cpu::gelu_backward(dg.data(), x.data(), y.data(), n);
    cpu::residual_forward(r.data(), x.data(), y.data(), n);
    DeviceBuf<T> d_x(x), d_y(y), d_g(n), d_r(n);
    fc::gelu_forward<T>(ctx, d_g.get(), d_x.get(), n);
    fc::gelu_backward<T>(ctx, d_y.get(), d_x.get(), d_y.get(), n);  // in place, as the model does
    fc::residual_forward<T>(ctx, d_r.get(), d_x.get(), d_x.get(), n);
    std::vector<float> twice(n);
    cpu::residual_forward(twice.data(), x.data(), x.data(), n);
    compare<T>("gelu_forward", d_g.download(), g);
    compare<T>("gelu_backward (in place)", d_y.download(), dg);
    compare<T>("residual_forward", d_r.download(), twice);
    (void)r;
  }
}

template <typename T>
void test_crossentropy(fc::Context& ctx) {
  const long N = 45;
  const int V = 1000, Vp = 1024;
  auto logits = random_vec(static_cast<size_t>(N) * Vp, 51, 3, kBf16<T>);
  std::vector<int32_t> targets(static_cast<size_t>(N));
  flotilla::Rng rng(52);
  for (auto& t : targets) t = static_cast<int32_t>(rng.below(V));
  std::vector<float> losses(targets.size()), lse(targets.size()), dlogits(logits.size());
  cpu::softmax_crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
  cpu::softmax_crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), 0.25f, N, V, Vp);
  std::unique_ptr<DeviceBuf<int32_t>> d_t(gpu_test::new_ids(targets));
  DeviceBuf<T> d_logits(logits);
  DeviceBuf<float> d_losses(targets.size()), d_lse(targets.size());
  fc::softmax_crossentropy_forward<T>(ctx, d_losses.get(), d_lse.get(), d_logits.get(), d_t->get(), N, V, Vp);
  compare<float>("softmax_crossentropy_forward losses", d_losses.download(), losses);
  compare<float>("softmax_crossentropy_forward lse", d_lse.download(), lse);
  fc::softmax_crossentropy_backward<T>(ctx, d_logits.get(), d_logits.get(), d_lse.get(), d_t->get(), 0.25f, N, V, Vp);
  compare<T>("softmax_crossentropy_backward (in place)", d_logits.download(), dlogits);
  double sum = 0;
  for (float l : losses) sum += l;
  CHECK_NEAR(fc::sum_losses(ctx, d_losses.get(), N), sum, 1e-4 * sum);
}

// Tensor parallelism's vocabulary slices (gpu_trainer.cpp): the vocabulary split in two halves, each
// half's kernels on its own rows or columns with ids local to it (-1 where the other half holds
// them), recombined on the host, against the CPU kernels over the whole vocabulary.
template <typename T>
void test_vocab_slices(fc::Context& ctx) {
  const int B = 2, Tn = 33, C = 64, Vp = 256, V = 200, H = Vp / 2;
  const size_t N = static_cast<size_t>(B) * Tn, Cs = static_cast<size_t>(C);
  std::vector<int32_t> ids(N);
  flotilla::Rng rng(81);
  for (auto& t : ids) t = static_cast<int32_t>(rng.below(V));
  auto wte = random_vec(static_cast<size_t>(Vp) * Cs, 82, 1, kBf16<T>), wpe = random_vec(Tn * Cs, 83, 1, kBf16<T>);
  auto dout = random_vec(N * Cs, 84, 1, kBf16<T>);
  std::vector<float> out(N * Cs), dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
  cpu::encoder_forward(out.data(), ids.data(), wte.data(), wpe.data(), nullptr, B, Tn, C);
  cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), ids.data(), nullptr, B, Tn, C);
  std::vector<float> sum(N * Cs, 0.0f), dwte_got;
  for (int h = 0; h < 2; ++h) {
    std::vector<int32_t> local(N);
    for (size_t i = 0; i < N; ++i) local[i] = ids[i] >= h * H && ids[i] < (h + 1) * H ? ids[i] - h * H : -1;
    std::unique_ptr<DeviceBuf<int32_t>> d_ids(gpu_test::new_ids(local));
    const std::vector<float> half(wte.begin() + h * H * C, wte.begin() + (h + 1) * H * C);
    DeviceBuf<T> d_wte(half), d_wpe(wpe), d_out(N * Cs), d_dout(dout), d_dwte(half.size()), d_dwpe(wpe.size());
    // wpe on the first half only (as TP rank 0); the second half's dwpe is not asked for.
    fc::encoder_forward<T>(ctx, d_out.get(), d_ids->get(), d_wte.get(), h == 0 ? d_wpe.get() : nullptr, nullptr, B,
                           Tn, C);
    fc::encoder_backward<T>(ctx, d_dwte.get(), h == 0 ? d_dwpe.get() : nullptr, d_dout.get(), d_ids->get(), nullptr, B,
                            Tn, C);
    const auto o = d_out.download();
    for (size_t i = 0; i < o.size(); ++i) sum[i] += o[i];
    const auto g = d_dwte.download();
    dwte_got.insert(dwte_got.end(), g.begin(), g.end());
    if (h == 0) compare<T>("vocab slices: encoder dwpe", d_dwpe.download(), dwpe);
  }
  compare<T>("vocab slices: encoder_forward (sum)", sum, out);
  compare<T>("vocab slices: encoder_backward dwte", dwte_got, dwte);

  // Cross-entropy: per-half lse and target logit, combined; backward with the global lse.
  auto logits = random_vec(N * Vp, 85, 3, kBf16<T>);
  std::vector<float> losses(N), lse(N), dlogits(logits.size());
  cpu::softmax_crossentropy_forward(losses.data(), lse.data(), logits.data(), ids.data(), static_cast<long>(N), V, Vp);
  cpu::softmax_crossentropy_backward(dlogits.data(), logits.data(), lse.data(), ids.data(), 0.5f,
                                     static_cast<long>(N), V, Vp);
  std::vector<std::vector<float>> part_lse(2), part_logits(2);
  std::vector<float> target_logit(N, 0.0f);
  std::vector<std::vector<int32_t>> local(2, std::vector<int32_t>(N));
  for (int h = 0; h < 2; ++h) {
    const int real = std::max(0, std::min(V - h * H, H));
    for (size_t r = 0; r < N; ++r) {
      local[h][r] = ids[r] >= h * H && ids[r] < h * H + real ? ids[r] - h * H : -1;
      const auto row = logits.begin() + static_cast<long>(r * Vp);
      part_logits[h].insert(part_logits[h].end(), row + h * H, row + (h + 1) * H);
    }
    std::unique_ptr<DeviceBuf<int32_t>> d_t(gpu_test::new_ids(local[h]));
    DeviceBuf<T> d_logits(part_logits[h]);
    DeviceBuf<float> d_losses(N), d_lse(N), d_tl(N);
    fc::softmax_crossentropy_forward<T>(ctx, d_losses.get(), d_lse.get(), d_logits.get(), d_t->get(),
                                        static_cast<long>(N), real, H);
    fc::gather_target_logits<T>(ctx, d_tl.get(), d_logits.get(), d_t->get(), static_cast<long>(N), H);
    part_lse[h] = d_lse.download();
    const auto tl = d_tl.download();
    for (size_t r = 0; r < N; ++r) target_logit[r] += tl[r];
  }
  std::vector<float> lse_got(N), losses_got(N);
  for (size_t r = 0; r < N; ++r) {
    const float mx = std::max(part_lse[0][r], part_lse[1][r]);
    lse_got[r] = mx + std::log(std::exp(part_lse[0][r] - mx) + std::exp(part_lse[1][r] - mx));
    losses_got[r] = lse_got[r] - target_logit[r];
  }
  compare<float>("vocab slices: cross-entropy lse", lse_got, lse);
  compare<float>("vocab slices: cross-entropy losses", losses_got, losses);
  std::vector<float> dgot(logits.size());
  for (int h = 0; h < 2; ++h) {
    const int real = std::max(0, std::min(V - h * H, H));
    std::unique_ptr<DeviceBuf<int32_t>> d_t(gpu_test::new_ids(local[h]));
    DeviceBuf<T> d_logits(part_logits[h]);
    DeviceBuf<float> d_lse(lse_got);
    fc::softmax_crossentropy_backward<T>(ctx, d_logits.get(), d_logits.get(), d_lse.get(), d_t->get(), 0.5f,
                                         static_cast<long>(N), real, H);
    const auto d = d_logits.download();
    for (size_t r = 0; r < N; ++r)
      std::copy(d.begin() + r * H, d.begin() + (r + 1) * H, dgot.begin() + r * Vp + h * H);
  }
  compare<T>("vocab slices: cross-entropy backward", dgot, dlogits);
}

void test_adamw(fc::Context& ctx) {
  const size_t n = 5000;
  auto p = random_vec(n, 61), g = random_vec(n, 62, 0.01f), m = random_vec(n, 63, 0.001f);
  auto v = random_vec(n, 64, 0.001f);
  for (auto& x : v) x = x * x;
  DeviceBuf<float> d_p(p), d_g(g), d_m(m), d_v(v), d_master(p), d_m2(m), d_v2(v);
  DeviceBuf<gpu_test::bf16> d_pb(n);
  DeviceBuf<gpu_test::bf16> d_gb(g);
  auto gb = g;
  for (auto& x : gb) x = gpu_test::round_bf16(x);
  fc::adamw_update(ctx, d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
  fc::adamw_update_mixed<gpu_test::bf16>(ctx, d_pb.get(), d_master.get(), d_gb.get(), d_m2.get(), d_v2.get(), n, 1.0f,
                                         1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0);
  auto p2 = p, m2 = m, v2 = v;
  cpu::adamw_update(p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
  cpu::adamw_update(p2.data(), gb.data(), m2.data(), v2.data(), n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3);
  compare<float>("adamw_update params", d_p.download(), p);
  compare<float>("adamw_update m", d_m.download(), m);
  compare<float>("adamw_update v", d_v.download(), v);
  compare<float>("adamw_update_mixed master", d_master.download(), p2);
  compare<gpu_test::bf16>("adamw_update_mixed bf16 params", d_pb.download(), p2);
}

void test_global_norm(fc::Context& ctx) {
  for (size_t n : {size_t{1}, size_t{1000}, size_t{3000001}}) {
    auto g = random_vec(n, 71);
    DeviceBuf<float> d_g(g);
    const double want = cpu::sum_squares(g.data(), n);
    const double got = fc::sum_squares<float>(ctx, d_g.get(), n);
    const double again = fc::sum_squares<float>(ctx, d_g.get(), n);
    CHECK_NEAR(got, want, 1e-10 * want);
    CHECK(std::memcmp(&got, &again, sizeof(double)) == 0);  // deterministic
    fc::scale_values(ctx, d_g.get(), n, 0.5f);
    cpu::scale_values(g.data(), n, 0.5f);
    compare<float>("scale_values", d_g.download(), g);
  }
}

template <typename T>
void all_families(fc::Context& ctx) {
  test_encoder<T>(ctx);
  test_layernorm<T>(ctx);
  test_matmul<T>(ctx);
  test_attention<T>(ctx, 128, 2);  // hs 64
  test_attention<T>(ctx, 128, 4);  // hs 32
  test_attention<T>(ctx, 256, 2);  // hs 128
  test_elementwise<T>(ctx);
  test_crossentropy<T>(ctx);
  test_vocab_slices<T>(ctx);
}

}  // namespace

int main() {
  if (gpu_test::skip_without_gpu()) return flotilla_test::summary("gpu_cuda_ops");
  cpu::blas_single_thread();
  fc::Context ctx;
  all_families<float>(ctx);
  all_families<gpu_test::bf16>(ctx);
  test_adamw(ctx);
  test_global_norm(ctx);
  return flotilla_test::summary("gpu_cuda_ops");
}
