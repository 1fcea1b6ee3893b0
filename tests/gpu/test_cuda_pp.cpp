// Pipeline parallelism on GPUs through the real launcher: `launch --nproc-per-node 2` with
// parallel.pp = 2 puts half the layers on each GPU (the first stage embeds, the last holds the
// final LayerNorm and the tied head); the PipelineRunner drives the device model's stage, sending
// fp32 (B*T, C) activations and gradients between the GPUs over NCCL, and the tied wte gradient
// is summed between the two stages. Needs two GPUs (four for the last cases; a one-GPU machine
// prints SKIP); under the CPU simulator (FLOTILLA_CUDA=SIM) it always runs.
//   - fp32: pp = 2 (1f1b, and gpipe) against one GPU with the same micro-batches: every step's
//     loss within 1e-4 relative; the 1f1b run again: identical loss and parameter bits;
//   - bf16: pp = 2 against one GPU in bf16, within the bf16 bound of the CPU comparison;
//   - every step record carries a bubble time; stage 0 allocates less device memory than the
//     one-GPU run (two activation slots, half the layers), and the planner is within 15% of it;
//   - stopped at step 4 and resumed on the GPUs: the same losses; resumed instead on the CPU
//     (pp = 2 over Gloo): the same checkpoint layout, the same losses within 1e-4;
//   - four GPUs: tp = 2 x pp = 2, and dp = 2 x pp = 2 with ZeRO-1, against one GPU.
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "gpu_train_runs.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

constexpr double kFp32Rel = 1e-4, kBf16Rel = 3e-2;
constexpr int kSteps = 8;

std::string config_text() {
  return R"(
[run]
name = "cuda-pp"
seed = 13
device = "cuda"
[model]
preset = "custom"
n_layer = 4
n_head = 4
n_embd = 128
vocab_size = 500
max_seq_len = 64
[data]
source = "synthetic"
synthetic_tokens = 100000
[train]
steps = 8
micro_batch = 2
seq_len = 64
global_batch_tokens = 256
grad_clip = 1.0
[optim]
lr = 0.002
warmup_steps = 2
[parallel]
backend = "nccl"
schedule = "1f1b"
timeout_s = 120
[checkpoint]
every = 4
keep_last = 2
)";
}

void pp2(const std::string& cfg, const std::string& out, std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--set", "parallel.pp=2", "--set", "parallel.micro_batches=2"});
  gpu_test::train_ranks(2, cfg, out, extra);
}

}  // namespace

int main() {
  if (gpu_test::skip_without_gpu()) return flotilla_test::summary("gpu_cuda_pp");
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (devices < 2) {
    std::printf("SKIP: pipeline parallelism on GPUs needs two devices (%d visible)\n", devices);
    return flotilla_test::summary("gpu_cuda_pp");
  }
  const std::string dir = fresh_dir("gpu-cuda-pp");
  const std::string cfg = dir + "/run.toml";
  write_text(cfg, config_text());

  gpu_test::train_single(cfg, dir + "/one", {});
  pp2(cfg, dir + "/pp2", {});
  const auto one = step_losses(dir + "/one"), pp = step_losses(dir + "/pp2");
  gpu_test::compare_losses("fp32: pp=2 (1f1b) vs 1 GPU", pp, one, kFp32Rel, kSteps);
  pp2(cfg, dir + "/pp2-gpipe", {"--set", "parallel.schedule=gpipe"});
  gpu_test::compare_losses("fp32: pp=2 (gpipe) vs 1 GPU", step_losses(dir + "/pp2-gpipe"), one, kFp32Rel,
                           kSteps);

  int with_bubble = 0;
  for (const auto& r : read_metrics(dir + "/pp2"))
    if (r["type"] == "step" && r["time_ms"]["bubble"].get<double>() > 0) ++with_bubble;
  CHECK_MSG(with_bubble == kSteps, "%d of %d step records carry time_ms.bubble > 0", with_bubble, kSteps);
  const double one_mem = memory_event_bytes(dir + "/one"), pp_mem = memory_event_bytes(dir + "/pp2");
  const double pp_planned = memory_event_bytes(dir + "/pp2", "planner_bytes");
  CHECK_MSG(pp_mem > 0 && pp_mem < one_mem, "pp=2 measured %.0f bytes on rank 0, one GPU %.0f", pp_mem,
            one_mem);
  CHECK_MSG(std::fabs(pp_planned - pp_mem) <= 0.15 * pp_mem, "pp=2: planner %.0f vs measured %.0f bytes",
            pp_planned, pp_mem);
  std::printf("  device memory: %.2f MiB on one GPU, %.2f MiB on stage 0 with pp=2 (planner %.2f MiB)\n",
              one_mem / 1048576, pp_mem / 1048576, pp_planned / 1048576);

  gpu_test::train_single(cfg, dir + "/one-bf16", {"--set", "train.dtype=bf16"});
  pp2(cfg, dir + "/pp2-bf16", {"--set", "train.dtype=bf16"});
  gpu_test::compare_losses("bf16: pp=2 vs 1 GPU", step_losses(dir + "/pp2-bf16"),
                           step_losses(dir + "/one-bf16"), kBf16Rel, kSteps);

  // Repeat, stop after step 4 and resume on the GPUs, and (from a copy) on the CPU.
  gpu_test::check_repeat_and_resume(
      dir, "pp2",
      [&](const std::string& out, const std::vector<std::string>& extra) { pp2(cfg, out, extra); }, pp,
      kFp32Rel, kSteps);

  if (devices < 4) {
    std::printf("  SKIP tp=2 x pp=2 and dp=2 x pp=2: need four devices (%d visible)\n", devices);
  } else {
    gpu_test::train_ranks(
        4, cfg, dir + "/tp2pp2",
        {"--set", "parallel.tp=2", "--set", "parallel.pp=2", "--set", "parallel.micro_batches=2"});
    gpu_test::compare_losses("tp=2 x pp=2, 4 GPUs vs 1", step_losses(dir + "/tp2pp2"), one, kFp32Rel, kSteps);
    gpu_test::train_ranks(
        4, cfg, dir + "/dp2pp2",
        {"--set", "parallel.dp=2", "--set", "parallel.pp=2", "--set", "parallel.micro_batches=2", "--set",
         "train.micro_batch=1", "--set", "parallel.zero=1"});
    gpu_test::compare_losses("dp=2 x pp=2, ZeRO-1, 4 GPUs vs 1", step_losses(dir + "/dp2pp2"), one, kFp32Rel,
                             kSteps);
  }
  return flotilla_test::summary("gpu_cuda_pp");
}
