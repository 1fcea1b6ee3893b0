// The planner's memory prediction for a QLoRA fine-tune against a real run, within the tolerance of
// the full-training and LoRA cases (test_plan_memory_rss*.cpp, plan_rss_util.h): `flotilla-worker
// train` with lora.base_quant = "nf4" on a random Llama base written here as a Hugging Face folder
// (4 layers, width 512, 8 heads of 64, 4 K/V heads, SwiGLU 1536, vocabulary 8192, untied: every
// projection's in-width a multiple of 64), two steps plus the final evaluation and checkpoint. The
// base's projections (12.6 M parameters: 50 MiB in fp32, 6.2 MiB in NF4) are a large part of the
// memory here, so a planner that counted them in fp32 would miss by far more than the tolerance.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "engine/interop/hf_model.h"
#include "engine/model/model.h"
#include "tests/engine/plan_rss_util.h"

int main() {
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer's shadow memory and redzones inflate RSS by design: nothing to compare.
  std::printf("skipped: built with AddressSanitizer\n");
  return 0;
#endif
  using namespace flotilla;
  const std::string base = std::string(FLOTILLA_TEST_TMP) + "/test_plan_memory_rss_qlora-base";
  std::filesystem::remove_all(base);
  ModelSection s;
  s.arch = "llama";
  s.preset = "custom";
  s.n_layer = 4;
  s.n_head = 8;
  s.n_kv_head = 4;
  s.head_dim = 64;
  s.n_embd = 512;
  s.ffn_dim = 1536;
  s.vocab_size = 8192;
  s.max_seq_len = 256;
  s.tie_embeddings = false;
  const ModelDims d = dims_from_config(s);
  // Written by a forked child: the worker is spawned from this process, and a spawned child's
  // ru_maxrss starts from its parent's high-water mark (Linux carries it across exec), so this
  // process must never hold the model.
  const pid_t writer = fork();
  if (writer == 0) {
    Model m(d);
    m.init_random(7);
    std::vector<float> full(m.base_layout().full_params());
    m.base_to_full(full.data());
    interop::HfExportOptions o;
    o.dtype = "bf16";
    interop::export_hf_folder(base, d, full.data(), o);
    std::_Exit(0);
  }
  int status = -1;
  CHECK(writer > 0 && waitpid(writer, &status, 0) == writer && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  plan_rss::give_mfu_ceiling();
  const std::string lora = "[lora]\nenabled = true\nrank = 8\nbase_quant = \"nf4\"\n";
  plan_rss::check_config("qlora", "init_from = \"" + base + "\"\n", lora,
                         "steps = 2\nmicro_batch = 4\nseq_len = 64\n");
  // A tiny batch: loading the base is the peak.
  plan_rss::check_config("qlora-load", "init_from = \"" + base + "\"\n", lora,
                         "steps = 2\nmicro_batch = 1\nseq_len = 8\n");
  // LoRA on the same base: its load (the whole model in fp32 beside the frozen base) peaks too.
  plan_rss::check_config("lora-small-batch", "init_from = \"" + base + "\"\n",
                         "[lora]\nenabled = true\nrank = 8\n", "steps = 2\nmicro_batch = 4\nseq_len = 64\n");
  return flotilla_test::summary("test_plan_memory_rss_qlora");
}
