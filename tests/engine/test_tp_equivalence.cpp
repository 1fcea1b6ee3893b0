// Tensor parallelism (issue 4), with real Gloo ranks:
//  1. Model level, forked ranks: a tp=2 and a tp=4 shard of the same model start from exactly
//     their slice of the whole model's initialisation, give the same loss, and their gradients
//     equal the whole model's gradients sliced the same way (replicated tensors included), with a
//     vocabulary that does not fill the last ranks' columns (tp=4: one rank holds only padding).
//  2. Training: tp=2 for 10 steps matches one process (losses and final parameters, tolerance in
//     test_hybrid_util.h); each rank's checkpoint file holds only its shard; export-style loading
//     gathers the shards; resume on tp=2 is bitwise; resuming under another layout is refused
//     with both layouts named.
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/backend/registry.h"
#include "engine/comm/rendezvous.h"
#include "engine/model/gpt.h"
#include "engine/model/param_layout.h"
#include "tests/engine/test_comm_util.h"
#include "tests/engine/test_hybrid_util.h"

using namespace hybrid_test;

namespace {

flotilla::ModelDims tiny_dims(int vocab) {
  flotilla::ModelDims d;
  d.n_layer = 2;
  d.n_head = 4;
  d.n_embd = 32;
  d.vocab_size = vocab;
  d.padded_vocab = flotilla::pad_vocab(vocab);
  d.max_seq_len = 16;
  return d;
}

void tokens(int vocab, std::vector<int32_t>& in, std::vector<int32_t>& tg) {
  uint32_t x = 12345;
  for (size_t i = 0; i < in.size(); ++i) {
    x = x * 1664525u + 1013904223u;
    in[i] = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab));
    x = x * 1664525u + 1013904223u;
    tg[i] = static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab));
  }
  tg[0] = vocab - 1;  // a target in the last real column
}

// One TP rank: compares its shard against the whole model computed on the same rank.
void tp_rank(int rank, int port, int tp, int vocab) {
  flotilla::get_backend("cpu").set_threads(1);
  const flotilla::ModelDims d = tiny_dims(vocab);
  const int B = 2, T = 8;
  std::vector<int32_t> in(B * T), tg(B * T);
  tokens(vocab, in, tg);

  flotilla::Model whole(d);
  whole.init_random(7);
  whole.zero_grad();
  const float loss_whole = whole.forward(in.data(), tg.data(), B, T);
  whole.backward(0.5f);

  auto world =
      flotilla::comm::init_process_group("gloo", rank, tp, "127.0.0.1", port, flotilla::comm::Millis(20000));
  const flotilla::ModelShard shard = flotilla::make_shard(d, tp, rank, 1, 0);
  flotilla::Model part(d, shard);
  part.set_tensor_parallel_group(world.get());
  part.init_random(7);
  std::vector<float> expect(part.num_params());
  flotilla::full_to_shard(d, shard, whole.params(), expect.data());
  CHECK_MSG(std::memcmp(expect.data(), part.params(), expect.size() * 4) == 0,
            "tp=%d rank %d: shard initialisation is not the whole model's slice", tp, rank);
  part.zero_grad();
  const float loss_part = part.forward(in.data(), tg.data(), B, T);
  part.backward(0.5f);
  CHECK_MSG(std::fabs(loss_part - loss_whole) < 2e-6f * std::fabs(loss_whole),
            "tp=%d rank %d: loss %.8f vs %.8f", tp, rank, loss_part, loss_whole);

  flotilla::full_to_shard(d, shard, whole.grads(), expect.data());
  double worst = 0, scale = 0;
  for (size_t i = 0; i < expect.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(expect[i]) - part.grads()[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(expect[i])));
  }
  std::printf("tp=%d rank %d: loss %.7f (whole %.7f), max grad diff %.2e of max |grad| %.2e\n", tp, rank,
              loss_part, loss_whole, worst, scale);
  // Summation-order differences only: ~1e-7 relative to the largest gradient.
  CHECK_MSG(worst < 1e-5 * scale && scale > 0, "tp=%d rank %d: grad diff %.3g", tp, rank, worst);
  // The shard is smaller than the model: wte split, layers split but for the replicated parts.
  CHECK(part.param_size(flotilla::kWte) * static_cast<size_t>(tp) == whole.param_size(flotilla::kWte));
  CHECK(part.param_size(flotilla::kFcprojw) * static_cast<size_t>(tp) ==
        whole.param_size(flotilla::kFcprojw));
  CHECK(part.param_size(flotilla::kLn1w) == whole.param_size(flotilla::kLn1w));
}

void model_level() {
  auto r2 =
      comm_test::run_ranks(comm_test::iota_ranks(2), [](int rank, int port) { tp_rank(rank, port, 2, 200); });
  comm_test::expect_all_ok(r2, "tp=2 shard vs whole model");
  auto r4 =
      comm_test::run_ranks(comm_test::iota_ranks(4), [](int rank, int port) { tp_rank(rank, port, 4, 130); });
  comm_test::expect_all_ok(r4, "tp=4 shard vs whole model (a rank without real vocabulary)");
}

}  // namespace

int main() {
  model_level();

  const std::string root = fresh_dir("tp_equivalence");
  const Run single = train(root, "single", 1, config_text(2, ""));
  CHECK_MSG(single.code == 0 && single.losses.size() == 10, "%s", single.output.c_str());

  const Run tp2 = train(root, "tp2", 2, config_text(2, "tp = 2"));
  expect_close(single, tp2, "tp=2");

  // Each rank's file holds its own shard: about half of the parameters (the replicated
  // LayerNorms, wpe and row-parallel biases are in both).
  const auto p0 = checkpoint_section(root + "/tp2", 10, "params", 0);
  const auto p1 = checkpoint_section(root + "/tp2", 10, "params", 1);
  CHECK_MSG(p0.size() == p1.size() && p0.size() < single.params.size() * 4 * 6 / 10 &&
                p0.size() > single.params.size() * 4 * 4 / 10,
            "rank files hold %zu and %zu bytes of %zu", p0.size(), p1.size(), single.params.size() * 4);

  // Resume on tp=2: 5 steps, new processes, 5 more == 10 straight, bit for bit.
  const Run a = train(root, "tp2-resume", 2, config_text(2, "tp = 2"), {"--stop-after", "5"});
  CHECK_MSG(a.code == 0 && !a.losses.empty() && a.losses.rbegin()->first == 5, "%s", a.output.c_str());
  const Run b = train(root, "tp2-resume", 2, config_text(2, "tp = 2"));
  CHECK_MSG(bitwise_equal(tp2, b), "tp=2 resume is not bitwise equal to the straight run");

  // Another layout on the same run directory resumes (re-cut, issue 32), naming both.
  const Run other = train(root, "tp2-resume", 2, config_text(2, "dp = 2", 12));
  CHECK_MSG(other.code == 0, "%s", other.output.c_str());
  CHECK_MSG(
      contains(other.output, "saved with layout dp=1 x tp=2 x pp=1, this run requests dp=2 x tp=1 x pp=1"),
      "%s", other.output.c_str());
  return summary("tp_equivalence");
}
