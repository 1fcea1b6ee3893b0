// Hybrid layouts (issue 4) on the rank grid with TP innermost, with real Gloo ranks:
//  1. validate() rejects impossible layouts, each message showing every factor.
//  2. dp=2 x tp=2 (with ZeRO-0 and ZeRO-1), tp=2 x pp=2 (1F1B) and dp=2 x pp=2 (ZeRO-1, GPipe)
//     train 10 steps to the losses and final parameters of one process on the same global batch
//     (tolerance in test_hybrid_util.h); resume of dp=2 x tp=2 ZeRO-1 is bitwise.
#include <string>
#include <vector>

#include "engine/config/config_validate.h"
#include "tests/engine/test_hybrid_util.h"

using namespace hybrid_test;

namespace {

flotilla::RunConfig base_config() {
  flotilla::RunConfig c;
  c.model.preset = "custom";
  c.model.n_layer = 2;
  c.model.n_head = 4;
  c.model.n_embd = 64;
  c.model.vocab_size = 256;
  c.model.max_seq_len = 64;
  c.train.micro_batch = 2;
  c.train.seq_len = 32;
  c.train.global_batch_tokens = 128;
  c.data.synthetic_tokens = 60000;
  return c;
}

// Every problem validate() reports at `path`, as "path: message" lines.
std::string problem_at(const flotilla::RunConfig& c, const std::string& path, int world) {
  std::string out;
  for (const auto& p : flotilla::validate(c, world))
    if (p.path == path) out += flotilla::to_string(p) + "\n";
  return out;
}

void expect_message(const flotilla::RunConfig& c, const std::string& path, int world,
                    const std::string& text) {
  const std::string got = problem_at(c, path, world);
  CHECK_MSG(contains(got, text), "%s: expected [%s], got [%s]", path.c_str(), text.c_str(), got.c_str());
}

void layouts() {
  flotilla::RunConfig c = base_config();
  c.parallel.dp = 2;
  c.parallel.tp = 2;
  CHECK(flotilla::validate(c, 4).empty());  // a valid hybrid
  c.parallel.pp = 2;
  c.parallel.micro_batches = 1;
  CHECK(flotilla::validate(c, 8).empty());

  c = base_config();
  c.parallel.tp = 3;
  c.parallel.dp = 1;
  expect_message(c, "parallel.tp", 3, "parallel.tp=3 does not divide model.n_head=4");
  expect_message(c, "parallel.tp", 3, "parallel.tp=3 does not divide the padded vocabulary 256");
  c = base_config();
  c.model.n_head = 6;
  c.model.n_embd = 96;
  c.parallel.tp = 3;
  CHECK(flotilla::validate(c, 3).size() == 1);
  expect_message(c, "parallel.tp", 3, "parallel.tp=3 does not divide the padded vocabulary 256");
  c = base_config();
  c.parallel.pp = 3;
  c.parallel.micro_batches = 2;
  expect_message(c, "parallel.pp", 3, "parallel.pp=3 exceeds model.n_layer=2");
  c = base_config();
  c.parallel.pp = 2;
  c.parallel.micro_batches = 3;  // 128 tokens / (2 x 32) = 2 micro-batches per step
  expect_message(c, "parallel.micro_batches", 2,
                 "parallel.micro_batches=3 does not divide the 2 micro-batches");
  c = base_config();
  c.parallel.dp = 2;
  c.parallel.tp = 2;
  expect_message(c, "parallel", 2, "dp*tp*pp = 2*2*1 = 4 does not equal the world size 2");
  c = base_config();
  c.parallel.tp = 2;
  c.eval.sample_every = 5;
  expect_message(c, "eval.sample_every", 2, "parallel.tp=2 x parallel.pp=1 splits it");
  c = base_config();
  c.parallel.pp = 2;
  c.parallel.micro_batches = 2;
  c.parallel.dp = 1;
  c.parallel.zero = 2;
  expect_message(c, "parallel.zero", 2, "ZeRO-2 (sharded gradients) cannot be combined with parallel.pp=2");
}

}  // namespace

int main() {
  layouts();

  const std::string root = fresh_dir("hybrid_equivalence");
  const Run single = train(root, "single", 1, config_text(2, ""));
  CHECK_MSG(single.code == 0 && single.losses.size() == 10, "%s", single.output.c_str());

  const Run dp_tp = train(root, "dp2tp2", 4, config_text(2, "dp = 2\ntp = 2"));
  expect_close(single, dp_tp, "dp=2 x tp=2");
  const Run dp_tp_z1 = train(root, "dp2tp2z1", 4, config_text(2, "dp = 2\ntp = 2\nzero = 1"));
  expect_close(single, dp_tp_z1, "dp=2 x tp=2 zero=1");
  const Run tp_pp = train(root, "tp2pp2", 4, config_text(2, "tp = 2\npp = 2\nmicro_batches = 2"));
  expect_close(single, tp_pp, "tp=2 x pp=2 1f1b");
  const Run dp_pp = train(
      root, "dp2pp2", 4, config_text(2, "dp = 2\npp = 2\nmicro_batches = 1\nzero = 1\nschedule = \"gpipe\""));
  expect_close(single, dp_pp, "dp=2 x pp=2 zero=1");

  // Resume of dp=2 x tp=2 ZeRO-1: bitwise.
  const std::string cfg = config_text(2, "dp = 2\ntp = 2\nzero = 1");
  const Run a = train(root, "dp2tp2z1-resume", 4, cfg, {"--stop-after", "5"});
  CHECK_MSG(a.code == 0 && !a.losses.empty() && a.losses.rbegin()->first == 5, "%s", a.output.c_str());
  const Run b = train(root, "dp2tp2z1-resume", 4, cfg);
  CHECK_MSG(bitwise_equal(dp_tp_z1, b), "dp=2 x tp=2 ZeRO-1 resume is not bitwise equal to the straight run");
  return summary("hybrid_equivalence");
}
