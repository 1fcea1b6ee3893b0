// The Llama kernel families on the GPU against their CPU twins, through the Backend interface the
// model uses (CPU backend on host buffers, CUDA backend on device buffers), in fp32 and bf16
// storage, on random inputs (bf16 inputs rounded on the host first; accumulating outputs start from
// random values, so "+=" is checked too): RMSNorm forward/backward and its fused residual form,
// the per-head q/k RMSNorm, rotate-half RoPE (with llama3-scaled frequencies, plain and packed
// positions), SwiGLU, grouped-query attention (plain and packed documents; head sizes 8 to 128),
// the embedding with packed positions, and the cross-entropy with ignored targets. Skips without a
// device.
#include <memory>
#include <vector>

#include "engine/backend/registry.h"
#include "engine/model/llama.h"
#include "engine/model/model_impl.h"
#include "gpu_test_util.h"

namespace fl = flotilla;
using gpu_test::compare;
using gpu_test::DeviceBuf;
using gpu_test::random_vec;

namespace {

template <typename T>
constexpr bool kBf16 = sizeof(T) == 2;
// The Backend's storage type for the test's device type.
template <typename T>
using S = std::conditional_t<kBf16<T>, fl::bf16_t, float>;
template <typename T>
S<T>* as(DeviceBuf<T>& b) {
  return reinterpret_cast<S<T>*>(b.get());
}

fl::Backend& host() { return fl::get_backend("cpu"); }
fl::Backend& gpu() { return fl::get_backend("cuda"); }

// Positions of three packed documents per row (0.., restarting), or plain 0..T-1.
std::vector<int32_t> positions(int B, int T, bool packed) {
  std::vector<int32_t> p(static_cast<size_t>(B) * T);
  for (int b = 0; b < B; ++b) {
    const int cut1 = T / 3 + b, cut2 = 2 * T / 3;
    for (int t = 0; t < T; ++t)
      p[static_cast<size_t>(b) * T + t] = !packed ? t : t < cut1 ? t : t < cut2 ? t - cut1 : t - cut2;
  }
  return p;
}

template <typename T>
void test_rmsnorm() {
  const long N = 37;
  const int C = 96;
  const float eps = 1e-5f;
  auto x = random_vec(N * C, 1, 1, kBf16<T>), w = random_vec(C, 2, 0.5f, kBf16<T>),
       r2 = random_vec(N * C, 3, 1, kBf16<T>);
  for (auto& v : w) v += 1.0f;
  auto dout = random_vec(N * C, 4, 1, kBf16<T>), dinp0 = random_vec(N * C, 5, 1, kBf16<T>),
       dw0 = random_vec(C, 6, 1, kBf16<T>);
  // CPU reference in fp32 on the (rounded) inputs.
  std::vector<float> out(N * C), rstd(N), resid(N * C), out2(N * C), rstd2(N), dinp = dinp0, dw = dw0;
  host().rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
  host().residual_rmsnorm_forward(resid.data(), out2.data(), rstd2.data(), x.data(), r2.data(), w.data(), N,
                                  C, eps);
  host().rmsnorm_backward(dinp.data(), dw.data(), dout.data(), x.data(), w.data(), rstd.data(), N, C);
  DeviceBuf<T> d_x(x), d_w(w), d_r2(r2), d_out(N * C), d_res(N * C), d_out2(N * C), d_dout(dout),
      d_dinp(dinp0), d_dw(dw0);
  DeviceBuf<float> d_rstd(N), d_rstd2(N);
  gpu().rmsnorm_forward(as(d_out), d_rstd.get(), as(d_x), as(d_w), N, C, eps);
  gpu().residual_rmsnorm_forward(as(d_res), as(d_out2), d_rstd2.get(), as(d_x), as(d_r2), as(d_w), N, C, eps);
  gpu().rmsnorm_backward(as(d_dinp), as(d_dw), as(d_dout), as(d_x), as(d_w), d_rstd.get(), N, C);
  compare<T>("rmsnorm_forward", d_out.download(), out);
  compare<float>("rmsnorm_forward rstd", d_rstd.download(), rstd);
  compare<T>("residual_rmsnorm_forward residual", d_res.download(), resid);
  compare<T>("residual_rmsnorm_forward out", d_out2.download(), out2);
  compare<T>("rmsnorm_backward dinp", d_dinp.download(), dinp);
  compare<T>("rmsnorm_backward dweight", d_dw.download(), dw);
}

template <typename T>
void test_qk_norm() {
  const long N = 29;
  const int NH = 4, NKV = 2, HD = 16, D = (NH + 2 * NKV) * HD;
  const float eps = 1e-6f;
  auto x = random_vec(N * D, 11, 1, kBf16<T>), qw = random_vec(HD, 12, 0.3f, kBf16<T>),
       kw = random_vec(HD, 13, 0.3f, kBf16<T>);
  auto dout = random_vec(N * D, 14, 1, kBf16<T>), dq0 = random_vec(HD, 15, 1, kBf16<T>),
       dk0 = random_vec(HD, 16, 1, kBf16<T>);
  std::vector<float> out(N * D), rstd(N * (NH + NKV)), dinp(N * D), dq = dq0, dk = dk0;
  host().qk_norm_forward(out.data(), rstd.data(), x.data(), qw.data(), kw.data(), N, NH, NKV, HD, eps);
  host().qk_norm_backward(dinp.data(), dq.data(), dk.data(), dout.data(), x.data(), qw.data(), kw.data(),
                          rstd.data(), N, NH, NKV, HD);
  DeviceBuf<T> d_x(x), d_qw(qw), d_kw(kw), d_out(N * D), d_dout(dout), d_dq(dq0), d_dk(dk0);
  DeviceBuf<float> d_rstd(rstd.size());
  gpu().qk_norm_forward(as(d_out), d_rstd.get(), as(d_x), as(d_qw), as(d_kw), N, NH, NKV, HD, eps);
  // In place, as the model runs it: dinp aliases dout.
  gpu().qk_norm_backward(as(d_dout), as(d_dq), as(d_dk), as(d_dout), as(d_x), as(d_qw), as(d_kw),
                         d_rstd.get(), N, NH, NKV, HD);
  compare<T>("qk_norm_forward", d_out.download(), out);
  compare<float>("qk_norm_forward rstd", d_rstd.download(), rstd);
  compare<T>("qk_norm_backward dinp (in place)", d_dout.download(), dinp);
  compare<T>("qk_norm_backward dqw", d_dq.download(), dq);
  compare<T>("qk_norm_backward dkw", d_dk.download(), dk);
}

template <typename T>
void test_rope(bool packed) {
  const int B = 2, Tn = 45, NH = 4, NKV = 2, HD = 32, D = (NH + 2 * NKV) * HD;
  fl::ModelDims d;
  d.arch = fl::Arch::kLlama;
  d.n_head = NH;
  d.n_embd = 128;
  d.head_dim = HD;
  d.rope_theta = 500000.0;
  d.rope.type = "llama3";
  d.rope.factor = 8.0;
  d.rope.original_max_position = 64;  // every llama3 band at head_dim 32
  const std::vector<float> inv = fl::llama::rope_inv_freq(d);
  const std::vector<int32_t> pos = positions(B, Tn, packed);
  auto x = random_vec(static_cast<size_t>(B) * Tn * D, 21, 1, kBf16<T>);
  std::vector<float> fwd = x, bwd = x;
  const int32_t* hp = packed ? pos.data() : nullptr;
  host().rope_forward(fwd.data(), hp, inv.data(), B, Tn, NH, NKV, HD);
  host().rope_backward(bwd.data(), hp, inv.data(), B, Tn, NH, NKV, HD);
  std::unique_ptr<DeviceBuf<int32_t>> d_pos(gpu_test::new_ids(pos));
  DeviceBuf<float> d_inv(inv);
  DeviceBuf<T> d_f(x), d_b(x);
  const int32_t* dp = packed ? d_pos->get() : nullptr;
  gpu().rope_forward(as(d_f), dp, d_inv.get(), B, Tn, NH, NKV, HD);
  gpu().rope_backward(as(d_b), dp, d_inv.get(), B, Tn, NH, NKV, HD);
  compare<T>(packed ? "rope_forward (packed)" : "rope_forward", d_f.download(), fwd);
  compare<T>(packed ? "rope_backward (packed)" : "rope_backward", d_b.download(), bwd);
}

template <typename T>
void test_swiglu() {
  const long N = 23;
  const int F = 80;
  auto x = random_vec(N * 2 * F, 31, 2, kBf16<T>), dout = random_vec(N * F, 32, 1, kBf16<T>);
  std::vector<float> out(N * F), dinp(N * 2 * F);
  host().swiglu_forward(out.data(), x.data(), N, F);
  host().swiglu_backward(dinp.data(), dout.data(), x.data(), N, F);
  DeviceBuf<T> d_x(x), d_out(N * F), d_dout(dout), d_dinp(N * 2 * F);
  gpu().swiglu_forward(as(d_out), as(d_x), N, F);
  gpu().swiglu_backward(as(d_dinp), as(d_dout), as(d_x), N, F);
  compare<T>("swiglu_forward", d_out.download(), out);
  compare<T>("swiglu_backward", d_dinp.download(), dinp);
}

template <typename T>
void test_gqa(bool packed, int HD) {
  const int B = 2, Tn = 70, NH = 6, NKV = 2, D = (NH + 2 * NKV) * HD;
  const size_t N = static_cast<size_t>(B) * Tn;
  const std::vector<int32_t> pos = positions(B, Tn, packed);
  const int32_t* hp = packed ? pos.data() : nullptr;
  auto qkv = random_vec(N * D, 41, 1, kBf16<T>), dout = random_vec(N * NH * HD, 42, 1, kBf16<T>);
  std::vector<float> out(N * NH * HD), lse(N * NH), dqkv(N * D);
  host().attention_forward(out.data(), lse.data(), qkv.data(), hp, B, Tn, NH, NKV, HD);
  // The backward from the CPU forward's out and lse on both sides (isolates the backward).
  std::vector<float> out_s = out;
  if (kBf16<T>)
    for (auto& v : out_s) v = gpu_test::round_bf16(v);
  host().attention_backward(dqkv.data(), dout.data(), qkv.data(), out_s.data(), lse.data(), hp, B, Tn, NH,
                            NKV, HD);
  std::unique_ptr<DeviceBuf<int32_t>> d_pos(gpu_test::new_ids(pos));
  const int32_t* dp = packed ? d_pos->get() : nullptr;
  DeviceBuf<T> d_qkv(qkv), d_out(out.size()), d_dout(dout), d_outref(out_s), d_dqkv(dqkv.size());
  DeviceBuf<float> d_lse(lse.size()), d_lseref(lse);
  gpu().attention_forward(as(d_out), d_lse.get(), as(d_qkv), dp, B, Tn, NH, NKV, HD);
  gpu().attention_backward(as(d_dqkv), as(d_dout), as(d_qkv), as(d_outref), d_lseref.get(), dp, B, Tn, NH,
                           NKV, HD);
  const std::string tag = std::string(packed ? " packed" : "") + " hd" + std::to_string(HD);
  compare<T>(("gqa attention_forward out" + tag).c_str(), d_out.download(), out);
  compare<float>(("gqa attention_forward lse" + tag).c_str(), d_lse.download(), lse);
  compare<T>(("gqa attention_backward dqkv" + tag).c_str(), d_dqkv.download(), dqkv);
}

template <typename T>
void test_embedding_packed() {
  const int B = 2, Tn = 33, C = 64, Vp = 128;
  std::vector<int32_t> ids(static_cast<size_t>(B) * Tn);
  flotilla::Rng rng(51);
  for (auto& t : ids) t = static_cast<int32_t>(rng.below(40));
  const std::vector<int32_t> pos = positions(B, Tn, true);
  auto wte = random_vec(static_cast<size_t>(Vp) * C, 52, 1, kBf16<T>),
       wpe = random_vec(static_cast<size_t>(Tn) * C, 53, 1, kBf16<T>);
  auto dout = random_vec(ids.size() * C, 54, 1, kBf16<T>);
  auto dwte0 = random_vec(wte.size(), 55, 1, kBf16<T>), dwpe0 = random_vec(wpe.size(), 56, 1, kBf16<T>);
  std::vector<float> out(ids.size() * C), dwte = dwte0, dwpe = dwpe0;
  host().encoder_forward(out.data(), ids.data(), wte.data(), wpe.data(), pos.data(), B, Tn, C);
  host().encoder_backward(dwte.data(), dwpe.data(), dout.data(), ids.data(), pos.data(), B, Tn, C);
  std::unique_ptr<DeviceBuf<int32_t>> d_ids(gpu_test::new_ids(ids)), d_pos(gpu_test::new_ids(pos));
  DeviceBuf<T> d_wte(wte), d_wpe(wpe), d_out(out.size()), d_dout(dout), d_dwte(dwte0), d_dwpe(dwpe0);
  gpu().encoder_forward(as(d_out), d_ids->get(), as(d_wte), as(d_wpe), d_pos->get(), B, Tn, C);
  gpu().encoder_backward(as(d_dwte), as(d_dwpe), as(d_dout), d_ids->get(), d_pos->get(), B, Tn, C);
  compare<T>("encoder_forward (packed positions)", d_out.download(), out);
  compare<T>("encoder_backward dwte (packed)", d_dwte.download(), dwte);
  compare<T>("encoder_backward dwpe (packed)", d_dwpe.download(), dwpe);
}

template <typename T>
void test_ignored_targets() {
  const long N = 19;
  const int V = 77, Vp = 128;
  auto logits = random_vec(N * Vp, 61, 2, kBf16<T>);
  std::vector<int32_t> targets(N);
  for (long r = 0; r < N; ++r)
    targets[r] = r % 4 == 0 ? fl::kIgnoreTarget : r % 5 == 0 ? -1 : static_cast<int32_t>(r * 3 % V);
  std::vector<float> losses(N), lse(N), dl(N * Vp);
  host().softmax_crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V, Vp);
  host().softmax_crossentropy_backward(dl.data(), logits.data(), lse.data(), targets.data(), 0.25f, N, V, Vp);
  for (long r = 0; r < N; r += 4)
    CHECK(losses[r] == 0.0f && dl[r * Vp] == 0.0f);  // ignored: no loss, no gradient
  std::unique_ptr<DeviceBuf<int32_t>> d_t(gpu_test::new_ids(targets));
  DeviceBuf<T> d_logits(logits), d_dl(N * Vp);
  DeviceBuf<float> d_losses(N), d_lse(N);
  gpu().softmax_crossentropy_forward(d_losses.get(), d_lse.get(), as(d_logits), d_t->get(), N, V, Vp);
  gpu().softmax_crossentropy_backward(as(d_dl), as(d_logits), d_lse.get(), d_t->get(), 0.25f, N, V, Vp);
  compare<float>("crossentropy losses (ignored targets)", d_losses.download(), losses);
  compare<T>("crossentropy dlogits (ignored targets)", d_dl.download(), dl);
}

template <typename T>
void all() {
  test_rmsnorm<T>();
  test_qk_norm<T>();
  test_rope<T>(false);
  test_rope<T>(true);
  test_swiglu<T>();
  // 128: Llama-3.1-8B's heads (the gpu-check QLoRA run), 32-row tiles in the backward, 3 query heads a
  // K/V head; no other test runs grouped-query attention at a head size above 64.
  for (int hd : {8, 16, 64, 128}) test_gqa<T>(false, hd);
  test_gqa<T>(true, 32);
  test_gqa<T>(true, 128);
  test_embedding_packed<T>();
  test_ignored_targets<T>();
}

}  // namespace

int main() {
  if (gpu_test::skip_without_gpu()) return flotilla_test::summary("test_cuda_llama_ops");
  all<float>();
  all<gpu_test::bf16>();
  return flotilla_test::summary("test_cuda_llama_ops");
}
