// Reproducibility: two training runs (init, forward, backward, clip, AdamW) with the same seed give
// bit-identical losses and parameters; a different seed gives different ones. The reductions the
// model does outside BLAS (LayerNorm and bias/embedding gradients, the gradient norm) are also
// bit-identical between 1 and 2 threads, since they sum in a fixed order by design.
#include <omp.h>

#include <cstring>
#include <vector>

#include "check.h"
#include "engine/backend/registry.h"
#include "engine/model/gpt.h"
#include "engine/train/adamw.h"
#include "test_gradcheck_util.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

ModelDims small_dims() {
  ModelDims d;
  d.n_layer = 2;
  d.n_head = 4;
  d.n_embd = 64;
  d.vocab_size = 500;
  d.padded_vocab = pad_vocab(d.vocab_size);
  d.max_seq_len = 96;
  return d;
}

struct RunResult {
  std::vector<float> losses;
  std::vector<float> params;
};

RunResult train(uint64_t seed, int steps) {
  const ModelDims d = small_dims();
  const int B = 2, T = 80;  // T > 64: two attention query blocks
  Model model(d);
  model.init_random(seed);
  AdamW opt(model.backend(), param_groups(model), 0, model.num_params());
  AdamWHyper h;
  h.lr = 1e-3f;
  Rng data(4242);
  std::vector<int32_t> tok(B * T + 1);
  RunResult r;
  for (int s = 1; s <= steps; ++s) {
    for (auto& x : tok) x = static_cast<int32_t>(data.below(static_cast<uint64_t>(d.vocab_size)));
    model.zero_grad();
    r.losses.push_back(model.forward(tok.data(), tok.data() + 1, B, T));
    model.backward(1.0f);
    const float norm = global_grad_norm(model.grads(), model.num_params());
    if (norm > 1.0f) scale_grads(model.grads(), model.num_params(), 1.0f / norm);
    opt.step(model.params(), model.grads(), h, s);
  }
  r.params.assign(model.params(), model.params() + model.num_params());
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void test_same_seed_same_bits() {
  const RunResult a = train(1337, 4), b = train(1337, 4), c = train(1338, 4);
  CHECK(same_bits(a.losses, b.losses));
  CHECK(same_bits(a.params, b.params));
  CHECK(!same_bits(a.params, c.params));
  CHECK(a.losses[0] != c.losses[0]);
  CHECK(a.losses.back() < a.losses.front());  // it trains at all
}

void test_reductions_thread_independent() {
  Backend& be = get_backend("cpu");
  Rng rng(77);
  const int N = 300, C = 96;
  auto x = random_vec(rng, N * C), w = random_vec(rng, C), b = random_vec(rng, C),
       dout = random_vec(rng, N * C);
  std::vector<float> out(N * C), mean(N), rstd(N);
  be.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  std::vector<int32_t> tok(N);
  for (auto& t : tok) t = static_cast<int32_t>(rng.below(7));  // heavy repetition
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    std::vector<float> dx(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f), dwte(7 * C, 0.0f), dwpe(N * C, 0.0f);
    be.layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                          rstd.data(), N, C);
    be.encoder_backward(dwte.data(), dwpe.data(), dout.data(), tok.data(), 1, N, C);
    std::vector<float> dbias(C, 0.0f);
    be.matmul_backward(nullptr, std::vector<float>(C * C).data(), dbias.data(), dout.data(), x.data(),
                       w.data(), N, C, C);
    std::vector<float> all;
    for (const auto* v : {&dx, &dw, &db, &dwte, &dwpe, &dbias}) all.insert(all.end(), v->begin(), v->end());
    return all;
  };
  const auto one = run(1), two = run(2);
  be.set_threads(be.threads());
  CHECK(same_bits(one, two));
}

}  // namespace

int main() {
  test_same_seed_same_bits();
  test_reductions_thread_independent();
  return flotilla_test::summary("model_determinism");
}
