// The planner's memory prediction for a LoRA fine-tune against a real run, within the tolerance of
// the full-training cases (test_plan_memory_rss.cpp, plan_rss_util.h): `flotilla-worker train` on the
// golden Llama folder (2 layers, width 32, vocab 128) with lora.enabled, two steps plus the final
// evaluation and checkpoint. The frozen base is tiny here; the batch is large enough that the
// activations, the adapters' buffers among them, are most of the memory.
#include "tests/engine/plan_rss_util.h"

int main() {
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer's shadow memory and redzones inflate RSS by design: nothing to compare.
  std::printf("skipped: built with AddressSanitizer\n");
  return 0;
#endif
  plan_rss::give_mfu_ceiling();
  plan_rss::check_config(
      "lora", "init_from = \"" + std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/hf/llama\"\n",
      "[lora]\nenabled = true\nrank = 8\n", "steps = 2\nmicro_batch = 32\nseq_len = 512\n");
  return flotilla_test::summary("test_plan_memory_rss_lora");
}
