// The Hugging Face round trip through the real worker, as a user runs it: a HF folder (the golden
// Qwen2 model plus tokenizer files) as model.init_from decides the model (`plan` shows it), trains
// on two data-parallel ranks, and `export --format hf` writes a folder whose fp32 weights are the
// checkpoint's bit for bit (bf16: their rounding), with config.json and the tokenizer files carried
// over and no lm_head for the tied head, as checkpoint.export_hf writes it at the end of the run; then the
// errors: a folder without weights, a GPT-2 folder, a tensor the config does not account for.
#include <filesystem>
#include <string>

#include "engine/checkpoint/model_checkpoint.h"
#include "engine/core/bf16.h"
#include "engine/interop/hf_checkpoint.h"
#include "engine/interop/hf_config.h"
#include "engine/interop/hf_model.h"
#include "tests/engine/test_hybrid_util.h"

using namespace hybrid_test;
namespace fs = std::filesystem;

int main() {
  const std::string root = fresh_dir("llama_hf_cli");
  const std::string src = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden";
  const std::string model = root + "/qwen2";
  fs::copy(src + "/hf/qwen2", model);
  fs::remove(model + "/reference.safetensors");
  fs::copy_file(src + "/tokenizers/qwen/tokenizer.json", model + "/tokenizer.json");
  fs::copy_file(src + "/tokenizers/qwen/tokenizer_config.json", model + "/tokenizer_config.json");
  const std::string cfg = root + "/ft.toml";
  write_text(cfg,
             "[run]\nname = \"ft\"\nthreads = 1\n[model]\ninit_from = \"" + model +
                 "\"\n[data]\nsynthetic_tokens = 50000\n[train]\nsteps = 3\nmicro_batch = 2\nseq_len = 16\n"
                 "[optim]\nlr = 0.001\nwarmup_steps = 1\n[parallel]\ndp = 2\n");

  const auto plan = flotilla_test::run_worker({"plan", "--config", cfg});
  CHECK_MSG(plan.exit_code == 0 && contains(plan.output, "llama, 2 layers, 4 heads (2 KV, head_dim 8)") &&
                contains(plan.output, "parameters      22,816"),
            "%s", plan.output.c_str());
  const auto run = flotilla_test::run_worker({"launch", "--nproc-per-node", "2", "--master-port", "0",
                                              "--no-bind", "--", "train", "--config", cfg, "--out-dir",
                                              root + "/run", "--quiet", "--no-stdout-metrics", "--set",
                                              "checkpoint.export_hf=" + root + "/auto"});
  CHECK_MSG(run.exit_code == 0, "%s", run.output.c_str());
  const flotilla::ModelCheckpoint ck = flotilla::load_model_checkpoint(root + "/run", nullptr);
  CHECK(ck.dims.llama() && ck.dims.qkv_bias && ck.dims.tied() && ck.init_from == model);

  const auto e32 = flotilla_test::run_worker({"export", "--checkpoint", root + "/run", "--format", "hf",
                                              "--dtype", "fp32", "--out", root + "/out32"});
  CHECK_MSG(e32.exit_code == 0, "%s", e32.output.c_str());
  CHECK(flotilla::interop::import_hf_weights(root + "/out32", ck.dims) == ck.params);
  CHECK(fs::exists(root + "/out32/tokenizer.json") && fs::exists(root + "/out32/tokenizer_config.json"));
  CHECK(flotilla::interop::HfCheckpoint(root + "/out32").find("lm_head.weight") == nullptr);
  const flotilla::interop::HfConfig a = flotilla::interop::read_hf_config(model),
                                    b = flotilla::interop::read_hf_config(root + "/out32");
  CHECK(a.model_type == b.model_type && a.rms_norm_eps == b.rms_norm_eps && a.rope.theta == b.rope.theta &&
        b.dtype == "float32");
  const auto e16 = flotilla_test::run_worker(
      {"export", "--checkpoint", root + "/run", "--format", "hf", "--out", root + "/out16"});
  // No --dtype: the source's (the golden folder is bfloat16), said so, and the folder named absolutely.
  CHECK_MSG(e16.exit_code == 0 && contains(e16.output, "(bf16, as the source: the dtype of " + model + ")") &&
                contains(e16.output, ": " + fs::absolute(root + "/out16").string() + " ("),
            "%s", e16.output.c_str());
  const std::vector<float> half = flotilla::interop::import_hf_weights(root + "/out16", ck.dims);
  size_t wrong = 0;
  for (size_t i = 0; i < half.size(); ++i)
    wrong += half[i] != flotilla::from_bf16(flotilla::to_bf16(ck.params[i])) ? 1 : 0;
  CHECK_MSG(wrong == 0, "%zu bf16 values differ from the rounded checkpoint", wrong);
  // checkpoint.export_hf wrote the same folder at the end of the run.
  CHECK(flotilla::interop::import_hf_weights(root + "/auto", ck.dims) == half);
  CHECK(fs::exists(root + "/auto/tokenizer.json"));

  // Errors name the folder, the key or the tensor, and say what to do.
  const std::string empty = root + "/no-weights";
  fs::create_directories(empty);
  fs::copy_file(model + "/config.json", empty + "/config.json");
  auto bad = flotilla_test::run_worker({"train", "--config", cfg, "--set", "model.init_from=" + empty,
                                        "--set", "parallel.dp=1", "--out-dir", root + "/bad1", "--quiet"});
  CHECK_MSG(bad.exit_code != 0 && contains(bad.output, "no-weights"), "%s", bad.output.c_str());
  const std::string gpt2 = root + "/gpt2-folder";
  fs::create_directories(gpt2);
  write_text(gpt2 + "/config.json", "{\"model_type\": \"gpt2\", \"n_layer\": 2}");
  bad = flotilla_test::run_worker({"plan", "--config", cfg, "--set", "model.init_from=" + gpt2});
  CHECK_MSG(bad.exit_code == 3 && contains(bad.output, "model.safetensors"), "%s", bad.output.c_str());
  return flotilla_test::summary("test_llama_hf_cli");
}
