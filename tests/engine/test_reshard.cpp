// Resume on another layout (issue 32), the core pairs, with the real worker (harness and
// tolerances: test_reshard_util.h): dp 4 -> 2 -> 1, tp 2 -> 1 -> 2, dp=2 ZeRO-1 -> ZeRO-0, each
// against one uninterrupted run on the first layout, by losses, final parameters and the rows of
// tokens each step read. Negative controls: resuming on another layout without the AdamW moments
// or without the data cursor (FLOTILLA_TEST_SKIP_RESTORE) is caught by the same comparison. Also:
// a layout validate() refuses names the saved and the requested layout and the valid ones; a
// changed model shape is still refused; export reads a ZeRO-1 checkpoint. The other pairs
// (ZeRO-2, pp, hybrids, upward dp, LoRA/QLoRA) are in test_reshard_layouts.cpp (label slow).
#include "tests/engine/test_reshard_util.h"

using namespace reshard_test;

int main() {
  const std::string root = fresh_dir("reshard");
  constexpr int kSteps = 6;
  const std::string cfg = base_config(kSteps);

  const ChainResult dp4 = chain_run(root, "dp4", cfg, {layout(4)}, {}, kSteps);
  CHECK_MSG(dp4.run.code == 0 && dp4.run.losses.size() == kSteps, "%s", dp4.run.output.c_str());
  expect_chain(root, "dp4-dp2-dp1", dp4, cfg, {layout(4), layout(2), layout(1)}, {2, 4}, kSteps);

  const ChainResult tp2 = chain_run(root, "tp2", cfg, {layout(1, 2)}, {}, kSteps);
  CHECK_MSG(tp2.run.code == 0 && tp2.run.losses.size() == kSteps, "%s", tp2.run.output.c_str());
  expect_chain(root, "tp2-tp1-tp2", tp2, cfg, {layout(1, 2), layout(1), layout(1, 2)}, {2, 4}, kSteps);

  const ChainResult z1 = chain_run(root, "dp2z1", cfg, {layout(2, 1, 1, 1)}, {}, kSteps);
  CHECK_MSG(z1.run.code == 0 && z1.run.losses.size() == kSteps, "%s", z1.run.output.c_str());
  const Compared z1z0 = expect_chain(root, "z1-z0", z1, cfg, {layout(2, 1, 1, 1), layout(2)}, {3}, kSteps);
  // Two ranks: ZeRO-1's reduce-scatter + all-gather and ZeRO-0's all-reduce add the same two terms.
  CHECK_MSG(z1z0.bitwise, "dp=2 ZeRO-1 -> ZeRO-0 should be bitwise");

  // The runs layer's request: the same config (global batch left to its default, micro_batch x
  // seq_len x dp) resumed with --set parallel.dp=1: the run keeps the checkpoint's global batch
  // (accumulating 2 micro-batches), so the steps continue as on dp=2.
  {
    std::string dflt = cfg;
    dflt.replace(dflt.find("micro_batch = 1\nseq_len = 32\nglobal_batch_tokens = 128\n"),
                 std::string("micro_batch = 1\nseq_len = 32\nglobal_batch_tokens = 128\n").size(),
                 "micro_batch = 2\nseq_len = 32\n");
    const ChainResult ref = chain_run(root, "default-dp2", dflt, {layout(2)}, {}, kSteps);
    CHECK_MSG(ref.run.code == 0 && ref.run.losses.size() == kSteps, "%s", ref.run.output.c_str());
    expect_chain(root, "default-dp2-dp1", ref, dflt, {layout(2), layout(1)}, {3}, kSteps);
    bool kept = false;
    for (const auto& r : flotilla_test::read_metrics(root + "/default-dp2-dp1"))
      kept = kept || contains(r.value("message", ""), "train.global_batch_tokens = 128 kept from checkpoint");
    CHECK_MSG(kept, "no event says the global batch was kept");
  }

  // Shuffled llm.c data permutes whole global micro-batches: dp 4 -> 2 continues only with the same
  // global micro-batch (micro_batch 1 -> 2); otherwise the refusal says what to keep.
  {
    std::string shuffled = cfg;
    shuffled.replace(shuffled.find("[data]\n"), 7, "[data]\nshuffle = true\n");
    const ChainResult ref = chain_run(root, "shuffled-dp4", shuffled, {layout(4)}, {}, kSteps);
    CHECK_MSG(ref.run.code == 0 && ref.run.losses.size() == kSteps, "%s", ref.run.output.c_str());
    const ChainResult refused =
        chain_run(root, "shuffled-refused", shuffled, {layout(4), layout(2)}, {3}, kSteps);
    CHECK(refused.run.code != 0);
    CHECK_MSG(contains(refused.run.output,
                       "saved with layout dp=4 x tp=1 x pp=1, this run requests dp=2 x tp=1 x "
                       "pp=1: data cursor: with data.shuffle = true") &&
                  contains(refused.run.output, "keep parallel.dp x train.micro_batch = 4"),
              "%s", refused.run.output.c_str());
    Layout wider = layout(2);
    wider.sets.push_back("train.micro_batch=2");
    wider.parallel += " micro_batch=2";
    expect_chain(root, "shuffled-dp4-dp2", ref, shuffled, {layout(4), wider}, {3}, kSteps);
  }

  // Negative controls: each drops one piece of state on the re-cut resume and must be caught.
  const ChainResult no_moments = chain_run(root, "ctl-moments", cfg, {layout(4), layout(2)}, {3}, kSteps,
                                           {"FLOTILLA_TEST_SKIP_RESTORE=moments"});
  const Compared cm = compare(dp4, no_moments);
  std::printf("control: moments dropped: loss %.2e, params %.2e\n", cm.loss_rel, cm.param_abs);
  CHECK_MSG(no_moments.run.code == 0 && (cm.loss_rel >= kLossRelTol || cm.param_abs >= kParamAbsTol),
            "dropping the moments went unnoticed (loss %.3g, params %.3g)", cm.loss_rel, cm.param_abs);
  const ChainResult no_cursor = chain_run(root, "ctl-cursor", cfg, {layout(4), layout(2)}, {3}, kSteps,
                                          {"FLOTILLA_TEST_SKIP_RESTORE=cursor"});
  CHECK_MSG(no_cursor.run.code == 0 && !compare(dp4, no_cursor).rows_equal,
            "restarting the data order went unnoticed by the rows check");

  // A layout this model cannot take: tp=3 does not divide 4 heads (and no layout splits the global
  // batch of 4 sequences over 3 ranks). The refusal names both layouts and what would work.
  {
    const std::string c = root + "/bad.toml";
    write_text(c, cfg);
    const auto bad = segment(root, "dp4", c, layout(1, 3), 0, {});
    CHECK(bad.exit_code != 0);
    CHECK_MSG(
        contains(bad.output,
                 "saved with layout dp=4 x tp=1 x pp=1 on 4 rank(s); this run requests "
                 "dp=1 x tp=3 x pp=1 on 3 rank(s)") &&
            contains(bad.output, "on 3 rank(s): none with this config's other settings") &&
            contains(bad.output, "on 4 rank(s): dp=4 x tp=1 x pp=1, dp=2 x tp=1 x pp=2, dp=2 x tp=2 x pp=1"),
        "%s", bad.output.c_str());
  }
  // Another model shape is refused as before, whatever the layout.
  {
    const std::string c = root + "/shape.toml";
    write_text(c, cfg);
    const auto other = segment(root, "dp4", c, layout(2), 0, {}, {"model.n_embd=128"});
    CHECK(other.exit_code != 0);
    CHECK_MSG(contains(other.output, "different model or optimizer shape"), "%s", other.output.c_str());
  }
  // export reads a ZeRO-1 checkpoint (params in the first replica's file, moments in both).
  {
    const auto e = flotilla_test::run_worker(
        {"export", "--checkpoint", root + "/dp2z1", "--format", "llmc", "--out", root + "/z1.bin"},
        worker_env());
    CHECK_MSG(e.exit_code == 0 && std::filesystem::file_size(root + "/z1.bin") > 0, "%s", e.output.c_str());
  }
  return summary("reshard");
}
