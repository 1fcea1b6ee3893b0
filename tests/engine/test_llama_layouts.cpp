// Every parallel layout for the Llama architecture, with real Gloo ranks, against one process on
// the same global batch (the tolerances and batch plan of test_hybrid_util.h): data parallelism
// with ZeRO 0/1/2, tensor parallelism (whole K/V heads per rank), 1F1B pipeline stages, and the
// hybrids tp x pp and dp x tp with ZeRO-1; recomputation is bitwise. Two shapes: a Qwen 3-style one
// (grouped-query attention, per-head q/k RMSNorm, whose weight gradient each TP rank sums over its
// group, head_dim 16 != C/H, tied head) and a Llama / Qwen 2-style one (q/k/v biases, an untied LM
// head living on the last stage only, llama3 RoPE scaling). validate() refuses a tp that does not
// divide n_kv_head, naming both numbers.
#include <filesystem>
#include <string>

#include "engine/config/config_validate.h"
#include "tests/engine/test_hybrid_util.h"

using namespace hybrid_test;

namespace {

std::string llama_config(const std::string& shape, const std::string& parallel,
                         const std::string& train = "") {
  return "[run]\nname = \"llama-layouts\"\nseed = 11\nthreads = 1\n"
         "[model]\npreset = \"custom\"\narch = \"llama\"\nn_layer = 2\nn_head = 4\nn_kv_head = 2\nn_embd = "
         "64\n"
         "ffn_dim = 96\nvocab_size = 256\nmax_seq_len = 64\n" +
         shape +
         "[data]\nsynthetic_tokens = 60000\n"
         "[train]\nsteps = 10\nmicro_batch = 2\nseq_len = 32\nglobal_batch_tokens = 128\n" +
         train +
         "[optim]\nlr = 0.003\nwarmup_steps = 2\n"
         "[parallel]\ntimeout_s = 60\n" +
         parallel +
         "\n[checkpoint]\nevery = 5\nkeep_last = 3\n"
         "[eval]\nevery = 0\nbatches = 1\n";
}

const char* kQwen3 = "head_dim = 16\nqk_norm = true\ntie_embeddings = true\nrope_theta = 1000000.0\n";
const char* kLlama =
    "qkv_bias = true\ntie_embeddings = false\nrope_theta = 500000.0\nrope_scaling = \"llama3\"\n"
    "rope_factor = 8.0\nrope_original_max_position = 32\n";

void validation() {
  flotilla::RunConfig c;
  c.model.preset = "custom";
  c.model.arch = "llama";
  c.model.n_layer = 2;
  c.model.n_head = 8;
  c.model.n_kv_head = 2;
  c.model.n_embd = 64;
  c.model.vocab_size = 256;
  c.parallel.tp = 4;
  std::string got;
  for (const auto& p : flotilla::validate(c, 4)) got += flotilla::to_string(p) + "\n";
  CHECK_MSG(contains(got, "parallel.tp=4 does not divide model.n_kv_head=2"), "got [%s]", got.c_str());
  c.parallel.tp = 2;
  CHECK(flotilla::validate(c, 2).empty());
}

void layouts(const std::string& root, const char* name, const std::string& shape) {
  const std::string r = root + "/" + name;
  std::filesystem::create_directories(r);
  const Run single = train(r, "single", 1, llama_config(shape, ""));
  CHECK_MSG(single.code == 0 && single.losses.size() == 10, "%s single: %s", name, single.output.c_str());
  const Run recompute = train(r, "recompute", 1, llama_config(shape, "", "recompute = true\n"));
  CHECK_MSG(bitwise_equal(single, recompute), "%s: recompute is not bitwise equal", name);
  const std::string tag = std::string(name) + " ";
  expect_close(single, train(r, "dp2", 2, llama_config(shape, "dp = 2")), (tag + "dp=2").c_str());
  expect_close(single, train(r, "dp2z1", 2, llama_config(shape, "dp = 2\nzero = 1")),
               (tag + "dp=2 zero1").c_str());
  expect_close(single, train(r, "dp2z2", 2, llama_config(shape, "dp = 2\nzero = 2")),
               (tag + "dp=2 zero2").c_str());
  expect_close(single, train(r, "tp2", 2, llama_config(shape, "tp = 2")), (tag + "tp=2").c_str());
  expect_close(single, train(r, "pp2", 2, llama_config(shape, "pp = 2\nmicro_batches = 2")),
               (tag + "pp=2").c_str());
  expect_close(single, train(r, "tp2pp2", 4, llama_config(shape, "tp = 2\npp = 2\nmicro_batches = 2")),
               (tag + "tp=2 x pp=2").c_str());
  expect_close(single, train(r, "dp2tp2", 4, llama_config(shape, "dp = 2\ntp = 2\nzero = 1")),
               (tag + "dp=2 x tp=2 zero1").c_str());
}

}  // namespace

int main() {
  validation();
  const std::string root = fresh_dir("llama_layouts");
  layouts(root, "qwen3-like", kQwen3);
  layouts(root, "llama-like", kLlama);
  return flotilla_test::summary("test_llama_layouts");
}
