// Data parallelism on GPUs through the real launcher: `launch --nproc-per-node 2` pins one GPU per
// rank (FLOTILLA_CUDA_DEVICE), the ranks meet over NCCL, and the CUDA train model all-reduces its
// per-layer gradient buckets on the NCCL stream while the backward goes on. Needs two GPUs (a
// one-GPU machine prints SKIP); under the CPU simulator (FLOTILLA_CUDA=SIM) it always runs.
//   - fp32: 2 ranks x micro_batch 2 against one GPU with micro_batch 4 and the same global batch:
//     every step's loss within 1e-4 relative (only the order of the gradient sum differs);
//   - the same 2-rank run again: loss bits and final parameter bits identical (deterministic);
//   - bf16: 2 ranks against one GPU in bf16, within the bf16 bound of the CPU comparison;
//   - the step records of rank 0 carry a comm time (the all-reduce was measured);
//   - ZeRO-1 (parallel.zero = 1: AdamW moments sharded, updated shards all-gathered in place):
//     the same loss bits and final parameters as the unsharded 2-rank run, in fp32 and bf16, with
//     less device memory measured at start; stopped at step 4 and resumed, the same bits again;
//   - ZeRO-2 (parallel.zero = 2: no full gradient buffer, layers summed during the backward into
//     an fp32 gradient shard): within 1e-4 of the unsharded run (the norm is summed in other
//     pieces), in fp32, bf16 and with gradient accumulation; less memory than ZeRO-1 and within 15%
//     of the planner; stopped at step 4 and resumed, the same bits as uninterrupted.
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
name = "cuda-dp"
seed = 7
device = "cuda"
[model]
preset = "custom"
n_layer = 2
n_head = 2
n_embd = 128
vocab_size = 500
max_seq_len = 64
[data]
source = "synthetic"
synthetic_tokens = 100000
[train]
steps = 8
micro_batch = 4
seq_len = 64
global_batch_tokens = 256
grad_clip = 1.0
[optim]
lr = 0.002
warmup_steps = 2
[parallel]
backend = "nccl"
timeout_s = 120
[checkpoint]
every = 4
keep_last = 2
)";
}

void two_ranks(const std::string& cfg, const std::string& out, const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"--set", "parallel.dp=2", "--set", "train.micro_batch=2"};
  a.insert(a.end(), extra.begin(), extra.end());
  gpu_test::train_ranks(2, cfg, out, a);
}

}  // namespace

int main() {
  if (gpu_test::skip_without_gpu()) return flotilla_test::summary("gpu_cuda_dp");
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (devices < 2) {
    std::printf("SKIP: data parallelism on GPUs needs two devices (%d visible)\n", devices);
    return flotilla_test::summary("gpu_cuda_dp");
  }
  const std::string dir = fresh_dir("gpu-cuda-dp");
  const std::string cfg = dir + "/run.toml";
  write_text(cfg, config_text());

  gpu_test::train_single(cfg, dir + "/one", {});
  two_ranks(cfg, dir + "/dp2", {});
  const auto one = step_losses(dir + "/one"), dp2 = step_losses(dir + "/dp2");
  gpu_test::compare_losses("fp32: 2 GPUs vs 1 GPU", dp2, one, kFp32Rel, kSteps);

  int with_comm = 0;
  for (const auto& r : read_metrics(dir + "/dp2"))
    if (r["type"] == "step" && r["time_ms"]["comm"].get<double>() > 0) ++with_comm;
  CHECK_MSG(with_comm == kSteps, "%d of %d step records carry time_ms.comm > 0", with_comm, kSteps);

  two_ranks(cfg, dir + "/dp2-again", {});
  CHECK_MSG(step_losses(dir + "/dp2-again") == dp2, "two deterministic 2-GPU runs differ");
  CHECK(checkpoint_section(dir + "/dp2", kSteps, "params") ==
        checkpoint_section(dir + "/dp2-again", kSteps, "params"));

  gpu_test::train_single(cfg, dir + "/one-bf16", {"--set", "train.dtype=bf16"});
  two_ranks(cfg, dir + "/dp2-bf16", {"--set", "train.dtype=bf16"});
  gpu_test::compare_losses("bf16: 2 GPUs vs 1 GPU", step_losses(dir + "/dp2-bf16"),
                           step_losses(dir + "/one-bf16"), kBf16Rel, kSteps);

  // ZeRO-1: each rank keeps AdamW moments for half the parameters; the result must not change.
  two_ranks(cfg, dir + "/zero1", {"--set", "parallel.zero=1"});
  CHECK_MSG(step_losses(dir + "/zero1") == dp2,
            "ZeRO-1 on 2 GPUs: losses differ from plain data parallelism");
  CHECK(checkpoint_section(dir + "/zero1", kSteps, "params") ==
        checkpoint_section(dir + "/dp2", kSteps, "params"));
  const double plain_mem = memory_event_bytes(dir + "/dp2"), zero_mem = memory_event_bytes(dir + "/zero1");
  const double zero_planned = memory_event_bytes(dir + "/zero1", "planner_bytes");
  CHECK_MSG(zero_mem > 0 && zero_mem < plain_mem, "ZeRO-1 measured %.0f bytes, plain %.0f", zero_mem,
            plain_mem);
  CHECK_MSG(std::fabs(zero_planned - zero_mem) <= 0.15 * zero_mem,
            "ZeRO-1: planner %.0f vs measured %.0f bytes", zero_planned, zero_mem);
  std::printf("  device memory per rank: %.2f MiB plain, %.2f MiB with ZeRO-1 (planner %.2f MiB)\n",
              plain_mem / 1048576, zero_mem / 1048576, zero_planned / 1048576);
  two_ranks(cfg, dir + "/zero1-bf16", {"--set", "parallel.zero=1", "--set", "train.dtype=bf16"});
  CHECK_MSG(step_losses(dir + "/zero1-bf16") == step_losses(dir + "/dp2-bf16"),
            "ZeRO-1 bf16 on 2 GPUs: losses differ from plain data parallelism");
  // The sharded checkpoint (each rank wrote its moments) resumes: stop after step 4, restart.
  two_ranks(cfg, dir + "/zero1-resume", {"--set", "parallel.zero=1", "--stop-after", "4"});
  CHECK(last_step(dir + "/zero1-resume") == 4);
  two_ranks(cfg, dir + "/zero1-resume", {"--set", "parallel.zero=1"});
  CHECK_MSG(step_losses(dir + "/zero1-resume") == dp2, "ZeRO-1 resumed at step 4: losses differ");

  // ZeRO-2: gradients exist only for this rank's shard (plus two layers in flight).
  two_ranks(cfg, dir + "/zero2", {"--set", "parallel.zero=2"});
  const auto zero2 = step_losses(dir + "/zero2");
  gpu_test::compare_losses("ZeRO-2 fp32 vs plain 2 GPUs", zero2, dp2, kFp32Rel, kSteps);
  const double zero2_mem = memory_event_bytes(dir + "/zero2");
  const double zero2_planned = memory_event_bytes(dir + "/zero2", "planner_bytes");
  CHECK_MSG(zero2_mem > 0 && zero2_mem < zero_mem, "ZeRO-2 measured %.0f bytes, ZeRO-1 %.0f", zero2_mem, zero_mem);
  CHECK_MSG(std::fabs(zero2_planned - zero2_mem) <= 0.15 * zero2_mem, "ZeRO-2: planner %.0f vs measured %.0f bytes",
            zero2_planned, zero2_mem);
  std::printf("  device memory per rank with ZeRO-2: %.2f MiB (planner %.2f MiB)\n", zero2_mem / 1048576,
              zero2_planned / 1048576);
  two_ranks(cfg, dir + "/zero2-bf16", {"--set", "parallel.zero=2", "--set", "train.dtype=bf16"});
  gpu_test::compare_losses("ZeRO-2 bf16 vs plain 2 GPUs", step_losses(dir + "/zero2-bf16"),
                           step_losses(dir + "/dp2-bf16"), kBf16Rel, kSteps);
  // Two micro-steps per step: every micro-step sums its layers into the shard.
  two_ranks(cfg, dir + "/zero2-accum", {"--set", "parallel.zero=2", "--set", "train.micro_batch=1"});
  gpu_test::compare_losses("ZeRO-2, 2 micro-steps, vs plain", step_losses(dir + "/zero2-accum"), dp2, kFp32Rel,
                           kSteps);
  two_ranks(cfg, dir + "/zero2-resume", {"--set", "parallel.zero=2", "--stop-after", "4"});
  CHECK(last_step(dir + "/zero2-resume") == 4);
  two_ranks(cfg, dir + "/zero2-resume", {"--set", "parallel.zero=2"});
  CHECK_MSG(step_losses(dir + "/zero2-resume") == zero2, "ZeRO-2 resumed at step 4: losses differ");
  return flotilla_test::summary("gpu_cuda_dp");
}
