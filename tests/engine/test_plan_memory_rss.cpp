// The planner's memory prediction against a real run (issue: "predicted peak memory within 15%
// of the measured peak RSS"): `flotilla-worker train` runs one step (plus the final evaluation and
// checkpoint) of a small config in a child process and its peak RSS (wait4's ru_maxrss) is compared with
// make_plan()'s total, for a GPT-2 and a Llama-architecture model (plan_rss_util.h;
// test_plan_memory_rss_lora.cpp does the same for a LoRA fine-tune).
#include "tests/engine/plan_rss_util.h"

int main() {
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer's shadow memory and redzones inflate RSS by design: nothing to compare.
  std::printf("skipped: built with AddressSanitizer\n");
  return 0;
#endif
  plan_rss::give_mfu_ceiling();
  plan_rss::check_config("gpt2", "preset = \"tiny\"\nvocab_size = 4096\nmax_seq_len = 256\n");
  plan_rss::check_config("llama", "preset = \"llama-tiny\"\nvocab_size = 4096\nmax_seq_len = 256\n");
  return flotilla_test::summary("test_plan_memory_rss");
}
