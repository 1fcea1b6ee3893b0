// validate(): each rule is broken on its own (and several at once) and the message must name the
// field path and show every factor; valid configs (defaults, every preset, the shipped examples'
// kind of layouts) produce no problem. Also the derived batch geometry and the run directory.
#include <string>
#include <vector>

#include "check.h"
#include "engine/config/config_io.h"
#include "engine/config/config_schema.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"

using namespace flotilla;

namespace {

std::string all_text(const std::vector<ConfigProblem>& problems) {
  std::string out;
  for (const auto& p : problems) out += to_string(p) + "\n";
  return out;
}

// Expects exactly one problem whose path is `path` and whose "path: message" contains each piece.
void expect_problem(const RunConfig& c, const std::string& path, const std::vector<std::string>& pieces,
                    int world_size = 0) {
  const auto problems = validate(c, world_size);
  ++flotilla_test::checks();
  const ConfigProblem* hit = nullptr;
  for (const auto& p : problems)
    if (p.path == path) hit = &p;
  bool ok = problems.size() == 1 && hit;
  if (hit)
    for (const auto& piece : pieces) ok = ok && to_string(*hit).find(piece) != std::string::npos;
  if (!ok) {
    ++flotilla_test::failures();
    std::fprintf(stderr, "expected one problem at %s containing", path.c_str());
    for (const auto& piece : pieces) std::fprintf(stderr, " [%s]", piece.c_str());
    std::fprintf(stderr, "; got:\n%s", all_text(problems).c_str());
  }
}

RunConfig with(const std::vector<std::string>& overrides) {
  RunConfig c;
  apply_overrides(c, overrides);
  return c;
}

// A config whose string field holds a value the reader would have refused (as the wizard or code
// could build it), so that validate() is what catches it.
RunConfig raw(const std::string& path, const std::string& value) {
  RunConfig c;
  *static_cast<std::string*>(field_ptr(*find_config_key(path), c)) = value;
  return c;
}

void test_valid_configs() {
  CHECK_MSG(validate(RunConfig{}).empty(), "%s", all_text(validate(RunConfig{})).c_str());
  for (const char* preset : {"tiny", "small", "gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1.5b"}) {
    const RunConfig c = with({std::string("model.preset=") + preset});
    CHECK_MSG(validate(c).empty(), "%s: %s", preset, all_text(validate(c)).c_str());
  }
  const RunConfig hybrid =
      with({"parallel.dp=2", "parallel.tp=2", "parallel.pp=2", "parallel.micro_batches=4", "parallel.zero=1",
            "train.global_batch_tokens=32768"});
  CHECK_MSG(validate(hybrid, 8).empty(), "%s", all_text(validate(hybrid, 8)).c_str());
}

void test_model_rules() {
  expect_problem(with({"model.preset=custom", "model.n_head=12", "model.n_embd=700"}), "model.n_head",
                 {"model.n_head: 12 does not divide model.n_embd 700"});
  expect_problem(with({"model.n_layer=0"}), "model.n_layer", {"model.n_layer: 0 must be >= 1"});
  expect_problem(with({"model.vocab_size=1"}), "model.vocab_size", {"model.vocab_size: 1", "between 2"});
  expect_problem(with({"model.init_from=weights.pt"}), "model.init_from",
                 {"\"weights.pt\"", ".safetensors", ".bin"});
  expect_problem(raw("model.arch", "mamba"), "model.arch", {"unknown value \"mamba\"", "gpt2", "llama"});
  RunConfig bad_preset;
  bad_preset.model.preset = "gpt2-125m";  // a struct built in code, not through the reader
  expect_problem(bad_preset, "model.preset", {"\"gpt2-125m\"", "did you mean \"gpt2-124m\"?"});
}

void test_train_rules() {
  expect_problem(with({"train.seq_len=2048"}), "train.seq_len",
                 {"train.seq_len: 2048 exceeds model.max_seq_len 1024"});
  expect_problem(with({"train.steps=0", "optim.warmup_steps=0"}), "train.steps",
                 {"train.steps: 0 must be >= 1"});
  expect_problem(with({"train.micro_batch=0", "data.synthetic_tokens=1000000"}), "train.micro_batch",
                 {"train.micro_batch: 0 must be >= 1"});
  expect_problem(
      with({"train.global_batch_tokens=500000", "parallel.dp=2"}), "train.global_batch_tokens",
      {"train.global_batch_tokens: 500000 is not a multiple of train.micro_batch 8 x train.seq_len 256 x "
       "parallel.dp 2 = 4096"});
  CHECK(validate(with({"train.dtype=bf16"})).empty());  // the CPU's features are checked at run time
  CHECK(validate(with({"train.dtype=bf16", "run.device=cuda"})).empty());
  expect_problem(with({"train.grad_clip=-1"}), "train.grad_clip", {"train.grad_clip: -1.0", ">= 0"});
  expect_problem(with({"train.log_every=0"}), "train.log_every", {"train.log_every: 0 must be >= 1"});
  expect_problem(with({"train.spike_factor=0.5"}), "train.spike_factor", {"0.5 must be 0 (off)", "> 1"});
  CHECK(validate(with({"train.spike_factor=3"})).empty());
}

void test_optim_rules() {
  expect_problem(with({"optim.lr=0"}), "optim.lr", {"optim.lr: 0.0 must be a finite number > 0"});
  expect_problem(with({"optim.lr=nan"}), "optim.lr", {"optim.lr: nan must be a finite number > 0"});
  expect_problem(with({"optim.lr=inf"}), "optim.lr", {"optim.lr: inf"});
  expect_problem(with({"optim.beta1=1"}), "optim.beta1", {"optim.beta1: 1.0 must be in [0, 1)"});
  expect_problem(with({"optim.beta2=-0.1"}), "optim.beta2", {"optim.beta2: -0.1 must be in [0, 1)"});
  expect_problem(with({"optim.eps=0"}), "optim.eps", {"optim.eps: 0.0"});
  expect_problem(with({"optim.weight_decay=-0.1"}), "optim.weight_decay", {"-0.1"});
  expect_problem(with({"optim.min_lr_ratio=1.5"}), "optim.min_lr_ratio", {"1.5 must be in [0, 1]"});
  expect_problem(with({"optim.warmup_steps=-1"}), "optim.warmup_steps",
                 {"optim.warmup_steps: -1 must be >= 0"});
  CHECK(validate(with({"optim.warmup_steps=300"})).empty());  // a shortened run stays in warmup
  expect_problem(raw("optim.schedule", "cosin"), "optim.schedule",
                 {"unknown value \"cosin\" (did you mean \"cosine\"?)", "constant, cosine, linear, wsd"});
  expect_problem(with({"optim.decay_fraction=1.5"}), "optim.decay_fraction", {"1.5 must be in [0, 1]"});
}

void test_parallel_rules() {
  expect_problem(with({"parallel.tp=3"}), "parallel.tp", {"parallel.tp=3 does not divide model.n_head=4"});
  // 5 divides n_head 25 (gpt2-1.5b) but not the padded vocabulary 50304 = 2^7 x 3 x 131.
  expect_problem(with({"model.preset=gpt2-1.5b", "parallel.tp=5"}), "parallel.tp",
                 {"parallel.tp=5 does not divide the padded vocabulary 50304", "model.vocab_size 50257"});
  expect_problem(with({"parallel.pp=8", "parallel.micro_batches=8"}), "parallel.pp",
                 {"parallel.pp=8 exceeds model.n_layer=4"});
  expect_problem(with({"parallel.zero=3"}), "parallel.zero", {"parallel.zero: 3", "0, 1 or 2"});
  expect_problem(with({"parallel.zero=2", "parallel.pp=2", "parallel.dp=2"}), "parallel.zero",
                 {"ZeRO-2", "parallel.pp=2"});
  expect_problem(with({"parallel.pp=2", "parallel.micro_batches=3", "train.global_batch_tokens=8192"}),
                 "parallel.micro_batches", {"parallel.micro_batches=3 does not divide the 4 micro-batches"});
  expect_problem(with({"parallel.micro_batches=4"}), "parallel.micro_batches",
                 {"no effect with parallel.pp=1"});
  expect_problem(with({"parallel.backend=nccl"}), "parallel.backend", {"nccl needs run.device = \"cuda\""});
  expect_problem(with({"parallel.dp=0", "data.synthetic_tokens=1000000"}), "parallel.dp",
                 {"parallel.dp: 0 must be >= 1"});
  expect_problem(with({"parallel.timeout_s=0"}), "parallel.timeout_s", {"parallel.timeout_s: 0.0"});
  expect_problem(raw("parallel.schedule", "zb"), "parallel.schedule", {"\"zb\"", "gpipe, 1f1b"});
  // The world size: every factor and the product.
  expect_problem(with({"parallel.dp=2", "parallel.tp=2", "parallel.pp=2", "parallel.micro_batches=2"}),
                 "parallel", {"parallel: dp*tp*pp = 2*2*2 = 8 does not equal the world size 4"}, 4);
  expect_problem(with({"parallel.dp=2"}), "parallel",
                 {"= 2 does not equal the world size 1", "--nproc-per-node 2"}, 1);
  CHECK(validate(with({"parallel.dp=2"}), 2).empty());
}

void test_other_sections() {
  expect_problem(with({"run.name=my run"}), "run.name", {"\"my run\" has \" \" at position 3"});
  expect_problem(with({"run.name=.hidden"}), "run.name", {"must not start with '.'"});
  expect_problem(with({"run.name="}), "run.name", {"run.name: must not be empty"});
  expect_problem(raw("run.device", "tpu"), "run.device", {"\"tpu\"", "cpu, cuda"});
  expect_problem(with({"run.threads=-2"}), "run.threads", {"run.threads: -2 must be >= 0"});
  RunConfig big_seed;
  big_seed.run.seed = ~0ull;
  expect_problem(big_seed, "run.seed", {"18446744073709551615 exceeds 2^63-1"});
  expect_problem(with({"data.source=shards"}), "data.train", {"data.source = \"shards\" needs"});
  // Shards named under the default synthetic source would be ignored: refused, naming the fix.
  expect_problem(with({"data.train=a.bin"}), "data.train", {"data.source is \"synthetic\"", "set data.source = \"shards\""});
  expect_problem(with({"data.val=v.bin"}), "data.val", {"would be ignored"});
  expect_problem(with({"data.source=shards", "data.train=a.bin", "eval.every=10"}), "eval.every",
                 {"eval.every: 10", "data.val is empty"});
  expect_problem(
      with({"data.synthetic_tokens=1000"}), "data.synthetic_tokens",
      {"1000 is fewer than one micro-batch per rank", "8 x train.seq_len 256 x parallel.dp 1 + 1 = 2049"});
  expect_problem(with({"data.synthetic_tokens=10000"}), "data.synthetic_tokens",
                 {"leaves 1000 validation tokens", "= 2049"});
  expect_problem(with({"checkpoint.keep_last=0"}), "checkpoint.keep_last",
                 {"checkpoint.keep_last: 0 must be >= 1"});
  expect_problem(with({"checkpoint.every=-5"}), "checkpoint.every", {"checkpoint.every: -5"});
  expect_problem(with({"checkpoint.resume=\"\""}), "checkpoint.resume", {"not empty"});
  expect_problem(with({"eval.batches=0"}), "eval.batches", {"eval.batches: 0 must be >= 1"});
  expect_problem(with({"eval.sample_tokens=0"}), "eval.sample_tokens", {"eval.sample_tokens: 0"});
  expect_problem(with({"budget.max_usd=-1"}), "budget.max_usd", {"budget.max_usd: -1.0"});
  expect_problem(with({"budget.max_usd=50"}), "budget.max_usd", {"50.0 needs a price"});
  CHECK(validate(with({"budget.max_usd=50", "budget.usd_per_hour=2"})).empty());
  expect_problem(with({"budget.warn_fraction=0"}), "budget.warn_fraction", {"0.0 must be in (0, 1]"});
  expect_problem(with({"budget.max_hours=-1"}), "budget.max_hours", {"-1.0"});
}

void test_all_at_once_and_throw() {
  const RunConfig c = with({"model.preset=custom", "model.n_head=12", "model.n_embd=700", "optim.lr=-1",
                            "checkpoint.keep_last=0", "parallel.tp=8"});
  const auto problems = validate(c);
  CHECK_MSG(problems.size() == 4, "%s", all_text(problems).c_str());
  try {
    validate_or_throw(c);
    CHECK(false);
  } catch (const Error& e) {
    const std::string m = e.what();
    CHECK(e.code() == ExitCode::kConfig);
    CHECK_MSG(m.find("the run config has 4 problems:") != std::string::npos, "%s", m.c_str());
    CHECK(m.find("\n  model.n_head: 12 does not divide model.n_embd 700") != std::string::npos);
    CHECK(m.find("\n  optim.lr: -1.0") != std::string::npos);
    CHECK(m.find("\n  checkpoint.keep_last: 0") != std::string::npos);
    CHECK(m.find("\n  parallel.tp: parallel.tp=8 does not divide model.n_head=12") != std::string::npos);
  }
  validate_or_throw(RunConfig{});  // no throw
}

void test_derived() {
  RunConfig c;
  CHECK(tokens_per_step(c) == 8 * 256);
  CHECK(grad_accum_steps(c) == 1);
  c = with({"parallel.dp=2", "train.global_batch_tokens=32768"});
  CHECK(tokens_per_step(c) == 32768);
  CHECK(grad_accum_steps(c) == 32768 / (8 * 256 * 2));
  c = with({"parallel.pp=2", "parallel.micro_batches=4"});
  CHECK(tokens_per_step(c) == 8 * 256 * 4);
  CHECK(grad_accum_steps(c) == 4);
  CHECK(resolved_out_dir(with({"run.name=exp"})) == "runs/exp");
  CHECK(resolved_out_dir(with({"run.out_dir=/data/x"})) == "/data/x");
}

}  // namespace

int main() {
  test_valid_configs();
  test_model_rules();
  test_train_rules();
  test_optim_rules();
  test_parallel_rules();
  test_other_sections();
  test_all_at_once_and_throw();
  test_derived();
  return flotilla_test::summary("test_config_validate");
}
